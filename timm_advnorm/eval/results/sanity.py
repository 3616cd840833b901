"""Sanity checks that run with every evaluation (Carlini et al., *On evaluating adversarial robustness*).

A robust-accuracy number means something only if the attack could have found adversarial examples. Each check
reads the per-sample results of one variant and returns a `SanityCheck` (the results' record of it):

* ``outputs_not_random``: clean accuracy is well above chance (3 binomial standard errors) — a broken checkpoint,
  wrong preprocessing or a label mismatch would otherwise pass as "robust";
* ``outputs_deterministic``: two identical forwards agree (randomized defenses need EOT, not these attacks);
* ``gradients_not_masked``: few samples have a zero or non-finite input gradient (quantized inputs, saturated
  softmax);
* ``accuracy_falls_to_zero``: accuracy under PGD at a huge L∞ budget (128/255) is ~0;
* ``accuracy_decreases_with_eps``: accuracy does not rise with ε (beyond a slack and sampling noise: the two
  accuracies are compared sample by sample, on the samples both scored, by the samples that flip between them);
* ``more_iterations_do_not_help``: more iterations never raise accuracy (sanity probe, and every group of the
  protocol's attacks that differ only in iterations, e.g. the PGD-10...2000 sweep of ``xie2020``). Budgets read
  off one best-iterate run (`plan.BudgetStage`) cannot rise by construction, a fooled sample stays fooled: there
  any sample that becomes correct with more iterations is a failure, with no slack;
* ``blackbox_not_stronger``: a black-box attack (Square) does not beat the white-box ones;
* ``perturbation_within_budget``: every adversarial example respects its attack's ε.

A check that tolerates noise says how many samples moved each way (`Flips`), so a pass "within noise" can be told
from a pass with nothing to tolerate. Failing `MASKING_CHECKS` flags the variant as suspected of gradient masking:
its robust accuracy is then an upper bound at best. Checks never change the numbers; they are reported next to
them, and `check_warnings` phrases the failures for the user.

A check whose probe did not run (probes off, or left out by the sanity budget, `sanity_budget.fit_sanity`) is
reported as skipped, saying why; the verdict (`summarize_checks`) is ``passed`` only when every check ran and passed.
"""
import math
from dataclasses import dataclass
from typing import Any, Dict, List, Mapping, Sequence, Tuple

import numpy as np

from ..plan.sanity_budget import SANITY_SHARE
from ..plan.stage_plan import EvalPlan
from ..plan.stages import BudgetStage, attack_norm
from ..protocols.protocol import AttackSpec, resolve_eps
from ..run.records import ResultTable
from ..schema import SanityCheck, passed_flag, sanity_status

__all__ = ['Flips', 'SanityThresholds', 'run_sanity_checks', 'MASKING_CHECKS', 'summarize_checks',
           'check_warnings']

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


def _accuracy(table: ResultTable, variant: str, stage: str) -> float:
    return float(np.mean(table.column(variant, stage, 'correct')))


#: How `Flips` words the samples that moved, for a stage compared with a later (larger, longer) one.
BECAME = '{up} {samples} became correct, {down} became wrong of {n}'
#: ... for a black-box attack compared with the best white-box one (``up``: broken by the black-box one only).
BROKE_ONLY = '{up} {samples} broken only by the black-box attack, {down} only by the white-box one, of {n}'


