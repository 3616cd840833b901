"""Training throughput of a study's cells side by side (``timm-advnorm-study --jobs N``) against one cell at a time.

A study runs many small, independent training runs. One run on every core (``--jobs 1``) is compared with N runs at
once, one thread each (``--jobs N``), on the same machine and the same work: N x ``--steps`` SGD steps of the model
on synthetic batches (forward, backward, momentum update; the input's pixels do not change the time). The N runs start
together, each in a process of its own (as the study's child processes), and the wall time is the last one's end.
Rounds alternate between the two layouts, so background load hits both alike; the table gives each layout's median
images per second and their ratio. The default model is the costliest cell of the Galloway et al. MNIST grid at the
paper's scale (``galloway_mlp`` at 84 px).

Example:
    python benchmarks/bench_study_jobs.py                       # galloway_mlp at 84 px, all CPUs
    python benchmarks/bench_study_jobs.py --model galloway_bn_mlp --img-size 28 --jobs 2
"""
import argparse
import multiprocessing
import statistics
import time
from typing import Dict, List

import timm
import torch
import torch.nn.functional as F

import timm_advnorm  # noqa: F401  (registers the models)
from timm_advnorm.usage import available_cpus

from _common import add_record_args, recorded


def get_args_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--model', default='galloway_mlp', help='registered model name')
    parser.add_argument('--img-size', type=int, default=84, help='input side (passed to the model as img_size)')
    parser.add_argument('--in-chans', type=int, default=3)
    parser.add_argument('--batch-size', type=int, default=128)
    parser.add_argument('--jobs', type=int, default=0, help='runs side by side (0: the CPUs this process may use)')
    parser.add_argument('--steps', type=int, default=100, help='timed SGD steps of each run')
    parser.add_argument('--warmup', type=int, default=10, help='untimed steps of each run first')
    parser.add_argument('--rounds', type=int, default=3, help='timed rounds of each layout')
    parser.add_argument('--seed', type=int, default=0)
    add_record_args(parser)
    return parser


def _train(args: argparse.Namespace, threads: int, steps: int, start: multiprocessing.Barrier,
           seconds: multiprocessing.Queue) -> None:
    """Train `steps` steps on `threads` threads after `args.warmup` untimed ones and waiting for the other runs at
    `start`; put the timed seconds on `seconds`."""
    torch.set_num_threads(threads)
    torch.manual_seed(args.seed)
    model = timm.create_model(args.model, num_classes=10, in_chans=args.in_chans, img_size=args.img_size)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    inputs = torch.randn(args.batch_size, args.in_chans, args.img_size, args.img_size)
    labels = torch.randint(10, (args.batch_size,))

    def step() -> None:
        optimizer.zero_grad(set_to_none=True)
        F.cross_entropy(model(inputs), labels).backward()
        optimizer.step()

    for _ in range(args.warmup):
        step()
    start.wait()
    began = time.perf_counter()
    for _ in range(steps):
        step()
    seconds.put(time.perf_counter() - began)


def _layout(args: argparse.Namespace, processes: int, threads: int, steps: int) -> float:
    """Images per second of `processes` runs of `steps` steps each on `threads` threads, started together."""
    context = multiprocessing.get_context('spawn')
    start, seconds = context.Barrier(processes), context.Queue()
    runs = [context.Process(target=_train, args=(args, threads, steps, start, seconds)) for _ in range(processes)]
    for run in runs:
        run.start()
    wall = max(seconds.get() for _ in runs)
    for run in runs:
        run.join()
        if run.exitcode != 0:
            raise RuntimeError(f'a training process exited with status {run.exitcode}')
    return processes * steps * args.batch_size / wall


def _run(args: argparse.Namespace) -> None:
    jobs = args.jobs or available_cpus()
    layouts = {f'--jobs 1 (one run on {jobs} threads)': (1, jobs, jobs * args.steps),
               f'--jobs {jobs} ({jobs} runs on 1 thread each)': (jobs, 1, args.steps)}
    rates: Dict[str, List[float]] = {name: [] for name in layouts}
    for _ in range(args.rounds):
        for name, layout in layouts.items():
            rates[name].append(_layout(args, *layout))
    baseline = statistics.median(next(iter(rates.values())))
    print(f'{args.model} at {args.img_size} px, batch {args.batch_size}: {jobs} x {args.steps} SGD steps per layout, '
          f'median of {args.rounds} rounds on {available_cpus()} CPUs\n')
    print('| layout | images/s | vs --jobs 1 |')
    print('|---|---:|---:|')
    for name, values in rates.items():
        median = statistics.median(values)
        print(f'| {name} | {median:,.0f} | {median / baseline:.2f}x |')


def main(argv=None) -> None:
    parser = get_args_parser()
    args = parser.parse_args(argv)
    with recorded('bench_study_jobs', parser, args, argv):
        _run(args)


if __name__ == '__main__':
    main()
