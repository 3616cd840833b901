"""Cost of one PGD iteration relative to one training step, measured in the same run on the same model and batch.

Adversarial training pays N attack iterations per step, so the iteration cost sets the price of a recipe (Xie &
Yuille's PGD-30 costs 31 "passes" only if an iteration costs as much as a training step). Compared here:

* our PGD with BN folded into the convolutions (running statistics; the fold is redone every call and its cost is
  included, amortized over the iterations of one call);
* our PGD without folding (input-only gradients alone);
* torchattacks' PGD as an external reference, when installed (a dev dependency), on the same normalized batch:
  ``set_normalization_used`` makes it un-normalize internally and leaves the model's train/eval mode as it was.

Measurements are interleaved round by round and the median per method is reported, so background load hits every
method alike. Prints a markdown table of ratios against the training step (forward + backward + SGD step).

Example:
    python benchmarks/bench_attack.py --model resnet26 --img-size 64 --batch-size 32 --steps 10
"""
import argparse
import logging
import statistics
from typing import Callable, Dict

import timm
import torch
import torch.nn.functional as F

from timm_advnorm.attacks import PGD, InputSpace
from timm_advnorm.attacks.fold_bn import BatchNormFolder

from _common import add_device_args, add_record_args, add_timing_args, apply_run_args, measure, recorded, \
    torchattacks_pgd

_logger = logging.getLogger('bench_attack')


def get_args_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--model', default='resnet26', help='timm model name')
    parser.add_argument('--img-size', type=int, default=64)
    parser.add_argument('--batch-size', type=int, default=32)
    add_device_args(parser, amp_help='bf16 autocast for training and attacks')
    parser.add_argument('--steps', type=int, default=10, help='attack iterations per timed attack call')
    add_timing_args(parser)
    parser.add_argument('--seed', type=int, default=0)
    add_record_args(parser)
    return parser


def main(argv=None) -> None:
    parser = get_args_parser()
    args = parser.parse_args(argv)
    with recorded('bench_attack', parser, args, argv, args.device):
        _run(args)


def _run(args: argparse.Namespace) -> None:
    logging.basicConfig(level=logging.INFO, format='%(message)s')
    device, memory_format, amp_dtype = apply_run_args(args)

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
    try:
        reference = torchattacks_pgd(model, space, eps=16, step=1, steps=args.steps)
    except ImportError:
        _logger.warning('torchattacks is not installed: no external reference row.')
    else:
        def reference_attack():
            with torch.autocast(device.type, dtype=amp_dtype, enabled=amp_dtype is not None):
                reference(x, y)  # normalized in, normalized out
        methods[f'PGD-{args.steps}, torchattacks'] = reference_attack

    seconds, _ = measure(methods, device, args.warmup, args.rounds)
    times = {name: [t / (args.steps if name.startswith('PGD') else 1) for t in values]
             for name, values in seconds.items()}
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
