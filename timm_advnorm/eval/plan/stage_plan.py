"""From a protocol and options to the ordered list of stages an evaluation runs, and what each one is for.

PGD attacks of a protocol that differ only in their iteration count (Xie & Yuille's 20, 100, 500 and 2000 iterations
at step 1) run once, at the longest budget; the shorter budgets' results are read off that run (`BudgetStage`),
which is exactly each shorter attack from the same start.

Besides the protocol's attacks, an evaluation runs sanity probes on a small prefix of the subset (`SANITY_PROBES`): the
input-gradient norm, a determinism probe, an untargeted PGD from the clean image (no random start, so zero gradients
cannot hide behind noise) at a budget no honest classifier survives and over an ε-sweep up to it, the same PGD with
4x the iterations, and a black-box Square probe when the protocol has no black-box attack. A reduced (smoke-test)
evaluation shrinks the probes too (`reduce_sanity`: fewer samples, iterations, queries and ε points), each check
keeping what it compares; by default a budget sizes them further (`sanity_budget.fit_sanity`).
Optionally it also runs the NoFrost §4.3 robustness metrics and an fp32 reference of the clean pass and first
white-box attack, to check a bf16 evaluation against full precision.

A protocol's further out-of-distribution sets (`Protocol.ood`) are runs of their own over their own images, one
clean pass each (`ood_stage`).
"""
from dataclasses import dataclass, field, replace
from typing import Dict, List, Optional, Sequence, Tuple

from ...attacks import PGD, InputSpace, PixelBudget, Square, list_attacks
from ..protocols.protocol import SQRT_DIM_RULES, AttackSpec, Protocol, check_resolved
from ..schema import SanityProbe
from .metrics import METRICS, smoothness_attack, thickness_attack
from .stages import (
    AttackStage, BudgetStage, CleanStage, DeterminismProbe, EvalContext, GradientProbe, SmoothnessStage, Stage,
    ThicknessStage, attack_norm, build_attack)

__all__ = ['SanityPlan', 'SanityBudget', 'EvalPlan', 'build_plan', 'reduce_sanity', 'sanity_stages', 'ood_stage',
           'SANITY_PROBES', 'SANITY_EPS_FACTORS', 'SANITY_LARGE_EPS', 'REDUCED_SANITY_SAMPLES', 'REDUCED_SANITY_STEPS',
           'REDUCED_SANITY_QUERIES', 'REDUCED_SANITY_EPS_FACTORS', 'SANITY_STEP_FACTOR']

#: The sanity probes, most telling per pass first: the input gradient (``gradients_not_masked``), two identical
#: forwards (``outputs_deterministic``), PGD at `SANITY_LARGE_EPS` (``accuracy_falls_to_zero``), the rest of the
#: ε-sweep (``accuracy_decreases_with_eps``), PGD with 4x the iterations (``more_iterations_do_not_help``) and Square
#: (``blackbox_not_stronger``). A budget that cannot fit them all drops them from the end: each needs those before it.
SANITY_PROBES = ('gradient', 'determinism', 'huge-eps', 'eps-sweep', 'iterations', 'blackbox')
#: Multiples of the protocol's ε in the sanity sweep.
SANITY_EPS_FACTORS = (0.5, 1.0, 2.0, 4.0)
#: A reduced evaluation's probes run on at most this many samples: 0 of 16 may survive the huge budget.
REDUCED_SANITY_SAMPLES = 16
#: ... with at most this many PGD iterations (the iteration check: 4x as many); fewer than 5 from the clean image
#: can leave a sample correct at the huge budget, a false alarm of ``accuracy_falls_to_zero``.
REDUCED_SANITY_STEPS = 5
#: ... with at most this many Square queries (a quarter of NoFrost's 400: a smoke test's check, not a verdict).
REDUCED_SANITY_QUERIES = 100
#: ... and sweep ε over these multiples of the protocol's ε (plus `SANITY_LARGE_EPS`): still a curve of 3 points.
REDUCED_SANITY_EPS_FACTORS = (1.0, 4.0)
#: Always in the sweep: an L∞ budget (0-255 scale) that leaves no classifier with honest gradients any accuracy.
SANITY_LARGE_EPS = 128.0
#: Default ε of the sweep when the protocol has no L∞ white-box attack.
SANITY_DEFAULT_EPS = 8.0
#: The probes' PGD step is this many times ε / N (Madry et al.'s 2.5 ε / N: N steps can cross the ball).
SANITY_STEP_FACTOR = 2.5


