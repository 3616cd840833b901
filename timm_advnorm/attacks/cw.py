"""CW-L∞: PGD on the Carlini-Wagner margin loss.

Carlini & Wagner, *Towards evaluating the robustness of neural networks* (S&P 2017), in the L∞ form of Zhang et al.
(FAT, ICML 2020) that NoFrost (Wang et al., ICML 2022) follows: projected sign-gradient ascent, from a uniform random
start in the ε-box, on ``-max(z_y - max_{i != y} z_i + κ, 0)`` with confidence κ=50. Defaults are FAT's evaluation
(30 iterations of step ε/4); NoFrost evaluates 20 iterations.

Evaluation semantics (`pgd` with ``best_iterate``): per sample the first fooling iterate, else the one with the
highest loss; fooled samples leave the batch; misclassified clean samples are returned unchanged.
"""
from functools import partial
from typing import Optional

import torch
import torch.nn as nn

from .base import attack_dataclass
from .eval_attack import EvalAttack, pgd_correct_only
from .losses import cw_loss
from .progress import ProgressFn
from .registry import register_attack
from .space import InputSpace

__all__ = ['cw_linf', 'CWLinf']


def cw_linf(
        model: nn.Module,
        x: torch.Tensor,
        y: torch.Tensor,
        *,
        space: InputSpace,
        eps: float,
        steps: int = 30,
        step: Optional[float] = None,
        confidence: float = 50.0,
        random_start: bool = True,
        generator: Optional[torch.Generator] = None,
        autocast_dtype: Optional[torch.dtype] = None,
        progress: Optional[ProgressFn] = None,
) -> torch.Tensor:
    """Untargeted CW-L∞: PGD ascending the CW margin loss with the true class masked out of the maximum.

    Args:
        model: Model in eval mode.
        x: Normalized inputs (B, C, H, W).
        y: Labels (B,) or soft targets (B, C).
        space: The model's input normalization.
        eps: L∞ budget on the 0-255 scale.
        steps: Iterations (30).
        step: Step on the 0-255 scale; default ``eps / 4``.
        confidence: κ, the margin beyond which the loss stops rewarding (50).
        random_start: Start uniformly in the ε-box.
        generator: Source of the random start.
        autocast_dtype: Forward under autocast at this dtype; loss and gradient stay fp32.
        progress: Where to report the iterations (`progress.AttackProgress`, as PGD's), if anywhere.

    Returns:
        Adversarial inputs (normalized, `x`'s shape and dtype).

    Example:
        >>> with attack_context(model):
        ...     x_adv = cw_linf(model, x, y, space=InputSpace.from_model(model), eps=8, steps=20)
    """
    if step is not None and step < 0:
        raise ValueError(f'step must be >= 0, got {step}.')
    return pgd_correct_only(
        model, x, y, space=space, eps=eps, step=eps / 4 if step is None else step, steps=steps,
        random_start=random_start, loss_fn=partial(cw_loss, confidence=confidence), generator=generator,
        autocast_dtype=autocast_dtype, progress=progress)


@register_attack('cw-linf')
@attack_dataclass
class CWLinf(EvalAttack):
    """CW-L∞ (see `cw_linf`); defaults: FAT's evaluation (30 iterations, step ε/4, κ=50) at NoFrost's ε=8.

    Args:
        eps: L∞ budget on the 0-255 scale (8).
        steps: Iterations (30; NoFrost evaluates 20).
        step: Step on the 0-255 scale (default ``eps / 4``).
        confidence: κ (50).
        random_start: Uniform random start in the ε-box (True).
        space, autocast_dtype, seed, bn_stats, fold_bn: See `EvalAttack`.
    """
    title = 'CW-L∞'

    eps: float = 8.0
    steps: int = 30
    step: Optional[float] = None
    confidence: float = 50.0
    random_start: bool = True

    core = staticmethod(cw_linf)

    def check_options(self) -> None:
        # 0 iterations: the start point scored as robust accuracy
        if self.steps < 1 or (self.step is not None and self.step < 0):
            raise ValueError(f'CW-L∞ needs steps >= 1 and step >= 0, got {self.steps}, {self.step}.')

    @property
    def step_size(self) -> float:
        """`step`, or ``eps / 4`` by default."""
        return self.eps / 4 if self.step is None else self.step

    @property
    def step_description(self) -> str:
        """``sign step`` (on the CW margin loss), with ``ε/4`` by default."""
        return 'sign step' + (', ε/4' if self.step is None else '')
