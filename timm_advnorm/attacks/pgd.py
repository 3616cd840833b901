"""Projected gradient descent (PGD), L∞ and L2, for adversarial training and evaluation.

Madry et al., *Towards deep learning models resistant to adversarial attacks* (ICLR 2018). The training and
evaluation attacker of Xie & Yuille, *Intriguing properties of adversarial training at scale* (ICLR 2020): targeted
(target uniform among the other classes), L∞ ε=16 and step 1 on the 0-255 scale, 30 iterations to train and 10 to
2000 to evaluate, random start in the ε-box, 20% of training samples starting from the clean image, and the step
size rule ``max(step, ε / N)`` of their released code (so few-iteration attacks can still reach the box corners).

Training uses the last iterate. Evaluation keeps, per sample, the first iterate that fools the model past the
rounding tolerance of `core.rounding_tolerance` (else the best candidate, see `BestIterate`) and stops attacking
samples so fooled: they leave the batch, so later iterations run on fewer rows.

Protocols that sweep the iteration count (Xie & Yuille's 20, 100, 500 and 2000 iterations at the same step) need not
run each budget from scratch: `pgd_budgets` runs the longest once and reads the shorter budgets' results off the way,
since from the same start the first N iterations of a longer run are exactly the N-iteration attack.

`PGDGeometry` holds the pieces every PGD iteration is made of (random start, step with projection onto the ε-ball,
clipping to valid pixels), so that attacks whose loop is not `pgd`'s (Fast AdvProp's gradient reuse, whose input
gradient comes from a training backward) take exactly the same steps.
"""
from dataclasses import dataclass
from typing import List, Optional, Sequence, Union

import torch
import torch.nn as nn
from torch.nn.modules.batchnorm import _BatchNorm

from .base import (
    NORMS, Attack, bernoulli, forward_logits, hard_labels, iterations, l2_direction, project_l2, project_linf,
    random_l2_start, random_linf_start)
from .best_iterate import BestIterate
from .core import LossFn, cross_entropy_per_sample, fooling_tier, input_gradient, is_clearly_fooled
from .registry import register_attack
from .space import PIXEL_SCALE, InputSpace

__all__ = ['pgd', 'pgd_budgets', 'PGD', 'PGDGeometry', 'STEP_RULES']

STEP_RULES = ('max', 'fixed')


@dataclass(frozen=True)
class PGDGeometry:
    """The threat model of one PGD run in the units its steps act in, built once per run (the loop then launches no
    host-to-device copies): the ε-ball, the step, and the valid pixel box.

    Attributes:
        norm: ``linf`` or ``l2``.
        radius: L∞: per-channel normalized radius (1, C, 1, 1); L2: radius on the [0, 1] pixel scale.
        step_size: The step, in the units of `radius`.
        std: Per-channel std (1, C, 1, 1), to measure L2 norms on the pixel scale.
        lower: Per-channel lowest valid normalized input (1, C, 1, 1).
        upper: Per-channel highest valid normalized input (1, C, 1, 1).
    """

    norm: str
    radius: Union[torch.Tensor, float]
    step_size: Union[torch.Tensor, float]
    std: torch.Tensor
    lower: torch.Tensor
    upper: torch.Tensor

    @classmethod
    def build(cls, space: InputSpace, eps: float, step: float, norm: str, like: torch.Tensor) -> 'PGDGeometry':
        """The geometry of budget `eps` and step `step` (0-255 scale) for inputs like `like` (device and dtype)."""
        if norm not in NORMS:
            raise ValueError(f'norm must be one of {NORMS}, got {norm!r}.')
        std = space.std_like(like).to(like.dtype)
        lower, upper = (b.to(like.dtype) for b in space.bounds(like))
        if norm == 'linf':
            radius = space.linf_budget(eps, like).to(like.dtype)
            step_size = space.linf_budget(step, like).to(like.dtype)
        else:
            radius, step_size = eps / PIXEL_SCALE, step / PIXEL_SCALE
        return cls(norm, radius, step_size, std, lower, upper)

    def random_start(
            self,
            x: torch.Tensor,
            clean_start_prob: float = 0.0,
            generator: Optional[torch.Generator] = None,
    ) -> torch.Tensor:
        """A start perturbation drawn uniformly in the ε-ball, per sample; with probability `clean_start_prob` per
        sample, none (start from the clean image). Not yet clipped to the pixel box (`clip` ``x + delta``)."""
        if self.norm == 'linf':
            delta = random_linf_start(x, self.radius, generator)
        else:
            delta = random_l2_start(x, self.radius, self.std, generator)
        if clean_start_prob > 0:
            delta[bernoulli(x.shape[0], clean_start_prob, x, generator)] = 0.0
        return delta

    def clip(self, x: torch.Tensor) -> torch.Tensor:
        """`x` clipped to valid pixels."""
        return torch.clamp(x, self.lower, self.upper)

    def step(self, x_adv: torch.Tensor, x: torch.Tensor, grad: torch.Tensor, sign: float = 1.0) -> torch.Tensor:
        """One PGD iteration from `x_adv` around the clean `x`: a step along the sign of the input gradient `grad`
        (L∞) or its pixel-scale unit direction (L2), ascending for `sign` 1 and descending for -1, projected onto the
        ε-ball and clipped to valid pixels (clipping to the box never leaves the ball: the box contains `x`)."""
        if self.norm == 'linf':
            delta = project_linf(x_adv + sign * self.step_size * grad.sign() - x, self.radius)
        else:
            delta = project_l2(x_adv + sign * self.step_size * l2_direction(grad, self.std) - x, self.radius, self.std)
        return self.clip(x + delta)


