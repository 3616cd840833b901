"""Robustness metrics of NoFrost (Wang et al., ICML 2022, §4.3 and App. B.1), per sample.

* **Decision margin** (Kim et al. 2021): ``M(x) = p(x)_y - max_{i != y} p(x)_i`` with ``p`` the softmax; negative
  means misclassified. Larger is better.
* **Boundary thickness** (Yang et al., NeurIPS 2020):
  ``T(x) = ||x - x*||_2 ∫_0^1 1{α < g_ij(t x + (1-t) x*) < β} dt``
  with ``g_ij = p_i - p_j``, ``i`` the prediction on ``x`` and ``j`` the class ``x*`` is pushed to, α=0, β=0.75.
  ``x*`` comes from a targeted 20-step L2 PGD toward a random other class; as in Yang et al.'s code we keep its
  last iterate (pushed past the boundary, not stopped on it), use a pixel-scale L2 radius of 1.0 and step 0.2, and
  integrate with 128 evenly spaced points. ``j`` is the attack's target, which is the prediction on ``x*`` whenever
  the attack succeeds (NoFrost states it that way). We measure ``||x - x*||_2`` on the [0, 1] pixel scale, so values
  do not depend on the model's normalization, and are at most the radius, 1.0. NoFrost's ImageNet values (Table 5:
  13.8-31.5) cannot come from that radius even in normalized units (at most about 1/std ≈ 4.4): they used a larger
  one, which the paper does not state, so our values compare models with each other, not with Table 5. Larger is
  better.
* **Smoothness** (Zhang et al. 2019, TRADES): ``D(x) = KL(p(x) || p(x*))`` with ``x*`` the last iterate of an
  untargeted L∞ PGD-20 at the protocol's ε (NoFrost's white-box budget). Smaller is better.
"""
from typing import Optional

import torch
import torch.nn as nn
import torch.nn.functional as F

from ...attacks.pgd import PGD
from ...attacks.space import InputSpace
from ..protocols.protocol import AttackSpec

__all__ = ['METRICS', 'decision_margin', 'smoothness_kl', 'boundary_thickness', 'thickness_attack',
           'smoothness_attack']

METRICS = ('margin', 'thickness', 'smoothness')

THICKNESS_ALPHA = 0.0
THICKNESS_BETA = 0.75
THICKNESS_POINTS = 128


def thickness_attack() -> AttackSpec:
    """Yang et al.'s x*: targeted L2 PGD-20, pixel-scale radius 1.0 and step 0.2, last iterate, from x."""
    return AttackSpec('thickness-pgd-l2-t', PGD.Config.of(
        steps=20, step=0.2 * 255.0, step_rule='fixed', norm='l2', targeted=True, random_start=False,
        best_iterate=False), eps=255.0)


def smoothness_attack(eps: float = 8.0, steps: int = 20) -> AttackSpec:
    """TRADES/NoFrost's x*: untargeted L∞ PGD at ε with NoFrost's step rule, last iterate."""
    return AttackSpec('smoothness-pgd', PGD.Config.of(
        steps=steps, step=min(1.25 * eps, eps + 4.0) / steps, step_rule='fixed', random_start=True,
        best_iterate=False), eps=eps, step_rule='nofrost')


def decision_margin(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """``p_y - max_{i != y} p_i`` per sample (B,), in [-1, 1]."""
    probs = logits.float().softmax(dim=1)
    true = probs.gather(1, labels.view(-1, 1)).squeeze(1)
    others = probs.scatter(1, labels.view(-1, 1), -1.0).amax(dim=1)
    return true - others


def smoothness_kl(logits: torch.Tensor, logits_adv: torch.Tensor) -> torch.Tensor:
    """``KL(p(x) || p(x*))`` per sample (B,), from clean and adversarial logits."""
    log_p = F.log_softmax(logits.float(), dim=1)
    log_q = F.log_softmax(logits_adv.float(), dim=1)
    return (log_p.exp() * (log_p - log_q)).sum(dim=1)


@torch.no_grad()
def boundary_thickness(
        model: nn.Module,
        x: torch.Tensor,
        x_adv: torch.Tensor,
        source: torch.Tensor,
        target: torch.Tensor,
        space: InputSpace,
        alpha: float = THICKNESS_ALPHA,
        beta: float = THICKNESS_BETA,
        num_points: int = THICKNESS_POINTS,
        autocast_dtype: Optional[torch.dtype] = None,
) -> torch.Tensor:
    """Boundary thickness per sample (B,) along the segment from `x` to `x_adv` (normalized inputs).

    Args:
        model: The classifier, in eval mode.
        x: Clean inputs.
        x_adv: Points past the boundary between `source` and `target` (see `thickness_attack`).
        source: Class ``i``: the prediction on `x`.
        target: Class ``j``: the class `x_adv` was pushed to.
        space: Input normalization, to measure the segment length on the [0, 1] pixel scale.
        alpha: Lower level of ``g_ij`` (0: the decision boundary).
        beta: Upper level of ``g_ij``.
        num_points: Points of the Riemann sum over the segment (endpoints included, as Yang et al.).
        autocast_dtype: Forward under autocast at this dtype.
    """
    if num_points < 2:
        raise ValueError(f'num_points must be >= 2, got {num_points}.')
    delta = (x_adv - x).float()
    length = (delta * space.std_like(x)).flatten(1).norm(dim=1)
    inside = torch.zeros(x.shape[0], device=x.device)
    for t in torch.linspace(0.0, 1.0, num_points).tolist():
        with torch.autocast(x.device.type, dtype=autocast_dtype, enabled=autocast_dtype is not None):
            logits = model((x + t * delta).to(x.dtype))
        probs = logits.float().softmax(dim=1)
        g = probs.gather(1, source.view(-1, 1)).squeeze(1) - probs.gather(1, target.view(-1, 1)).squeeze(1)
        inside += ((g > alpha) & (g < beta)).float()
    return length * inside / num_points
