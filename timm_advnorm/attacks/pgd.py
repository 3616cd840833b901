"""Projected gradient descent (PGD), L∞ and L2, for adversarial training and evaluation.

Madry et al., *Towards deep learning models resistant to adversarial attacks* (ICLR 2018). The training and
evaluation attacker of Xie & Yuille, *Intriguing properties of adversarial training at scale* (ICLR 2020): targeted
(target uniform among the other classes), L∞ ε=16 and step 1 on the 0-255 scale, 30 iterations to train and 10 to
2000 to evaluate, random start in the ε-box, 20% of training samples starting from the clean image, and the step
size rule ``max(step, ε / N)`` of their released code (so few-iteration attacks can still reach the box corners).

Training uses the last iterate. Evaluation keeps, per sample, the first iterate that fools the model past the
rounding tolerance of `core.rounding_tolerance` (else the best candidate, see `BestIterate`) and stops attacking
samples so fooled: they leave the batch, so later iterations run on fewer rows. The papers report the last iterate
instead (weaker: a sample fooled on the way may be classified correctly again at the end); `pgd_best_and_last`
returns both from one run, which then attacks every sample to the last iteration, as a last-iterate run does.

Clean starts (Xie & Yuille's 20%) are drawn per sample or, as their released code does, once per batch
(`CLEAN_START_MODES`); Fast AdvProp's released code starts the whole batch from the clean images when a standard
normal draw is at most 0.2 (``per_batch_randn``: probability Φ(0.2) ≈ 0.579 per batch).

Protocols that sweep the iteration count (Xie & Yuille's 20, 100, 500 and 2000 iterations at the same step) need not
run each budget from scratch: `pgd_budgets` runs the longest once and reads the shorter budgets' results off the way,
since from the same start the first N iterations of a longer run are exactly the N-iteration attack.

`PGDGeometry` holds the pieces every PGD iteration is made of (random start, step with projection onto the ε-ball,
clipping to valid pixels), so that attacks whose loop is not `pgd`'s (Fast AdvProp's gradient reuse, whose input
gradient comes from a training backward) take exactly the same steps.
"""
from dataclasses import Field, dataclass, field, fields
from typing import Any, List, Optional, Sequence, Union

import torch
import torch.nn as nn
from torch.nn.modules.batchnorm import _BatchNorm

from .base import (
    NORMS, STEP_DIRECTIONS, Attack, attack_dataclass, attack_inputs, bernoulli, evaluate_iterate, l2_direction, normal,
    project_l2, project_linf, random_l2_start, random_linf_start)
from .best_iterate import BestIterate
from .core import LossFn, cross_entropy_per_sample, input_gradient
from .progress import ProgressFn, reporter
from .registry import register_attack
from .space import PIXEL_SCALE, InputSpace

__all__ = ['pgd', 'pgd_budgets', 'pgd_best_and_last', 'BestAndLast', 'PGD', 'PGDGeometry', 'PGDOptions', 'STEP_RULES',
           'CLEAN_START_MODES', 'RANDN_CLEAN_START_THRESHOLD', 'check_clean_start', 'clean_start_rows']

STEP_RULES = ('max', 'fixed')
#: How clean starts are drawn: ``per_sample`` (each sample with the clean-start probability), ``per_batch`` (one draw
#: for the whole batch with that probability: Xie & Yuille's released code) and ``per_batch_randn`` (the whole batch
#: when a standard normal draw is at most `RANDN_CLEAN_START_THRESHOLD`: Fast AdvProp's released code, probability
#: Φ(0.2) ≈ 0.579; the clean-start probability is not used).
CLEAN_START_MODES = ('per_sample', 'per_batch', 'per_batch_randn')
#: Fast AdvProp's released code: the batch starts from the clean images when ``torch.randn(1) <= 0.2``.
RANDN_CLEAN_START_THRESHOLD = 0.2


def check_clean_start(prob: float, mode: str) -> None:
    """Refuse a clean-start probability outside [0, 1] or an unknown clean-start mode (ValueError)."""
    if not 0.0 <= prob <= 1.0:
        raise ValueError(f'clean_start_prob must be in [0, 1], got {prob}.')
    if mode not in CLEAN_START_MODES:
        raise ValueError(f'clean_start_mode must be one of {CLEAN_START_MODES}, got {mode!r}.')