def _uses_batch_stats(model: nn.Module) -> bool:
    """Whether some BN layer normalizes with batch statistics: then rows are not independent and may not be pruned."""
    return any(isinstance(m, _BatchNorm) and m.training for m in model.modules())


def pgd(
        model: nn.Module,
        x: torch.Tensor,
        y: torch.Tensor,
        *,
        space: InputSpace,
        eps: float,
        step: float,
        steps: int,
        norm: str = 'linf',
        targeted: bool = False,
        targets: Optional[torch.Tensor] = None,
        random_start: bool = True,
        clean_start_prob: float = 0.0,
        loss_fn: Optional[LossFn] = None,
        best_iterate: bool = False,
        generator: Optional[torch.Generator] = None,
        autocast_dtype: Optional[torch.dtype] = None,
        progress: bool = False,
) -> torch.Tensor:
    """Projected gradient descent in timm's normalized input space.

    Each iteration takes a step of size `step` along the sign of the input gradient (L∞) or its pixel-scale
    unit direction (L2), projects onto the ε-ball around `x` and clips to valid pixels. Untargeted, it ascends
    ``loss_fn(logits, y)``; targeted, it descends ``loss_fn(logits, targets)``. Call it under `attack_context`
    (the `PGD` class does): parameters get no gradients and the model's state is the caller's business.

    Args:
        model: Model in the mode to attack (eval for running BN statistics).
        x: Normalized inputs (B, C, H, W).
        y: Labels (B,), or soft targets (B, C) (Mixup/CutMix; attacked as given with `loss_fn`, never re-mixed).
        space: The model's input normalization.
        eps: Budget on the 0-255 scale; L2 norms are taken on the [0, 1] pixel scale (radius ``eps / 255``).
        step: Step size on the same scale as `eps` (no step rule applied here; see `PGD`).
        steps: Number of gradient iterations (0 returns the start point).
        norm: ``linf`` or ``l2``.
        targeted: Move toward `targets` instead of away from `y`.
        targets: Target classes (B,); required when `targeted` (draw them with `random_targets`).
        random_start: Start uniformly in the ε-ball, independently per sample (else at `x`).
        clean_start_prob: Probability, per sample, of starting at `x` despite `random_start` (Xie & Yuille: 0.2).
        loss_fn: Per-sample loss ``(logits, target) -> (B,)``; default cross-entropy (accepts soft targets).
        best_iterate: Evaluation mode: return per sample the first iterate that clearly fools the model (past the
            rounding tolerance), else the best candidate (`BestIterate`), and stop attacking clearly fooled samples
            (unless BN uses batch statistics, which couple the rows). Costs one extra forward to score the last
            iterate. ``False`` returns the last iterate.
        generator: Source of the random start and clean-start draws.
        autocast_dtype: Forward under autocast at this dtype; loss, gradient and perturbation stay fp32.
        progress: Show a transient progress bar over the iterations.

    Returns:
        Detached adversarial inputs, normalized, with `x`'s shape and dtype.

    Example:
        >>> space = InputSpace.from_model(model)
        >>> targets = random_targets(y, num_classes=1000)
        >>> with attack_context(model, 'running'):
        ...     x_adv = pgd(model, x, y, space=space, eps=16, step=1, steps=10, targeted=True, targets=targets)
    """
    return pgd_budgets(
        model, x, y, budgets=(steps,), space=space, eps=eps, step=step, norm=norm, targeted=targeted,
        targets=targets, random_start=random_start, clean_start_prob=clean_start_prob, loss_fn=loss_fn,
        best_iterate=best_iterate, generator=generator, autocast_dtype=autocast_dtype, progress=progress)[0]


