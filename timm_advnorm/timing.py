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


def timed_seconds(work: Callable[[], object], device: torch.device, warmup: int = 0) -> float:
    """Seconds one call of `work` takes on `device`, after `warmup` untimed calls.

    Args:
        work: What to time (its result is dropped).
        device: Where it runs, waited for before and after the timed call.
        warmup: Untimed calls first, so that one-time work (kernel selection, allocator growth) is not timed.
    """
    for _ in range(warmup):
        work()
    synchronize(device)
    start = time.perf_counter()
    work()
    synchronize(device)
    return time.perf_counter() - start
