"""Auto-PGD (APGD), L∞: APGD-CE, APGD-DLR and targeted APGD-T, as in AutoAttack.

Croce & Hein, *Reliable evaluation of adversarial robustness with an ensemble of diverse parameter-free attacks*
(ICML 2020), Algorithm 1, with the constants of their reference implementation:

* step size starts at 2ε and is halved at checkpoints; the first checkpoint comes after ``0.22·N`` iterations and the
  gap shrinks by ``0.03·N`` per checkpoint down to ``0.06·N`` (the paper's ``p_{j+1} = p_j + max(p_j - p_{j-1} - 0.03,
  0.06)``, ``p_1 = 0.22``);
* at a checkpoint the step is halved (and the iterate reset to the best point so far) when the loss increased in at
  most a fraction ρ=0.75 of the iterations since the last checkpoint, or when the step was not halved at the last
  checkpoint and the best loss has not improved since;
* momentum 0.75 (none on the first step); random start uniform in the ε-box, rescaled so one coordinate sits on
  the box's surface.

The loss history counts the start point, so the first checkpoint compares ``f(x¹) > f(x⁰)`` as in the paper (the
reference code wraps around to an unset entry there). APGD-T attacks, in turn, the classes ranked 2nd to
(n_target_classes + 1)th by the clean logits with the targeted DLR loss; success is misclassification.

Budgets are on the 0-255 scale and the attack runs in timm's normalized space with the per-channel ε-box, which is
exactly the pixel-space L∞ ball. Evaluation semantics: per sample the first fooling iterate is returned (else the
highest-loss one), fooled samples leave the batch, misclassified clean samples are returned unchanged.
"""
from typing import Callable, ClassVar, List, Optional

import torch
import torch.nn as nn

from .base import attack_dataclass, attack_inputs, project, random_linf_surface
from .best_iterate import BestIterate
from .core import cross_entropy_per_sample, input_gradient
from .eval_attack import EvalAttack, clean_record, target_restarts
from .losses import dlr_loss, targeted_dlr_loss
from .progress import ProgressFn, reporter, restart_part
from .registry import register_attack
from .space import InputSpace

__all__ = ['apgd', 'apgd_targeted', 'apgd_checkpoints', 'APGDCE', 'APGDDLR', 'APGDT', 'APGD_LOSSES']

APGD_LOSSES = {'ce': cross_entropy_per_sample, 'dlr': dlr_loss}


def apgd_checkpoints(steps: int) -> List[int]:
    """Iteration counts after which APGD may halve its step, with the reference implementation's integer constants.

    The first checkpoint comes after ``int(0.22·N)`` iterations; each gap is ``int(0.03·N)`` shorter than the
    previous one, but at least ``int(0.06·N)`` (each constant at least 1). For N = 100 this is the paper's
    ``w_j = ⌈p_j·N⌉``: 22, 41, 57, 70, 80, 87, 93, 99.
    """
    gap, decrement, min_gap = max(int(0.22 * steps), 1), max(int(0.03 * steps), 1), max(int(0.06 * steps), 1)
    checkpoints = []
    at = gap
    while at <= steps:
        checkpoints.append(at)
        gap = max(gap - decrement, min_gap)
        at += gap
    return checkpoints