@dataclass(frozen=True)
class Flips:
    """Two stages scored on the same images, sample by sample: how many samples moved each way between them.

    Attributes:
        what: The comparison, for messages (``eps 8/255 -> 16/255``).
        samples: Samples both stages scored.
        up: Samples correct only under the second stage (its accuracy rising).
        down: Samples correct only under the first.
        exact: Whether the second cannot be more accurate by construction (budgets of one best-iterate run), so
            that any rise is a failure; otherwise a rise must exceed a slack and sampling noise.
        wording: How the moves are told (`BECAME`, `BROKE_ONLY`).
    """

    what: str
    samples: int
    up: int
    down: int
    exact: bool = False
    wording: str = BECAME

    @property
    def noise(self) -> float:
        """Standard error of the paired difference of the two accuracies (McNemar): ``sqrt(up + down - (up -
        down)**2 / n) / n``."""
        n = self.samples
        return math.sqrt(max(self.up + self.down - (self.up - self.down) ** 2 / n, 0.0)) / n if n else 0.0

    def rises(self, thresholds: SanityThresholds) -> bool:
        """Whether accuracy rises from the first stage to the second: at all when `exact`, else beyond the slack
        and beyond sampling noise, so that a flip or two on a small prefix is noise while the same images
        flipping one way in numbers is a finding."""
        if self.exact or not self.samples:
            return self.up > 0
        return (self.up - self.down) / self.samples > max(thresholds.monotonic, thresholds.z * self.noise)

    def describe(self, thresholds: SanityThresholds) -> str:
        """``what: moves; verdict`` (``eps 8/255 -> 16/255: 2 samples became correct, 1 became wrong of 64; within
        noise``)."""
        if self.exact:
            verdict = ('one run (best iterate), where more iterations cannot help: any is a failure' if self.up else
                       'one run (best iterate): checked exactly')
        else:
            verdict = 'beyond noise' if self.rises(thresholds) else 'within noise'
        moved = self.wording.format(up=self.up, down=self.down, n=self.samples,
                                    samples='sample' if self.up == 1 else 'samples')
        return f'{self.what}: {moved}; {verdict}'

    def to_dict(self, thresholds: SanityThresholds) -> Dict[str, Any]:
        """For a check's details."""
        return dict(what=self.what, samples=self.samples, up=self.up, down=self.down, exact=self.exact,
                    rises=self.rises(thresholds))


def _flips(table: ResultTable, variant: str, before: str, after: str, what: str, exact: bool = False,
           wording: str = BECAME) -> Flips:
    """The samples that move between stage `before` and stage `after`, on the samples both scored."""
    first, second = table.get(variant, before), table.get(variant, after)
    _, i, j = np.intersect1d(first['position'], second['position'], assume_unique=True, return_indices=True)
    was, now = first['correct'][i].astype(bool), second['correct'][j].astype(bool)
    return Flips(what, len(i), int(np.sum(now & ~was)), int(np.sum(was & ~now)), exact, wording)


def _verdict(name: str, comparisons: Sequence[Flips], thresholds: SanityThresholds, passed: str, failed: str
             ) -> SanityCheck:
    """A check over paired comparisons: it fails when any rises. Its message tells the failing comparisons, those
    where samples moved up within the tolerance (so that a tolerated move is visible), and the exact ones."""
    rising = [c for c in comparisons if c.rises(thresholds)]
    shown = rising + [c for c in comparisons if (c.up or c.exact) and not c.rises(thresholds)]
    told = '; '.join(c.describe(thresholds) for c in shown)
    message = (failed if rising else passed) + (f' ({told})' if told else '')
    return SanityCheck(name, FAIL if rising else PASS, message,
                       dict(comparisons=[c.to_dict(thresholds) for c in comparisons]),
                       samples=min(c.samples for c in comparisons))


def _not_run(plan: EvalPlan, probe: str) -> str:
    """Why a check whose `probe` (of `plan.SANITY_PROBES`) did not run was skipped."""
    if plan.sanity is None:
        return 'not run: the sanity probes were off'
    if probe in plan.sanity.not_run:
        return (f'not run: its probe does not fit the sanity budget, at most {SANITY_SHARE:.0%} of the requested '
                f'attacks\' cost (--sanity full runs it)')
    return f'not run: no {probe} probe'


def _ran(plan: EvalPlan, probe: str) -> bool:
    return plan.sanity is not None and probe in plan.sanity.probes


def _outputs_not_random(table, variant, num_classes) -> SanityCheck:
    correct = table.column(variant, 'clean', 'correct')
    n = len(correct)
    chance = 1.0 / num_classes
    threshold = chance + 3.0 * math.sqrt(chance * (1.0 - chance) / n)
    accuracy = float(np.mean(correct))
    ok = accuracy > threshold
    return SanityCheck(
        'outputs_not_random', PASS if ok else FAIL,
        f'clean accuracy {accuracy:.3f} {">" if ok else "<="} chance {chance:.3f} + 3 SE ({threshold:.3f})',
        dict(accuracy=accuracy, chance=chance, threshold=threshold, samples=n, num_classes=num_classes), samples=n)


