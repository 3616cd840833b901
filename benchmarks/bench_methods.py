"""Each training method's step time per image against its cost model, measured in one run on one model and batch.

The papers count training cost in forward+backward passes per image (vanilla = 1, PGD-K adversarial training
K + 1, AdvProp K + 2, Fast AdvProp ``p_adv * K + 1``); every task reports that figure as `passes_per_image`. Here
every registered method, built as the training command builds it (`create_run_task` on the command's parsed
options), runs full training steps (attack, task forward, backward, SGD step) on the same mixture-BN model and batch; its time per
image divided by vanilla training's is the measured cost, printed beside the model's. A method that refuses a
mixture-BN model (NoFrost trains normalizer-free ones) runs on a normalizer-free model of the same depth, with that
model's own vanilla step as its unit.

An attack iteration needs no parameter gradients and, on running statistics, runs with BN folded, so it costs
less than a training pass: a measured/model ratio below 1 means cheaper than the papers' accounting. The goal is
that no method exceeds its cost model by more than 5% (ratio <= 1.05).

The cost model assumes every pass runs at vanilla training's speed per image. A method whose passes run on a part of
the batch (Fast AdvProp: one pass over the loader batch, then K over its attacked ``p_adv`` share) pays the device's
lower efficiency on small batches, which no implementation of the algorithm avoids. For such a method a last column
divides its time by that of vanilla steps over the same row counts (`PASS_ROWS`): what the implementation adds
beyond the algorithm's passes at the batch sizes they run at.

Example:
    python benchmarks/bench_methods.py --model mbn_resnet26 --img-size 64 --batch-size 32 --steps 2
    python benchmarks/bench_methods.py --methods fast_advprop  # one method (and vanilla, its unit)
    python benchmarks/bench_methods.py --device cuda --amp --channels-last --model mbn_resnet50 --img-size 224
"""
import argparse
import statistics
from typing import Callable, Dict, List, Optional, Tuple

import timm
import torch
import torch.nn as nn

import timm_advnorm  # noqa: F401  (registers the models and the methods)
from timm_advnorm.attacks import InputSpace
from timm_advnorm.task import AdversarialClassificationTask, list_tasks
from timm_advnorm.commands.train import get_args_parser as get_train_args_parser
from timm_advnorm.commands.train import train_options
from timm_advnorm.train.build import create_run_task

from _common import add_device_args, add_record_args, add_timing_args, apply_run_args, measure, recorded

NUM_CLASSES = 100
#: The methods' attack, as training options: targeted PGD-K (``--steps``) at eps 16, step 4, random start.
ATTACK_ARGS = ('--attack-eps', '16', '--attack-step', '4', '--attack-clean-start-prob', '0', '--seed', '0')
#: Options of a method measured at its paper's own settings rather than the shared attack's: Fast AdvProp's PGD-1
#: at eps 1, as in its packaged recipe. NoFrost*'s DeepAugment runs an untrained network of the same architecture
#: (its pretrained weights are not shipped), which costs what the pretrained one does.
METHOD_ARGS = {'fast_advprop': ('--attack-eps', '1', '--attack-step', '1', '--attack-steps', '1'),
               'nofrost_star': ('--deepaugment-random-weights',)}
#: Row counts of the training passes of a method whose passes run on parts of its loader batch, given the task and
#: the loader batch's rows: Fast AdvProp's fused pass over the whole batch, then K passes over its attacked rows.
PASS_ROWS: Dict[str, Callable[[AdversarialClassificationTask, int], List[int]]] = {
    'fast_advprop': lambda task, rows: [rows] + [task.split_sizes(rows)[1]] * task.attack_steps,
}


def get_args_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--model', default='mbn_resnet26', help='mixture-BN model for every method but nofrost')
    parser.add_argument('--nf-model', default='nf_resnet26', help='normalizer-free model for nofrost')
    parser.add_argument('--img-size', type=int, default=64)
    parser.add_argument('--batch-size', type=int, default=32)
    parser.add_argument('--steps', type=int, default=2, help='K, attack iterations of the adversarial methods')
    parser.add_argument('--methods', nargs='+', choices=list_tasks(), metavar='METHOD',
                        help='methods to measure (default: every registered one); vanilla, the unit, always runs')
    add_device_args(parser, amp_help='bf16 autocast for the training step and its attack, as --amp trains')
    parser.add_argument('--seed', type=int, default=0)
    add_timing_args(parser, rounds=7)
    add_record_args(parser)
    return parser


def _batch(space: InputSpace, n: int, img_size: int, device: torch.device,
           memory_format: torch.memory_format = torch.contiguous_format) -> Tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(0)
    x = space.from_pixels(torch.rand(n, 3, img_size, img_size, generator=generator)).to(device)
    y = torch.randint(0, NUM_CLASSES, (n,), generator=generator).to(device)
    return x.contiguous(memory_format=memory_format), y