def clean_start_rows(
        like: torch.Tensor,
        prob: float,
        mode: str = 'per_sample',
        generator: Optional[torch.Generator] = None,
) -> torch.Tensor:
    """Which rows of the batch `like` start from the clean image (B,) bool, drawn as `mode` says
    (`CLEAN_START_MODES`); no draw is made when nothing can start clean (a probability of 0 outside
    ``per_batch_randn``), so the random stream of an attack without clean starts is the one it always was."""
    check_clean_start(prob, mode)
    batch = like.shape[0]
    if mode == 'per_batch_randn':
        return (normal((1,), like, generator) <= RANDN_CLEAN_START_THRESHOLD).expand(batch)
    if prob <= 0:
        return torch.zeros(batch, dtype=torch.bool, device=like.device)
    if mode == 'per_batch':
        return bernoulli(1, prob, like, generator).expand(batch)
    return bernoulli(batch, prob, like, generator)


def _number_if_uniform(values: torch.Tensor) -> Union[torch.Tensor, float]:
    """A per-channel (1, C, 1, 1) value as one number when every channel holds the same (exactly the value the
    tensor holds, so that element-wise work with it gives the same results), else as it is."""
    flat = values.flatten()
    return float(flat[0]) if bool((flat == flat[0]).all()) else values


