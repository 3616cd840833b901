"""Units of evaluation work: clean accuracy, one attack, a sanity probe or a robustness metric, on one batch.

A stage maps a batch (and the results earlier stages produced for it) to per-sample columns. The evaluator runs
every stage of every variant on every batch and records the columns; nothing else in a stage depends on how the
data were split, so the same stage serves single-process, sharded and resumed evaluations.
"""
from dataclasses import dataclass
from typing import Dict, List, Mapping, Optional, Sequence, Tuple

import torch
import torch.nn as nn

from ...attacks import InputSpace, ProgressFn, attack_context, cross_entropy_per_sample, input_gradient
from ...attacks.space import PIXEL_SCALE
from ..protocols.protocol import AttackSpec, create_spec_attack
from .metrics import boundary_thickness, decision_margin, smoothness_kl

__all__ = ['Batch', 'EvalContext', 'Stage', 'CleanStage', 'AttackStage', 'BudgetStage', 'GradientProbe',
           'DeterminismProbe', 'ThicknessStage', 'SmoothnessStage', 'Columns', 'RESULT_COLUMNS', 'LAST_ITERATE_COLUMNS',
           'predict', 'attack_norm', 'build_attack']

Columns = Dict[str, torch.Tensor]


@dataclass
class Batch:
    """Normalized inputs with their labels, subset positions and per-sample random target classes."""

    x: torch.Tensor
    y: torch.Tensor
    positions: torch.Tensor
    targets: torch.Tensor

    def select(self, rows: torch.Tensor) -> 'Batch':
        """The rows where the (CPU, boolean) mask `rows` is set."""
        device_rows = rows.to(self.x.device)
        return Batch(self.x[device_rows], self.y[device_rows], self.positions[rows], self.targets[device_rows])

    def __len__(self) -> int:
        return self.x.shape[0]


@dataclass(frozen=True)
class EvalContext:
    """What every stage needs to know about the evaluation.

    Args:
        space: The model's input normalization.
        input_size: (C, H, W) of the model's inputs (for budgets scaled by the input dimension).
        autocast_dtype: Autocast dtype of forwards and attacks (``None``: full precision).
        fold_bn: Let attacks fold BN into convolutions (exact; faster).
        progress: Where the attacks report their progress from inside (`Attack.progress`): the evaluator's progress
            bar while one is shown; None: nowhere.
    """

    space: InputSpace
    input_size: Tuple[int, int, int]
    autocast_dtype: Optional[torch.dtype] = None
    fold_bn: bool = True
    progress: Optional[ProgressFn] = None


@torch.no_grad()
def predict(model: nn.Module, x: torch.Tensor, autocast_dtype: Optional[torch.dtype] = None) -> torch.Tensor:
    """fp32 logits of `model` at `x`, the forward under autocast when `autocast_dtype` is given."""
    with torch.autocast(x.device.type, dtype=autocast_dtype, enabled=autocast_dtype is not None):
        logits = model(x)
    return logits.float()


def _aligned(columns: Columns, name: str, positions: torch.Tensor) -> torch.Tensor:
    """`columns[name]` reordered to match `positions` (every position must be present)."""
    index = {int(p): i for i, p in enumerate(columns['position'].tolist())}
    return columns[name][torch.tensor([index[int(p)] for p in positions.tolist()], dtype=torch.long)]


def attack_norm(spec: AttackSpec) -> str:
    """Threat-model norm of an attack spec: its configured ``norm``, else its class's (BIM-L2's ``l2``), else
    ``linf``."""
    return getattr(spec.config, 'norm', None) or getattr(spec.config.attack_class, 'norm', 'linf')


class Stage:
    """One unit of work per batch.

    Attributes:
        name: Results key (``clean``, ``pgd-t-2000``, ``sanity/gradient``).
        limit: Run only on samples at subset positions below this (sanity and verification subsets).
        seed_name: Draw the random numbers of the stage of this name (``None``: its own), so that an fp32
            reference of an attack starts where the attack it checks started.
    """

    name: str = ''
    limit: Optional[int] = None
    seed_name: Optional[str] = None

    def rows(self, positions: torch.Tensor) -> torch.Tensor:
        """Boolean mask of the batch rows this stage covers."""
        if self.limit is None:
            return torch.ones_like(positions, dtype=torch.bool)
        return positions < self.limit

    def run(self, model: nn.Module, batch: Batch, previous: Mapping[str, Columns], ctx: EvalContext,
            seed: int) -> Columns:
        """Per-sample columns for `batch` (a ``position`` column included)."""
        raise NotImplementedError


