"""One robust evaluation from its typed options, as ``timm-advnorm-validate`` runs it
(`timm_advnorm.commands.validate` parses its arguments into them): build, run, gather the records of every rank,
assemble and report.

SIGINT and SIGTERM stop it with one line that says what the ``--resume-state`` file keeps and how to resume.
"""
import time
from typing import Optional

from ..data import rendered_kept_on_success
from ..signals import Interrupted
from .options import EvalOptions
from .results.assemble import assemble_results
from .results.report import check_outputs, log_results, write_outputs
from .run.build import build_evaluation
from .run.distributed import cleanup_distributed, gather_records, init_distributed
from .run.records import ResultTable
from .run.runner import evaluate_runs, plan_title
from .run.state import EvalState
from .schema import EvalResults

__all__ = ['validate']


def _resume_hint(state: Optional[EvalState]) -> str:
    """How an interrupted evaluation goes on, for its one line."""
    if state is None:
        return ('while evaluating: nothing is kept without --resume-state FILE, which lets a long evaluation resume '
                'where it stopped')
    return (f'while evaluating: {len(state)} finished record(s) are kept in {state.path}; run the same command again '
            f'to resume')


def validate(options: EvalOptions) -> Optional[EvalResults]:
    """Run the evaluation `options` describe; returns its results on rank 0 (None on other ranks, and under
    ``--plan``, which prints the plan with the time projected from the model's timed passes and evaluates nothing)."""
    started = time.perf_counter()
    dist_info = init_distributed(options.runtime.device)
    check_outputs(options, dist_info)
    with rendered_kept_on_success(options.data.data_dir):  # a refusal after the rendering leaves no copy behind
        setup = build_evaluation(options, dist_info)

    try:
        outcome = evaluate_runs(options, setup, dist_info, plan_only=options.plan_only)
    except Interrupted as e:
        raise e.with_detail(_resume_hint(setup.state)) from e
    if options.plan_only:
        cleanup_distributed(dist_info)
        if dist_info.is_primary:
            print(outcome.cost.format(plan_title(options, setup, dist_info)))
        return None
    records = gather_records(outcome.records, dist_info)
    cleanup_distributed(dist_info)
    if not dist_info.is_primary:
        return None

    results = assemble_results(options, setup, ResultTable(records), outcome, dist_info.world_size, started)
    outputs = write_outputs(options.outputs, results, setup.bn_stats)
    log_results(results)
    outputs.check_nothing_kept()
    return results
