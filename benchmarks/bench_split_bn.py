"""Cost of a mixture-BN ``split`` training step relative to the same step with plain BN, in one run.

Mixture-BN adversarial training (Xie & Yuille, ICLR 2020; AdvProp) runs one fused forward over
``cat([clean, adv])`` with the first rows normalized by the clean BN and the rest by the adversarial BN. Its price
over plain BN should be the two half-batch normalizations only. Compared on the same architecture, weights and
concatenated batch:

* plain BN (the baseline);
* our `MixtureBatchNorm2d` on the ``split`` route;
* timm's `SplitBatchNorm2d` (``convert_splitbn_model``, 2 equal splits) as an external reference.

Each step is forward + backward + SGD step. Steps are interleaved round by round and the median per variant is
reported, so background load hits every variant alike. Prints a markdown table of ratios against plain BN.

Example:
    python benchmarks/bench_split_bn.py --model resnet26 --img-size 64 --batch-size 32
    python benchmarks/bench_split_bn.py --threads 1 --clock process  # on a busy shared CPU machine
"""
import argparse
import contextlib
import copy
import statistics
import time
from typing import Callable, ContextManager, Dict, List, Tuple

import timm
import torch
import torch.nn as nn
import torch.nn.functional as F
from timm.layers import convert_splitbn_model

from timm_advnorm.layers import convert_to_mixture_bn, route


def get_args_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--model', default='resnet26', help='timm model name (with batch norm)')
    parser.add_argument('--img-size', type=int, default=64)
    parser.add_argument('--batch-size', type=int, default=32, help='concatenated batch: half clean, half adversarial')
    parser.add_argument('--device', default='cpu')
    parser.add_argument('--amp', action='store_true', help='bf16 autocast for the forward pass')
    parser.add_argument('--channels-last', action='store_true')
    parser.add_argument('--rounds', type=int, default=10, help='timed rounds (each times every variant once)')
    parser.add_argument('--warmup', type=int, default=3, help='untimed rounds first')
    parser.add_argument('--threads', type=int, default=0, help='torch CPU threads (0: torch default)')
    parser.add_argument('--clock', default='wall', choices=('wall', 'process'),
                        help='process: CPU time of this process, steadier than wall time on a shared CPU machine')
    parser.add_argument('--seed', type=int, default=0)
    return parser


Variant = Tuple[nn.Module, Callable[[], ContextManager]]


def build_variants(args: argparse.Namespace, device: torch.device) -> Dict[str, Variant]:
    """The three models, sharing the same initial weights, each with the context its training step runs in."""
    plain = timm.create_model(args.model, num_classes=1000)
    mixture = convert_to_mixture_bn(copy.deepcopy(plain))
    split_bn = convert_splitbn_model(copy.deepcopy(plain), num_splits=2)
    n_clean = args.batch_size // 2
    variants = {
        'plain BN': (plain, contextlib.nullcontext),
        'mixture BN, split route': (mixture, lambda: route(mixture, 'split', n_clean=n_clean)),
        "timm SplitBatchNorm2d (2 splits)": (split_bn, contextlib.nullcontext),
    }
    memory_format = torch.channels_last if args.channels_last else torch.contiguous_format
    for model, _ in variants.values():
        model.to(device=device, memory_format=memory_format).train()
    return variants


def _timed(device: torch.device, fn: Callable[[], None], clock: Callable[[], float]) -> float:
    if device.type == 'cuda':
        torch.cuda.synchronize(device)
    start = clock()
    fn()
    if device.type == 'cuda':
        torch.cuda.synchronize(device)
    return clock() - start


def run(args: argparse.Namespace) -> Dict[str, List[float]]:
    """Seconds per training step of every variant, one list per variant."""
    torch.manual_seed(args.seed)
    if args.threads:
        torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    if args.clock == 'process' and device.type != 'cpu':
        raise ValueError('--clock process measures CPU work; use the wall clock on an accelerator.')
    clock = time.process_time if args.clock == 'process' else time.perf_counter
    variants = build_variants(args, device)
    memory_format = torch.channels_last if args.channels_last else torch.contiguous_format
    x = torch.randn(args.batch_size, 3, args.img_size, args.img_size, device=device).to(memory_format=memory_format)
    target = torch.randint(0, 1000, (args.batch_size,), device=device)
    optimizers = {name: torch.optim.SGD(model.parameters(), lr=1e-3, momentum=0.9) for name, (model, _) in
                  variants.items()}

    def step(name: str) -> None:
        model, context = variants[name]
        with context(), torch.autocast(device.type, dtype=torch.bfloat16, enabled=args.amp):
            loss = F.cross_entropy(model(x), target)
        optimizers[name].zero_grad(set_to_none=True)
        loss.backward()
        optimizers[name].step()

    times: Dict[str, List[float]] = {name: [] for name in variants}
    for round_idx in range(args.warmup + args.rounds):
        for name in variants:
            elapsed = _timed(device, lambda: step(name), clock)
            if round_idx >= args.warmup:
                times[name].append(elapsed)
    return times


def markdown_table(times: Dict[str, List[float]], baseline: str = 'plain BN') -> str:
    base = statistics.median(times[baseline])
    lines = ['| variant | median step (ms) | ratio vs plain BN |', '|---|---:|---:|']
    for name, values in times.items():
        median = statistics.median(values)
        lines.append(f'| {name} | {median * 1e3:.1f} | {median / base:.3f} |')
    return '\n'.join(lines)


def main() -> None:
    args = get_args_parser().parse_args()
    times = run(args)
    print(f'{args.model}, {args.img_size}px, batch {args.batch_size}, {args.device}, threads '
          f'{torch.get_num_threads()}, channels_last={args.channels_last}, amp={args.amp}, {args.clock} clock, '
          f'median of {args.rounds} rounds\n')
    print(markdown_table(times))


if __name__ == '__main__':
    main()