@dataclass(frozen=True)
class SanityPlan:
    """Names of the sanity stages and what they are, for `sanity.run_sanity_checks`.

    Attributes:
        samples: Size of the sanity prefix of the subset.
        eps: The L∞ budget the probes center on (0-255 scale).
        sweep: ``(eps, stage name)`` of the ε-sweep, by increasing ε.
        more_iterations: ``(fewer, more)`` stage names of the iteration check at `eps`.
        blackbox: Stage name of the Square probe, if one runs.
        steps: PGD iterations of the sweep (the iteration check runs 4x as many).
        queries: Queries of the Square probe, when one runs (`blackbox`).
        reduced: Whether the probes were shrunk for a smoke test (`reduce_sanity`).
        probes: The probes that run (of `SANITY_PROBES`).
        mode: How they were sized: ``full`` (as asked) or ``budget`` (`sanity_budget.fit_sanity`).
        not_run: The probes the budget could not fit.
    """

    samples: int
    eps: float
    sweep: Tuple[Tuple[float, str], ...] = ()
    more_iterations: Optional[Tuple[str, str]] = None
    blackbox: Optional[str] = None
    steps: int = 0
    queries: int = 0
    reduced: bool = False
    probes: Tuple[str, ...] = SANITY_PROBES
    mode: str = 'full'
    not_run: Tuple[str, ...] = ()

    def probe(self, samples: int) -> SanityProbe:
        """What the probes ran, for results: on `samples` samples (those of the prefix evaluated), the attack and its
        budgets, whether they were reduced, how they were sized and the probes the budget left out."""
        return SanityProbe(samples=samples, attack='pgd', norm='linf', random_start=False, steps=self.steps,
                           more_steps=4 * self.steps if self.more_iterations else None, eps=self.eps,
                           sweep_eps=[eps for eps, _ in self.sweep],
                           blackbox_queries=self.queries if self.blackbox is not None else None, reduced=self.reduced,
                           step=SANITY_STEP_FACTOR * self.eps / self.steps if self.steps else None,
                           step_rule=f'sign step, {SANITY_STEP_FACTOR:g}ε/N', mode=self.mode,
                           not_run=list(self.not_run))


@dataclass(frozen=True)
class SanityBudget:
    """What the sanity probes spend (see `build_plan`).

    Attributes:
        samples: Size of the prefix the probes run on (0 disables them).
        steps: PGD iterations of the ε-sweep.
        queries: Square queries of the black-box probe.
        eps_factors: Multiples of the protocol's ε swept (`SANITY_LARGE_EPS` is always added).
        reduced: Shrunk for a smoke test (`reduce_sanity`).
        probes: The probes to run (of `SANITY_PROBES`, in its order).
    """

    samples: int = 64
    steps: int = 10
    queries: int = 400
    eps_factors: Tuple[float, ...] = SANITY_EPS_FACTORS
    reduced: bool = False
    probes: Tuple[str, ...] = SANITY_PROBES


def reduce_sanity(budget: SanityBudget) -> SanityBudget:
    """The probes of a reduced (``--reduced``) evaluation: about 10x cheaper, and every check still compares
    something: at most `REDUCED_SANITY_SAMPLES` samples, `REDUCED_SANITY_STEPS` iterations (the iteration check
    compares them with 4x as many) and `REDUCED_SANITY_QUERIES` queries, and an ε-sweep of 3 points: the protocol's
    ε, 4x it and the huge budget (`REDUCED_SANITY_EPS_FACTORS`). Budgets already smaller stay.
    """
    return replace(budget, samples=min(budget.samples, REDUCED_SANITY_SAMPLES),
                   steps=min(budget.steps, REDUCED_SANITY_STEPS), queries=min(budget.queries, REDUCED_SANITY_QUERIES),
                   eps_factors=REDUCED_SANITY_EPS_FACTORS, reduced=True)


@dataclass(frozen=True)
class EvalPlan:
    """The stages of an evaluation and the role of the non-protocol ones (`sanity_budget`: what the sanity stages were
    built from; None without probes)."""

    protocol: Protocol
    stages: Tuple[Stage, ...]
    sanity: Optional[SanityPlan] = None
    metrics: Tuple[str, ...] = ()
    amp_pairs: Tuple[Tuple[str, str], ...] = field(default_factory=tuple)
    amp_samples: int = 0
    sanity_budget: Optional[SanityBudget] = None

    def check_attacks(self, ctx: EvalContext) -> None:
        """Build every attack once, so an unknown name or argument fails now, not hours into the evaluation."""
        for stage in self.stages:
            spec = getattr(stage, 'spec', None)
            if spec is not None:
                build_attack(spec, ctx, seed=0)

    def stage(self, name: str) -> Stage:
        """The stage called `name`."""
        for stage in self.stages:
            if stage.name == name:
                return stage
        raise KeyError(name)


