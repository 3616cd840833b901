"""``--grad-accum-steps``: one optimizer update from the gradients of several loader batches (micro-batches).

ImageNet recipes state a global batch (Xie & Yuille: 4096) that few GPUs hold at once; timm's ``train.py``
accumulates gradients over ``--grad-accum-steps`` batches before each update, and so does the training loop here,
with the same grouping: every ``N`` batches make an update, and the epoch's last update takes what is left.

Each micro-batch is a whole training step of its method up to the backward pass: its attack runs on that
micro-batch, a fused mixture-BN pass fuses its clean and adversarial rows, and Fast AdvProp reuses its own attack
gradient inside it. The loop then *averages* the accumulated gradients (`average_gradients`) instead of dividing
each loss: Fast AdvProp back-propagates part of its loss inside the task, where the loop cannot scale it, and
gradients are linear in the loss, so both give the same update. The method's `finalize_gradients` (Fast AdvProp's
per-group rescaling) runs once per update, after averaging: its factors depend only on the split of a micro-batch,
the same for every one of them.

The accumulated gradient equals that of one batch of all the micro-batches' rows wherever no row's loss depends on
another row: models without batch statistics (GroupNorm, NF-ResNets), BN on running statistics
(``--running-stats-epochs``), and attacks without random starts. Batch normalization in training mode normalizes each
micro-batch with its own statistics, as it normalizes each process's batch under DDP, so there the gradients differ
from one big batch's (as timm's do) and the running statistics are updated once per micro-batch; ``--sync-bn`` does
not change this, it synchronizes across processes, not micro-batches.
"""
from typing import Iterable

import torch
import torch.nn as nn

__all__ = ['GradientAccumulation', 'average_gradients']


class GradientAccumulation:
    """Which batches of an epoch open and close an optimizer update, as timm's ``train_one_epoch`` groups them.

    Args:
        num_batches: Loader batches in the epoch.
        steps: Batches per update (``--grad-accum-steps``).

    Raises:
        ValueError: `steps` is below 1.
    """

    def __init__(self, num_batches: int, steps: int = 1):
        if steps < 1:
            raise ValueError(f'--grad-accum-steps must be at least 1, got {steps}')
        self.num_batches = num_batches
        self.steps = steps

    @property
    def updates_per_epoch(self) -> int:
        """Optimizer updates in the epoch (what the learning-rate schedule counts)."""
        return -(-self.num_batches // self.steps)

    def opens_update(self, batch_idx: int) -> bool:
        """Whether batch `batch_idx` is the first micro-batch of an update (gradients start from zero)."""
        return batch_idx % self.steps == 0

    def closes_update(self, batch_idx: int) -> bool:
        """Whether the optimizer steps after batch `batch_idx`: every `steps` batches, and after the last one."""
        return (batch_idx + 1) % self.steps == 0 or batch_idx == self.num_batches - 1

    def micro_batches(self, batch_idx: int) -> int:
        """How many micro-batches the update holding batch `batch_idx` accumulates (fewer for a short last one)."""
        first = batch_idx - batch_idx % self.steps
        return min(self.steps, self.num_batches - first)

    def update_index(self, batch_idx: int) -> int:
        """The update (within the epoch) that batch `batch_idx` belongs to."""
        return batch_idx // self.steps


@torch.no_grad()
def average_gradients(parameters: Iterable[nn.Parameter], micro_batches: int) -> None:
    """Divide the gradients accumulated over `micro_batches` backward passes by their number: the mean of the
    micro-batches' gradients, as if each loss had been divided before its backward pass."""
    if micro_batches == 1:
        return
    grads = [p.grad for p in parameters if p.grad is not None]
    if grads:
        torch._foreach_mul_(grads, 1.0 / micro_batches)
