"""Cost of a mixture-BN ``split`` training step relative to the same step with plain BN, in one run.

Mixture-BN adversarial training (Xie & Yuille, ICLR 2020; AdvProp) runs one fused forward over
``cat([clean, adv])`` with the first rows normalized by the clean BN and the rest by the adversarial BN. Its price
over plain BN should be the two half-batch normalizations only. ``--clean-share`` sets the split route's clean
rows (Fast AdvProp's fused pass: 0.8). Compared on the same architecture, weights and
concatenated batch:

* plain BN (the baseline);
* our `MixtureBatchNorm2d` on the ``interleaved`` route (equal halves as clean/adversarial pairs: one batch norm
  over twice the channels, what the ``mbn`` training method uses);
* our `MixtureBatchNorm2d` on the ``split`` route (``cat([clean, adv])``, any split: two half-batch norms, written
  into one output on the CPU);
* timm's `SplitBatchNorm2d` (``convert_splitbn_model``, 2 equal splits) as an external reference;
* our `MixtureBatchNorm2d` on the ``clean`` route (plain training of a mixture-BN model, as timm's ``train.py`` runs
  it): one batch norm, the idle adversarial branch joined to the graph at zero gradient.

Each step is forward + backward + SGD step. Steps are interleaved round by round and the median per variant is
reported, so background load hits every variant alike. Prints a markdown table of ratios against plain BN.

Example:
    python benchmarks/bench_split_bn.py --model resnet26 --img-size 64 --batch-size 32
    python benchmarks/bench_split_bn.py --threads 1 --clock process  # on a busy shared CPU machine
"""
import argparse
import contextlib
import copy
import functools
import statistics
import time
from typing import Callable, ContextManager, Dict, List, Tuple

import timm
import torch
import torch.nn as nn
import torch.nn.functional as F
from timm.layers import convert_splitbn_model

from timm_advnorm.layers import convert_to_mixture_bn, route

from _common import add_device_args, add_record_args, add_timing_args, apply_run_args, measure, recorded


def get_args_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--model', default='resnet26', help='timm model name (with batch norm)')
    parser.add_argument('--img-size', type=int, default=64)
    parser.add_argument('--batch-size', type=int, default=32, help='concatenated batch: clean rows, then adversarial')
    parser.add_argument('--clean-share', type=float, default=0.5,
                        help='clean share of the batch on the split route (the other variants split it in halves)')
    add_device_args(parser, amp_help='bf16 autocast for the forward pass')
    add_timing_args(parser, rounds=10, warmup=3, unit='variant')
    parser.add_argument('--clock', default='wall', choices=('wall', 'process'),
                        help='process: CPU time of this process, steadier than wall time on a shared CPU machine')
    parser.add_argument('--seed', type=int, default=0)
    add_record_args(parser)
    return parser


Variant = Tuple[nn.Module, Callable[[], ContextManager]]


def build_variants(args: argparse.Namespace, device: torch.device, memory_format: torch.memory_format
                   ) -> Dict[str, Variant]:
    """The models, sharing the same initial weights, each with the context its training step runs in."""
    plain = timm.create_model(args.model, num_classes=1000)
    mixture = convert_to_mixture_bn(copy.deepcopy(plain))
    interleaved = convert_to_mixture_bn(copy.deepcopy(plain))
    clean = convert_to_mixture_bn(copy.deepcopy(plain))
    split_bn = convert_splitbn_model(copy.deepcopy(plain), num_splits=2)
    n_clean = int(round(args.batch_size * args.clean_share))
    variants = {
        'plain BN': (plain, contextlib.nullcontext),
        'mixture BN, interleaved route': (interleaved, lambda: route(interleaved, 'interleaved')),
        'mixture BN, split route': (mixture, lambda: route(mixture, 'split', n_clean=n_clean)),
        "timm SplitBatchNorm2d (2 splits)": (split_bn, contextlib.nullcontext),
        'mixture BN, clean route (idle branch joined)': (clean, lambda: route(clean, 'clean')),
    }
    for model, _ in variants.values():
        model.to(device=device, memory_format=memory_format).train()
    return variants


def run(args: argparse.Namespace) -> Dict[str, List[float]]:
    """Seconds per training step of every variant, one list per variant."""
    device, memory_format, amp_dtype = apply_run_args(args)
    if args.clock == 'process' and device.type != 'cpu':
        raise ValueError('--clock process measures CPU work; use the wall clock on an accelerator.')
    clock = time.process_time if args.clock == 'process' else time.perf_counter
    variants = build_variants(args, device, memory_format)
    x = torch.randn(args.batch_size, 3, args.img_size, args.img_size, device=device).to(memory_format=memory_format)
    target = torch.randint(0, 1000, (args.batch_size,), device=device)
    optimizers = {name: torch.optim.SGD(model.parameters(), lr=1e-3, momentum=0.9) for name, (model, _) in
                  variants.items()}

    def step(name: str) -> None:
        model, context = variants[name]
        with context(), torch.autocast(device.type, dtype=amp_dtype, enabled=amp_dtype is not None):
            loss = F.cross_entropy(model(x), target)
        optimizers[name].zero_grad(set_to_none=True)
        loss.backward()
        optimizers[name].step()

    steps = {name: functools.partial(step, name) for name in variants}
    return measure(steps, device, args.warmup, args.rounds, clock)[0]


def markdown_table(times: Dict[str, List[float]], baseline: str = 'plain BN') -> str:
    base = statistics.median(times[baseline])
    lines = ['| variant | median step (ms) | ratio vs plain BN |', '|---|---:|---:|']
    for name, values in times.items():
        median = statistics.median(values)
        lines.append(f'| {name} | {median * 1e3:.1f} | {median / base:.3f} |')
    return '\n'.join(lines)


def main(argv=None) -> None:
    parser = get_args_parser()
    args = parser.parse_args(argv)
    with recorded('bench_split_bn', parser, args, argv, args.device):
        _run(args)


def _run(args: argparse.Namespace) -> None:
    times = run(args)
    print(f'{args.model}, {args.img_size}px, batch {args.batch_size}, {args.device}, threads '
          f'{torch.get_num_threads()}, split route clean share {args.clean_share}, '
          f'channels_last={args.channels_last}, amp={args.amp}, {args.clock} clock, '
          f'median of {args.rounds} rounds\n')
    print(markdown_table(times))


if __name__ == '__main__':
    main()
