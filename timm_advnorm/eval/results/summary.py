"""From per-sample results to the reported numbers: accuracies, success rates, worst case, metrics, AMP check.

Accuracies are percentages (as timm's ``validate.py`` reports ``top1``). Every number says what ran: an attack is
named by the budget it ran (``label``: ``pgd-t-13`` for a reduced PGD-2000, whose ``protocol_label`` stays
``pgd-t-2000``), ε carries its scale and rule, noise its model and σ instead of a norm and ε. For each variant:

* ``clean``: accuracy on the subset;
* per attack: accuracy (correct after the attack; in a cascade, the cumulative robust accuracy), the targeted
  attack-success rate over the samples attacked when the protocol asks for it (Xie & Yuille), and the largest
  perturbation actually used;
* ``worst_case``: per-sample worst case over the suite (a sample counts only if it survives every attack);
* ``robust``: the protocol's headline number (`Protocol.headline`: worst case, PGD-2000, mean corruption accuracy),
  and ``robust_label``, what it is as it ran (``worst-case``, ``mean``, or the attack's ``label``: ``pgd-t-13``);
* last iterate (protocols whose PGD scores it, `AttackSpec.last_iterate`): per such attack the accuracy (and success
  rate) on the last iterate of the same run, and ``robust_last_iterate``, the headline with those in place of the
  best iterates: the papers' convention, at or above the best-iterate numbers;
* ``corruption_errors``: with all 15 ImageNet-C corruptions at 5 severities, CE per corruption and mCE (percent,
  normalized by AlexNet, `corruption_error`); None otherwise;
* ``ood``: clean accuracy and sample count on each further out-of-distribution set of the protocol (`Protocol.ood`);
* ``scores``: the protocol's accuracies side by side, as the papers' tables give them (`scores`);
* ``metrics``: mean, median and standard deviation of each per-sample robustness metric;
* ``eps_sweep`` and ``sanity_probe``: the sanity PGD's accuracy over ε, from ε = 0 (the clean accuracy of the same
  samples), and what that probe ran (`SanityPlan.probe`).

Each variant's numbers are a `schema.VariantResult` (its sanity checks added by `assemble`). `results_warnings` turns
failed checks that void the numbers into lines a user reads before them.
"""
from dataclasses import replace
from typing import Any, Dict, List, Mapping, Optional, Sequence

import numpy as np

from ..plan.stage_plan import EvalPlan, SanityPlan, ood_stage
from ..plan.stages import AttackStage, attack_norm
from ..plan.variants import Variant
from ..protocols.protocol import AttackSpec, Protocol, resolve_eps, stepping
from ..run.records import ResultTable
from ..schema import AmpCheck, AmpComparison, AttackResult, EpsPoint, OODAccuracy, VariantResult
from .corruption_error import corruption_errors
from .sanity import check_warnings

__all__ = ['summarize_variant', 'amp_report', 'attack_title', 'headline', 'headline_label', 'round_percent',
           'results_warnings', 'scores', 'EPS_SCALE']

#: The scale of every ε in results: a norm of the perturbation in 0-255 pixel units (k means k/255 on [0, 1]).
EPS_SCALE = '0-255'

METRIC_COLUMNS = {'margin': ('clean', 'margin'), 'thickness': ('metric/thickness', 'thickness'),
                  'smoothness': ('metric/smoothness', 'kl')}


def round_percent(fraction: Optional[float]) -> Optional[float]:
    """A fraction as a percentage rounded like timm's results (4 decimals)."""
    return None if fraction is None else round(100.0 * float(fraction), 4)


def _distribution(values: np.ndarray) -> Dict[str, float]:
    values = values.astype(float)
    return dict(mean=float(np.mean(values)), median=float(np.median(values)), std=float(np.std(values)),
                samples=int(values.size))