def pgd_budgets(
        model: nn.Module,
        x: torch.Tensor,
        y: torch.Tensor,
        *,
        budgets: Sequence[int],
        space: InputSpace,
        eps: float,
        step: float,
        norm: str = 'linf',
        targeted: bool = False,
        targets: Optional[torch.Tensor] = None,
        random_start: bool = True,
        clean_start_prob: float = 0.0,
        loss_fn: Optional[LossFn] = None,
        best_iterate: bool = False,
        generator: Optional[torch.Generator] = None,
        autocast_dtype: Optional[torch.dtype] = None,
        progress: bool = False,
) -> List[torch.Tensor]:
    """`pgd` at several iteration budgets from one run of the longest.

    The entry for budget N is what ``pgd(steps=N)`` returns from the same start (same random draws, same step): the
    iterates of the longer run begin with the shorter run's, and with `best_iterate` a sample's record after N
    iterations is the shorter run's result. A sweep over 20, 100, 500 and 2000 iterations then costs 2000 iterations
    instead of 2620, and its accuracies can only fall as the budget grows.

    Args:
        budgets: Iteration counts (>= 0), in any order; duplicates allowed.
        model, x, y, space, eps, step, norm, targeted, targets, random_start, clean_start_prob, loss_fn,
            best_iterate, generator, autocast_dtype, progress: See `pgd`.

    Returns:
        One tensor per entry of `budgets`, in the given order, each as `pgd` returns it.
    """
    if not budgets:
        raise ValueError('budgets must name at least one iteration count.')
    if norm not in NORMS:
        raise ValueError(f'norm must be one of {NORMS}, got {norm!r}.')
    if min(budgets) < 0 or eps < 0 or step < 0:
        raise ValueError(f'eps, step and steps must be >= 0, got eps={eps}, step={step}, steps={list(budgets)}.')
    steps, wanted = max(budgets), set(budgets)
    if not 0.0 <= clean_start_prob <= 1.0:
        raise ValueError(f'clean_start_prob must be in [0, 1], got {clean_start_prob}.')
    if targeted and targets is None:
        raise ValueError('A targeted attack needs targets; draw them with random_targets(y, num_classes).')
    loss_fn = cross_entropy_per_sample if loss_fn is None else loss_fn
    goal = targets if targeted else y
    sign = -1.0 if targeted else 1.0

    x_in = x.detach()
    x = x_in.to(torch.promote_types(x_in.dtype, torch.float32))
    geometry = PGDGeometry.build(space, eps, step, norm, x)
    x_adv = x.clone()
    if random_start:
        x_adv = geometry.clip(x + geometry.random_start(x, clean_start_prob, generator))

    at_budget = {}
    if not best_iterate:
        for i in iterations(steps + 1, 'pgd', progress):
            if i in wanted:
                at_budget[i] = x_adv.to(x_in.dtype)
            if i == steps:
                break
            grad, _, _ = input_gradient(model, x_adv, goal, loss_fn, autocast_dtype)
            x_adv = geometry.step(x_adv, x, grad, sign)
        return [at_budget[n] for n in budgets]

    labels = hard_labels(y)
    prune = not _uses_batch_stats(model)
    best = BestIterate(x_adv)
    active = torch.arange(x.shape[0], device=x.device)
    for i in iterations(steps + 1, 'pgd', progress):
        if i < steps:
            grad, logits, loss = input_gradient(model, x_adv, goal[active], loss_fn, autocast_dtype)
        else:
            logits = forward_logits(model, x_adv, autocast_dtype)
            loss = loss_fn(logits, goal[active])
        active_targets = targets[active] if targeted else None
        fooled = is_clearly_fooled(logits, labels[active], active_targets, autocast_dtype)
        best.update(active, x_adv, fooled, sign * loss, fooling_tier(logits, labels[active], active_targets))
        if i in wanted:
            at_budget[i] = best.x.to(x_in.dtype, copy=True)
        if i == steps:
            break
        if prune and fooled.any():
            keep = ~fooled
            active, x_adv, grad = active[keep], x_adv[keep], grad[keep]
            if active.numel() == 0:
                break
        x_adv = geometry.step(x_adv, x[active], grad, sign)
    # every sample fooled before the last budget: later budgets return the same record
    return [at_budget.get(n, best.x.to(x_in.dtype)) for n in budgets]