@dataclass(frozen=True)
class PGDGeometry:
    """The threat model of one PGD run in the units its steps act in, built once per run (the loop then launches no
    host-to-device copies): the ε-ball, the step, and the valid pixel box.

    A per-channel value that is the same in every channel (grey images, or one mean and std for all channels) is
    held as a number: element-wise work with a number does not broadcast the channels (on a CPU the clip and the
    projection take half the time or less) and gives the same float results.

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
    lower: Union[torch.Tensor, float]
    upper: Union[torch.Tensor, float]

    @classmethod
    def build(cls, space: InputSpace, eps: float, step: float, norm: str, like: torch.Tensor) -> 'PGDGeometry':
        """The geometry of budget `eps` and step `step` (0-255 scale) for inputs like `like` (device and dtype)."""
        if norm not in NORMS:
            raise ValueError(f'norm must be one of {NORMS}, got {norm!r}.')
        std = space.std_like(like).to(like.dtype)
        lower, upper = (b.to(like.dtype) for b in space.bounds(like))
        if norm == 'linf':
            radius, step_size = space.linf_budget(eps, like), space.linf_budget(step, like)
            radius, step_size = _number_if_uniform(radius), _number_if_uniform(step_size)
        else:
            radius, step_size = eps / PIXEL_SCALE, step / PIXEL_SCALE
        return cls(norm, radius, step_size, std, _number_if_uniform(lower), _number_if_uniform(upper))

    def random_start(
            self,
            x: torch.Tensor,
            clean_start_prob: float = 0.0,
            generator: Optional[torch.Generator] = None,
            clean_start_mode: str = 'per_sample',
    ) -> torch.Tensor:
        """A start perturbation drawn uniformly in the ε-ball, per sample; none (start from the clean image) for the
        rows `clean_start_rows` draws with `clean_start_prob` and `clean_start_mode`. Not yet clipped to the pixel
        box (`clip` ``x + delta``)."""
        if self.norm == 'linf':
            delta = random_linf_start(x, self.radius, generator)
        else:
            delta = random_l2_start(x, self.radius, self.std, generator)
        delta[clean_start_rows(x, clean_start_prob, clean_start_mode, generator)] = 0.0
        return delta

    def clip(self, x: torch.Tensor) -> torch.Tensor:
        """`x` clipped to valid pixels."""
        return torch.clamp(x, self.lower, self.upper)

    def step(self, x_adv: torch.Tensor, x: torch.Tensor, grad: torch.Tensor, sign: float = 1.0) -> torch.Tensor:
        """One PGD iteration from `x_adv` around the clean `x`: a step along the sign of the input gradient `grad`
        (L∞) or its pixel-scale unit direction (L2), ascending for `sign` 1 and descending for -1, projected onto the
        ε-ball and clipped to valid pixels (clipping to the box never leaves the ball: the box contains `x`)."""
        if self.norm == 'linf' and grad.dtype == x_adv.dtype == x.dtype:
            # The same operations, in place on the one new tensor: on a CPU each fresh batch-sized temporary is a
            # page-faulting allocation, which cost several times the arithmetic.
            delta = grad.sign().mul_(sign * self.step_size).add_(x_adv).sub_(x)
            delta = delta.clamp_(-self.radius, self.radius)
            return delta.add_(x).clamp_(self.lower, self.upper)
        if self.norm == 'linf':
            delta = project_linf(x_adv + sign * self.step_size * grad.sign() - x, self.radius)
        else:
            delta = project_l2(x_adv + sign * self.step_size * l2_direction(grad, self.std) - x, self.radius, self.std)
        return self.clip(x + delta)


def _uses_batch_stats(model: nn.Module) -> bool:
    """Whether some BN layer normalizes with batch statistics: then rows are not independent and may not be pruned."""
    return any(isinstance(m, _BatchNorm) and m.training for m in model.modules())


@dataclass(frozen=True, eq=False, kw_only=True)
class PGDOptions:
    """The keywords every PGD run shares (`pgd`, `pgd_budgets`, `pgd_best_and_last`), carried as one object from the
    functions and from `PGD` to the loop; the iteration budgets and what a run keeps (best or last iterate) are
    given beside them. Each field is the keyword argument of `pgd` of the same name."""

    space: InputSpace
    eps: float
    step: float
    norm: str = 'linf'
    targeted: bool = False
    targets: Optional[torch.Tensor] = None
    random_start: bool = True
    clean_start_prob: float = 0.0
    clean_start_mode: str = 'per_sample'
    loss_fn: Optional[LossFn] = None
    generator: Optional[torch.Generator] = None
    autocast_dtype: Optional[torch.dtype] = None
    progress: Optional[ProgressFn] = None

    def check(self, budgets: Sequence[int]) -> None:
        """Refuse a run of these options at iteration counts `budgets` that would attack nothing or something else
        than asked (ValueError)."""
        if not budgets:
            raise ValueError('budgets must name at least one iteration count.')
        if self.norm not in NORMS:
            raise ValueError(f'norm must be one of {NORMS}, got {self.norm!r}.')
        if min(budgets) < 0 or self.eps < 0 or self.step < 0:
            raise ValueError(f'eps, step and steps must be >= 0, got eps={self.eps}, step={self.step}, '
                             f'steps={list(budgets)}.')
        check_clean_start(self.clean_start_prob, self.clean_start_mode)
        if self.targeted and self.targets is None:
            raise ValueError('A targeted attack needs targets; draw them with random_targets(y, num_classes).')


def pgd(
        model: nn.Module,
        x: torch.Tensor,
        y: torch.Tensor,
        *,
        steps: int,
        best_iterate: bool = False,
        **options: Any,
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
        steps: Number of gradient iterations (0 returns the start point).
        best_iterate: Evaluation mode: return per sample the first iterate that clearly fools the model (past the
            rounding tolerance), else the best candidate (`BestIterate`), and stop attacking clearly fooled samples
            (unless BN uses batch statistics, which couple the rows). Costs one extra forward to score the last
            iterate. ``False`` returns the last iterate.
        options: The keywords every PGD run shares (`PGDOptions`):
        space: The model's input normalization.
        eps: Budget on the 0-255 scale; L2 norms are taken on the [0, 1] pixel scale (radius ``eps / 255``).
        step: Step size on the same scale as `eps` (no step rule applied here; see `PGD`).
        norm: ``linf`` or ``l2``.
        targeted: Move toward `targets` instead of away from `y`.
        targets: Target classes (B,); required when `targeted` (draw them with `random_targets`).
        random_start: Start uniformly in the ε-ball, independently per sample (else at `x`).
        clean_start_prob: Probability of starting at `x` despite `random_start` (Xie & Yuille: 0.2).
        clean_start_mode: How that is drawn (`CLEAN_START_MODES`): per sample, once per batch, or Fast AdvProp's
            per-batch ``randn() <= 0.2``.
        loss_fn: Per-sample loss ``(logits, target) -> (B,)``; default cross-entropy (accepts soft targets).
        generator: Source of the random start and clean-start draws.
        autocast_dtype: Forward under autocast at this dtype; loss, gradient and perturbation stay fp32.
        progress: Where to report the iterations done (`progress.AttackProgress`), if anywhere.

    Returns:
        Detached adversarial inputs, normalized, with `x`'s shape and dtype.

    Example:
        >>> space = InputSpace.from_model(model)
        >>> targets = random_targets(y, num_classes=1000)
        >>> with attack_context(model, 'running'):
        ...     x_adv = pgd(model, x, y, space=space, eps=16, step=1, steps=10, targeted=True, targets=targets)
    """
    return pgd_budgets(model, x, y, budgets=(steps,), best_iterate=best_iterate, **options)[0]