def _deterministic(table, variant, plan, thresholds) -> SanityCheck:
    change = table.column(variant, 'sanity/determinism', 'change')
    if change is None:
        return SanityCheck('outputs_deterministic', SKIP, _not_run(plan, 'determinism'))
    worst = float(np.max(change))
    ok = worst <= thresholds.determinism
    return SanityCheck('outputs_deterministic', PASS if ok else FAIL,
                       f'largest relative logit change between identical forwards {worst:.2e}', dict(max_change=worst),
                       samples=len(change))


def _gradients(table, variant, plan, thresholds) -> SanityCheck:
    columns = table.get(variant, 'sanity/gradient')
    if columns is None:
        return SanityCheck('gradients_not_masked', SKIP, _not_run(plan, 'gradient'))
    norms = columns['grad_norm'].astype(float)
    # a misclassified sample may legitimately sit on a flat region; judge the correctly classified ones
    correct = table.get(variant, 'clean')
    lookup = dict(zip(correct['position'].tolist(), correct['correct'].tolist()))
    keep = np.array([lookup[int(p)] for p in columns['position']], dtype=bool)
    norms = norms[keep] if keep.any() else norms
    masked = ~np.isfinite(norms) | (norms == 0)
    fraction = float(np.mean(masked))
    ok = fraction <= thresholds.masked_fraction
    return SanityCheck(
        'gradients_not_masked', PASS if ok else FAIL,
        f'{fraction:.1%} of samples have a zero or non-finite input gradient',
        dict(masked_fraction=fraction, median_grad_norm=float(np.nanmedian(norms)) if len(norms) else None),
        samples=len(norms))


def _falls_to_zero(table, variant, plan, thresholds) -> SanityCheck:
    if not _ran(plan, 'huge-eps'):
        return SanityCheck('accuracy_falls_to_zero', SKIP, _not_run(plan, 'huge-eps'))
    eps, stage = plan.sanity.sweep[-1]
    correct = table.column(variant, stage, 'correct')
    accuracy = float(np.mean(correct))
    ok = accuracy <= thresholds.zero_accuracy
    return SanityCheck(
        'accuracy_falls_to_zero', PASS if ok else FAIL,
        f'accuracy {accuracy:.3f} ({int(np.sum(correct))} of {len(correct)} samples) under untargeted PGD at '
        f'eps={eps:g}/255', dict(eps=eps, accuracy=accuracy, samples=len(correct)), samples=len(correct))


def _decreases_with_eps(table, variant, plan, thresholds) -> SanityCheck:
    if not _ran(plan, 'eps-sweep'):
        return SanityCheck('accuracy_decreases_with_eps', SKIP, _not_run(plan, 'eps-sweep'))
    sweep = plan.sanity.sweep
    comparisons = [_flips(table, variant, a, b, f'eps {e:g}/255 -> {f:g}/255')
                   for (e, a), (f, b) in zip(sweep, sweep[1:])]
    check = _verdict('accuracy_decreases_with_eps', comparisons, thresholds, 'accuracy does not rise with eps',
                     'accuracy rises with eps')
    check.details['curve'] = [dict(eps=eps, accuracy=_accuracy(table, variant, stage)) for eps, stage in sweep]
    return check


def _step_groups(plan: EvalPlan) -> List[List[AttackSpec]]:
    """The protocol's attacks that differ only in their iteration count, as groups of >= 2 by increasing steps."""
    groups: Dict[str, List[AttackSpec]] = {}
    for spec in plan.protocol.attacks:
        if spec.threat != 'white-box' or 'steps' not in spec.config.stated:
            continue
        rest = {k: v for k, v in spec.config.recorded().items() if k not in ('steps', 'step')}
        key = repr((spec.attack, spec.eps, sorted(rest.items())))
        groups.setdefault(key, []).append(spec)
    return [sorted(g, key=lambda s: s.config.steps) for g in groups.values()
            if len({s.config.steps for s in g}) > 1]


