"""What the benchmarks share: run arguments, the interleaved timing loop, and torchattacks' PGD as a reference.

The scripts run as ``python benchmarks/bench_*.py``, which puts this folder on ``sys.path``: import it as
``from _common import ...``.
"""
import argparse
import time
from typing import Callable, Dict, List, Mapping, Optional, Tuple, TypeVar

import torch
import torch.nn as nn

from timm_advnorm.attacks import InputSpace

Result = TypeVar('Result')


def add_device_args(parser: argparse.ArgumentParser, amp_help: str) -> None:
    """``--device``, ``--amp`` (bf16 autocast, where `amp_help` says) and ``--channels-last``."""
    parser.add_argument('--device', default='cpu')
    parser.add_argument('--amp', action='store_true', help=amp_help)
    parser.add_argument('--channels-last', action='store_true')


def add_timing_args(parser: argparse.ArgumentParser, rounds: int = 3, warmup: int = 1, unit: str = 'method') -> None:
    """``--rounds`` timed after ``--warmup`` untimed ones, each running every `unit` once, and ``--threads``."""
    parser.add_argument('--rounds', type=int, default=rounds, help=f'timed rounds (each times every {unit} once)')
    parser.add_argument('--warmup', type=int, default=warmup, help='untimed rounds first')
    parser.add_argument('--threads', type=int, default=0, help='torch CPU threads (0: torch default)')


def apply_run_args(args: argparse.Namespace) -> Tuple[torch.device, torch.memory_format, Optional[torch.dtype]]:
    """Apply ``--threads`` and ``--seed``; return the device, memory format and autocast dtype the arguments ask for."""
    if args.threads:
        torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    memory_format = torch.channels_last if args.channels_last else torch.contiguous_format
    return torch.device(args.device), memory_format, torch.bfloat16 if args.amp else None


def timed(fn: Callable[[], Result], device: torch.device,
          clock: Callable[[], float] = time.perf_counter) -> Tuple[float, Result]:
    """Seconds `fn` takes by `clock`, waiting for queued accelerator work before and after, and what it returned."""
    if device.type == 'cuda':
        torch.cuda.synchronize(device)
    start = clock()
    result = fn()
    if device.type == 'cuda':
        torch.cuda.synchronize(device)
    return clock() - start, result


def measure(
        methods: Mapping[str, Callable[[], Result]],
        device: torch.device,
        warmup: int,
        rounds: int,
        clock: Callable[[], float] = time.perf_counter,
) -> Tuple[Dict[str, List[float]], Dict[str, Result]]:
    """Seconds per call of every method over the timed rounds, and what each method returned last.

    Methods are interleaved round by round, so background load hits every method alike.
    """
    times: Dict[str, List[float]] = {name: [] for name in methods}
    results: Dict[str, Result] = {}
    for i in range(warmup + rounds):
        for name, fn in methods.items():
            elapsed, results[name] = timed(fn, device, clock)
            if i >= warmup:
                times[name].append(elapsed)
    return times, results


def torchattacks_pgd(model: nn.Module, space: InputSpace, eps: float, step: float, steps: int):
    """torchattacks' PGD (random start, last iterate) taking and returning normalized inputs, as our attacks do.

    With ``set_normalization_used``, torchattacks 3.5 un-normalizes its input, attacks in [0, 1] and normalizes the
    result. It restores the train mode of the model it is given after each call, so `model` is passed as is: a
    fresh ``nn.Sequential`` wrapper (``training=True``) would leave it in train mode.

    Args:
        model: The classifier, taking normalized inputs.
        space: The model's input normalization.
        eps: L-inf budget on the 0-255 scale.
        step: Step size on the 0-255 scale.
        steps: Iterations.

    Raises:
        ImportError: torchattacks is not installed (a dev dependency: ``pip install torchattacks --no-deps``).
    """
    import torchattacks

    attack = torchattacks.PGD(model, eps=eps / 255, alpha=step / 255, steps=steps, random_start=True)
    attack.set_normalization_used(mean=list(space.mean), std=list(space.std))
    return attack