def _probe_eps(protocol: Protocol) -> float:
    """The first L∞ white-box budget of the protocol (the one the sweep centers on), on the 0-255 scale."""
    for spec in protocol.attacks:
        if (spec.threat == 'white-box' and attack_norm(spec) == 'linf' and spec.eps > 0
                and spec.eps_rule not in SQRT_DIM_RULES):
            return spec.eps
    return SANITY_DEFAULT_EPS


def _probe_pgd(label: str, eps: float, steps: int) -> AttackSpec:
    """Untargeted PGD from the clean input with Madry et al.'s step 2.5 ε / N (`SANITY_STEP_FACTOR`)."""
    return AttackSpec(label, PGD.Config.of(steps=steps, step=SANITY_STEP_FACTOR * eps / steps, step_rule='fixed',
                                           random_start=False), eps)


def _budget_key(spec: AttackSpec) -> Optional[Tuple]:
    """What a PGD spec is besides its iteration count (its step after the step rule included); None otherwise.

    Specs with equal keys are one attack run for different lengths.
    """
    if spec.attack != 'pgd' or spec.eps_rule in SQRT_DIM_RULES:
        return None
    try:
        attack = spec.config.build(InputSpace(), PixelBudget(spec.eps))
    except (TypeError, ValueError):
        return None  # `EvalPlan.check_attacks` reports it
    others = tuple(sorted((k, repr(v)) for k, v in spec.config.recorded().items()
                          if k not in ('steps', 'step', 'step_rule')))
    return spec.eps, attack.step_size, spec.threat, others


def _attack_stages(protocol: Protocol, share_budgets: bool) -> List[Stage]:
    """The protocol's attacks in order, PGD budgets of one attack merged into a run of the longest when allowed."""
    if protocol.aggregation == 'cascade':
        stages: List[Stage] = []
        previous = 'clean'
        for spec in protocol.attacks:
            stages.append(AttackStage(spec, after=previous))
            previous = spec.label
        return stages
    groups: Dict[Tuple, List[AttackSpec]] = {}
    for spec in protocol.attacks:
        key = _budget_key(spec) if share_budgets else None
        groups.setdefault(key if key is not None else (spec.label,), []).append(spec)
    stages = []
    for group in groups.values():
        # targeted: every sample, for the success rate; noise and corruptions: accuracy on every corrupted
        # image, as ImageNet-C and Galloway et al. report it (a corruption can also fix a clean mistake)
        attack_all = group[0].targeted or group[0].threat == 'noise'
        if len(group) == 1:
            stages.append(AttackStage(group[0], attack_all=attack_all, loss=protocol.loss))
            continue
        longest = max(group, key=lambda spec: spec.steps)
        shorter = [spec for spec in group if spec is not longest]
        stages.append(AttackStage(longest, attack_all=attack_all, loss=protocol.loss,
                                  shorter_budgets=sorted({spec.steps for spec in shorter} - {longest.steps})))
        stages.extend(BudgetStage(spec, longest.label, spec.steps, longest.steps) for spec in shorter)
    return stages


def sanity_stages(protocol: Protocol, budget: SanityBudget, mode: str = 'full',
                  not_run: Sequence[str] = ()) -> Tuple[List[Stage], SanityPlan]:
    """The stages of the probes of `budget` for `protocol`, and their names for the checks.

    Args:
        protocol: The attack suite (the probes center on its first L∞ white-box budget).
        budget: The probes to run and what they spend.
        mode: How `budget` was sized, for the record.
        not_run: The probes a budget left out, for the record.
    """
    eps = _probe_eps(protocol)
    samples, steps, queries, probes = budget.samples, budget.steps, budget.queries, budget.probes
    stages: List[Stage] = []
    if 'gradient' in probes:
        stages.append(GradientProbe(limit=samples))
    if 'determinism' in probes:
        stages.append(DeterminismProbe(limit=samples))
    sweep_eps = {SANITY_LARGE_EPS} if 'huge-eps' in probes else set()
    if 'eps-sweep' in probes:
        sweep_eps |= {min(f * eps, 255.0) for f in budget.eps_factors}
    sweep = []
    for value in sorted(sweep_eps):
        name = f'sanity/pgd-{steps}-eps{value:g}'
        stages.append(AttackStage(_probe_pgd(name, value, steps), limit=samples))
        sweep.append((value, name))
    more_iterations = None
    if 'iterations' in probes:  # against the sweep's point at ε (every sweep has the factor 1)
        more_iterations = (f'sanity/pgd-{steps}-eps{eps:g}', f'sanity/pgd-{4 * steps}-eps{eps:g}')
        stages.append(AttackStage(_probe_pgd(more_iterations[1], eps, 4 * steps), limit=samples))
    blackbox = None
    has_blackbox = any(spec.threat == 'black-box' for spec in protocol.attacks)
    if 'blackbox' in probes and not has_blackbox and 'square' in list_attacks() and queries > 0:
        blackbox = f'sanity/square-{queries}-eps{eps:g}'
        spec = AttackSpec(blackbox, Square.Config.of(n_queries=queries), eps)
        stages.append(AttackStage(spec, limit=samples))
    return stages, SanityPlan(samples, eps, tuple(sweep), more_iterations, blackbox, steps, queries, budget.reduced,
                              tuple(probes), mode, tuple(not_run))


