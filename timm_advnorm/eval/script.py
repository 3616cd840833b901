"""The body of ``timm-advnorm-validate`` / ``validate_adv.py``: robust evaluation of timm models in the style of
timm's ``validate.py``.

Evaluates a model (a timm name, ``hf-hub:``/``local-dir:`` name, or a `train_adv.py` checkpoint) against a named
protocol (``xie2020``, ``robustbench``, ``nofrost``, ``galloway``, ``corruptions``, ``imagenet-r``, ``imagenet-a``,
``imagenet-sketch``, ``nofrost-star``; see `timm_advnorm.eval.protocols`) or an explicit attack list, on a fixed
seeded subset of a dataset, in eval mode with the model's own preprocessing. Out-of-distribution sets are read from
folders of their own (``--imagenet-r-dir``, ``--imagenet-a-dir``, ``--imagenet-sketch-dir``; `timm_advnorm.eval.ood`),
each a run of its own, all reported in one results file. Mixture-BN models are evaluated per branch and over a γ
sweep of feature and logit interpolation. Sanity checks run with every evaluation, their probes by default within a
quarter of the attacks' cost (``--sanity``). Before it runs, the evaluation prints its plan (passes and share of each
stage, time projected from the first batch); ``--plan`` prints it and stops. Results go to JSON + CSV, plots to PNG;
a state file makes a long evaluation resumable; ``torchrun`` shards it across processes.

The run reads as four steps over modules of their own: parse (`args`), build (`build`: model, protocol and plan, data
runs, state file), run (`runner`, then the records of every rank gathered) and report (`assemble` builds the typed
`schema.EvalResults`; `report` writes and logs it).

SIGINT and SIGTERM stop it with one line that says what the ``--resume-state`` file keeps and how to resume.

Bad input (arguments, model, protocol, variants, data, outputs) is found before anything is written: the output
folders are only created when the results are. Results never replace existing files without ``--overwrite``, not even
those of a run that finished meanwhile: its files are then kept under other names, and the run says where and exits
with status 2.

Examples:
    timm-advnorm-validate --checkpoint model_best.pth.tar --data-dir /imagenet --protocol xie2020 \\
        --gammas 0 0.5 1 --results-file results/xie2020.json --plot-dir results/plots
    torchrun --nproc_per_node 8 -m timm_advnorm.eval -c eval.yaml --resume-state results/state.jsonl --amp
"""
import argparse
import logging
import sys
import time
from typing import Optional, Sequence

from timm.utils import setup_default_logging

from ..cli import run_cli
from ..signals import Interrupted
from .args import PROG, eval_options, get_args_parser, parse_args
from .assemble import assemble_results
from .build import build_evaluation
from .distributed import cleanup_distributed, gather_records, init_distributed
from .records import ResultTable
from .report import check_outputs, log_results, write_outputs
from .runner import evaluate_runs, plan_title
from .schema import EvalResults
from .state import EvalState

__all__ = ['get_args_parser', 'parse_args', 'validate', 'main', 'run', 'console_main']


def _resume_hint(state: Optional[EvalState]) -> str:
    """How an interrupted evaluation goes on, for its one line."""
    if state is None:
        return ('while evaluating: nothing is kept without --resume-state FILE, which lets a long evaluation resume '
                'where it stopped')
    return (f'while evaluating: {len(state)} finished record(s) are kept in {state.path}; run the same command again '
            f'to resume')


def validate(args: argparse.Namespace) -> Optional[EvalResults]:
    """Run the evaluation `args` describe; returns its results on rank 0 (None on other ranks, and under ``--plan``,
    which prints the plan with the time its first batch projects and evaluates nothing else)."""
    started = time.perf_counter()
    options = eval_options(args)
    dist_info = init_distributed(options.runtime.device)
    check_outputs(options, dist_info)
    setup = build_evaluation(options, dist_info)

    try:
        outcome = evaluate_runs(options, setup, dist_info, first_batch_only=options.plan_only)
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


def main(argv: Optional[Sequence[str]] = None, prog: str = PROG) -> int:
    """Evaluate as `argv` says; returns the exit status (1: a sanity check failed under ``--strict-sanity``; a check
    that did not run is no failure).

    Bad input raises (see `run`).
    """
    args = parse_args(argv, prog=prog)
    if not logging.root.handlers:  # a host application (or pytest) may have configured logging already
        setup_default_logging()
    results = validate(args)
    if results is not None and args.strict_sanity and results.sanity_status == 'failed':
        return 1
    return 0


def run(prog: str = PROG, argv: Optional[Sequence[str]] = None) -> int:
    """Command-line entry: `main`, with bad input reported as one line and exit status 2."""
    return run_cli(lambda a: main(a, prog=prog), prog, argv)


def console_main() -> None:
    """The ``timm-advnorm-validate`` console command."""
    sys.exit(run('timm-advnorm-validate'))