class CleanStage(Stage):
    """Clean predictions: correctness, predicted class and decision margin (NoFrost §4.3), and with `loss` the
    cross-entropy loss (column ``loss``).

    Args:
        name: Results key.
        limit: See `Stage`.
        full_precision: Ignore the context's autocast (the fp32 reference of an AMP check).
        loss: Also record each sample's cross-entropy loss (`Protocol.loss`).
    """

    def __init__(self, name: str = 'clean', limit: Optional[int] = None, full_precision: bool = False,
                 loss: bool = False):
        self.name, self.limit, self.full_precision, self.loss = name, limit, full_precision, loss

    def run(self, model, batch, previous, ctx, seed):
        logits = predict(model, batch.x, None if self.full_precision else ctx.autocast_dtype)
        pred = logits.argmax(dim=1)
        columns = dict(position=batch.positions, correct=(pred == batch.y).cpu(), pred=pred.cpu(),
                       margin=decision_margin(logits, batch.y).cpu())
        if self.loss:
            columns['loss'] = cross_entropy_per_sample(logits, batch.y).cpu()
        return columns


def build_attack(spec: AttackSpec, ctx: EvalContext, seed: int, autocast_dtype: Optional[torch.dtype] = None):
    """The configured attack of `spec` on the context's input space (`create_spec_attack`; a clear error if it
    rejects its configuration).

    Its ε is on the 0-255 scale by the spec's contract; a [0, 1]-scale value is caught where users give it (the command
    line, `protocol_from_attacks`).
    """
    try:
        attack = create_spec_attack(spec, ctx.space, ctx.input_size, autocast_dtype=autocast_dtype, seed=seed,
                                    fold_bn=ctx.fold_bn)
    except TypeError as e:
        raise ValueError(
            f'Attack {spec.label!r} ({spec.attack}) rejected its configuration {spec.config.recorded()}: {e}') from e
    attack.progress = ctx.progress
    return attack


#: Per-sample result columns of an attack stage besides ``position`` and ``attacked``.
RESULT_COLUMNS = ('correct', 'pred', 'success', 'linf', 'l2')
#: ... and of a stage that also scores the last iterate (`AttackSpec.last_iterate`): correct and success there.
LAST_ITERATE_COLUMNS = ('correct_last', 'success_last')


def _unattacked(n: int, last_iterate: bool = False, loss: bool = False) -> Columns:
    """`RESULT_COLUMNS` (and `LAST_ITERATE_COLUMNS` when scored, ``loss`` when recorded) of `n` samples no attack
    touched (a sample broken before the attack stays incorrect)."""
    columns = dict(correct=torch.zeros(n, dtype=torch.bool), pred=torch.full((n,), -1, dtype=torch.long),
                   success=torch.zeros(n, dtype=torch.bool), linf=torch.zeros(n), l2=torch.zeros(n))
    if last_iterate:
        columns.update((name, torch.zeros(n, dtype=torch.bool)) for name in LAST_ITERATE_COLUMNS)
    if loss:
        columns['loss'] = torch.full((n,), float('nan'))
    return columns


