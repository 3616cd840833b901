"""``--dist-bn``: make every process's BN running statistics the same after each epoch, both branches of mixture BN.

Without synchronized BN each process estimates running statistics from its own share of the data, so the processes
end the epoch with different models, and rank 0 validates and saves only its own. timm's ``train.py`` therefore
averages (``reduce``) or copies from rank 0 (``broadcast``) the running means and variances before validation. Here
the statistics are found by module, every batch norm that tracks running statistics: a mixture BN layer is the clean
branch and holds the adversarial one (``adv_bn``) as a child batch norm, so both branches are reduced or broadcast.
"""
from typing import List

import torch
import torch.distributed as dist
import torch.nn as nn
from timm.utils.model import unwrap_model

__all__ = ['DIST_BN_MODES', 'check_dist_bn', 'distribute_bn', 'running_statistics']

#: ``--dist-bn`` values: average over processes, copy rank 0's, or leave each process's own (``''``).
DIST_BN_MODES = ('reduce', 'broadcast', '')


def check_dist_bn(mode: str) -> str:
    """`mode` when it is a ``--dist-bn`` value.

    Raises:
        ValueError: It is not one of `DIST_BN_MODES`.
    """
    if mode not in DIST_BN_MODES:
        raise ValueError(f'--dist-bn must be reduce, broadcast or empty (no distribution), got {mode!r}')
    return mode


def running_statistics(model: nn.Module) -> List[torch.Tensor]:
    """The running means and variances of every batch norm of `model` that tracks them, the adversarial branches of
    mixture BN included (their ``adv_bn`` children)."""
    stats = []
    for module in unwrap_model(model).modules():
        if isinstance(module, nn.modules.batchnorm._NormBase) and module.track_running_stats:
            stats.extend(s for s in (module.running_mean, module.running_var) if s is not None)
    return stats


@torch.no_grad()
def distribute_bn(model: nn.Module, mode: str) -> None:
    """Reduce (average) or broadcast (from rank 0) the running statistics of `model` over the default process group.

    Call on every process, with the same `mode`; ``''`` or a single process does nothing.
    """
    check_dist_bn(mode)
    if not mode or not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() == 1:
        return
    world_size = dist.get_world_size()
    for stat in running_statistics(model):
        if mode == 'reduce':
            dist.all_reduce(stat, op=dist.ReduceOp.SUM)
            stat.div_(world_size)
        else:
            dist.broadcast(stat, 0)
