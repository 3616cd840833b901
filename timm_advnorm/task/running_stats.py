"""Train with BN running statistics: Xie & Yuille's "enforce consistent BN behaviour" heuristic (ICLR 2020, §4.3).

For the last N epochs every BN layer normalizes with its running statistics (and stops updating them) while the
rest of the model trains as usual; Table 5 shows +1.3 to +3.3 points against PGD-2000 in every setting.
"""
import torch.nn as nn
from torch.nn.modules.batchnorm import _BatchNorm

__all__ = ['use_running_statistics', 'running_stats_active']


def running_stats_active(epoch: int, num_epochs: int, last_epochs: int) -> bool:
    """Whether `epoch` (0-based) falls in the final `last_epochs` of `num_epochs`."""
    return last_epochs > 0 and epoch >= num_epochs - last_epochs


def use_running_statistics(model: nn.Module) -> int:
    """Put every BN layer of a training model in eval mode; returns how many were switched.

    Call after ``model.train()`` at the start of each affected epoch.
    """
    count = 0
    for m in model.modules():
        if isinstance(m, _BatchNorm):
            m.eval()
            count += 1
    return count
