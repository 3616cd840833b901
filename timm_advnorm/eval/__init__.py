"""Robust evaluation: named protocols, a resumable and shardable evaluator, sanity checks, metrics and plots.

``validate_adv.py`` wires these together; each piece is usable on its own:

* `protocols`: the papers' attack suites as data (``xie2020``, ``robustbench``, ``nofrost``, ``galloway``,
  ``corruptions``, ``imagenet-r``, ``imagenet-a``, ``imagenet-sketch``, ``nofrost-star``);
* `ood`: the out-of-distribution sets (ImageNet-R, ImageNet-A, ImageNet-Sketch) and the 200-class restriction;
* `variants`: what is evaluated (a model, or a mixture-BN branch / interpolation over γ);
* `plan` and `stages`: the work per batch (clean pass, attacks, sanity probes, metrics, AMP reference);
* `evaluator`, `state`, `distributed`, `data`: the loop, its resumable state file, torchrun sharding, the seeded
  subset;
* `summary`, `sanity`, `metrics`, `bn_stats`: the reported numbers and checks;
* `results`, `plots`: atomic JSON/CSV and PNG output.
"""
from .bn_stats import collect_bn_stats, summarize_bn_stats
from .evaluator import RobustEvaluator
from .metrics import boundary_thickness, decision_margin, smoothness_kl
from .plan import EvalPlan, build_plan
from .protocols import (
    PROTOCOLS, AttackSpec, Protocol, get_protocol, list_protocols, override_protocol, protocol_from_attacks,
    reduce_protocol)
from .records import ResultTable
from .sanity import Check, SanityThresholds, run_sanity_checks, summarize_checks
from .stages import EvalContext
from .state import EvalState
from .summary import summarize_variant
from .variants import Variant, model_variants

__all__ = [
    'AttackSpec', 'Check', 'EvalContext', 'EvalPlan', 'EvalState', 'PROTOCOLS', 'Protocol', 'ResultTable',
    'RobustEvaluator', 'SanityThresholds', 'Variant', 'boundary_thickness', 'build_plan', 'collect_bn_stats',
    'decision_margin', 'get_protocol', 'list_protocols', 'model_variants', 'override_protocol', 'protocol_from_attacks',
    'reduce_protocol', 'run_sanity_checks', 'smoothness_kl', 'summarize_bn_stats', 'summarize_checks',
    'summarize_variant',
]
