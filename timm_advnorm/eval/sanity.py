"""Sanity checks that run with every evaluation (DESIGN §5; Carlini et al., *On evaluating adversarial robustness*).

A robust-accuracy number means something only if the attack could have found adversarial examples. Each check
reads the per-sample results of one variant and returns a `Check`:

* ``outputs_not_random``: clean accuracy is well above chance (3 binomial standard errors) — a broken checkpoint,
  wrong preprocessing or a label mismatch would otherwise pass as "robust";
* ``outputs_deterministic``: two identical forwards agree (randomized defenses need EOT, not these attacks);
* ``gradients_not_masked``: few samples have a zero or non-finite input gradient (quantized inputs, saturated
  softmax);
* ``accuracy_falls_to_zero``: accuracy under PGD at a huge L∞ budget (128/255) is ~0;
* ``accuracy_decreases_with_eps``: accuracy does not rise with ε (beyond a slack and sampling noise: the two
  accuracies are compared sample by sample, on the samples both scored, by the samples that flip between them);
* ``more_iterations_do_not_help``: more iterations never raise accuracy (sanity probe, and every group of the
  protocol's attacks that differ only in iterations, e.g. the PGD-10...2000 sweep of ``xie2020``);
* ``blackbox_not_stronger``: a black-box attack (Square) does not beat the white-box ones;
* ``perturbation_within_budget``: every adversarial example respects its attack's ε.

Failing `MASKING_CHECKS` flags the variant as suspected of gradient masking: its robust accuracy is then an
upper bound at best. Checks never change the numbers; they are reported next to them.
"""
import math
from dataclasses import asdict, dataclass, field
from typing import Any, Dict, List, Sequence

import numpy as np

from .plan import EvalPlan
from .protocols import AttackSpec, resolve_eps
from .records import ResultTable
from .stages import attack_norm

__all__ = ['Check', 'SanityThresholds', 'run_sanity_checks', 'MASKING_CHECKS', 'summarize_checks']

PASS, FAIL, SKIP = 'pass', 'fail', 'skip'
MASKING_CHECKS = ('gradients_not_masked', 'accuracy_falls_to_zero', 'blackbox_not_stronger')


@dataclass(frozen=True)
class SanityThresholds:
    """Tolerances of the checks (accuracies as fractions).

    Args:
        zero_accuracy: Largest accuracy at the huge budget still counted as ~0.
        monotonic: Slack for "does not rise" (independent random starts make small rises possible).
        z: A rise must also exceed this many standard errors of the paired difference of the two accuracies
            (McNemar: from the samples that flip either way), so that a flip or two on a small prefix is noise,
            while the same images flipping one way in numbers is a finding.
        masked_fraction: Largest fraction of zero/non-finite input gradients.
        determinism: Largest relative logit change between two identical forwards.
        budget: Slack on ε (0-255 scale) for rounding in normalized space.
    """

    zero_accuracy: float = 0.05
    monotonic: float = 0.05
    z: float = 2.0
    masked_fraction: float = 0.1
    determinism: float = 1e-3
    budget: float = 1e-2


@dataclass
class Check:
    """Outcome of one sanity check."""

    name: str
    status: str
    message: str
    details: Dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> Dict[str, Any]:
        return asdict(self)


def _accuracy(table: ResultTable, variant: str, stage: str) -> float:
    return float(np.mean(table.column(variant, stage, 'correct')))


def _rises(table: ResultTable, variant: str, before: str, after: str, thresholds: SanityThresholds) -> bool:
    """Whether accuracy rises from stage `before` to stage `after` beyond the slack and beyond sampling noise.

    Both are measured on the same images, so the difference is judged by the samples that flip: with ``up`` of
    them correct only after and ``down`` only before, out of ``n`` scored by both, the standard error of the
    difference of accuracies is ``sqrt(up + down - (up - down)**2 / n) / n``.
    """
    first, second = table.get(variant, before), table.get(variant, after)
    _, i, j = np.intersect1d(first['position'], second['position'], assume_unique=True, return_indices=True)
    if not len(i):
        return False
    was, now = first['correct'][i].astype(bool), second['correct'][j].astype(bool)
    n, up, down = len(i), int(np.sum(now & ~was)), int(np.sum(was & ~now))
    noise = math.sqrt(max(up + down - (up - down) ** 2 / n, 0.0)) / n
    return (up - down) / n > max(thresholds.monotonic, thresholds.z * noise)


