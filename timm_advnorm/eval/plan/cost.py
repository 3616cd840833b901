"""What an evaluation costs before it runs: the model's forward and backward passes of every stage, and its time.

The unit is the papers' (and training's ``--plan``): a pass of the model over one image, forward or backward (an
attack's backward reaches the input only, no parameter gradients). Each stage costs a number of passes per sample it
covers (`stage_passes`): one forward for the clean pass, an attack's iterations (a backward and its class's
``forwards_per_step`` forwards each: FAB's linearization adds one; Square queries forwards only) times its restarts and
target classes, plus the forwards that score it. The counts are upper bounds: an evaluation attack stops attacking a
sample once it is fooled, and an untargeted one skips the samples the clean pass already got wrong; PGD budgets read off
a longer run cost nothing.

An `EvalCost` lists every stage of every data run with its samples, passes and share of the total, and what the sanity
probes cost next to the attacks the user asked for. Its time is projected twice: before any attack, from the seconds per
pass of one batch's forward and backward passes of the model on this device (`time_passes`) and of one attack update of
the batch (`time_input_step`: the element-wise step, projection and clip that follow each backward pass, which for a
small model on a CPU can cost more than the passes themselves), the plan's passes and backward passes times those
(`EvalCost.with_pass_time`); and after the first batch from each stage's seconds on it, projected to its samples
(`EvalCost.measured`: the first batch's mix of fooled and robust samples assumed throughout).
"""
from dataclasses import dataclass, replace
from typing import Any, Dict, Mapping, Optional, Sequence, Tuple

import torch
import torch.nn as nn

from ...attacks import InputSpace, attack_context, cross_entropy_per_sample, input_gradient
from ...attacks.autoattack import AutoAttack
from ...attacks.fold_bn import BatchNormFolder
from ...attacks.pgd import PGDGeometry
from ...attacks.registry import attack_class
from ...durations import duration_text, seconds_text
from ...timing import timed_seconds
from .metrics import THICKNESS_POINTS
from .stages import (
    AttackStage, BudgetStage, CleanStage, DeterminismProbe, EvalContext, GradientProbe, SmoothnessStage, Stage,
    ThicknessStage, build_attack)

__all__ = ['Passes', 'StageCost', 'EvalCost', 'attack_passes', 'stage_passes', 'stage_kind', 'count_cost',
           'time_passes', 'time_input_step', 'STAGE_KINDS']

#: What a stage is for, in the order a plan lists them: the clean pass, the requested attacks, the sanity probes,
#: robustness metrics, the fp32 reference of ``--verify-amp`` and the clean passes over further out-of-distribution
#: sets.
STAGE_KINDS = ('clean', 'attack', 'sanity', 'metric', 'amp', 'ood')
#: Attacks are built only to read their configuration; their budget and normalization do not change a pass count.
_COUNTING = EvalContext(InputSpace(), (3, 1, 1))


@dataclass(frozen=True)
class Passes:
    """Forward and backward passes of the model over one image (or, scaled, over many)."""

    forward: float = 0.0
    backward: float = 0.0

    def __add__(self, other: 'Passes') -> 'Passes':
        return Passes(self.forward + other.forward, self.backward + other.backward)

    def __mul__(self, factor: float) -> 'Passes':
        return Passes(self.forward * factor, self.backward * factor)

    __rmul__ = __mul__

    @property
    def total(self) -> float:
        """Forward plus backward passes: the unit of costs and shares."""
        return self.forward + self.backward


def _iterations(steps: int, forwards_per_step: int = 1) -> Passes:
    """`steps` gradient iterations: each a forward and a backward to the input (and further forwards)."""
    return Passes(steps * forwards_per_step, steps)


def _autoattack_passes(attack: AutoAttack) -> Passes:
    """AutoAttack's components on every sample (each only sees the ones the earlier left), and the forward that
    checks who is fooled before the first and after each."""
    passes = Passes(forward=1 + len(attack.attacks))
    for name in attack.attacks:
        if name == 'square':
            passes += Passes(forward=attack.n_queries)
        else:
            rounds = attack.n_target_classes if name in ('apgd-t', 'fab-t') else 1
            passes += rounds * _iterations(attack.steps, attack_class(name).forwards_per_step)
    return passes