def _run_of(plan: EvalPlan, stage: str) -> str:
    """The attack run whose results `stage` reports: its own, or the longer run a `BudgetStage` reads."""
    found = plan.stage(stage)
    return found.source if isinstance(found, BudgetStage) else found.name


def _one_run(plan: EvalPlan, fewer: str, more: str) -> bool:
    """Whether two budgets were read off one best-iterate run, where accuracy cannot rise by construction."""
    run = _run_of(plan, fewer)
    return run == _run_of(plan, more) and getattr(plan.stage(run).spec.config, 'best_iterate', True)


def _more_iterations(table, variant, plan, thresholds) -> SanityCheck:
    comparisons = []
    if plan.sanity is not None and plan.sanity.more_iterations is not None:
        fewer, more = plan.sanity.more_iterations
        comparisons.append(_flips(table, variant, fewer, more, f'{fewer} -> {more}'))
    if plan.protocol.aggregation == 'independent':
        for group in _step_groups(plan):
            for a, b in zip(group, group[1:]):
                comparisons.append(_flips(table, variant, a.label, b.label, f'{a.run_label} -> {b.run_label}',
                                          exact=_one_run(plan, a.label, b.label)))
    if not comparisons:
        why = _not_run(plan, 'iterations') if plan.sanity is None or 'iterations' in plan.sanity.not_run else \
            'no attacks differing in iterations'
        return SanityCheck('more_iterations_do_not_help', SKIP, why)
    return _verdict('more_iterations_do_not_help', comparisons, thresholds,
                    'accuracy never rises with more iterations', 'accuracy rises with more iterations')


def _against_whitebox(table, variant, blackbox: str, whitebox: Sequence[str], name: Dict[str, str]) -> Flips:
    """The black-box stage against the strongest white-box one: may its accuracy be lower beyond noise?"""
    best = min(whitebox, key=lambda stage: _accuracy(table, variant, stage))
    return _flips(table, variant, blackbox, best, f'{name.get(blackbox, blackbox)} vs {name.get(best, best)}',
                  wording=BROKE_ONLY)


def _blackbox(table, variant, plan, thresholds) -> SanityCheck:
    comparisons = []
    specs = plan.protocol.attacks
    name = {spec.label: spec.run_label for spec in specs}
    if plan.protocol.aggregation == 'cascade':
        # in a cascade a black-box stage only sees survivors of the white-box ones: it should break (almost) none
        for before, spec in zip(specs, specs[1:]):
            if spec.threat == 'black-box':
                comparisons.append(_flips(table, variant, spec.label, before.label,
                                          f'{spec.run_label} after {before.run_label}', wording=BROKE_ONLY))
    else:
        for spec in specs:
            if spec.threat != 'black-box':
                continue
            rivals = [s.label for s in specs if s.threat == 'white-box' and s.eps == spec.eps]
            if rivals:
                comparisons.append(_against_whitebox(table, variant, spec.label, rivals, name))
    if plan.sanity is not None and plan.sanity.blackbox is not None:
        comparisons.append(_against_whitebox(table, variant, plan.sanity.blackbox, plan.sanity.more_iterations, name))
    if not comparisons:
        why = _not_run(plan, 'blackbox') if plan.sanity is None or 'blackbox' in plan.sanity.not_run else \
            'no black-box attack ran'
        return SanityCheck('blackbox_not_stronger', SKIP, why)
    return _verdict('blackbox_not_stronger', comparisons, thresholds, 'black-box attacks do not beat white-box ones',
                    'a black-box attack beats the white-box ones: gradients are likely masked')


