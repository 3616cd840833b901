"""FGSM with random start: a single PGD step of 1.25ε from a random point in the ε-box.

Wong, Rice & Kolter, *Fast is better than free: revisiting adversarial training* (ICLR 2020): the random start
and the 1.25ε step make one-step adversarial training as robust as PGD training at a fraction of its cost. Fast
AdvProp's attacker is the same PGD-1 with step ε (``FGSM(space, eps, step=eps)``).
"""
from typing import Optional

import torch

from .core import LossFn
from .pgd import PGD
from .registry import register_attack
from .space import InputSpace

__all__ = ['FGSM', 'FGSM_STEP_FACTOR']

FGSM_STEP_FACTOR = 1.25


@register_attack('fgsm')
class FGSM(PGD):
    """One-step attack with random start (PGD-1 with a fixed step).

    Args:
        space: The model's input normalization.
        eps: Budget on the 0-255 scale.
        step: Step on the 0-255 scale; default ``1.25 * eps`` (Wong et al. 2020).
        norm: ``linf`` or ``l2``.
        targeted, random_start, clean_start_prob, clean_start_mode, best_iterate, loss_fn: See `PGD`.
        bn_stats, autocast_dtype, seed, fold_bn: See `Attack`.
    """

    def __init__(
            self,
            space: InputSpace,
            eps: float = 16.0,
            step: Optional[float] = None,
            norm: str = 'linf',
            targeted: bool = False,
            random_start: bool = True,
            clean_start_prob: float = 0.0,
            clean_start_mode: str = 'per_sample',
            best_iterate: bool = True,
            loss_fn: Optional[LossFn] = None,
            bn_stats: str = 'running',
            autocast_dtype: Optional[torch.dtype] = None,
            seed: Optional[int] = None,
            fold_bn: bool = True,
    ):
        super().__init__(
            space, eps=eps, step=FGSM_STEP_FACTOR * eps if step is None else step, steps=1, norm=norm,
            targeted=targeted, random_start=random_start, clean_start_prob=clean_start_prob,
            clean_start_mode=clean_start_mode, step_rule='fixed',
            best_iterate=best_iterate, loss_fn=loss_fn, bn_stats=bn_stats, autocast_dtype=autocast_dtype, seed=seed,
            fold_bn=fold_bn)