def _apgd_run(
        model: nn.Module,
        x: torch.Tensor,
        rows: torch.Tensor,
        best: BestIterate,
        labels: torch.Tensor,
        goal: torch.Tensor,
        loss_fn,
        hit_targets: Optional[torch.Tensor],
        space: InputSpace,
        radius: torch.Tensor,
        steps: int,
        rho: float,
        momentum: float,
        generator: Optional[torch.Generator],
        autocast_dtype: Optional[torch.dtype],
        tick: Callable[[int], None],
) -> None:
    """One APGD run from a random start on batch rows `rows`, recording into `best`; ``tick(i)`` before iteration
    i.

    `x`, `labels`, `goal` (what `loss_fn` takes) and `hit_targets` are already restricted to `rows`; the per-row
    state `s` is filtered as a whole as samples get fooled.
    """
    x_adv = space.clamp(x + radius * random_linf_surface(x, generator))
    grad, logits, loss = input_gradient(model, x_adv, goal, loss_fn, autocast_dtype)
    fooled = best.update_from_logits(rows, x_adv, logits, labels, loss, hit_targets, autocast_dtype)

    checkpoints = apgd_checkpoints(steps)
    history = loss.new_zeros(steps + 1, x.shape[0])  # history[j]: loss at iterate j, iterate 0 the start
    history[0] = loss
    s = dict(
        x=x, labels=labels, goal=goal, x_adv=x_adv, x_prev=x_adv, grad=grad, x_best=x_adv, grad_best=grad,
        loss_best=loss, loss_best_at_check=loss, reduced_at_check=torch.ones_like(fooled),
        step=torch.full((x.shape[0], 1, 1, 1), 2.0, dtype=x.dtype, device=x.device), rows=rows)
    if hit_targets is not None:
        s['hit_targets'] = hit_targets
    last_check = 0
    for i in range(steps):
        tick(i)
        if fooled.any():
            keep = ~fooled
            s = {k: v[keep] for k, v in s.items()}
            history = history[:, keep]
            if not s['rows'].numel():
                return
        with torch.no_grad():
            a = momentum if i > 0 else 1.0
            z = project(s['x_adv'] + s['step'] * radius * s['grad'].sign(), s['x'], space, radius)
            x_next = project(s['x_adv'] + a * (z - s['x_adv']) + (1.0 - a) * (s['x_adv'] - s['x_prev']),
                             s['x'], space, radius)
        s['x_prev'], s['x_adv'] = s['x_adv'], x_next
        s['grad'], logits, loss = input_gradient(model, x_next, s['goal'], loss_fn, autocast_dtype)
        fooled = best.update_from_logits(s['rows'], x_next, logits, s['labels'], loss, s.get('hit_targets'),
                                         autocast_dtype)
        history[i + 1] = loss

        improved = loss > s['loss_best']
        s['x_best'] = torch.where(improved.view(-1, 1, 1, 1), x_next, s['x_best'])
        s['grad_best'] = torch.where(improved.view(-1, 1, 1, 1), s['grad'], s['grad_best'])
        s['loss_best'] = torch.where(improved, loss, s['loss_best'])

        if i + 1 in checkpoints:
            window = i + 1 - last_check
            increases = (history[last_check + 1:i + 2] > history[last_check:i + 1]).sum(dim=0)
            oscillating = increases <= window * rho
            stalled = ~s['reduced_at_check'] & (s['loss_best_at_check'] >= s['loss_best'])
            reduce = oscillating | stalled
            s['reduced_at_check'] = reduce
            s['loss_best_at_check'] = s['loss_best'].clone()
            reduce = reduce.view(-1, 1, 1, 1)
            s['step'] = torch.where(reduce, s['step'] / 2.0, s['step'])
            s['x_adv'] = torch.where(reduce, s['x_best'], s['x_adv'])
            s['grad'] = torch.where(reduce, s['grad_best'], s['grad'])
            last_check = i + 1


def _check_config(eps: float, steps: int, n_restarts: int, rho: float) -> None:
    if eps < 0 or steps < 1 or n_restarts < 1:
        raise ValueError(f'APGD needs eps >= 0, steps >= 1 and n_restarts >= 1, got {eps}, {steps}, {n_restarts}.')
    if not 0.0 < rho <= 1.0:
        raise ValueError(f'rho must be in (0, 1], got {rho}.')


