"""FGSM with random start: a single PGD step of 1.25ε from a random point in the ε-box.

Wong, Rice & Kolter, *Fast is better than free: revisiting adversarial training* (ICLR 2020): the random start
and the 1.25ε step make one-step adversarial training as robust as PGD training at a fraction of its cost. Fast
AdvProp's attacker is the same PGD-1 with step ε (``FGSM(space, eps, step=eps)``).
"""
from dataclasses import field
from typing import Optional

from .base import attack_dataclass
from .pgd import PGD
from .registry import register_attack

__all__ = ['FGSM', 'FGSM_STEP_FACTOR']

FGSM_STEP_FACTOR = 1.25


@register_attack('fgsm')
@attack_dataclass
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
    title = 'FGSM'

    step: Optional[float] = None
    steps: int = field(default=1, init=False)
    step_rule: str = field(default='fixed', init=False, repr=False)

    def __post_init__(self):
        if self.step is None:
            self.step = FGSM_STEP_FACTOR * self.eps
        super().__post_init__()