def pgd_budgets(
        model: nn.Module,
        x: torch.Tensor,
        y: torch.Tensor,
        *,
        budgets: Sequence[int],
        best_iterate: bool = False,
        **options: Any,
) -> List[torch.Tensor]:
    """`pgd` at several iteration budgets from one run of the longest.

    The entry for budget N is what ``pgd(steps=N)`` returns from the same start (same random draws, same step): the
    iterates of the longer run begin with the shorter run's, and with `best_iterate` a sample's record after N
    iterations is the shorter run's result. A sweep over 20, 100, 500 and 2000 iterations then costs 2000 iterations
    instead of 2620, and its accuracies can only fall as the budget grows.

    Args:
        budgets: Iteration counts (>= 0), in any order; duplicates allowed.
        best_iterate: See `pgd`.
        options: `pgd`'s other keyword arguments, the fields of `PGDOptions` (``space``, ``eps`` and ``step``
            required).

    Returns:
        One tensor per entry of `budgets`, in the given order, each as `pgd` returns it.
    """
    return _iterates(model, x, y, budgets, best_iterate, PGDOptions(**options))


def _iterates(
        model: nn.Module,
        x: torch.Tensor,
        y: torch.Tensor,
        budgets: Sequence[int],
        best_iterate: bool,
        options: PGDOptions,
) -> List[torch.Tensor]:
    """`pgd_budgets` on options already gathered: per budget the best-iterate record or the last iterate."""
    keep = 'best' if best_iterate else 'last'
    return [getattr(result, keep) for result in _run_pgd(model, x, y, budgets, keep, options)]


@dataclass(frozen=True)
class BestAndLast:
    """What one evaluation PGD run yields at one budget.

    Attributes:
        best: Per sample the first iterate that clearly fools the model, else the best candidate (``best_iterate``:
            what evaluation reports).
        last: The last iterate of every sample (what the papers report, and what ``best_iterate=False`` returns).
    """

    best: Optional[torch.Tensor]
    last: Optional[torch.Tensor]


def pgd_best_and_last(
        model: nn.Module,
        x: torch.Tensor,
        y: torch.Tensor,
        *,
        budgets: Sequence[int],
        **options: Any,
) -> List[BestAndLast]:
    """`pgd_budgets` with ``best_iterate`` and without it, from one run: per budget the best-iterate record and the
    last iterate.

    The last iterate of a sample needs every iteration, so the run attacks every sample to the end, as a
    last-iterate run does (a best-iterate run stops attacking fooled samples): it costs what ``pgd_budgets(...,
    best_iterate=False)`` costs plus one forward, and each entry's ``last`` is exactly that run's result from the
    same start, its ``best`` the best-iterate result.

    Args:
        budgets, options: See `pgd_budgets`.

    Returns:
        One `BestAndLast` per entry of `budgets`, in the given order.
    """
    return _run_pgd(model, x, y, budgets, 'both', PGDOptions(**options))