def _size_fields(spec: AttackSpec, input_size: Sequence[int]) -> Dict[str, Any]:
    """How large a perturbation the attack was allowed: its norm, ε and step (`stepping`), or for noise what the
    noise is.

    ε is the budget the attack was built with (`resolve_eps`, on the `EPS_SCALE`; ``eps_rule`` ``sqrt_dim``:
    Galloway's ε∞·√d, the spec's ε being ε∞; ``std``: ε declared in units of the standardized input, with that
    declared ε, ``eps_standardized``, and the model's std it was resolved with, ``input_std``). Noise has no norm nor
    ε: it states what its attack class says of it (`Attack.noise_fields`): Gaussian noise its σ and the scale σ is on
    (`noise_settings`), a corruption its name and severity.
    """
    if spec.threat != 'noise':
        step, rule, iterate = stepping(spec, input_size)
        return dict(norm=attack_norm(spec), eps=resolve_eps(spec, input_size), eps_scale=EPS_SCALE,
                    eps_rule=spec.eps_rule, eps_standardized=spec.eps_standardized, input_std=spec.input_std,
                    step=step, step_rule=rule, iterate=iterate)
    return spec.config.attack_class.noise_fields(spec.config.options())


def _attack_summary(table: ResultTable, variant: str, stage: AttackStage, input_size) -> AttackResult:
    """One attack's entry: named by what ran (``label``) and by the protocol (``protocol_label``), its budget
    (iterations or queries, ε or noise) and numbers."""
    spec = stage.spec
    columns = table.get(variant, stage.name)
    attacked = columns['attacked'].astype(bool)
    size = _size_fields(spec, input_size)
    reports_success = spec.success_rate and attacked.any()
    success = round_percent(np.mean(columns['success'][attacked])) if reports_success else None
    accuracy_last = success_last = None
    if _scores_last_iterate(spec, columns):
        accuracy_last = round_percent(np.mean(columns['correct_last']))
        success_last = round_percent(np.mean(columns['success_last'][attacked])) if reports_success else None
    largest = None if spec.threat == 'noise' else float(np.max(columns[size['norm']], initial=0.0))
    return AttackResult(label=spec.run_label, protocol_label=spec.label, attack=spec.attack, threat=spec.threat,
                        **size, steps=spec.iterations, queries=spec.queries, targeted=spec.targeted,
                        kwargs=spec.config.recorded(), samples=int(attacked.size), attacked=int(attacked.sum()),
                        accuracy=round_percent(np.mean(columns['correct'])), success_rate=success,
                        accuracy_last_iterate=accuracy_last, success_rate_last_iterate=success_last,
                        max_perturbation=largest, loss=_mean_loss(columns), reports_success_rate=spec.success_rate)


def _mean_loss(columns: Mapping[str, np.ndarray]) -> Optional[float]:
    """Mean of the ``loss`` column (`Protocol.loss`), None when it was not recorded."""
    return round(float(np.mean(columns['loss'])), 6) if 'loss' in columns else None


def _scores_last_iterate(spec: AttackSpec, columns: Mapping[str, np.ndarray]) -> bool:
    """Whether an attack's results hold its last iterate's (`AttackSpec.last_iterate`)."""
    return spec.last_iterate and 'correct_last' in columns


def _worst_case(table: ResultTable, variant: str, stages: Sequence[AttackStage], clean: np.ndarray,
                last_iterate: bool = False) -> Optional[float]:
    """Per-sample worst case over `stages`: a sample counts only if it is correct clean and after every attack (on
    the last iterate where one was scored, with `last_iterate`)."""
    survived = clean.astype(bool)
    for stage in stages:
        columns = table.get(variant, stage.name)
        name = 'correct_last' if last_iterate and _scores_last_iterate(stage.spec, columns) else 'correct'
        survived = survived & columns[name].astype(bool)
    return round_percent(np.mean(survived))


def _last_iterate_headline(protocol: Protocol, attacks: Sequence[AttackResult], worst_case: Optional[float],
                           clean: Optional[float]) -> Optional[float]:
    """The headline with the last iterate in place of the best wherever it was scored (the papers' convention);
    None when no attack scored it. `worst_case` is the last-iterate worst case."""
    if all(a.accuracy_last_iterate is None for a in attacks):
        return None
    last = [a if a.accuracy_last_iterate is None else replace(a, accuracy=a.accuracy_last_iterate) for a in attacks]
    return headline(protocol, last, worst_case, clean)