def attack_passes(attack: Any, targets_given: bool = False) -> Passes:
    """Passes per attacked sample of a configured attack run to its last iteration or query.

    Args:
        attack: A configured attack of the registry.
        targets_given: The evaluation hands it one target per sample (a targeted spec), so that APGD-T and FAB-T
            make one round toward it instead of one per target class.
    """
    if isinstance(attack, AutoAttack):
        return _autoattack_passes(attack)
    rounds = getattr(attack, 'n_restarts', 1) * (1 if targets_given else getattr(attack, 'n_target_classes', 1))
    queries = Passes(forward=getattr(attack, 'n_queries', 0))
    return rounds * (_iterations(getattr(attack, 'steps', 0), attack.forwards_per_step) + queries)


def stage_passes(stage: Stage) -> Passes:
    """Passes per sample the stage covers, for one variant (see the module docstring)."""
    if isinstance(stage, CleanStage):
        return Passes(forward=1)
    if isinstance(stage, BudgetStage):
        return Passes()
    if isinstance(stage, GradientProbe):
        return Passes(1, 1)
    if isinstance(stage, DeterminismProbe):
        return Passes(forward=2)
    if isinstance(stage, ThicknessStage):  # the attack, then a forward at each point of the segment
        return attack_passes(build_attack(stage.spec, _COUNTING, seed=0), True) + Passes(forward=THICKNESS_POINTS)
    if isinstance(stage, SmoothnessStage):  # the attack, then the clean and adversarial forwards
        return attack_passes(build_attack(stage.spec, _COUNTING, seed=0)) + Passes(forward=2)
    if isinstance(stage, AttackStage):
        scored = (1 + len(stage.shorter_budgets)) * (2 if stage.spec.last_iterate else 1)
        if stage.spec.threat == 'noise':  # noise and corruptions perturb the image: no model pass but the score
            return Passes(forward=scored)
        attack = build_attack(stage.spec, _COUNTING, seed=0)
        return attack_passes(attack, stage.spec.targeted) + Passes(forward=scored)
    raise TypeError(f'No pass count for stage {stage.name!r} ({type(stage).__name__}).')


def stage_kind(stage: Stage) -> str:
    """What `stage` is for (`STAGE_KINDS`), from its name: ``sanity/...``, ``metric/...``, ``amp-fp32/...``,
    ``ood/...``, ``clean``; any other is a requested attack."""
    prefixes = {'sanity/': 'sanity', 'metric/': 'metric', 'amp-fp32/': 'amp', 'ood/': 'ood'}
    kind = next((kind for prefix, kind in prefixes.items() if stage.name.startswith(prefix)), None)
    return kind or ('clean' if isinstance(stage, CleanStage) else 'attack')


@dataclass(frozen=True)
class StageCost:
    """One stage of one data run: what it costs over the whole evaluation.

    Attributes:
        name: The stage (``clean``, ``pgd-20``, ``sanity/gradient``, ``ood/imagenet-r``).
        kind: What it is for (`STAGE_KINDS`).
        samples: Samples it covers, per variant.
        variants: Variants it runs for.
        per_sample: Its passes per sample and variant (`stage_passes`).
        seconds: Projected seconds (`EvalCost.measured`); None until measured.
        read_off: The longer attack run a PGD budget is read off (`BudgetStage`): it costs nothing itself.
    """

    name: str
    kind: str
    samples: int
    variants: int
    per_sample: Passes
    seconds: Optional[float] = None
    read_off: Optional[str] = None

    @property
    def passes(self) -> Passes:
        """Its passes over every sample and variant."""
        return self.per_sample * (self.samples * self.variants)


def _share(part: float, whole: float) -> float:
    return part / whole if whole else 0.0