def apgd(
        model: nn.Module,
        x: torch.Tensor,
        y: torch.Tensor,
        *,
        space: InputSpace,
        eps: float,
        steps: int = 100,
        loss: str = 'ce',
        n_restarts: int = 1,
        rho: float = 0.75,
        momentum: float = 0.75,
        generator: Optional[torch.Generator] = None,
        autocast_dtype: Optional[torch.dtype] = None,
        progress: Optional[ProgressFn] = None,
) -> torch.Tensor:
    """Untargeted APGD, L∞ (APGD-CE with ``loss='ce'``, APGD-DLR with ``loss='dlr'``).

    Croce & Hein (ICML 2020), Algorithm 1: PGD with momentum whose step size adapts at checkpoints (see the module
    docstring). Restarts attack the samples still robust from a fresh random start. Call it under `attack_context`
    (the configured classes do).

    Args:
        model: Model in eval mode.
        x: Normalized inputs (B, C, H, W).
        y: Labels (B,) or soft targets (B, C) (their argmax is the label).
        space: The model's input normalization.
        eps: L∞ budget on the 0-255 scale.
        steps: Iterations per restart N (AutoAttack: 100).
        loss: ``ce`` (cross-entropy) or ``dlr`` (difference of logits ratio; needs >= 3 classes).
        n_restarts: Random restarts (AutoAttack standard: 1).
        rho: Checkpoint condition: halve the step if the loss increased in at most this fraction of iterations.
        momentum: Weight of the new step against the previous move (0.75).
        generator: Source of the random starts.
        autocast_dtype: Forward under autocast at this dtype; loss, gradient and perturbation stay fp32.
        progress: Where to report each restart's iterations (`progress.AttackProgress`), if anywhere.

    Returns:
        Adversarial inputs (normalized, `x`'s shape and dtype): per sample the first fooling iterate, else the
        highest-loss one; misclassified clean samples unchanged.

    Example:
        >>> with attack_context(model):
        ...     x_adv = apgd(model, x, y, space=InputSpace.from_model(model), eps=4, loss='ce')
    """
    _check_config(eps, steps, n_restarts, rho)
    if loss not in APGD_LOSSES:
        raise ValueError(f'loss must be one of {tuple(APGD_LOSSES)}, got {loss!r}.')
    x, labels, dtype = attack_inputs(x, y)
    radius = space.linf_budget(eps, x)
    clean_logits, best = clean_record(model, x, labels, autocast_dtype=autocast_dtype)
    if loss == 'dlr' and clean_logits.shape[1] < 3:
        raise ValueError(f'The DLR loss needs at least 3 classes, got {clean_logits.shape[1]}.')
    for restart, rows in enumerate(best.restarts(n_restarts)):
        tick = reporter(progress, f'apgd-{loss}', restart_part(restart, n_restarts), steps)
        _apgd_run(model, x[rows], rows, best, labels[rows], labels[rows], APGD_LOSSES[loss], None, space, radius,
                  steps, rho, momentum, generator, autocast_dtype, tick)
    return best.x.to(dtype)


def apgd_targeted(
        model: nn.Module,
        x: torch.Tensor,
        y: torch.Tensor,
        *,
        space: InputSpace,
        eps: float,
        steps: int = 100,
        n_target_classes: int = 9,
        n_restarts: int = 1,
        targets: Optional[torch.Tensor] = None,
        rho: float = 0.75,
        momentum: float = 0.75,
        generator: Optional[torch.Generator] = None,
        autocast_dtype: Optional[torch.dtype] = None,
        progress: Optional[ProgressFn] = None,
) -> torch.Tensor:
    """Targeted APGD on the targeted DLR loss (APGD-T), L∞, as in AutoAttack.

    Without `targets`, the AutoAttack scheme: for k = 2, ..., n_target_classes + 1, attack the samples still robust
    toward the class ranked k-th by their clean logits (N iterations per target and restart); a sample counts as
    fooled once misclassified. With `targets`, one pass toward the given classes, and a sample counts as fooled
    only once classified as its target.

    Args:
        model: Model in eval mode.
        x: Normalized inputs (B, C, H, W).
        y: Labels (B,) or soft targets (B, C).
        space: The model's input normalization.
        eps: L∞ budget on the 0-255 scale.
        steps: Iterations per target class and restart (AutoAttack: 100).
        n_target_classes: Number of target classes tried (AutoAttack: 9); capped at K - 1 for K classes.
        n_restarts: Random restarts per target class (AutoAttack: 1).
        targets: Optional explicit targets (B,), different from the labels.
        rho, momentum, generator, autocast_dtype: See `apgd`.
        progress: Where to report each target's and restart's iterations (`progress.AttackProgress`), if anywhere.

    Returns:
        Adversarial inputs as in `apgd`.

    Example:
        >>> with attack_context(model):
        ...     x_adv = apgd_targeted(model, x, y, space=space, eps=4, n_target_classes=9)
    """
    _check_config(eps, steps, n_restarts, rho)
    x, labels, dtype = attack_inputs(x, y)
    radius = space.linf_budget(eps, x)
    clean_logits, best = clean_record(model, x, labels, targets, autocast_dtype)
    num_classes = clean_logits.shape[1]
    if num_classes < 4:
        raise ValueError(f'The targeted DLR loss needs at least 4 classes, got {num_classes}.')
    for run in target_restarts(best, clean_logits, labels, targets, n_target_classes, n_restarts):
        rows = run.rows
        _apgd_run(model, x[rows], rows, best, labels[rows], run.labels_and_targets, targeted_dlr_loss, run.hit_targets,
                  space, radius, steps, rho, momentum, generator, autocast_dtype,
                  reporter(progress, 'apgd-t', run.part, steps))
    return best.x.to(dtype)


