"""Momentum iterative FGSM (MI-FGSM), L∞.

Dong et al., *Boosting adversarial attacks with momentum* (CVPR 2018), Algorithm 1: from the clean image, accumulate
``g ← μ·g + ∇ / ‖∇‖₁`` and step ``x ← Clip_ε(x + α·sign(g))``, with decay μ=1 and ``α = ε / T`` by default. NoFrost
(Wang et al., ICML 2022) evaluates it as "MIA" with 20 iterations at ε=8.

The gradient is taken with respect to pixels (the normalized-space gradient divided by the per-channel std) before
its L1 normalization, so the momentum accumulates the same quantity as in the paper whatever the model's
normalization. Evaluation semantics: per sample the first fooling iterate (else the highest-loss one); fooled
samples leave the batch; misclassified clean samples are returned unchanged.
"""
from typing import Optional

import torch
import torch.nn as nn

from .base import attack_dataclass, attack_inputs, evaluate_iterate, project
from .best_iterate import BestIterate
from .core import cross_entropy_per_sample
from .eval_attack import EvalAttack
from .progress import ProgressFn, reporter
from .registry import register_attack
from .space import InputSpace

__all__ = ['mifgsm', 'MIFGSM']


def mifgsm(
        model: nn.Module,
        x: torch.Tensor,
        y: torch.Tensor,
        *,
        space: InputSpace,
        eps: float,
        steps: int = 10,
        step: Optional[float] = None,
        decay: float = 1.0,
        autocast_dtype: Optional[torch.dtype] = None,
        progress: Optional[ProgressFn] = None,
) -> torch.Tensor:
    """Untargeted MI-FGSM, L∞, on the cross-entropy.

    Args:
        model: Model in eval mode.
        x: Normalized inputs (B, C, H, W).
        y: Labels (B,) or soft targets (B, C).
        space: The model's input normalization.
        eps: L∞ budget on the 0-255 scale.
        steps: Iterations T (10).
        step: Step α on the 0-255 scale; default ``eps / steps``.
        decay: Momentum decay μ (1.0).
        autocast_dtype: Forward under autocast at this dtype; gradients stay fp32.
        progress: Where to report the iterations (`progress.AttackProgress`), if anywhere.

    Returns:
        Adversarial inputs (normalized, `x`'s shape and dtype).

    Example:
        >>> with attack_context(model):
        ...     x_adv = mifgsm(model, x, y, space=InputSpace.from_model(model), eps=8, steps=20)
    """
    if eps < 0 or steps < 1 or (step is not None and step < 0) or decay < 0:
        raise ValueError(f'MI-FGSM needs eps, step, decay >= 0 and steps >= 1, got {eps}, {step}, {decay}, {steps}.')
    x, labels, dtype = attack_inputs(x, y)
    radius = space.linf_budget(eps, x)
    step_size = space.linf_budget(eps / steps if step is None else step, x)
    std = space.std_like(x).to(x.dtype)

    best = BestIterate(x)
    rows = torch.arange(x.shape[0], device=x.device)
    x_adv, momentum = x, torch.zeros_like(x)
    tick = reporter(progress, 'mifgsm', '', steps)
    for i in range(steps + 1):
        tick(i)
        grad, logits, loss = evaluate_iterate(
            model, x_adv, labels[rows], cross_entropy_per_sample, autocast_dtype, gradient=i < steps)
        fooled = best.update_from_logits(rows, x_adv, logits, labels[rows], loss, autocast_dtype=autocast_dtype)
        if i == steps:
            break
        keep = ~fooled
        rows, x_adv, grad, momentum = rows[keep], x_adv[keep], grad[keep], momentum[keep]
        if not rows.numel():
            break
        pixel_grad = grad / std
        momentum = decay * momentum + pixel_grad / pixel_grad.abs().flatten(1).sum(dim=1).clamp_min(1e-12).view(
            -1, 1, 1, 1)
        x_adv = project(x_adv + step_size * momentum.sign(), x[rows], space, radius)
    return best.x.to(dtype)


@register_attack('mifgsm')
@attack_dataclass
class MIFGSM(EvalAttack):
    """MI-FGSM, L∞ (see `mifgsm`); defaults: Dong et al. (10 iterations, μ=1, α=ε/T) at NoFrost's ε=8.

    Args:
        eps: L∞ budget on the 0-255 scale (8).
        steps: Iterations (10; NoFrost evaluates 20).
        step: Step on the 0-255 scale (default ``eps / steps``).
        decay: Momentum decay (1.0).
        space, autocast_dtype, seed, bn_stats, fold_bn: See `EvalAttack`.
    """
    title = 'MI-FGSM'

    eps: float = 8.0
    steps: int = 10
    step: Optional[float] = None
    decay: float = 1.0

    core = staticmethod(mifgsm)

    def check_options(self) -> None:
        if self.steps < 1 or (self.step is not None and self.step < 0) or self.decay < 0:
            raise ValueError(f'MI-FGSM needs steps >= 1 and step, decay >= 0, got {self.steps}, {self.step}, '
                             f'{self.decay}.')

    @property
    def step_size(self) -> float:
        """`step`, or ``eps / steps`` by default."""
        return self.eps / self.steps if self.step is None else self.step

    @property
    def step_description(self) -> str:
        """``momentum sign step`` (the sign of the accumulated normalized gradients), with ``ε/N`` by default."""
        return 'momentum sign step' + (', ε/N' if self.step is None else '')