@dataclass(frozen=True)
class EvalCost:
    """The cost of an evaluation, stage by stage (see the module docstring).

    Attributes:
        stages: Every stage of every data run, in the order they run.
        world_size: Processes the samples are sharded over (a projection is per process: they run side by side).
        sanity_mode: How the sanity probes were sized (``budget``, ``full``, ``off``).
        first_batch: Samples of the first batch the time was measured on; None until measured.
        first_batch_seconds: Its seconds over every stage and variant; None until measured.
        pass_seconds: Seconds of one pass of the model over one image, measured before any attack (`time_passes`);
            None until measured.
        step_seconds: Seconds of one attack update of one image, measured with it (`time_input_step`): added once
            per backward pass; None where not measured.
        timed_passes: The passes that measurement timed.
        timed_on: The device type they ran on (``cpu``, ``cuda``).
    """

    stages: Tuple[StageCost, ...]
    world_size: int = 1
    sanity_mode: str = 'full'
    first_batch: Optional[int] = None
    first_batch_seconds: Optional[float] = None
    pass_seconds: Optional[float] = None
    step_seconds: Optional[float] = None
    timed_passes: int = 0
    timed_on: str = ''

    def passes(self, kind: Optional[str] = None) -> float:
        """Passes of every stage of `kind` (every stage with None)."""
        return sum(stage.passes.total for stage in self.stages if kind is None or stage.kind == kind)

    @property
    def input_steps(self) -> float:
        """Attack updates of one image over the whole evaluation: one per backward pass to the input."""
        return sum(stage.passes.backward for stage in self.stages)

    @property
    def total(self) -> float:
        """Passes of the whole evaluation."""
        return self.passes()

    @property
    def sanity_share(self) -> float:
        """What the sanity probes cost as a share of the requested attacks' cost (0 without attacks)."""
        return _share(self.passes('sanity'), self.passes('attack'))

    @property
    def projected_seconds(self) -> Optional[float]:
        """Projected wall time of the evaluation (per process, the processes running side by side); None until
        measured."""
        if self.first_batch_seconds is None:
            return None
        return sum(stage.seconds or 0.0 for stage in self.stages) / self.world_size

    @property
    def pass_projected_seconds(self) -> Optional[float]:
        """Projected wall time of the evaluation (per process) from the measured times: every pass of the plan at
        the time per pass, and every attack update at its time; None until measured."""
        if self.pass_seconds is None:
            return None
        return (self.total * self.pass_seconds + self.input_steps * (self.step_seconds or 0.0)) / self.world_size

    def with_pass_time(self, pass_seconds: float, timed_passes: int, device: str,
                       step_seconds: Optional[float] = None) -> 'EvalCost':
        """This cost with the seconds per pass `time_passes` measured (`timed_passes` passes on a `device`) and
        the seconds per image of an attack update `time_input_step` measured."""
        return replace(self, pass_seconds=pass_seconds, step_seconds=step_seconds, timed_passes=timed_passes,
                       timed_on=device)

    def measured(self, seconds: Mapping[str, float], rows: Mapping[str, int], first_batch: int) -> 'EvalCost':
        """This cost with its time, from the first batch: `seconds` and `rows` (samples times variants) each stage
        computed on it. A stage the first batch did not compute (one read back from a state file, or the clean pass
        over a further data set) is projected at the first batch's seconds per pass."""
        measured = [s for s in self.stages if rows.get(s.name)]
        spent = sum(seconds[s.name] for s in measured)
        per_pass = _share(spent, sum(s.per_sample.total * rows[s.name] for s in measured))
        stages = []
        for stage in self.stages:
            work = stage.samples * stage.variants
            if rows.get(stage.name):
                projected = seconds[stage.name] / rows[stage.name] * work
            else:
                projected = stage.passes.total * per_pass
            stages.append(replace(stage, seconds=projected))
        return replace(self, stages=tuple(stages), first_batch=first_batch, first_batch_seconds=spent)

    def to_dict(self) -> Dict[str, Any]:
        """The plan as results record it (``plan``): each stage's samples, passes and share, the totals, the sanity
        probes' share of the attacks' cost and, once measured, the projected time."""
        total = self.total
        return dict(
            unit='forward and backward passes of the model over one image (upper bounds: attacks stop at fooled '
                 'samples)',
            stages=[dict(name=s.name, kind=s.kind, **(dict(read_off=s.read_off) if s.read_off else {}),
                         samples=s.samples, variants=s.variants,
                         forward_per_sample=s.per_sample.forward, backward_per_sample=s.per_sample.backward,
                         passes=s.passes.total, share=round(_share(s.passes.total, total), 6),
                         projected_seconds=None if s.seconds is None else round(s.seconds, 3))
                    for s in self.stages],
            total_passes=total, attack_passes=self.passes('attack'), sanity_passes=self.passes('sanity'),
            sanity_share_of_attacks=round(self.sanity_share, 6), sanity_mode=self.sanity_mode,
            world_size=self.world_size, first_batch=self.first_batch,
            first_batch_seconds=None if self.first_batch_seconds is None else round(self.first_batch_seconds, 3),
            projected_seconds=None if self.projected_seconds is None else round(self.projected_seconds, 3),
            pass_seconds=self.pass_seconds, step_seconds=self.step_seconds, input_steps=self.input_steps,
            timed_passes=self.timed_passes or None, timed_on=self.timed_on or None,
            pass_projected_seconds=(None if self.pass_projected_seconds is None
                                    else round(self.pass_projected_seconds, 3)))

    def format(self, title: str) -> str:
        """The plan as a table for the console: one line per stage (samples, passes per sample, passes, share and,
        once the first batch is measured, projected time), the totals, the sanity probes against the attacks, and the
        times projected from the measured passes and from the first batch."""
        total = self.total
        timed = self.first_batch_seconds is not None
        rows = [('stage', 'samples', 'fwd+bwd/sample', 'passes', 'share') + (('time',) if timed else ())]
        for s in self.stages:
            name = s.name + (f' (read off {s.read_off})' if s.read_off else '')
            row = (name, f'{s.samples:,}' + (f' x{s.variants}' if s.variants > 1 else ''),
                   f'{s.per_sample.forward:g}+{s.per_sample.backward:g}', f'{s.passes.total:,.0f}',
                   f'{100 * _share(s.passes.total, total):.1f} %')
            rows.append(row + ((duration_text(s.seconds),) if timed else ()))
        widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
        lines = [title]
        for row in rows:
            cells = [row[0].ljust(widths[0])] + [cell.rjust(width) for cell, width in zip(row[1:], widths[1:])]
            lines.append('  ' + '  '.join(cells).rstrip())
        lines.append(f'  total: {total:,.0f} passes (upper bound: attacks stop at fooled samples)')
        attacks, sanity = self.passes('attack'), self.passes('sanity')
        if attacks:
            lines.append(f'  sanity probes: {sanity:,.0f} passes, {100 * self.sanity_share:.0f} % of the requested '
                         f'attacks\' {attacks:,.0f} (--sanity {self.sanity_mode})')
        else:
            lines.append(f'  sanity probes: {sanity:,.0f} passes (--sanity {self.sanity_mode}; no attack requested)')
        if self.pass_seconds is not None:
            lines.append(f'  projected time: {self.pass_time_text()}')
        if timed:
            lines.append(f'  time: {self.time_text()}')
        return '\n'.join(lines)

    def pass_time_text(self) -> str:
        """The time projected from the measured passes and what it was measured on (once measured)."""
        processes = f' per process, {self.world_size} processes side by side' if self.world_size > 1 else ''
        steps = ''
        if self.step_seconds is not None and self.input_steps:
            steps = (f' and attack updates of the input ({seconds_text(self.step_seconds)} per image x '
                     f'{self.input_steps:,.0f})')
        return (f'{duration_text(self.pass_projected_seconds)} for the whole evaluation{processes}, a projection from '
                f'{self.timed_passes:,} measured forward+backward passes of the model on {self.timed_on} '
                f'({seconds_text(self.pass_seconds)} per pass x {self.total:,.0f} passes){steps}')

    def time_text(self) -> str:
        """The projected time and what it was measured on (once measured)."""
        processes = f' per process, {self.world_size} processes side by side' if self.world_size > 1 else ''
        return (f'{duration_text(self.projected_seconds)} projected for the whole evaluation{processes} (the first '
                f'batch of {self.first_batch} samples took {duration_text(self.first_batch_seconds)})')