def _outputs_not_random(table, variant, num_classes) -> Check:
    correct = table.column(variant, 'clean', 'correct')
    n = len(correct)
    chance = 1.0 / num_classes
    threshold = chance + 3.0 * math.sqrt(chance * (1.0 - chance) / n)
    accuracy = float(np.mean(correct))
    ok = accuracy > threshold
    return Check('outputs_not_random', PASS if ok else FAIL,
                 f'clean accuracy {accuracy:.3f} {">" if ok else "<="} chance {chance:.3f} + 3 SE ({threshold:.3f})',
                 dict(accuracy=accuracy, chance=chance, threshold=threshold, samples=n))


def _deterministic(table, variant, thresholds) -> Check:
    change = table.column(variant, 'sanity/determinism', 'change')
    if change is None:
        return Check('outputs_deterministic', SKIP, 'no determinism probe')
    worst = float(np.max(change))
    ok = worst <= thresholds.determinism
    return Check('outputs_deterministic', PASS if ok else FAIL,
                 f'largest relative logit change between identical forwards {worst:.2e}', dict(max_change=worst))


def _gradients(table, variant, thresholds) -> Check:
    columns = table.get(variant, 'sanity/gradient')
    if columns is None:
        return Check('gradients_not_masked', SKIP, 'no gradient probe')
    norms = columns['grad_norm'].astype(float)
    # a misclassified sample may legitimately sit on a flat region; judge the correctly classified ones
    correct = table.get(variant, 'clean')
    lookup = dict(zip(correct['position'].tolist(), correct['correct'].tolist()))
    keep = np.array([lookup[int(p)] for p in columns['position']], dtype=bool)
    norms = norms[keep] if keep.any() else norms
    masked = ~np.isfinite(norms) | (norms == 0)
    fraction = float(np.mean(masked))
    ok = fraction <= thresholds.masked_fraction
    return Check('gradients_not_masked', PASS if ok else FAIL,
                 f'{fraction:.1%} of samples have a zero or non-finite input gradient',
                 dict(masked_fraction=fraction, median_grad_norm=float(np.nanmedian(norms)) if len(norms) else None))


def _falls_to_zero(table, variant, plan, thresholds) -> Check:
    eps, stage = plan.sanity.sweep[-1]
    accuracy = _accuracy(table, variant, stage)
    ok = accuracy <= thresholds.zero_accuracy
    return Check('accuracy_falls_to_zero', PASS if ok else FAIL,
                 f'accuracy {accuracy:.3f} under untargeted PGD at eps={eps:g}/255', dict(eps=eps, accuracy=accuracy))


def _decreases_with_eps(table, variant, plan, thresholds) -> Check:
    stages = [stage for _, stage in plan.sanity.sweep]
    curve = [(eps, _accuracy(table, variant, stage)) for eps, stage in plan.sanity.sweep]
    rises = [pair for pair in zip(stages, stages[1:]) if _rises(table, variant, *pair, thresholds)]
    return Check('accuracy_decreases_with_eps', FAIL if rises else PASS,
                 'accuracy rises with eps' if rises else 'accuracy does not rise with eps',
                 dict(curve=[dict(eps=e, accuracy=a) for e, a in curve]))


def _step_groups(plan: EvalPlan) -> List[List[AttackSpec]]:
    """The protocol's attacks that differ only in their iteration count, as groups of >= 2 by increasing steps."""
    groups: Dict[str, List[AttackSpec]] = {}
    for spec in plan.protocol.attacks:
        if spec.threat != 'white-box' or 'steps' not in spec.kwargs:
            continue
        rest = {k: v for k, v in spec.kwargs.items() if k not in ('steps', 'step')}
        key = repr((spec.attack, spec.eps, sorted(rest.items())))
        groups.setdefault(key, []).append(spec)
    return [sorted(g, key=lambda s: s.kwargs['steps']) for g in groups.values()
            if len({s.kwargs['steps'] for s in g}) > 1]


def _more_iterations(table, variant, plan, thresholds) -> Check:
    curves = []
    if plan.sanity is not None and plan.sanity.more_iterations is not None:
        curves.append(list(plan.sanity.more_iterations))
    if plan.protocol.aggregation == 'independent':
        curves += [[spec.label for spec in group] for group in _step_groups(plan)]
    if not curves:
        return Check('more_iterations_do_not_help', SKIP, 'no attacks differing in iterations')
    rises = [pair for curve in curves for pair in zip(curve, curve[1:]) if _rises(table, variant, *pair, thresholds)]
    message = ', '.join(f'{a} {_accuracy(table, variant, a):.3f} -> {b} {_accuracy(table, variant, b):.3f}'
                        for a, b in rises) if rises else 'accuracy never rises with more iterations'
    return Check('more_iterations_do_not_help', FAIL if rises else PASS, message,
                 dict(curves=[[dict(stage=s, accuracy=_accuracy(table, variant, s)) for s in curve]
                              for curve in curves]))