class AttackStage(Stage):
    """Accuracy under one attack.

    Untargeted attacks only run on the samples still correct after stage `after` (the clean stage, or the previous
    attack of a cascade): the others count as broken already. With `attack_all` every sample is attacked: targeted
    attacks, so the attack-success rate (prediction == target) covers the whole subset as in Xie & Yuille, and
    noise or corruptions, whose accuracy is measured on every corrupted image.

    Columns: ``attacked``, ``correct`` (after the attack), ``pred``, ``success`` (target reached, or fooled when
    untargeted), ``linf`` and ``l2`` (perturbation size on the 0-255 scale; L2 of pixel values times 255). A spec with
    ``last_iterate`` adds ``correct_last`` and ``success_last``: the same on the last iterate of the same run, which
    then attacks every sample to the end (`PGD.best_and_last`). With `loss` the stage attacks every sample and adds
    ``loss``, each sample's cross-entropy loss at the attack's last iterate where the spec scores it (the attack's
    final point, as the papers measure the loss), else at its result; ``correct`` then still requires the sample to
    have been correct after stage `after` unless the stage attacks all samples anyway (`attack_all`).

    Args:
        spec: The attack.
        after: Stage whose ``correct`` column selects the samples to attack.
        attack_all: Attack every sample (targeted attacks, noise and corruptions in an independent protocol).
        name: Results key (default: the spec's label).
        limit: See `Stage`.
        full_precision: Ignore the context's autocast.
        shorter_budgets: With a PGD `spec`, also score its results after these fewer iterations, read off the same
            run (`PGD.at_budgets`), as the result columns suffixed ``@N`` (for `BudgetStage`).
        seed_name: See `Stage`.
        loss: Attack every sample and record its loss (`Protocol.loss`).
    """

    def __init__(self, spec: AttackSpec, after: str = 'clean', attack_all: bool = False, name: Optional[str] = None,
                 limit: Optional[int] = None, full_precision: bool = False, shorter_budgets: Sequence[int] = (),
                 seed_name: Optional[str] = None, loss: bool = False):
        self.spec, self.after, self.attack_all = spec, after, attack_all
        self.name, self.limit, self.full_precision = name or spec.label, limit, full_precision
        self.shorter_budgets, self.seed_name, self.loss = tuple(shorter_budgets), seed_name, loss

    def run(self, model, batch, previous, ctx, seed):
        autocast_dtype = None if self.full_precision else ctx.autocast_dtype
        n = len(batch)
        survivors = None if self.attack_all else _aligned(previous[self.after], 'correct', batch.positions).bool()
        todo = torch.ones(n, dtype=torch.bool) if survivors is None or self.loss else survivors
        suffixes = [''] + [f'@{budget}' for budget in self.shorter_budgets]
        last_iterate = self.spec.last_iterate
        columns: Columns = {name + suffix: values for suffix in suffixes
                            for name, values in _unattacked(n, last_iterate, self.loss).items()}
        if todo.any():
            sub = batch.select(todo)
            attack = build_attack(self.spec, ctx, seed, autocast_dtype)
            x_advs, x_lasts = self._attack(model, attack, sub, sub.targets if self.spec.targeted else None)
            for suffix, x_adv in zip(suffixes, x_advs):
                for name, values in self._score(model, sub, x_adv, ctx, autocast_dtype).items():
                    columns[name + suffix][todo] = values
            for suffix, x_last in zip(suffixes, x_lasts):
                scored = self._score(model, sub, x_last, ctx, autocast_dtype)
                columns['correct_last' + suffix][todo] = scored['correct']
                columns['success_last' + suffix][todo] = scored['success']
                if self.loss:  # the loss at the attack's final point, where it ran one
                    columns['loss' + suffix][todo] = scored['loss']
        if survivors is not None and self.loss:  # every sample attacked for its loss: robust only if correct before
            for name in [key for key in columns if key.startswith('correct')]:
                columns[name] &= survivors
        return dict(position=batch.positions, attacked=todo, **columns)

    def _attack(self, model, attack, sub: Batch, targets: Optional[torch.Tensor]
                ) -> Tuple[List[torch.Tensor], List[torch.Tensor]]:
        """The attack's results at its own budget, then at `shorter_budgets`; and the last iterates at the same
        budgets when the spec scores them (else none)."""
        if self.spec.last_iterate:
            results = attack.best_and_last(model, sub.x, sub.y, (attack.steps,) + self.shorter_budgets, targets)
            return [r.best for r in results], [r.last for r in results]
        if self.shorter_budgets:
            return attack.at_budgets(model, sub.x, sub.y, (attack.steps,) + self.shorter_budgets, targets), []
        return [attack(model, sub.x, sub.y, targets=targets)], []

    def _score(self, model, sub: Batch, x_adv: torch.Tensor, ctx: EvalContext, autocast_dtype) -> Columns:
        logits = predict(model, x_adv, autocast_dtype)
        pred = logits.argmax(dim=1)
        correct = pred == sub.y
        success = pred == sub.targets if self.spec.targeted else ~correct
        pixels = ((x_adv.float() - sub.x.float()) * ctx.space.std_like(sub.x)).flatten(1) * PIXEL_SCALE
        columns = dict(correct=correct.cpu(), pred=pred.cpu(), success=success.cpu(),
                       linf=pixels.abs().amax(dim=1).cpu(), l2=pixels.norm(dim=1).cpu())
        if self.loss:
            columns['loss'] = cross_entropy_per_sample(logits, sub.y).cpu()
        return columns


