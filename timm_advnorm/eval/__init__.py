"""Robust evaluation: named protocols, a resumable and shardable evaluator, sanity checks, metrics and plots.

``validate_adv.py`` (`timm_advnorm.commands.validate`) parses its arguments into the typed `options.EvalOptions` the
library reads; `validate` wires these together from them: build (`build`), run (`runner`) and report (`assemble`,
`report`). Each piece is usable on its own:

* `protocols`: the papers' attack suites as data (``xie2020``, ``robustbench``, ``nofrost``, ``galloway``,
  ``galloway-mnist``, ``corruptions``, ``imagenet-r``, ``imagenet-a``, ``imagenet-sketch``, ``nofrost-star``);
* `ood`: the out-of-distribution sets (ImageNet-R, ImageNet-A, ImageNet-Sketch) and the 200-class restriction;
* `subsets`: named evaluation subsets (RobustBench's 5000 ImageNet images);
* `recorded`: the data, preprocessing and branch a training checkpoint records;
* `variants`: what is evaluated (a model, or a mixture-BN branch / interpolation over γ);
* `plan` and `stages`: the work per batch (clean pass, attacks, sanity probes, metrics, AMP reference);
* `cost` and `sanity_budget`: what that work costs in passes of the model (the plan printed before a run, and its
  time projected from the first batch), and the sanity probes sized to a share of the attacks' cost;
* `evaluator`, `records`, `state`, `distributed`, `data`: the loop, its per-sample records, its resumable state
  file, torchrun sharding, the seeded subset;
* `summary`, `sanity`, `metrics`, `bn_stats`, `intervals`, `corruption_error`: the reported numbers, their
  precision and checks, ImageNet-C's mCE;
* `describe`: one line naming an attack as it ran;
* `schema`: the typed results (`EvalResults`), their JSON layout and reader (`read_results`);
* `results`, `plots`: atomic JSON/CSV and PNG output.
"""
from .bn_stats import collect_bn_stats, summarize_bn_stats
from .evaluator import RobustEvaluator
from .metrics import boundary_thickness, decision_margin, smoothness_kl
from .plan import EvalPlan, build_plan
from .protocols import (
    PROTOCOLS, AttackSpec, Protocol, get_protocol, list_protocols, override_protocol, protocol_from_attacks,
    reduce_protocol, register_protocol, resolve_protocol, unregister_protocol)
from .records import ResultTable
from .sanity import SanityThresholds, run_sanity_checks, summarize_checks
from .schema import EvalResults, SanityCheck, read_results
from .stages import EvalContext
from .state import EvalState
from .summary import summarize_variant
from .variants import Variant, model_variants

__all__ = [
    'AttackSpec', 'EvalContext', 'EvalPlan', 'EvalResults', 'EvalState', 'PROTOCOLS', 'Protocol', 'ResultTable',
    'RobustEvaluator', 'SanityCheck', 'SanityThresholds', 'Variant', 'boundary_thickness', 'build_plan',
    'collect_bn_stats', 'decision_margin', 'get_protocol', 'list_protocols', 'model_variants', 'override_protocol',
    'protocol_from_attacks', 'read_results', 'reduce_protocol', 'register_protocol', 'resolve_protocol',
    'run_sanity_checks',
    'smoothness_kl', 'summarize_bn_stats', 'summarize_checks', 'summarize_variant', 'unregister_protocol',
]
