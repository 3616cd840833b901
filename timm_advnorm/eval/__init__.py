"""Robust evaluation: named protocols, a resumable and shardable evaluator, sanity checks, metrics and plots.

``validate_adv.py`` (`timm_advnorm.commands.validate`) parses its arguments into the typed `options.EvalOptions` the
library reads; `validate` runs one evaluation from them. The subpackages are floors, each importing only those below:

* `protocols`: what runs, as data: the papers' attack suites (``xie2020``, ``robustbench``, ``nofrost``,
  ``galloway``, ``galloway-mnist``, ``corruptions``, ``imagenet-r``, ``imagenet-a``, ``imagenet-sketch``,
  ``nofrost-star``), the out-of-distribution sets (`protocols.ood`) and one line naming an attack as it ran
  (`protocols.describe`);
* `schema` (a module): the typed results (`EvalResults`), their JSON layout and reader (`read_results`);
* `plan`: the functions evaluated (`plan.variants`: a model, or a mixture-BN branch / interpolation over γ), the
  work per batch (`plan.stages`, `plan.metrics`; their order in `plan.stage_plan`), what it costs in passes of the
  model (`plan.cost`) and the sanity probes sized to a share of it (`plan.sanity_budget`);
* `run`: building an evaluation (`run.build`), the seeded and named subsets (`run.data`, `run.subsets`), the
  resumable loop (`run.evaluator`, `run.records`, `run.state`), torchrun sharding (`run.distributed`,
  `run.runner`) and mixture-BN statistics (`run.bn_stats`);
* `results`: the reported numbers (`results.summary`, `results.intervals`, `results.corruption_error`), the sanity
  checks (`results.sanity`), the assembled results (`results.assemble`) and what is written: atomic JSON/CSV
  (`results.files`), the console summary (`results.report`) and PNG plots (`results.plots`).

Beside them, `recorded` (the data, preprocessing and branch a training checkpoint records) sits at the bottom,
`options` (the typed options, whose fields declare the command's options: their help names the protocols, subsets,
probes and variants below) above `protocols`, `plan` and `run.subsets`, and `validate` on top.
"""
from .plan.metrics import boundary_thickness, decision_margin, smoothness_kl
from .plan.stage_plan import EvalPlan, build_plan
from .plan.stages import EvalContext
from .plan.variants import Variant, model_variants
from .protocols.protocol import (
    PROTOCOLS, AttackSpec, Protocol, get_protocol, list_protocols, override_protocol, protocol_from_attacks,
    reduce_protocol, register_protocol, resolve_protocol, unregister_protocol)
from .results.sanity import SanityThresholds, run_sanity_checks, summarize_checks
from .results.summary import summarize_variant
from .run.bn_stats import collect_bn_stats, summarize_bn_stats
from .run.evaluator import RobustEvaluator
from .run.records import ResultTable
from .run.state import EvalState
from .schema import EvalResults, SanityCheck, read_results

__all__ = [
    'AttackSpec', 'EvalContext', 'EvalPlan', 'EvalResults', 'EvalState', 'PROTOCOLS', 'Protocol', 'ResultTable',
    'RobustEvaluator', 'SanityCheck', 'SanityThresholds', 'Variant', 'boundary_thickness', 'build_plan',
    'collect_bn_stats', 'decision_margin', 'get_protocol', 'list_protocols', 'model_variants', 'override_protocol',
    'protocol_from_attacks', 'read_results', 'reduce_protocol', 'register_protocol', 'resolve_protocol',
    'run_sanity_checks',
    'smoothness_kl', 'summarize_bn_stats', 'summarize_checks', 'summarize_variant', 'unregister_protocol',
]
