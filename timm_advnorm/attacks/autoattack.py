"""AutoAttack, L∞: a cascade of complementary parameter-free attacks, each run on the samples still robust.

Croce & Hein, *Reliable evaluation of adversarial robustness with an ensemble of diverse parameter-free attacks*
(ICML 2020), "standard" version, with the reference defaults: APGD-CE (100 iterations, no restarts), APGD-T (9 target
classes, 100 iterations each), FAB-T (9 target classes, 100 iterations each) and Square (5000 queries, p_init 0.8);
RobustBench evaluates ImageNet at ε = 4/255. A sample is robust only if every attack fails on it, so the result is
the per-sample worst case, and it can only be lower than (or equal to) any single component's robust accuracy.

Not to be confused with torchattacks' ``AutoAttack`` (10 steps per APGD attack, and 999 target classes for
ImageNet) or `pyautoattack` (a fork with a different API): this module implements the reference protocol.
"""
from typing import NamedTuple, Optional, Sequence, Tuple

import torch
import torch.nn as nn

from .apgd import apgd, apgd_targeted
from .base import attack_dataclass, attack_inputs, forward_logits
from .core import attack_context, is_clearly_fooled, is_fooled
from .eval_attack import EvalAttack
from .fab import fab_targeted
from .fold_bn import fold_batchnorm
from .progress import ProgressFn, within
from .registry import register_attack
from .space import InputSpace
from .square import square

__all__ = ['autoattack', 'AutoAttack', 'AutoAttackResult', 'AUTOATTACK_STANDARD', 'AUTOATTACK_COMPONENTS']

AUTOATTACK_STANDARD = ('apgd-ce', 'apgd-t', 'fab-t', 'square')
AUTOATTACK_COMPONENTS = ('apgd-ce', 'apgd-dlr', 'apgd-t', 'fab-t', 'square')


class AutoAttackResult(NamedTuple):
    """Output of `autoattack`.

    Attributes:
        x_adv: Adversarial inputs (normalized): for each fooled sample the first successful attack's output (a later
            one that fools it by more than rounding replaces a marginal fool), for each robust one the first
            attack's output (APGD-CE: its highest-loss point).
        fooled_by: (B,) long: index into `stages` of the first that misclassifies each sample (argmax, as the
            reference scores; 0: the clean input), -1 for robust samples.
        stages: ``('clean', *attacks)``.
    """

    x_adv: torch.Tensor
    fooled_by: torch.Tensor
    stages: Tuple[str, ...]

    def robust_accuracy_after(self, stage: str) -> float:
        """Fraction of samples not fooled by `stage` or any stage before it (the cascade's running accuracy)."""
        index = self.stages.index(stage)
        fooled = (self.fooled_by >= 0) & (self.fooled_by <= index)
        return 1.0 - fooled.float().mean().item()


_APGD_LOSS = {'apgd-ce': 'ce', 'apgd-dlr': 'dlr'}


def _run_component(name, model, x, labels, space, eps, steps, n_target_classes, n_queries, generator, autocast_dtype,
                   progress):
    common = dict(space=space, eps=eps, generator=generator, autocast_dtype=autocast_dtype, progress=progress)
    if name in _APGD_LOSS:
        return apgd(model, x, labels, steps=steps, loss=_APGD_LOSS[name], **common)
    if name == 'apgd-t':
        return apgd_targeted(model, x, labels, steps=steps, n_target_classes=n_target_classes, **common)
    if name == 'fab-t':
        return fab_targeted(model, x, labels, steps=steps, n_target_classes=n_target_classes, **common)
    return square(model, x, labels, n_queries=n_queries, **common)


def _check_attacks(attacks: Sequence[str]) -> Tuple[str, ...]:
    attacks = tuple(attacks)
    unknown = [a for a in attacks if a not in AUTOATTACK_COMPONENTS]
    if unknown or not attacks or len(set(attacks)) != len(attacks):
        raise ValueError(f'attacks must be distinct names among {AUTOATTACK_COMPONENTS}, got {attacks}.')
    return attacks