def _run_pgd(
        model: nn.Module,
        x: torch.Tensor,
        y: torch.Tensor,
        budgets: Sequence[int],
        keep: str,
        options: PGDOptions,
) -> List[BestAndLast]:
    """The PGD loop behind `pgd_budgets` and `pgd_best_and_last`; `keep` is ``last``, ``best`` or ``both``.

    Only a ``best`` run drops fooled samples from the batch (with running BN statistics): a run that keeps the last
    iterate computes every sample's iterations.
    """
    options.check(budgets)
    steps, wanted = max(budgets), set(budgets)
    loss_fn = cross_entropy_per_sample if options.loss_fn is None else options.loss_fn
    targeted, targets, autocast_dtype = options.targeted, options.targets, options.autocast_dtype
    goal = targets if targeted else y
    sign = -1.0 if targeted else 1.0

    x, labels, dtype = attack_inputs(x, y)
    geometry = PGDGeometry.build(options.space, options.eps, options.step, options.norm, x)
    x_adv = x.clone()
    if options.random_start:
        x_adv = geometry.clip(x + geometry.random_start(
            x, options.clean_start_prob, options.generator, options.clean_start_mode))

    at_budget = {}
    tick = reporter(options.progress, 'pgd', '', steps)
    if keep == 'last':
        for i in range(steps + 1):
            tick(i)
            if i in wanted:
                at_budget[i] = BestAndLast(best=None, last=x_adv.to(dtype))
            if i == steps:
                break
            grad, _, _ = input_gradient(model, x_adv, goal, loss_fn, autocast_dtype)
            x_adv = geometry.step(x_adv, x, grad, sign)
        return [at_budget[n] for n in budgets]

    prune = keep == 'best' and not _uses_batch_stats(model)
    best = BestIterate(x_adv)
    active = torch.arange(x.shape[0], device=x.device)
    x_active = x  # the clean inputs of the rows still attacked, narrowed as they are (not gathered every step)
    for i in range(steps + 1):
        tick(i)
        grad, logits, loss = evaluate_iterate(model, x_adv, goal[active], loss_fn, autocast_dtype, gradient=i < steps)
        active_targets = targets[active] if targeted else None
        fooled = best.update_from_logits(
            active, x_adv, logits, labels[active], sign * loss, active_targets, autocast_dtype)
        if i in wanted:
            last = x_adv.to(dtype, copy=True) if keep == 'both' else None
            at_budget[i] = BestAndLast(best=best.x.to(dtype, copy=True), last=last)
        if i == steps:
            break
        if prune and fooled.any():
            keep_rows = ~fooled
            active, x_adv, grad = active[keep_rows], x_adv[keep_rows], grad[keep_rows]
            if active.numel() == 0:
                break
            x_active = x_active[keep_rows]
        x_adv = geometry.step(x_adv, x_active, grad, sign)
    # every sample fooled before the last budget (a pruned run only): later budgets return the same record
    return [at_budget.get(n, BestAndLast(best=best.x.to(dtype), last=None)) for n in budgets]


