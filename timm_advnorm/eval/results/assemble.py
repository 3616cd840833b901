"""Results assembly: the one place an evaluation's `EvalResults` is built, from its setup and gathered records.

Each variant gets its reported numbers (`summary.summarize_variant`) and its sanity checks (`sanity`); the headline
numbers are those of the model as loaded (a mixture-BN model on the branch its checkpoint records, `primary_variant`),
on best iterates and, where the protocol scores it, on the last PGD iterate (the papers' convention);
the warnings that void numbers come first, and what ran (data, subset, preprocessing, protocol, precision, ranks,
the plan and timings) is recorded with them, with one verdict of the sanity checks over every variant.
"""
import time
from dataclasses import replace
from typing import Sequence

from ...layers import get_inference_branch
from ..options import EvalOptions
from ..plan.stage_plan import EvalPlan
from ..plan.variants import Variant
from ..protocols.ood import get_ood_dataset
from ..run.bn_stats import summarize_bn_stats
from ..run.build import EvalSetup
from ..run.records import ResultTable
from ..run.runner import RunOutcome
from ..run.subsets import robustbench_model_info
from ..schema import (
    ITERATE_CONVENTIONS, BNStats, EvalResults, ProtocolInfo, SanityResult, VariantResult, combined_sanity_status,
    passed_flag)
from .sanity import run_sanity_checks, summarize_checks
from .summary import amp_report, results_warnings, summarize_variant

__all__ = ['assemble_results']


def _variant_result(table: ResultTable, variant: Variant, plan: EvalPlan, num_classes: int,
                    input_size: Sequence[int]) -> VariantResult:
    """A variant's reported numbers with its sanity checks."""
    summary = summarize_variant(table, variant, plan, input_size)
    checks = run_sanity_checks(table, variant.name, plan, num_classes, input_size)
    probes_ran = plan.sanity is not None and bool(plan.sanity.probes)
    return replace(summary, sanity=SanityResult(**summarize_checks(checks, probes_ran), checks=checks))


def assemble_results(options: EvalOptions, setup: EvalSetup, table: ResultTable, outcome: RunOutcome,
                     world_size: int, started: float) -> EvalResults:
    """The results of the evaluation `options` describe and `setup` ran.

    Args:
        options: The evaluation's options.
        setup: The evaluation as built.
        table: The per-sample results of every process.
        outcome: What this process evaluated (for the work computed and the time taken).
        world_size: Processes the evaluation was sharded over.
        started: `time.perf_counter` when the run started (for ``total_seconds``).
    """
    model, protocol, runs = setup.model, setup.protocol, setup.runs
    main = runs[0]
    num_classes = main.num_classes or model.num_classes
    variants = [_variant_result(table, variant, setup.plan, num_classes, setup.ctx.input_size)
                for variant in setup.variants]
    # the headline is the model as loaded: a mixture-BN model on the branch it runs on (recorded by its checkpoint)
    inference_branch = get_inference_branch(model)
    primary = next((v for v in variants if v.kind in (inference_branch, 'model')), variants[0])
    amp, checks, data = options.runtime.autocast, options.checks, options.data
    amp_check = amp_report(table, primary.name, setup.plan, checks.amp_tolerance) if checks.amp_samples else None
    data_config = setup.data_config
    sanity = combined_sanity_status([v.sanity.status for v in variants])
    results = EvalResults(
        warnings=results_warnings(variants, amp, amp_check), model=setup.model_name,
        checkpoint=options.model.checkpoint,
        weights_digest=setup.weights_digest, branch_weights_digests=setup.branch_weights_digests or None,
        dataset=protocol.dataset or data.dataset or 'folder', split=None if protocol.dataset else data.split,
        num_samples=len(main.indices), subset=data.subset, skipped_images=main.skipped, seed=options.runtime.seed,
        ood_data={run.name: dict(get_ood_dataset(run.name).to_dict(), num_samples=len(run.indices),
                                 skipped_images=run.skipped) for run in runs if run.name},
        img_size=data_config['input_size'][-1],
        data_config={k: list(v) if isinstance(v, tuple) else v for k, v in data_config.items()},
        preprocessing=setup.preprocessing, protocol=ProtocolInfo.from_dict(protocol.to_dict()), amp=amp,
        world_size=world_size, inference_branch=inference_branch, primary_variant=primary.name, top1=primary.clean,
        robust_top1=primary.robust, robust_top1_last_iterate=primary.robust_last_iterate,
        conventions=None if primary.robust_last_iterate is None else dict(ITERATE_CONVENTIONS),
        sanity_passed=passed_flag(sanity), sanity_status=sanity,
        masked_gradients_suspected=any(v.sanity.masked_gradients_suspected for v in variants), amp_check=amp_check,
        variants=variants, bn_stats=BNStats(layers=summarize_bn_stats(setup.bn_stats)) if setup.bn_stats else None,
        plan=outcome.cost.to_dict(),
        eval_seconds=round(outcome.seconds, 3), units_computed=outcome.units_computed,
        images_per_second=round(sum(len(run.indices) for run in runs) * len(variants) / max(outcome.seconds, 1e-9), 3),
        total_seconds=round(time.perf_counter() - started, 3), robustbench_model_info=None)
    results.robustbench_model_info = robustbench_model_info(results, model.pretrained_cfg or {})
    return results