def _step_fn(task: AdversarialClassificationTask, model: nn.Module, x: torch.Tensor, y: torch.Tensor,
             pass_rows: Optional[List[int]] = None, amp_dtype: Optional[torch.dtype] = None) -> Callable[[], None]:
    """One training step of `task` on the batch, optimizer update included, its forward under autocast at `amp_dtype`
    as the training loop runs it; with `pass_rows`, one forward+backward of `task` over the first `pass_rows[i]` rows
    each before the update (a method's passes at the batch sizes they run at, made as vanilla training steps)."""
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-4, momentum=0.9)
    rows = pass_rows or [x.shape[0]]

    def step() -> None:
        task.train()
        optimizer.zero_grad(set_to_none=True)
        for n in rows:
            with torch.autocast(x.device.type, dtype=amp_dtype, enabled=amp_dtype is not None):
                loss = task(x[:n], y[:n])['loss']
            loss.backward()
        task.finalize_gradients()
        optimizer.step()
    return step


def _training_args(method: str, steps: int) -> argparse.Namespace:
    """The training command's options for `method`, checked as the command checks them (one process)."""
    args = get_train_args_parser().parse_args(
        ['--method', method, '--attack-steps', str(steps), *ATTACK_ARGS, *METHOD_ARGS.get(method, ())])
    args.rank, args.distributed = 0, False
    train_options(args)
    return args


def _tasks(args, device: torch.device, memory_format: torch.memory_format = torch.contiguous_format,
           amp_dtype: Optional[torch.dtype] = None) -> List[tuple]:
    """(family, method, task, model, loader batch) for every registered method, on the first model family the method
    can train; vanilla runs on every family, as its unit."""
    models = {family: timm.create_model(name, num_classes=NUM_CLASSES).to(device, memory_format=memory_format)
              for family, name in (('mbn', args.model), ('nf', args.nf_model))}
    methods = [m for m in list_tasks() if not args.methods or m == 'vanilla' or m in args.methods]
    out = []
    for method in methods:
        training_args = _training_args(method, args.steps)
        for family, model in models.items():
            space = InputSpace.from_model(model)
            try:
                task = create_run_task(train_options(training_args), model, space, num_classes=NUM_CLASSES,
                                       amp_dtype=amp_dtype, device=device, verbose=False)
            except ValueError:  # a model the method refuses (NoFrost: one with batch norm)
                continue
            batch = int(round(args.batch_size * task.batch_scale))
            out.append((family, method, task, model, _batch(space, batch, args.img_size, device, memory_format)))
            if method != 'vanilla':
                break
    return out


def main(argv=None) -> None:
    parser = get_args_parser()
    args = parser.parse_args(argv)
    with recorded('bench_methods', parser, args, argv, args.device):
        _run(args)


def _run(args: argparse.Namespace) -> None:
    device, memory_format, amp_dtype = apply_run_args(args)
    entries = _tasks(args, device, memory_format, amp_dtype)
    steps = {(family, method): _step_fn(task, model, *batch, amp_dtype=amp_dtype)
             for family, method, task, model, batch in entries}
    vanilla = {family: task for family, method, task, _, _ in entries if method == 'vanilla'}
    for family, method, task, model, batch in entries:
        if method in PASS_ROWS:
            rows = PASS_ROWS[method](task, batch[0].shape[0])
            steps[(family, f'{method} passes')] = _step_fn(vanilla[family], model, *batch, pass_rows=rows,
                                                           amp_dtype=amp_dtype)
    seconds, _ = measure(steps, device, args.warmup, args.rounds)
    per_image = {(family, method): [t / batch[0].shape[0] for t in seconds[(family, method)]]
                 for family, method, _, _, batch in entries}

    precision = 'bf16 autocast' if amp_dtype is not None else 'fp32'
    layout = 'channels_last' if args.channels_last else 'NCHW'
    print(f'\n{args.model} / {args.nf_model}, {args.img_size}px, batch {args.batch_size}, K = {args.steps}, '
          f'{device.type}, {precision}, {layout}, threads {torch.get_num_threads()}, median of {args.rounds} rounds\n')
    print('| method | model | cost model (passes/image) | measured (× vanilla) | measured / model | '
          '× its passes as vanilla steps |')
    print('|---|---|---:|---:|---:|---:|')
    for family, method, task, model, batch in entries:
        seconds_per_image = statistics.median(per_image[(family, method)])
        measured = seconds_per_image / statistics.median(per_image[(family, 'vanilla')])
        model_cost = task.passes_per_image
        name = args.model if family == 'mbn' else args.nf_model
        passes = seconds.get((family, f'{method} passes'))
        own_passes = (f'{seconds_per_image * batch[0].shape[0] / statistics.median(passes):.2f}' if passes
                      else '—')
        print(f'| {method} | {name} | {model_cost:g} | {measured:.2f} | {measured / model_cost:.2f} | {own_passes} |')


if __name__ == '__main__':
    main()
