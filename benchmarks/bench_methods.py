"""Each training method's step time per image against its cost model, measured in one run on one model and batch.

The papers count training cost in forward+backward passes per image (vanilla = 1, PGD-K adversarial training
K + 1, AdvProp K + 2, Fast AdvProp ``p_adv * K + 1``); every task reports that figure as `passes_per_image`. Here
each method runs full training steps (attack, task forward, backward, SGD step) on the same mixture-BN model and
batch; its time per image divided by vanilla training's is the measured cost, printed beside the model's. NoFrost
runs on a normalizer-free model of the same depth, with that model's own vanilla step as its unit.

An attack iteration needs no parameter gradients and, on running statistics, runs with BN folded, so it costs
less than a training pass: a measured/model ratio below 1 means cheaper than the papers' accounting. The goal is
that no method exceeds its cost model by more than 5% (ratio <= 1.05).

Example:
    python benchmarks/bench_methods.py --model mbn_resnet26 --img-size 64 --batch-size 32 --steps 2
"""
import argparse
import statistics
from typing import Callable, Tuple

import timm
import torch
import torch.nn as nn

import timm_advnorm  # noqa: F401  (registers the models)
from timm_advnorm.attacks import InputSpace, create_attack
from timm_advnorm.task import AdversarialClassificationTask, create_task

from _common import add_timing_args, measure

NUM_CLASSES = 100


def get_args_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--model', default='mbn_resnet26', help='mixture-BN model for every method but nofrost')
    parser.add_argument('--nf-model', default='nf_resnet26', help='normalizer-free model for nofrost')
    parser.add_argument('--img-size', type=int, default=64)
    parser.add_argument('--batch-size', type=int, default=32)
    parser.add_argument('--steps', type=int, default=2, help='K, attack iterations of the adversarial methods')
    parser.add_argument('--device', default='cpu')
    add_timing_args(parser, rounds=7)
    return parser


def _batch(space: InputSpace, n: int, img_size: int, device: torch.device) -> Tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(0)
    x = space.from_pixels(torch.rand(n, 3, img_size, img_size, generator=generator)).to(device)
    y = torch.randint(0, NUM_CLASSES, (n,), generator=generator).to(device)
    return x, y


def _step_fn(task: AdversarialClassificationTask, model: nn.Module, x: torch.Tensor, y: torch.Tensor
             ) -> Callable[[], None]:
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-4, momentum=0.9)

    def step() -> None:
        task.train()
        optimizer.zero_grad(set_to_none=True)
        task(x, y)['loss'].backward()
        task.finalize_gradients()
        optimizer.step()
    return step


def _tasks(args, device: torch.device):
    """(label, task, model, loader batch) for every method; nofrost gets its own model and vanilla baseline."""
    out = []
    for family, model_name, methods in (('mbn', args.model, ('vanilla', 'madry', 'mixed', 'alp', 'mbn',
                                                              'fast_advprop')),
                                        ('nf', args.nf_model, ('vanilla', 'nofrost'))):
        model = timm.create_model(model_name, num_classes=NUM_CLASSES).to(device)
        space = InputSpace.from_model(model)
        attack = create_attack('pgd', space=space, eps=16.0, step=4.0, steps=args.steps, targeted=True,
                               best_iterate=False, seed=0)
        for method in methods:
            if method == 'fast_advprop':
                task = create_task(method, model, space=space, eps=1.0, steps=1)
            else:
                task = create_task(method, model, attack=attack, verbose=False)
            batch = int(round(args.batch_size * getattr(task, 'batch_scale', 1.0)))
            out.append((family, method, task, model, _batch(space, batch, args.img_size, device)))
    return out


def main(argv=None) -> None:
    args = get_args_parser().parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    entries = _tasks(args, device)
    steps = {(family, method): _step_fn(task, model, *batch) for family, method, task, model, batch in entries}
    seconds, _ = measure(steps, device, args.warmup, args.rounds)
    per_image = {(family, method): [t / batch[0].shape[0] for t in seconds[(family, method)]]
                 for family, method, _, _, batch in entries}

    print(f'\n{args.model} / {args.nf_model}, {args.img_size}px, batch {args.batch_size}, K = {args.steps}, '
          f'{device.type}, threads {torch.get_num_threads()}, median of {args.rounds} rounds\n')
    print('| method | model | cost model (passes/image) | measured (× vanilla) | measured / model |')
    print('|---|---|---:|---:|---:|')
    for family, method, task, model, _ in entries:
        measured = statistics.median(per_image[(family, method)]) / statistics.median(per_image[(family, 'vanilla')])
        model_cost = task.passes_per_image
        name = args.model if family == 'mbn' else args.nf_model
        print(f'| {method} | {name} | {model_cost:g} | {measured:.2f} | {measured / model_cost:.2f} |')


if __name__ == '__main__':
    main()
