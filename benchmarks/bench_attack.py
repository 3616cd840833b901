"""Cost of one PGD iteration relative to one training step, measured in the same run on the same model and batch.

Adversarial training pays N attack iterations per step, so the iteration cost sets the price of a recipe (Xie &
Yuille's PGD-30 costs 31 "passes" only if an iteration costs as much as a training step). Compared here:

* our PGD with BN folded into the convolutions (running statistics; the fold is redone every call and its cost is
  included, amortized over the iterations of one call);
* our PGD without folding (input-only gradients alone);
* torchattacks' PGD as an external reference, when installed (a dev dependency; model wrapped with its
  normalization, as torchattacks expects [0, 1] inputs).

Measurements are interleaved round by round and the median per method is reported, so background load hits every
method alike. Prints a markdown table of ratios against the training step (forward + backward + SGD step).

Example:
    python benchmarks/bench_attack.py --model resnet26 --img-size 64 --batch-size 32 --steps 10
"""
import argparse
import logging
import statistics
import time
from typing import Callable, Dict, List

import timm
import torch
import torch.nn as nn
import torch.nn.functional as F

from timm_advnorm.attacks import PGD, InputSpace
from timm_advnorm.attacks.fold_bn import BatchNormFolder

_logger = logging.getLogger('bench_attack')


def get_args_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--model', default='resnet26', help='timm model name')
    parser.add_argument('--img-size', type=int, default=64)
    parser.add_argument('--batch-size', type=int, default=32)
    parser.add_argument('--device', default='cpu')
    parser.add_argument('--amp', action='store_true', help='bf16 autocast for training and attacks')
    parser.add_argument('--channels-last', action='store_true')
    parser.add_argument('--steps', type=int, default=10, help='attack iterations per timed attack call')
    parser.add_argument('--rounds', type=int, default=3, help='timed rounds (each times every method once)')
    parser.add_argument('--warmup', type=int, default=1, help='untimed rounds first')
    parser.add_argument('--threads', type=int, default=0, help='torch CPU threads (0: torch default)')
    parser.add_argument('--seed', type=int, default=0)
    return parser


def _timer(device: torch.device) -> Callable[[Callable[[], None]], float]:
    def run(fn: Callable[[], None]) -> float:
        if device.type == 'cuda':
            torch.cuda.synchronize(device)
        start = time.perf_counter()
        fn()
        if device.type == 'cuda':
            torch.cuda.synchronize(device)
        return time.perf_counter() - start
    return run


def _torchattacks_pgd(model: nn.Module, space: InputSpace, steps: int):
    try:
        import torchattacks
    except ImportError:
        _logger.warning('torchattacks is not installed: no external reference row.')
        return None
    attack = torchattacks.PGD(model, eps=16 / 255, alpha=1 / 255, steps=steps, random_start=True)
    attack.set_normalization_used(mean=list(space.mean), std=list(space.std))
    return attack


def main(argv=None) -> None:
    args = get_args_parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO, format='%(message)s')
    if args.threads:
        torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    device = torch.device(args.device)
    memory_format = torch.channels_last if args.channels_last else torch.contiguous_format
    amp_dtype = torch.bfloat16 if args.amp else None

    model = timm.create_model(args.model, num_classes=1000).to(device, memory_format=memory_format)
    space = InputSpace.from_model(model)
    pixels = torch.rand(args.batch_size, 3, args.img_size, args.img_size, device=device)
    x = space.from_pixels(pixels).contiguous(memory_format=memory_format)
    y = torch.randint(0, 1000, (args.batch_size,), device=device)
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-4, momentum=0.9)

    def train_step():
        model.train()
        with torch.autocast(device.type, dtype=amp_dtype, enabled=amp_dtype is not None):
            loss = F.cross_entropy(model(x), y)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    common = dict(eps=16, step=1, steps=args.steps, targeted=True, best_iterate=False, autocast_dtype=amp_dtype,
                  seed=args.seed)
    pgd_fold = PGD(space, fold_bn=True, **common)
    pgd_plain = PGD(space, fold_bn=False, **common)
    folder = BatchNormFolder()

    def fold_only():
        model.eval()
        folder(model)

    methods: Dict[str, Callable[[], None]] = {
        'training step (fwd + bwd + SGD)': train_step,
        f'PGD-{args.steps}, BN folded (ours)': lambda: pgd_fold(model, x, y),
        f'PGD-{args.steps}, input grads only (ours)': lambda: pgd_plain(model, x, y),
        'BN fold alone (per attack call)': fold_only,
    }
    reference = _torchattacks_pgd(nn.Sequential(model), space, args.steps)
    if reference is not None:
        def reference_attack():
            with torch.autocast(device.type, dtype=amp_dtype, enabled=amp_dtype is not None):
                reference(pixels, y)
        methods[f'PGD-{args.steps}, torchattacks'] = reference_attack
    iterations = {name: args.steps if name.startswith('PGD') else 1 for name in methods}

    timer = _timer(device)
    times: Dict[str, List[float]] = {name: [] for name in methods}
    for i in range(args.warmup + args.rounds):
        for name, fn in methods.items():
            elapsed = timer(fn)
            if i >= args.warmup:
                times[name].append(elapsed / iterations[name])

    base = statistics.median(times['training step (fwd + bwd + SGD)'])
    print(f'\n{args.model}, {args.img_size}px, batch {args.batch_size}, {device.type}, '
          f'threads {torch.get_num_threads()}, amp {args.amp}, channels_last {args.channels_last}, '
          f'median of {args.rounds} rounds\n')
    print('| method | ms per iteration | × training step |')
    print('|---|---:|---:|')
    for name, values in times.items():
        per_iter = statistics.median(values)
        print(f'| {name} | {1e3 * per_iter:.1f} | {per_iter / base:.2f} |')


if __name__ == '__main__':
    main()
