"""From per-sample results to the reported numbers: accuracies, success rates, worst case, metrics, AMP check.

Accuracies are percentages (as timm's ``validate.py`` reports ``top1``). For each variant:

* ``clean``: accuracy on the subset;
* per attack: accuracy (correct after the attack; in a cascade, the cumulative robust accuracy), the targeted
  attack-success rate over the samples attacked when the protocol asks for it (Xie & Yuille), and the largest
  perturbation actually used;
* ``worst_case``: per-sample worst case over the suite (a sample counts only if it survives every attack);
* ``robust``: the protocol's headline number (`Protocol.headline`: worst case, PGD-2000, mean corruption accuracy);
* ``corruption_errors``: with all 15 ImageNet-C corruptions at 5 severities, CE per corruption and mCE (percent,
  normalized by AlexNet, `corruption_error`); None otherwise;
* ``metrics``: mean, median and standard deviation of each per-sample robustness metric.
"""
from typing import Any, Dict, List, Optional, Sequence

import numpy as np

from .corruption_error import corruption_errors
from .plan import EvalPlan
from .protocols import Protocol, resolve_eps
from .records import ResultTable
from .stages import AttackStage, attack_norm
from .variants import Variant

__all__ = ['summarize_variant', 'amp_report', 'headline', 'round_percent']

METRIC_COLUMNS = {'margin': ('clean', 'margin'), 'thickness': ('metric/thickness', 'thickness'),
                  'smoothness': ('metric/smoothness', 'kl')}


def round_percent(fraction: Optional[float]) -> Optional[float]:
    """A fraction as a percentage rounded like timm's results (4 decimals)."""
    return None if fraction is None else round(100.0 * float(fraction), 4)


def _distribution(values: np.ndarray) -> Dict[str, float]:
    values = values.astype(float)
    return dict(mean=float(np.mean(values)), median=float(np.median(values)), std=float(np.std(values)),
                samples=int(values.size))


def _attack_summary(table: ResultTable, variant: str, stage: AttackStage, input_size) -> Dict[str, Any]:
    spec = stage.spec
    columns = table.get(variant, stage.name)
    attacked = columns['attacked'].astype(bool)
    entry = dict(label=spec.label, attack=spec.attack, threat=spec.threat, norm=attack_norm(spec),
                 eps=resolve_eps(spec, input_size), steps=spec.steps, targeted=spec.targeted,
                 kwargs=dict(spec.kwargs), samples=int(attacked.size), attacked=int(attacked.sum()),
                 accuracy=round_percent(np.mean(columns['correct'])))
    if spec.success_rate:
        entry['success_rate'] = round_percent(np.mean(columns['success'][attacked])) if attacked.any() else None
    if spec.threat != 'noise':
        entry['max_perturbation'] = float(np.max(columns[entry['norm']], initial=0.0))
    return entry


def headline(protocol: Protocol, attacks: List[Dict[str, Any]], worst_case: Optional[float]) -> Optional[float]:
    """The protocol's single robust number (see `Protocol.headline`), as a percentage."""
    if protocol.headline == 'worst-case':
        return worst_case
    if protocol.headline == 'mean':
        return round(float(np.mean([a['accuracy'] for a in attacks])), 4)
    if protocol.headline == 'last':
        return attacks[-1]['accuracy']
    return next(a['accuracy'] for a in attacks if a['label'] == protocol.headline)


def summarize_variant(table: ResultTable, variant: Variant, plan: EvalPlan, input_size: Sequence[int]
                      ) -> Dict[str, Any]:
    """Reported numbers of one variant (see the module docstring)."""
    name = variant.name
    clean = table.get(name, 'clean')
    attack_stages = [plan.stage(spec.label) for spec in plan.protocol.attacks]
    attacks = [_attack_summary(table, name, stage, input_size) for stage in attack_stages]
    worst_case = None
    if plan.protocol.worst_case:
        survived = clean['correct'].astype(bool)
        for stage in attack_stages:
            survived = survived & table.column(name, stage.name, 'correct').astype(bool)
        worst_case = round_percent(np.mean(survived))
    metrics = {}
    for metric in ('margin',) + tuple(m for m in plan.metrics if m != 'margin'):
        stage, column = METRIC_COLUMNS[metric]
        values = table.column(name, stage, column)
        if values is not None:
            metrics[metric] = _distribution(values)
    sweep = []
    if plan.sanity is not None:
        sweep = [dict(eps=eps, accuracy=round_percent(np.mean(table.column(name, stage, 'correct'))))
                 for eps, stage in plan.sanity.sweep]
    corrupted = {(a['kwargs']['corruption'], a['kwargs']['severity']): a['accuracy']
                 for a in attacks if a['attack'] == 'corruption'}
    return dict(variant.to_dict(), samples=int(clean['correct'].size),
                clean=round_percent(np.mean(clean['correct'])), attacks=attacks, worst_case=worst_case,
                robust=headline(plan.protocol, attacks, worst_case), metrics=metrics, eps_sweep=sweep,
                corruption_errors=corruption_errors(corrupted))


def amp_report(table: ResultTable, variant: str, plan: EvalPlan, tolerance: float) -> Optional[Dict[str, Any]]:
    """bf16 vs fp32 on the verification prefix: prediction agreement and accuracy differences.

    Passes when every accuracy differs by at most `tolerance` (a fraction).
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
        comparisons.append(dict(
            stage=low, accuracy_low=round_percent(np.mean(low_correct)),
            accuracy_fp32=round_percent(np.mean(reference['correct'])),
            prediction_agreement=round_percent(np.mean(low_pred == reference['pred'])),
            ok=abs(delta) <= tolerance))
    return dict(samples=int(min(plan.amp_samples, len(table.get(variant, 'clean')['position']))),
                tolerance=round_percent(tolerance), passed=all(c['ok'] for c in comparisons),
                comparisons=comparisons)