def headline(protocol: Protocol, attacks: Sequence[AttackResult], worst_case: Optional[float],
             clean: Optional[float]) -> Optional[float]:
    """The protocol's single robust number (see `Protocol.headline`, an attack's protocol label), as a percentage."""
    if protocol.headline == 'worst-case':
        return worst_case
    if protocol.headline == 'clean':
        return clean
    if protocol.headline == 'mean':
        return round(float(np.mean([a.accuracy for a in attacks])), 4)
    if protocol.headline == 'last':
        return attacks[-1].accuracy
    return next(a.accuracy for a in attacks if a.protocol_label == protocol.headline)


def headline_label(protocol: Protocol, attacks: Sequence[AttackResult]) -> str:
    """What `headline` reports, named as it ran: ``worst-case``, ``mean``, ``clean``, or the attack's ``label``."""
    if protocol.headline in ('worst-case', 'mean', 'clean'):
        return protocol.headline
    if protocol.headline == 'last':
        return attacks[-1].label
    return next(a.label for a in attacks if a.protocol_label == protocol.headline)


def _eps_sweep(table: ResultTable, variant: str, sanity: SanityPlan) -> List[EpsPoint]:
    """Accuracy of the sanity PGD at each ε of its sweep, from ε = 0: the clean accuracy of the same samples."""
    clean = table.get(variant, 'clean')
    points = [EpsPoint(eps=0.0, accuracy=round_percent(np.mean(clean['correct'][clean['position'] < sanity.samples])))]
    return points + [EpsPoint(eps=eps, accuracy=round_percent(np.mean(table.column(variant, stage, 'correct'))))
                     for eps, stage in sanity.sweep]


def _ood_summary(table: ResultTable, variant: str, protocol: Protocol) -> Dict[str, OODAccuracy]:
    """Clean accuracy and sample count on each out-of-distribution set of `protocol.ood` (`ood_stage`)."""
    entries = {}
    for name in protocol.ood:
        correct = table.column(variant, ood_stage(name).name, 'correct')
        entries[name] = OODAccuracy(accuracy=round_percent(np.mean(correct)), samples=int(correct.size))
    return entries


def scores(protocol: Protocol, clean: Optional[float], attacks: Sequence[AttackResult],
           ood: Mapping[str, OODAccuracy]) -> Dict[str, Optional[float]]:
    """The protocol's accuracies side by side, as the papers' tables give them (NoFrost* Figures 3 and 4: clean,
    ImageNet-C, ImageNet-R, ImageNet-Sketch, PGD, Square): clean, named by the out-of-distribution set the protocol
    runs on if it does (``imagenet-r``); ``imagenet-c``, the mean accuracy over the ImageNet-C corruptions, if it has
    any; each further out-of-distribution set; and each other attack, by the label that ran."""
    row = {protocol.dataset or 'clean': clean}
    corrupted = [a.accuracy for a in attacks if a.attack == 'corruption']
    if corrupted:
        row['imagenet-c'] = round(float(np.mean(corrupted)), 4)
    row.update((name, entry.accuracy) for name, entry in ood.items())
    row.update((a.label, a.accuracy) for a in attacks if a.attack != 'corruption')
    return row