@register_attack('pgd')
class PGD(Attack):
    """Configured PGD attack (see `pgd`); ``PGD(space)(model, x, y)`` returns adversarial inputs.

    Defaults follow the evaluation attacker of Xie & Yuille (2020) with 10 iterations (L∞ ε=16, step 1 with the
    ``max(step, ε / N)`` rule, random start, best iterate) except that it is untargeted unless ``targeted=True``:
    their evaluation is targeted (the `xie2020` protocol sets it). Their training attacker is
    ``PGD(space, eps=16, step=1, steps=30, targeted=True, clean_start_prob=0.2, best_iterate=False)``.

    Args:
        space: The model's input normalization.
        eps: Budget on the 0-255 scale (L2: pixel-scale norm times 255).
        step: Step size on the 0-255 scale, before the step rule.
        steps: Number of iterations N.
        norm: ``linf`` or ``l2``.
        targeted: Move toward a target class (drawn uniformly among the other classes when not given).
        random_start: Start uniformly in the ε-ball.
        clean_start_prob: Per-sample probability of starting from the clean image instead (Xie & Yuille: 0.2 for
            training). Their released code draws it once per batch; per sample gives every batch the same mix.
        step_rule: ``max``: step ``max(step, eps / steps)`` (Xie & Yuille's code); ``fixed``: `step` as given.
        best_iterate: Keep per sample the first fooling iterate and stop attacking it (evaluation); ``False``
            returns the last iterate (training).
        loss_fn: Per-sample loss ``(logits, target) -> (B,)``; default cross-entropy (accepts soft targets).
        bn_stats, autocast_dtype, seed, fold_bn: See `Attack`.
    """

    def __init__(
            self,
            space: InputSpace,
            eps: float = 16.0,
            step: float = 1.0,
            steps: int = 10,
            norm: str = 'linf',
            targeted: bool = False,
            random_start: bool = True,
            clean_start_prob: float = 0.0,
            step_rule: str = 'max',
            best_iterate: bool = True,
            loss_fn: Optional[LossFn] = None,
            bn_stats: str = 'running',
            autocast_dtype: Optional[torch.dtype] = None,
            seed: Optional[int] = None,
            fold_bn: bool = True,
    ):
        super().__init__(space, eps=eps, bn_stats=bn_stats, autocast_dtype=autocast_dtype, seed=seed, fold_bn=fold_bn)
        if norm not in NORMS:
            raise ValueError(f'norm must be one of {NORMS}, got {norm!r}.')
        if step_rule not in STEP_RULES:
            raise ValueError(f'step_rule must be one of {STEP_RULES}, got {step_rule!r}.')
        if steps < 0 or step < 0:
            raise ValueError(f'step and steps must be >= 0, got step={step}, steps={steps}.')
        if not 0.0 <= clean_start_prob <= 1.0:
            raise ValueError(f'clean_start_prob must be in [0, 1], got {clean_start_prob}.')
        self.step = float(step)
        self.steps = int(steps)
        self.norm = norm
        self.targeted = targeted
        self.random_start = random_start
        self.clean_start_prob = float(clean_start_prob)
        self.step_rule = step_rule
        self.best_iterate = best_iterate
        self.loss_fn = loss_fn

    @property
    def step_size(self) -> float:
        """The step actually taken, on the 0-255 scale, after the step rule."""
        if self.step_rule == 'max' and self.steps > 0:
            return max(self.step, self.eps / self.steps)
        return self.step

    def perturb(
            self,
            model: nn.Module,
            x: torch.Tensor,
            y: torch.Tensor,
            targets: Optional[torch.Tensor],
    ) -> torch.Tensor:
        return self._run_budgets(model, x, y, targets, (self.steps,))[0]

    def at_budgets(
            self,
            model: nn.Module,
            x: torch.Tensor,
            y: torch.Tensor,
            budgets: Sequence[int],
            targets: Optional[torch.Tensor] = None,
    ) -> List[torch.Tensor]:
        """This attack's result after each of `budgets` iterations (none above `steps`), from one run.

        The entry for N is what this attack with ``steps=N`` and the same step size returns from the same start
        (see `pgd_budgets`); model handling and target draws are those of a call.
        """
        if not budgets or max(budgets) > self.steps:
            raise ValueError(f'budgets must be non-empty and at most steps={self.steps}, got {list(budgets)}.')
        return self.call_in_context(
            model, x, y, targets, lambda m, x_, y_, t: self._run_budgets(m, x_, y_, t, budgets))

    def _run_budgets(self, model, x, y, targets, budgets: Sequence[int]) -> List[torch.Tensor]:
        return pgd_budgets(
            model, x, y,
            budgets=budgets,
            space=self.space,
            eps=self.eps,
            step=self.step_size,
            norm=self.norm,
            targeted=self.targeted,
            targets=targets,
            random_start=self.random_start,
            clean_start_prob=self.clean_start_prob,
            loss_fn=self.loss_fn,
            best_iterate=self.best_iterate,
            generator=self.generator,
            autocast_dtype=self.autocast_dtype,
            progress=self.progress,
        )

    def extra_repr(self) -> str:
        return (f'norm={self.norm}, steps={self.steps}, step={self.step:g} (taken {self.step_size:g}), '
                f'targeted={self.targeted}, random_start={self.random_start}, '
                f'clean_start_prob={self.clean_start_prob:g}, best_iterate={self.best_iterate}, '
                + super().extra_repr())