def ood_stage(dataset: str) -> CleanStage:
    """The clean pass over the out-of-distribution set `dataset` of `Protocol.ood`, named ``ood/<dataset>`` in
    results and state files (a run of its own: its sample positions are not the evaluation data's)."""
    return CleanStage(f'ood/{dataset}')


def build_plan(
        protocol: Protocol,
        sanity_samples: int = 64,
        sanity_steps: int = 10,
        sanity_queries: int = 400,
        metrics: Optional[Sequence[str]] = None,
        metric_samples: Optional[int] = None,
        amp_samples: int = 0,
        share_budgets: bool = True,
        reduced_sanity: bool = False,
) -> EvalPlan:
    """The stages of an evaluation, with the complete battery of sanity probes (`sanity_budget.fit_sanity` sizes
    them to a budget).

    Args:
        protocol: The attack suite, its budgets on the 0-255 scale (`protocols.resolve_protocol`).
        sanity_samples: Size of the prefix the sanity probes run on (0 disables them: not recommended).
        sanity_steps: PGD iterations of the sanity sweep.
        sanity_queries: Queries of the Square sanity probe (400: NoFrost's black-box budget; 100 is too few
            for Square to beat even a masked model reliably).
        metrics: Robustness metrics to compute (default: the protocol's); ``margin`` comes with the clean stage.
        metric_samples: Compute thickness and smoothness on this prefix only (``None``: every sample).
        amp_samples: With autocast, check bf16 against fp32 on this prefix (0: no check); the fp32 attack starts
            where the attack it checks started.
        share_budgets: Read PGD attacks that differ only in iterations off one run of the longest (``False``: each
            its own run, with its own random start).
        reduced_sanity: Shrink the sanity probes for a smoke test (`reduce_sanity`), as ``--reduced`` shrinks the
            protocol.

    Raises:
        ValueError: Unknown metric, or a budget still in units of the standardized input.
    """
    check_resolved(protocol)
    metrics = tuple(protocol.metrics if metrics is None else metrics)
    for name in metrics:
        if name not in METRICS:
            raise ValueError(f'Unknown metric {name!r}, expected one of {METRICS}.')
    stages: List[Stage] = [CleanStage(loss=protocol.loss), *_attack_stages(protocol, share_budgets)]
    sanity, budget = None, SanityBudget(sanity_samples, sanity_steps, sanity_queries)
    if reduced_sanity:
        budget = reduce_sanity(budget)
    if budget.samples > 0:
        probes, sanity = sanity_stages(protocol, budget)
        stages.extend(probes)
    else:
        budget = None
    if 'thickness' in metrics:
        stages.append(ThicknessStage(thickness_attack(), limit=metric_samples))
    if 'smoothness' in metrics:
        stages.append(SmoothnessStage(smoothness_attack(eps=_probe_eps(protocol)), limit=metric_samples))
    amp_pairs = []
    if amp_samples > 0:
        stages.append(CleanStage('amp-fp32/clean', limit=amp_samples, full_precision=True))
        amp_pairs.append(('clean', 'amp-fp32/clean'))
        reference = next((spec for spec in protocol.attacks if spec.threat == 'white-box'), None)
        if reference is not None:
            name = f'amp-fp32/{reference.label}'
            checked = next(stage for stage in stages if stage.name == reference.label)
            stages.append(AttackStage(reference, after='amp-fp32/clean', attack_all=reference.targeted, name=name,
                                      limit=amp_samples, full_precision=True,
                                      seed_name=getattr(checked, 'source', checked.name)))
            amp_pairs.append((reference.label, name))
    return EvalPlan(protocol, tuple(stages), sanity, metrics, tuple(amp_pairs), amp_samples, budget)