def summarize_variant(table: ResultTable, variant: Variant, plan: EvalPlan, input_size: Sequence[int]
                      ) -> VariantResult:
    """Reported numbers of one variant (see the module docstring), without its sanity checks."""
    name = variant.name
    clean = table.get(name, 'clean')
    attack_stages = [plan.stage(spec.label) for spec in plan.protocol.attacks]
    attacks = [_attack_summary(table, name, stage, input_size) for stage in attack_stages]
    worst_case = worst_case_last = None
    if plan.protocol.worst_case:
        worst_case = _worst_case(table, name, attack_stages, clean['correct'])
        worst_case_last = _worst_case(table, name, attack_stages, clean['correct'], last_iterate=True)
    metrics = {}
    for metric in ('margin',) + tuple(m for m in plan.metrics if m != 'margin'):
        stage, column = METRIC_COLUMNS[metric]
        values = table.column(name, stage, column)
        if values is not None:
            metrics[metric] = _distribution(values)
    sweep, probe = [], None
    if plan.sanity is not None and plan.sanity.probes:
        sweep = _eps_sweep(table, name, plan.sanity)
        probe = plan.sanity.probe(int(np.sum(clean['position'] < plan.sanity.samples)))
    corrupted = {(a.kwargs['corruption'], a.kwargs['severity']): a.accuracy
                 for a in attacks if a.attack == 'corruption'}
    accuracy = round_percent(np.mean(clean['correct']))
    ood = _ood_summary(table, name, plan.protocol)
    return VariantResult(**variant.to_dict(), samples=int(clean['correct'].size), clean=accuracy,
                         clean_loss=_mean_loss(clean), attacks=attacks,
                         worst_case=worst_case, robust=headline(plan.protocol, attacks, worst_case, accuracy),
                         robust_label=headline_label(plan.protocol, attacks),
                         robust_last_iterate=_last_iterate_headline(plan.protocol, attacks, worst_case_last, accuracy),
                         ood=ood,
                         scores=scores(plan.protocol, accuracy, attacks, ood), metrics=metrics, eps_sweep=sweep,
                         sanity_probe=probe, corruption_errors=corruption_errors(corrupted))


def amp_report(table: ResultTable, variant: str, plan: EvalPlan, tolerance: float) -> Optional[AmpCheck]:
    """bf16 vs fp32 on the verification prefix: prediction agreement and accuracy differences.

    Passes when every accuracy differs by at most `tolerance` (a fraction). Each comparison names its ``stage`` and,
    as `summarize_variant` does, the ``label`` of what ran.
    """
    if not plan.amp_pairs:
        return None
    comparisons = []
    for low, full in plan.amp_pairs:
        reference = table.get(variant, full)
        columns = table.get(variant, low)
        keep = columns['position'] < plan.amp_samples
        low_correct, low_pred = columns['correct'][keep], columns['pred'][keep]
        delta = float(np.mean(low_correct)) - float(np.mean(reference['correct']))
        spec = getattr(plan.stage(low), 'spec', None)
        comparisons.append(AmpComparison(
            stage=low, label=low if spec is None else spec.run_label, accuracy_low=round_percent(np.mean(low_correct)),
            accuracy_fp32=round_percent(np.mean(reference['correct'])),
            prediction_agreement=round_percent(np.mean(low_pred == reference['pred'])),
            ok=abs(delta) <= tolerance))
    return AmpCheck(samples=int(min(plan.amp_samples, len(table.get(variant, 'clean')['position']))),
                    tolerance=round_percent(tolerance), passed=all(c.ok for c in comparisons), comparisons=comparisons)


def attack_title(label: str, steps: Optional[int] = None, queries: Optional[int] = None) -> str:
    """An attack as a reader should see it: its `label`, with the budget that ran added where the label does not
    carry it (``pgd (20 iterations)``, ``square (400 queries)``; ``pgd-t-13`` as it is)."""
    for budget, unit in ((steps, 'iterations'), (queries, 'queries')):
        if budget and not label.endswith(f'-{budget}'):
            return f'{label} ({budget} {unit})'
    return label


def results_warnings(variants: Sequence[VariantResult], amp: Optional[str] = None,
                     amp_check: Optional[AmpCheck] = None) -> List[str]:
    """The lines a user must read before the numbers of `variants`: each failed check that voids them, worst first.

    Chance-level outputs (``outputs_not_random``: a wrong checkpoint, preprocessing or labels) of every variant come
    first, then each variant's other failed sanity checks (`sanity.check_warnings`), then a low-precision (`amp`)
    evaluation that disagrees with fp32 (`amp_check`). Empty when every check passed. Log them at WARNING before the
    per-variant numbers and store them first in the results.
    """
    per_variant = [check_warnings(variant.name, variant.sanity.checks) for variant in variants]
    lines = [line for chance, _ in per_variant for line in chance] + [line for _, rest in per_variant for line in rest]
    if amp_check and not amp_check.passed:
        lines.append(f"the {amp or 'low-precision'} evaluation differs from fp32 by more than "
                     f"{amp_check.tolerance:g} points on {amp_check.samples} samples: numbers below may be off by as "
                     f"much.")
    return lines