#: How APGD steps (`Attack.step_description`): no size of its own, it adapts.
APGD_STEP_DESCRIPTION = 'adaptive step (from 2ε, halved at checkpoints)'


@attack_dataclass
class _APGD(EvalAttack):
    """Shared configuration of the untargeted APGD classes."""

    eps: float = 4.0
    steps: int = 100
    n_restarts: int = 1
    rho: float = 0.75

    loss: ClassVar[str] = 'ce'
    core = staticmethod(apgd)
    step_description = APGD_STEP_DESCRIPTION

    def check_options(self) -> None:
        _check_config(self.eps, self.steps, self.n_restarts, self.rho)


@register_attack('apgd-ce')
@attack_dataclass
class APGDCE(_APGD):
    """APGD on the cross-entropy (see `apgd`); defaults: AutoAttack standard at RobustBench's ImageNet ε=4/255.

    Args:
        eps: L∞ budget on the 0-255 scale (4).
        steps: Iterations (100).
        n_restarts: Random restarts (1).
        rho: Checkpoint threshold (0.75).
        space, autocast_dtype, seed, bn_stats, fold_bn: See `EvalAttack`.
    """
    title = 'APGD-CE'

    loss = 'ce'


@register_attack('apgd-dlr')
@attack_dataclass
class APGDDLR(_APGD):
    """APGD on the DLR loss (see `apgd`); same defaults as `APGDCE`. Needs at least 3 classes."""
    title = 'APGD-DLR'

    loss = 'dlr'


@register_attack('apgd-t')
@attack_dataclass
class APGDT(EvalAttack):
    """Targeted APGD on the targeted DLR loss (see `apgd_targeted`); defaults: AutoAttack standard.

    Without explicit targets it tries the 9 classes ranked 2nd to 10th by the clean logits, not random targets.

    Args:
        eps: L∞ budget on the 0-255 scale (4).
        steps: Iterations per target class (100).
        n_target_classes: Target classes tried (9).
        n_restarts: Random restarts per target class (1).
        rho: Checkpoint threshold (0.75).
        space, autocast_dtype, seed, bn_stats, fold_bn: See `EvalAttack`.
    """
    title = 'APGD-T'

    eps: float = 4.0
    steps: int = 100
    n_target_classes: int = 9
    n_restarts: int = 1
    rho: float = 0.75

    core = staticmethod(apgd_targeted)
    accepts_targets = True
    step_description = APGD_STEP_DESCRIPTION

    def check_options(self) -> None:
        _check_config(self.eps, self.steps, self.n_restarts, self.rho)
        if self.n_target_classes < 1:
            raise ValueError(f'n_target_classes must be >= 1, got {self.n_target_classes}.')
