"""Mixture BN whose batch statistics are synchronized across processes, branch by branch.

Each branch reduces its statistics over the rows routed to it on every rank, so a ``split`` forward synchronizes
the clean rows among themselves and the adversarial rows among themselves (an ``interleaved`` forward does both in
one reduction over twice the channels). On CUDA the native `SyncBatchNorm`
kernel does the work; elsewhere (CPU with gloo, for tests and CPU clusters) a differentiable all-reduce of
per-channel sums gives the same statistics.
"""
from typing import Optional

import torch
import torch.distributed as dist
import torch.distributed.nn.functional as dist_fn
from torch.nn.modules._functions import SyncBatchNorm as _NativeSyncBatchNorm

from .mixture_bn import MixtureBatchNorm2d, MixtureBatchNormAct2d

__all__ = ['SyncMixtureBatchNorm2d', 'SyncMixtureBatchNormAct2d']


def _portable_sync_batch_norm(
        x: torch.Tensor,
        weight: Optional[torch.Tensor],
        bias: Optional[torch.Tensor],
        running_mean: Optional[torch.Tensor],
        running_var: Optional[torch.Tensor],
        momentum: float,
        eps: float,
        group,
) -> torch.Tensor:
    """Training-mode batch norm over the union of every rank's rows, differentiable through the all-reduces."""
    channels = x.shape[1]
    dims = (0, 2, 3)
    x32 = x.float()
    count = torch.full((1,), float(x.numel() // channels), device=x.device)
    totals = dist_fn.all_reduce(torch.cat([x32.sum(dims), count]), group=group)
    n = totals[-1].clamp(min=1.0)
    mean = totals[:channels] / n
    centered = x32 - mean.view(1, -1, 1, 1)
    var = dist_fn.all_reduce((centered * centered).sum(dims), group=group) / n
    if running_mean is not None and running_var is not None:
        with torch.no_grad():
            unbiased = var * n / (n - 1).clamp(min=1.0)
            running_mean.lerp_(mean.to(running_mean.dtype), momentum)
            running_var.lerp_(unbiased.to(running_var.dtype), momentum)
    y = centered * torch.rsqrt(var + eps).view(1, -1, 1, 1)
    if weight is not None:
        y = y * weight.view(1, -1, 1, 1)
    if bias is not None:
        y = y + bias.view(1, -1, 1, 1)
    return y.to(x.dtype)


class SyncMixtureBatchNorm2d(MixtureBatchNorm2d):
    """`MixtureBatchNorm2d` with cross-process batch statistics in training; identical to it in eval.

    Args:
        process_group: Group to synchronize over (default: the world).
        *args: As for `MixtureBatchNorm2d`.
        **kwargs: As for `MixtureBatchNorm2d`.
    """

    def __init__(self, *args, process_group=None, **kwargs):
        super().__init__(*args, **kwargs)
        self.process_group = process_group

    def _world(self):
        """(process group, its size) when training under an initialized process group, else (None, 1)."""
        if not (self.training and dist.is_available() and dist.is_initialized()):
            return None, 1
        group = self.process_group if self.process_group is not None else dist.group.WORLD
        return group, dist.get_world_size(group)

    @torch.jit.unused
    def _fuses_split(self, x: torch.Tensor) -> bool:
        """Only when the statistics are this process's own: the fused split knows no other process."""
        return self._world()[1] == 1 and super()._fuses_split(x)

    @torch.jit.unused
    def _batch_norm(
            self,
            x: torch.Tensor,
            weight: Optional[torch.Tensor],
            bias: Optional[torch.Tensor],
            running_mean: Optional[torch.Tensor],
            running_var: Optional[torch.Tensor],
            momentum: float,
    ) -> torch.Tensor:
        group, world_size = self._world()
        if world_size == 1:
            return super()._batch_norm(x, weight, bias, running_mean, running_var, momentum)
        if not self.track_running_stats:
            running_mean = running_var = None
        if x.is_cuda:
            return _NativeSyncBatchNorm.apply(
                x, weight, bias, running_mean, running_var, self.eps, momentum, group, world_size)
        return _portable_sync_batch_norm(x, weight, bias, running_mean, running_var, momentum, self.eps, group)


class SyncMixtureBatchNormAct2d(SyncMixtureBatchNorm2d, MixtureBatchNormAct2d):
    """`MixtureBatchNormAct2d` with cross-process batch statistics (keeps ``act`` and ``drop``)."""