def autoattack(
        model: nn.Module,
        x: torch.Tensor,
        y: torch.Tensor,
        *,
        space: InputSpace,
        eps: float = 4.0,
        attacks: Sequence[str] = AUTOATTACK_STANDARD,
        steps: int = 100,
        n_target_classes: int = 9,
        n_queries: int = 5000,
        generator: Optional[torch.Generator] = None,
        autocast_dtype: Optional[torch.dtype] = None,
        progress: Optional[ProgressFn] = None,
) -> AutoAttackResult:
    """AutoAttack, L∞: run `attacks` in order, each on the samples no earlier attack fooled.

    Args:
        model: Model in eval mode.
        x: Normalized inputs (B, C, H, W).
        y: Labels (B,) or soft targets (B, C).
        space: The model's input normalization.
        eps: L∞ budget on the 0-255 scale (RobustBench ImageNet: 4).
        attacks: Component names, in order (standard: APGD-CE, APGD-T, FAB-T, Square; NoFrost's "fast" version:
            ``('apgd-ce', 'apgd-dlr')``).
        steps: Iterations of APGD and FAB, per target class for the targeted ones (100).
        n_target_classes: Target classes of APGD-T and FAB-T (9).
        n_queries: Square's queries per sample (5000).
        generator: Source of every random start and random search draw.
        autocast_dtype: Forward under autocast at this dtype.
        progress: Where to report each component's progress (`progress.AttackProgress` of ``autoattack``, its part
            naming the component, its target and restart: ``apgd-t target 3/9, restart 1/1``), if anywhere.

    Returns:
        `AutoAttackResult`: adversarial inputs and which stage fooled each sample.

    Example:
        >>> with attack_context(model):
        ...     result = autoattack(model, x, y, space=InputSpace.from_model(model), eps=4)
        >>> robust_accuracy = result.robust_accuracy_after('square')
    """
    attacks = _check_attacks(attacks)
    x, labels, dtype = attack_inputs(x, y)
    fooled, clearly = _fooling(model, x, labels, autocast_dtype)
    fooled_by = torch.where(fooled, 0, -1)
    x_adv = x.clone()
    report = within(progress, 'autoattack')
    for stage, name in enumerate(attacks, start=1):
        rows = (~clearly).nonzero().squeeze(1)
        if not rows.numel():
            break
        out = _run_component(name, model, x[rows], labels[rows], space, eps, steps, n_target_classes, n_queries,
                             generator, autocast_dtype, report)
        out_fooled, out_clearly = _fooling(model, out, labels[rows], autocast_dtype)
        # a clear fool beats a marginal one; the first attack's output stands for samples nothing has fooled yet
        take = out_clearly | (~fooled[rows] & (out_fooled | (stage == 1)))
        x_adv[rows[take]] = out[take]
        fooled_by[rows[out_fooled & ~fooled[rows]]] = stage
        fooled[rows] |= out_fooled
        clearly[rows] |= out_clearly
    return AutoAttackResult(x_adv.to(dtype), fooled_by, ('clean',) + attacks)


def _fooling(model: nn.Module, x: torch.Tensor, labels: torch.Tensor,
             autocast_dtype: Optional[torch.dtype]) -> Tuple[torch.Tensor, torch.Tensor]:
    """Per sample: misclassified (what is scored, as in the reference), and misclassified past the rounding tolerance
    (what needs no further attack: a marginal fool may flip when the evaluator scores at another precision)."""
    logits = forward_logits(model, x, autocast_dtype)
    return is_fooled(logits, labels), is_clearly_fooled(logits, labels, autocast_dtype=autocast_dtype)


@register_attack('autoattack')
@attack_dataclass
class AutoAttack(EvalAttack):
    """AutoAttack (see `autoattack`); defaults: the standard version at RobustBench's ImageNet ε=4/255.

    Args:
        eps: L∞ budget on the 0-255 scale (4).
        attacks: Components in order (APGD-CE, APGD-T, FAB-T, Square).
        steps: APGD / FAB iterations (100).
        n_target_classes: APGD-T / FAB-T target classes (9).
        n_queries: Square queries (5000).
        space, autocast_dtype, seed, bn_stats, fold_bn: See `EvalAttack`.
    """
    title = 'AutoAttack'

    eps: float = 4.0
    attacks: Sequence[str] = AUTOATTACK_STANDARD
    steps: int = 100
    n_target_classes: int = 9
    n_queries: int = 5000

    core = staticmethod(autoattack)

    def check_options(self) -> None:
        if self.steps < 1 or self.n_target_classes < 1 or self.n_queries < 2:
            raise ValueError(f'AutoAttack needs steps >= 1, n_target_classes >= 1 and n_queries >= 2, got '
                             f'{self.steps}, {self.n_target_classes}, {self.n_queries}.')
        self.attacks = _check_attacks(self.attacks)

    def run(self, model: nn.Module, x: torch.Tensor, y: torch.Tensor) -> AutoAttackResult:
        """Like calling the attack, but return the full `AutoAttackResult` (which stage fooled which sample)."""
        with attack_context(model, self.bn_stats):
            return self.core(fold_batchnorm(model) if self.fold_bn else model, x, y, **self.core_kwargs())

    def perturb(self, model, x, y, targets):
        return self.core(model, x, y, **self.core_kwargs()).x_adv
