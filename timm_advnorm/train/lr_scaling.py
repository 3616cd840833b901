"""The learning rate of a run, scaled by its global batch exactly as timm's ``train.py`` computes it.

A rate tuned for one batch size is wrong for another: timm's training script takes a *base* rate for a base batch
(``--lr-base`` per ``--lr-base-size`` images) and scales it by the run's global batch, the images behind one optimizer
update over all processes and accumulated micro-batches (``--batch-size`` × processes × ``--grad-accum-steps``):
linearly (Goyal et al.) or by the square root (adaptive optimizers, whose default this is). An explicit ``--lr`` is
used as given. Recipes therefore state the paper's rate and batch and stay right on any number of GPUs.
"""
import math
from typing import NamedTuple, Optional

__all__ = ['LR_BASE_SCALES', 'LearningRate', 'default_lr_base_scale', 'global_batch_size', 'resolve_lr']

#: ``--lr-base-scale`` values; empty picks the optimizer's default (`default_lr_base_scale`).
LR_BASE_SCALES = ('', 'linear', 'sqrt')

# Optimizer names containing one of these default to square-root scaling (timm: adaptive ones and LAMB).
_SQRT_SCALED_OPTIMIZERS = ('ada', 'lamb')


class LearningRate(NamedTuple):
    """The resolved learning rate and how it came about.

    Attributes:
        lr: The peak learning rate the optimizer and schedule use.
        global_batch: Images per optimizer update over all processes and accumulated micro-batches.
        scale: ``linear`` or ``sqrt`` when `lr` was scaled from the base rate; ``''`` when ``--lr`` was given.
        lr_base: The base rate it was scaled from (None when ``--lr`` was given).
        lr_base_size: The batch size of the base rate.
    """
    lr: float
    global_batch: int
    scale: str
    lr_base: Optional[float]
    lr_base_size: int

    def describe(self, resumed: Optional[str] = None) -> str:
        """One log line: where the learning rate comes from (timm's start-up message, with its numbers).

        Args:
            resumed: The checkpoint whose record the rate was read from (a resumed run not given ``--lr``).
        """
        if resumed:
            return f'Learning rate {self.lr:g} as {resumed} records it, global batch {self.global_batch}.'
        if not self.scale:
            return f'Learning rate {self.lr:g} as given (--lr), global batch {self.global_batch}.'
        return (f'Learning rate ({self.lr:g}) calculated from base learning rate ({self.lr_base:g} per '
                f'{self.lr_base_size} images) and effective global batch size ({self.global_batch}) with '
                f'{self.scale} scaling.')


def default_lr_base_scale(opt: str) -> str:
    """timm's scaling for an optimizer when ``--lr-base-scale`` is empty: ``sqrt`` for names containing ``ada`` or
    ``lamb`` (adam, adamw, nadam, adagrad, lamb, ...), else ``linear``."""
    name = opt.lower()
    return 'sqrt' if any(part in name for part in _SQRT_SCALED_OPTIMIZERS) else 'linear'


def global_batch_size(batch_size: int, world_size: int = 1, grad_accum_steps: int = 1) -> int:
    """Images per optimizer update: the per-process batch times the processes times the accumulated micro-batches."""
    return batch_size * world_size * grad_accum_steps


def resolve_lr(lr: Optional[float], lr_base: float, lr_base_size: int, lr_base_scale: str, opt: str,
               global_batch: int) -> LearningRate:
    """The run's learning rate: `lr` when given, else `lr_base` scaled by ``global_batch / lr_base_size``.

    Args:
        lr: ``--lr``; None (timm's default) to scale the base rate.
        lr_base: ``--lr-base``, the rate at `lr_base_size` images per update.
        lr_base_size: ``--lr-base-size``.
        lr_base_scale: ``--lr-base-scale``: ``linear``, ``sqrt``, or ``''`` for the optimizer's default.
        opt: ``--opt``, which picks the default scaling.
        global_batch: Images per optimizer update (`global_batch_size`).

    Raises:
        ValueError: An unknown scaling, or sizes that are not positive.
    """
    if lr_base_scale not in LR_BASE_SCALES:
        raise ValueError(f'--lr-base-scale must be one of linear, sqrt or empty (the optimizer\'s default), '
                         f'got {lr_base_scale!r}')
    if lr_base_size < 1 or global_batch < 1:
        raise ValueError(f'--lr-base-size and the global batch must be positive, got {lr_base_size} and '
                         f'{global_batch}')
    if lr is not None:
        return LearningRate(lr, global_batch, '', None, lr_base_size)
    scale = lr_base_scale or default_lr_base_scale(opt)
    ratio = global_batch / lr_base_size
    if scale == 'sqrt':
        ratio = math.sqrt(ratio)
    return LearningRate(lr_base * ratio, global_batch, scale, lr_base, lr_base_size)