def _within_budget(table, variant, plan, input_size, thresholds) -> SanityCheck:
    violations, checked, samples = [], 0, 0
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
        samples = max(samples, len(columns[norm]))
        if size > eps * (1.0 + 1e-4) + thresholds.budget:
            violations.append(dict(stage=stage.name, norm=norm, eps=eps, max_perturbation=size))
    if not checked:
        return SanityCheck('perturbation_within_budget', SKIP, 'no bounded attack ran')
    return SanityCheck('perturbation_within_budget', FAIL if violations else PASS,
                       f'{len(violations)} of {checked} attacks exceed their budget', dict(violations=violations),
                       samples=samples)


def run_sanity_checks(
        table: ResultTable,
        variant: str,
        plan: EvalPlan,
        num_classes: int,
        input_size: Sequence[int],
        thresholds: SanityThresholds = SanityThresholds(),
) -> List[SanityCheck]:
    """Every sanity check for `variant`; checks whose probes did not run are reported as skipped, saying why."""
    return [_outputs_not_random(table, variant, num_classes), _deterministic(table, variant, plan, thresholds),
            _gradients(table, variant, plan, thresholds), _falls_to_zero(table, variant, plan, thresholds),
            _decreases_with_eps(table, variant, plan, thresholds), _more_iterations(table, variant, plan, thresholds),
            _blackbox(table, variant, plan, thresholds), _within_budget(table, variant, plan, input_size, thresholds)]


def summarize_checks(checks: Sequence[SanityCheck], probes_ran: bool = True) -> Dict[str, Any]:
    """The verdict of `checks`: ``status`` (`schema.SANITY_STATUSES`: ``passed`` only when every check ran and
    passed; ``not run`` when the sanity probes did not, `probes_ran`), ``passed`` (True when passed, False when
    failed, None otherwise), the failed check names and ``masked_gradients_suspected``."""
    failed = [c.name for c in checks if c.status == FAIL]
    status = sanity_status([c.status for c in checks], probes_ran)
    return dict(status=status, passed=passed_flag(status), failed=failed,
                masked_gradients_suspected=any(name in MASKING_CHECKS for name in failed))


#: What a failed check means for the numbers reported with it, for `check_warnings`.
CONSEQUENCES = {
    'outputs_deterministic': 'a randomized model needs attacks with EOT, so the robust numbers below overestimate '
                             'its robustness',
    'gradients_not_masked': 'gradients are masked, so the robust numbers below are upper bounds at best',
    'accuracy_falls_to_zero': 'no classifier with honest gradients survives that budget: gradients are likely masked, '
                              'so the robust numbers below are upper bounds at best',
    'accuracy_decreases_with_eps': 'a larger budget helped the model: the attack is unreliable, so the robust '
                                   'numbers below may be too high',
    'more_iterations_do_not_help': 'more iterations helped the model: the attack is unreliable, so the robust '
                                   'numbers below may be too high',
    'blackbox_not_stronger': 'the robust numbers below are upper bounds at best',
    'perturbation_within_budget': 'the robust numbers below are for a larger budget than the one reported',
}


def _chance_warning(variant: str, details: Mapping[str, Any]) -> str:
    """The ``outputs_not_random`` failure as a user reads it: the model is not working at all."""
    return (f"clean accuracy {details['accuracy']:.1%} of variant {variant} is at chance "
            f"({details['num_classes']} classes: {details['chance']:.1%}; above chance needs more than "
            f"{details['threshold']:.1%} on {details['samples']} samples): wrong checkpoint, preprocessing or labels? "
            f"Robust numbers below are meaningless.")


def check_warnings(variant: str, checks: Sequence[SanityCheck]) -> Tuple[List[str], List[str]]:
    """Warning lines for the failed checks of `variant`, phrased for a user (no level prefix: the console's logger
    adds ``WARNING:``).

    Returns:
        ``(chance, others)``: the ``outputs_not_random`` failure (it voids every number, so it is shown before any
        other warning of any variant), and one line per other failed check with what it means for the numbers.
    """
    failed = [check for check in checks if check.status == FAIL]
    chance = [_chance_warning(variant, c.details) for c in failed if c.name == 'outputs_not_random']
    others = [f"variant {variant}: {c.name} failed: {c.message}; {CONSEQUENCES[c.name]}."
              for c in failed if c.name != 'outputs_not_random']
    return chance, others