def time_passes(model: nn.Module, x: torch.Tensor, y: torch.Tensor,
                autocast_dtype: Optional[torch.dtype] = None, fold_bn: bool = True, repeat: int = 1
                ) -> Tuple[float, int]:
    """Seconds per pass of `model` on `x`'s device, and the passes timed: one forward and one backward to the input
    over the batch `x` (what an attack iteration runs, under `attack_context` and with BN folded as the attacks fold
    it), timed after an untimed warm-up; it makes 2 passes per row in the plan's unit.

    Args:
        model: The model as the attacks see it (a variant's module).
        x: A batch of normalized inputs on the model's device.
        y: Its labels.
        autocast_dtype: The evaluation's autocast dtype (None: full precision).
        fold_bn: Fold BN into the convolutions, as the evaluation's attacks do.
        repeat: Timed calls, the fastest taken (`timed_seconds`).
    """
    with attack_context(model):
        net = BatchNormFolder()(model, x) if fold_bn else model
        seconds = timed_seconds(lambda: input_gradient(net, x, y, cross_entropy_per_sample, autocast_dtype),
                                x.device, warmup=1, repeat=repeat)
    passes = 2 * x.shape[0]
    return seconds / passes, passes


def time_input_step(x: torch.Tensor, repeat: int = 1) -> float:
    """Seconds per image of one L∞ PGD update of the batch `x` (`PGDGeometry.step`: the step along the gradient's
    sign, the projection onto the ε-ball, the clip to valid pixels), timed after an untimed warm-up: what an attack
    iteration adds to its passes. Its element-wise work does not depend on the budget or the pixels.

    Args:
        x: A batch of normalized inputs on the evaluation's device.
        repeat: Timed calls, the fastest taken (`timed_seconds`).
    """
    ones = torch.ones((1, x.shape[1], 1, 1), dtype=x.dtype, device=x.device)
    geometry = PGDGeometry('linf', radius=ones, step_size=ones, std=ones, lower=-ones, upper=ones)
    gradient = torch.randn_like(x)
    seconds = timed_seconds(lambda: geometry.step(x, x, gradient), x.device, warmup=1, repeat=repeat)
    return seconds / x.shape[0]


def _covered(stage: Stage, positions: Sequence[int]) -> int:
    """Samples of `positions` that `stage` covers (all, or those below its limit)."""
    return int(stage.rows(torch.as_tensor(list(positions), dtype=torch.long)).sum())


def count_cost(runs: Sequence[Tuple[Sequence[Stage], Sequence[int]]], variants: int, world_size: int = 1,
               sanity_mode: str = 'full') -> EvalCost:
    """The cost of running each data run's stages on its sample positions, for `variants` variants.

    Args:
        runs: ``(stages, positions)`` per data run: the whole subset's positions for the evaluation's plan, one
            process's shard for what that process runs.
        variants: Variants evaluated (every stage runs for each; the out-of-distribution runs too).
        world_size: Processes the evaluation is sharded over.
        sanity_mode: How the sanity probes were sized, for the record.
    """
    stages = tuple(StageCost(stage.name, stage_kind(stage), _covered(stage, positions), variants, stage_passes(stage),
                             read_off=stage.source if isinstance(stage, BudgetStage) else None)
                   for run_stages, positions in runs for stage in run_stages)
    return EvalCost(stages, world_size, sanity_mode)

