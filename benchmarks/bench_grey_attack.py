"""The attack loop on grey digits: our BIM against torchattacks' on Galloway et al.'s MNIST models, per iteration.

MNIST's digits reach the models as three equal RGB channels under one mean and std; the ``galloway-mnist`` protocol
attacks them with BIM-100 (ε = 12.75/255, step 0.1275/255, from the clean input) on 10,000 digits per cell, which
for the small models is mostly element-wise work on the input, not model passes. Compared on each model at one width,
same batch and budget, time per iteration:

* **torchattacks PGD without random start** (BIM; baseline; dev dependency): every sample to the last iteration;
* **ours, last iterate**: `pgd` with the same budget, every sample to the last iteration;
* **ours, best and last iterate**: what the protocol runs (`pgd_best_and_last`): the same iterations, each sample's
  best iterate kept beside the last.

The models are freshly initialized (the cost of an iteration does not depend on the weights: no sample is dropped in
these modes). Measurements are interleaved round by round and the median per method is reported, with its time over
the first row's (torchattacks', where installed).

Example:
    python benchmarks/bench_grey_attack.py --img-size 84 --batch-size 200 --steps 20 --threads 1
"""
import argparse
import logging
import statistics
from typing import Callable, Dict

import timm
import torch

import timm_advnorm  # noqa: F401  (registers the Galloway models)
from timm_advnorm.attacks import InputSpace, pgd
from timm_advnorm.attacks.pgd import pgd_best_and_last
from timm_advnorm.models.galloway_mlp import MNIST_MEAN, MNIST_STD

from _common import add_record_args, add_timing_args, measure, recorded, torchattacks_pgd

_logger = logging.getLogger('bench_grey_attack')

#: The galloway-mnist protocol's BIM at ε = 0.1 of the [-1, 1] scale: budget and step on the 0-255 scale.
_EPS, _STEP = 12.75, 0.1275


def get_args_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--models', nargs='+', default=['galloway_linear', 'galloway_mlp'],
                        help='Galloway MNIST models to attack')
    parser.add_argument('--img-size', type=int, default=84, help='image width √d (28, 56, 84, 112)')
    parser.add_argument('--batch-size', type=int, default=200, help='the protocol evaluates batches of 200')
    parser.add_argument('--steps', type=int, default=20, help='attack iterations per timed call')
    add_timing_args(parser)
    parser.add_argument('--seed', type=int, default=0)
    add_record_args(parser)
    return parser


def main(argv=None) -> None:
    parser = get_args_parser()
    args = parser.parse_args(argv)
    with recorded('bench_grey_attack', parser, args, argv):
        _run(args)


def _run(args: argparse.Namespace) -> None:
    logging.basicConfig(level=logging.INFO, format='%(message)s')
    if args.threads:
        torch.set_num_threads(args.threads)
    generator = torch.Generator().manual_seed(args.seed)
    space = InputSpace(mean=MNIST_MEAN, std=MNIST_STD)
    grey = torch.rand(args.batch_size, 1, args.img_size, args.img_size, generator=generator)
    x = space.from_pixels(grey.expand(-1, 3, -1, -1).contiguous())
    budget = dict(space=space, eps=_EPS, step=_STEP, steps=args.steps, random_start=False)
    print(f'\nBIM-{args.steps} (ε = {_EPS}/255, step {_STEP}/255, from the clean input), {args.img_size} px grey '
          f'digits as 3 channels, batch {args.batch_size}, cpu, threads {torch.get_num_threads()}, median of '
          f'{args.rounds} rounds\n')
    print('| model | method | ms per iteration | time × the first row |')
    print('|---|---|---:|---:|')
    for name in args.models:
        model = timm.create_model(name, num_classes=10, img_size=args.img_size).eval()
        with torch.no_grad():
            y = model(x).argmax(1)  # every sample correctly classified: all are attacked
        methods: Dict[str, Callable[[], object]] = {}
        try:
            reference = torchattacks_pgd(model, space, _EPS, _STEP, args.steps, random_start=False)
        except ImportError:
            _logger.warning('torchattacks is not installed: no baseline row, ratios against ours.')
        else:
            methods['torchattacks PGD, no random start (BIM)'] = lambda: reference(x, y)
        methods['ours, last iterate'] = lambda: pgd(model, x, y, best_iterate=False, **budget)
        methods['ours, best and last iterate (the protocol)'] = lambda: pgd_best_and_last(
            model, x, y, budgets=[args.steps], **{k: v for k, v in budget.items() if k != 'steps'})
        seconds, _ = measure(methods, torch.device('cpu'), args.warmup, args.rounds)
        per_iteration = {method: statistics.median(values) / args.steps for method, values in seconds.items()}
        base = next(iter(per_iteration.values()))
        for method, value in per_iteration.items():
            print(f'| {name} | {method} | {1e3 * value:.1f} | {value / base:.2f} |')


if __name__ == '__main__':
    main()