class BudgetStage(Stage):
    """Accuracy under a PGD attack that a longer run of the same attack already scored on the way.

    Evaluation PGD from the same start is the same attack for its first N iterations whatever its length, so the
    `AttackStage` of the longest budget records the shorter budgets' results (`shorter_budgets`) and this stage
    reports one of them under its own label: same columns as an `AttackStage` (the last iterate's when the source
    scored it), no attack run.

    Args:
        spec: The shorter attack (its label names the results).
        source: Name of the `AttackStage` that ran the longest budget.
        budget: Iterations of `spec`.
        source_steps: Iterations of the source's attack (a `budget` equal to it reads the source's own columns).
        limit: See `Stage` (the source's).
    """

    def __init__(self, spec: AttackSpec, source: str, budget: int, source_steps: int, limit: Optional[int] = None):
        self.spec, self.source, self.budget, self.limit = spec, source, budget, limit
        self.name = spec.label
        self.suffix = '' if budget == source_steps else f'@{budget}'

    def run(self, model, batch, previous, ctx, seed):
        source = previous[self.source]
        recorded = tuple(name for name in LAST_ITERATE_COLUMNS + ('loss',) if name + self.suffix in source)
        names = RESULT_COLUMNS + recorded
        columns = {name: _aligned(source, name + self.suffix, batch.positions) for name in names}
        return dict(position=batch.positions, attacked=_aligned(source, 'attacked', batch.positions), **columns)


class GradientProbe(Stage):
    """Norm of the input gradient of the cross-entropy at clean inputs (zero or non-finite: masked gradients).

    Columns: ``grad_norm`` (pixel-scale gradient norm; NaN where non-finite).
    """

    def __init__(self, name: str = 'sanity/gradient', limit: Optional[int] = None):
        self.name, self.limit = name, limit

    def run(self, model, batch, previous, ctx, seed):
        with attack_context(model):
            grad, _, _ = input_gradient(model, batch.x, batch.y, cross_entropy_per_sample, ctx.autocast_dtype)
        # d loss / d pixel = (d loss / d x) / std: a norm that does not depend on the normalization
        norm = (grad / ctx.space.std_like(grad)).flatten(1).norm(dim=1)
        return dict(position=batch.positions, grad_norm=norm.cpu())


class DeterminismProbe(Stage):
    """Largest logit change between two identical forwards, relative to the logits' scale (randomized defenses).

    Columns: ``change``.
    """

    def __init__(self, name: str = 'sanity/determinism', limit: Optional[int] = None):
        self.name, self.limit = name, limit

    def run(self, model, batch, previous, ctx, seed):
        first = predict(model, batch.x, ctx.autocast_dtype)
        second = predict(model, batch.x, ctx.autocast_dtype)
        scale = first.abs().amax(dim=1).clamp_min(1.0)
        return dict(position=batch.positions, change=((first - second).abs().amax(dim=1) / scale).cpu())


class ThicknessStage(Stage):
    """Boundary thickness (Yang et al. 2020, NoFrost §4.3) toward each sample's random target class.

    Columns: ``thickness``.
    """

    def __init__(self, spec: AttackSpec, name: str = 'metric/thickness', limit: Optional[int] = None):
        self.spec, self.name, self.limit = spec, name, limit

    def run(self, model, batch, previous, ctx, seed):
        source = _aligned(previous['clean'], 'pred', batch.positions).to(batch.x.device)
        attack = build_attack(self.spec, ctx, seed, ctx.autocast_dtype)
        x_adv = attack(model, batch.x, batch.y, targets=batch.targets)
        thickness = boundary_thickness(model, batch.x, x_adv, source, batch.targets, ctx.space,
                                       autocast_dtype=ctx.autocast_dtype)
        return dict(position=batch.positions, thickness=thickness.cpu())


class SmoothnessStage(Stage):
    """Local smoothness ``KL(p(x) || p(x*))`` (TRADES; NoFrost §4.3).

    Columns: ``kl``.
    """

    def __init__(self, spec: AttackSpec, name: str = 'metric/smoothness', limit: Optional[int] = None):
        self.spec, self.name, self.limit = spec, name, limit

    def run(self, model, batch, previous, ctx, seed):
        attack = build_attack(self.spec, ctx, seed, ctx.autocast_dtype)
        x_adv = attack(model, batch.x, batch.y)
        logits = predict(model, batch.x, ctx.autocast_dtype)
        logits_adv = predict(model, x_adv, ctx.autocast_dtype)
        return dict(position=batch.positions, kl=smoothness_kl(logits, logits_adv).cpu())