def _against_whitebox(table, variant, blackbox: str, whitebox: Sequence[str], thresholds) -> Dict[str, Any]:
    """The black-box stage against the strongest white-box one: may its accuracy be lower beyond noise?"""
    best = min(whitebox, key=lambda stage: _accuracy(table, variant, stage))
    return dict(blackbox=blackbox, accuracy=_accuracy(table, variant, blackbox),
                best_whitebox=_accuracy(table, variant, best),
                ok=not _rises(table, variant, blackbox, best, thresholds))


def _blackbox(table, variant, plan, thresholds) -> Check:
    comparisons = []
    specs = plan.protocol.attacks
    if plan.protocol.aggregation == 'cascade':
        # in a cascade a black-box stage only sees survivors of the white-box ones: it should break (almost) none
        for before, spec in zip(specs, specs[1:]):
            if spec.threat == 'black-box':
                survived, accuracy = _accuracy(table, variant, before.label), _accuracy(table, variant, spec.label)
                comparisons.append(dict(blackbox=spec.label, extra_broken=survived - accuracy, ok=not _rises(
                    table, variant, spec.label, before.label, thresholds)))
    else:
        for spec in specs:
            if spec.threat != 'black-box':
                continue
            rivals = [s.label for s in specs if s.threat == 'white-box' and s.eps == spec.eps]
            if rivals:
                comparisons.append(_against_whitebox(table, variant, spec.label, rivals, thresholds))
    if plan.sanity is not None and plan.sanity.blackbox is not None:
        comparisons.append(_against_whitebox(table, variant, plan.sanity.blackbox, plan.sanity.more_iterations,
                                             thresholds))
    if not comparisons:
        return Check('blackbox_not_stronger', SKIP, 'no black-box attack ran')
    ok = all(c['ok'] for c in comparisons)
    return Check('blackbox_not_stronger', PASS if ok else FAIL,
                 'black-box attacks do not beat white-box ones' if ok else
                 'a black-box attack beats the white-box ones: gradients are likely masked',
                 dict(comparisons=comparisons))


def _within_budget(table, variant, plan, input_size, thresholds) -> Check:
    violations, checked = [], 0
    for stage in plan.stages:
        spec = getattr(stage, 'spec', None)
        if spec is None or spec.threat == 'noise' or not table.has(variant, stage.name):
            continue
        columns = table.get(variant, stage.name)
        if 'linf' not in columns:
            continue
        norm = attack_norm(spec)
        eps = resolve_eps(spec, input_size)
        size = float(np.max(columns[norm], initial=0.0))
        checked += 1
        if size > eps * (1.0 + 1e-4) + thresholds.budget:
            violations.append(dict(stage=stage.name, norm=norm, eps=eps, max_perturbation=size))
    if not checked:
        return Check('perturbation_within_budget', SKIP, 'no bounded attack ran')
    return Check('perturbation_within_budget', FAIL if violations else PASS,
                 f'{len(violations)} of {checked} attacks exceed their budget', dict(violations=violations))


def run_sanity_checks(
        table: ResultTable,
        variant: str,
        plan: EvalPlan,
        num_classes: int,
        input_size: Sequence[int],
        thresholds: SanityThresholds = SanityThresholds(),
) -> List[Check]:
    """Every sanity check for `variant`; checks whose probes did not run are reported as skipped."""
    checks = [_outputs_not_random(table, variant, num_classes), _deterministic(table, variant, thresholds),
              _gradients(table, variant, thresholds)]
    if plan.sanity is not None:
        checks += [_falls_to_zero(table, variant, plan, thresholds),
                   _decreases_with_eps(table, variant, plan, thresholds)]
    else:
        checks += [Check('accuracy_falls_to_zero', SKIP, 'sanity probes disabled'),
                   Check('accuracy_decreases_with_eps', SKIP, 'sanity probes disabled')]
    checks += [_more_iterations(table, variant, plan, thresholds), _blackbox(table, variant, plan, thresholds),
               _within_budget(table, variant, plan, input_size, thresholds)]
    return checks


def summarize_checks(checks: Sequence[Check]) -> Dict[str, Any]:
    """``passed`` (no failure), ``masked_gradients_suspected`` and the failed check names."""
    failed = [c.name for c in checks if c.status == FAIL]
    return dict(passed=not failed, failed=failed,
                masked_gradients_suspected=any(name in MASKING_CHECKS for name in failed))
