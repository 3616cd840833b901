"""Timing work on a device, for the plans of training and evaluation: what one call takes once warmed up (kernels
chosen, caches filled, one-time work done), to the end of the device's work (CUDA runs asynchronously)."""
import time
from typing import Callable

import torch

__all__ = ['synchronize', 'timed_seconds']


def synchronize(device: torch.device) -> None:
    """Wait for the work queued on `device` (CUDA); nothing to wait for elsewhere."""
    if device.type == 'cuda':
        torch.cuda.synchronize(device)


def timed_seconds(work: Callable[[], object], device: torch.device, warmup: int = 0, repeat: int = 1) -> float:
    """Seconds one call of `work` takes on `device`, after `warmup` untimed calls: the fastest of `repeat` timed
    calls (as `timeit` reports), the least disturbed by other work on a shared machine.

    Args:
        work: What to time (its result is dropped).
        device: Where it runs, waited for before and after each timed call.
        warmup: Untimed calls first, so that one-time work (kernel selection, allocator growth) is not timed.
        repeat: Timed calls.
    """
    for _ in range(warmup):
        work()
    fastest = float('inf')
    for _ in range(max(repeat, 1)):
        synchronize(device)
        start = time.perf_counter()
        work()
        synchronize(device)
        fastest = min(fastest, time.perf_counter() - start)
    return fastest