@register_attack('pgd')
@attack_dataclass
class PGD(Attack):
    """Configured PGD attack (see `pgd`); ``PGD(space)(model, x, y)`` returns adversarial inputs.

    Defaults follow the evaluation attacker of Xie & Yuille (2020) with 10 iterations (L∞ ε=16, every attack's
    `DEFAULT_EPS`; step 1 with the ``max(step, ε / N)`` rule, random start, best iterate) except that it is untargeted
    unless ``targeted=True``: their evaluation is targeted (the `xie2020` protocol sets it). Their training attacker is
    ``PGD(space, eps=16, step=1, steps=30, targeted=True, clean_start_prob=0.2, best_iterate=False)`` (their released
    code draws the clean start per batch: ``clean_start_mode='per_batch'``).

    Args:
        space: The model's input normalization.
        eps: Budget on the 0-255 scale (L2: pixel-scale norm times 255).
        step: Step size on the 0-255 scale, before the step rule.
        steps: Number of iterations N (at least 1; the functional `pgd` returns the start point for 0).
        norm: ``linf`` or ``l2``.
        targeted: Move toward a target class (drawn uniformly among the other classes when not given).
        random_start: Start uniformly in the ε-ball.
        clean_start_prob: Probability of starting from the clean image instead (Xie & Yuille: 0.2 for training).
        clean_start_mode: How clean starts are drawn (`CLEAN_START_MODES`): ``per_sample`` gives every batch about
            the same mix; ``per_batch`` starts whole batches clean, as Xie & Yuille's released code does;
            ``per_batch_randn`` is Fast AdvProp's released rule (whole batch, ``randn() <= 0.2``, probability 0.579;
            `clean_start_prob` unused).
        step_rule: ``max``: step ``max(step, eps / steps)`` (Xie & Yuille's code); ``fixed``: `step` as given.
        best_iterate: Keep per sample the first fooling iterate and stop attacking it (evaluation); ``False``
            returns the last iterate (training).
        loss_fn: Per-sample loss ``(logits, target) -> (B,)``; default cross-entropy (accepts soft targets).
        bn_stats, autocast_dtype, seed, fold_bn: See `Attack`.
    """
    title = 'PGD'
    scores_last_iterate = True

    norm: str = 'linf'
    steps: int = 10
    step: float = 1.0
    targeted: bool = False
    random_start: bool = True
    clean_start_prob: float = 0.0
    clean_start_mode: str = 'per_sample'
    step_rule: str = field(default='max', repr=False)
    best_iterate: bool = True
    loss_fn: Optional[LossFn] = field(default=None, repr=False)

    def check_options(self) -> None:
        if self.norm not in NORMS:
            raise ValueError(f'norm must be one of {NORMS}, got {self.norm!r}.')
        if self.step_rule not in STEP_RULES:
            raise ValueError(f'step_rule must be one of {STEP_RULES}, got {self.step_rule!r}.')
        if self.steps < 1 or self.step < 0:  # 0 iterations would report the start point's accuracy as robust accuracy
            raise ValueError(f'PGD needs steps >= 1 and step >= 0, got steps={self.steps}, step={self.step}.')
        check_clean_start(self.clean_start_prob, self.clean_start_mode)

    @property
    def step_size(self) -> float:
        """The step actually taken, on the 0-255 scale, after the step rule."""
        if self.step_rule == 'max':
            return max(self.step, self.eps / self.steps)
        return self.step

    @property
    def step_description(self) -> str:
        """``sign step`` (L∞) or ``L2 step``, with ``max(1/255, ε/N)`` under the ``max`` rule."""
        direction = STEP_DIRECTIONS[self.norm]
        return f'{direction}, max({self.step:g}/255, ε/N)' if self.step_rule == 'max' else direction

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
        self._check_budgets(budgets)
        return self.call_in_context(
            model, x, y, targets, lambda m, x_, y_, t: self._run_budgets(m, x_, y_, t, budgets))

    def best_and_last(
            self,
            model: nn.Module,
            x: torch.Tensor,
            y: torch.Tensor,
            budgets: Sequence[int],
            targets: Optional[torch.Tensor] = None,
    ) -> List[BestAndLast]:
        """Per entry of `budgets` (none above `steps`), this best-iterate attack's result and the last iterate, from
        one run (`pgd_best_and_last`).

        The ``last`` entry for N is exactly what this attack with ``best_iterate=False`` and ``steps=N`` (the same
        step size) returns from the same start: the papers' convention, reported beside the best iterate at the cost
        of attacking every sample to the end.

        Raises:
            ValueError: The attack does not keep the best iterate, or a budget is above `steps`.
        """
        if not self.best_iterate:
            raise ValueError('best_and_last needs a best-iterate attack (best_iterate=True).')
        self._check_budgets(budgets)
        return self.call_in_context(
            model, x, y, targets, lambda m, x_, y_, t: _run_pgd(m, x_, y_, budgets, 'both', self._options(t)))

    def _check_budgets(self, budgets: Sequence[int]) -> None:
        if not budgets or max(budgets) > self.steps:
            raise ValueError(f'budgets must be non-empty and at most steps={self.steps}, got {list(budgets)}.')

    def _run_budgets(self, model, x, y, targets, budgets: Sequence[int]) -> List[torch.Tensor]:
        return _iterates(model, x, y, budgets, self.best_iterate, self._options(targets))

    def _options(self, targets: Optional[torch.Tensor]) -> PGDOptions:
        """The run's shared keywords: the options of the same names, the step after the step rule, `targets`."""
        held = self.options_for(option.name for option in fields(PGDOptions))
        return PGDOptions(**dict(held, step=self.step_size, targets=targets))

    def option_repr(self, option: Field) -> str:
        if option.name == 'step':
            return f'step={self.step:g} (taken {self.step_size:g})'
        return super().option_repr(option)
