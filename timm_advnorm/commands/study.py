"""``timm-advnorm-study`` / ``python -m timm_advnorm.study``: a seed paper's comparison grid as one
resumable command.

    timm-advnorm-study xie2020 --scale digits                  # every cell on the built-in digits, on this CPU
    timm-advnorm-study nofrost --scale digits --dry-run        # the cells, their commands and planned budgets
    timm-advnorm-study galloway-mnist --scale mnist            # Galloway et al.'s MNIST tables, on this CPU
    timm-advnorm-study nofrost --scale mnist                   # the tiny models on real MNIST digits at 28 px
    timm-advnorm-study galloway-mnist --scale paper --jobs 2   # full MNIST, two cells at once (one per core)
    timm-advnorm-study xie2020 --scale imagenet --data-dir /imagenet \\
        --launcher subprocess --launch-prefix "torchrun --nproc_per_node 8"
    timm-advnorm-study galloway --scale imagenet --data-dir /imagenet --launcher submitit \\
        --submitit-params slurm_partition=gpu timeout_min=4320 gpus_per_node=8

The study folder (``--output``/``<study>-<scale>``) holds each cell's run folder under ``cells/``, the results table
(``results.md``, ``results.csv``, ``findings.csv``; ``ratios.csv`` for a study with ratio tables) and the paper-style
plot (``study.png``). A rerun skips the evaluated cells and resumes an interrupted one from its checkpoint
(`timm_advnorm.study.runner`). This module parses and checks the arguments, each option declared once on the field of
the typed options it fills (`study.options.StudyOptions`, `study.options.DocsUpdateOptions`), the parser generated
from these declarations, and converts them into `StudyOptions` (`study_options`); `timm_advnorm.study.launch` runs
the study they describe, its cells as the training and evaluation commands' runs (`study_cells.CELL_COMMANDS`).
"""
import argparse
import logging
import sys
from pathlib import Path
from typing import Dict, Optional, Sequence

from timm.utils import setup_default_logging

from ..study.document import update_document
from ..study.launch import run_study
from ..study.options import DocsUpdateOptions, StudyOptions
from ..task.method_options import options_from_values
from .options import Declaration, declarations_of
from .parser import ArgumentParser, run_cli
from .study_cells import CELL_COMMANDS

__all__ = ['declarations', 'get_args_parser', 'study_options', 'main', 'run', 'console_main']

PROG = 'timm-advnorm-study'


def declarations() -> Dict[str, Declaration]:
    """The command's options by destination, from the fields of the options they fill (`study.options.StudyOptions`,
    `study.options.DocsUpdateOptions`; `options.declarations_of`), in the order ``--help`` shows them."""
    return declarations_of((StudyOptions, DocsUpdateOptions))


def get_args_parser(prog: str = PROG) -> ArgumentParser:
    """The command-line parser (importable, so tests can drive it), generated from the options' declarations
    (`declarations`)."""
    parser = ArgumentParser(prog=prog, description='Run a seed paper\'s comparison grid: every cell an ordinary '
                                                   'timm-advnorm-train run and its timm-advnorm-validate '
                                                   'evaluation.')
    for declaration in declarations().values():
        declaration.add(parser, parser)
    return parser


def _check_args(parser: ArgumentParser, args: argparse.Namespace) -> None:
    if args.update_docs:
        if args.study:
            parser.error('--update-docs regenerates documentation from recorded results: give no STUDY')
        return
    if not args.study:
        parser.error('the following arguments are required: STUDY (or --update-docs FILE)')
    if args.scale == 'imagenet' and not args.data_dir:
        parser.error('--scale imagenet needs --data-dir')
    if args.scale != 'imagenet' and args.data_dir:
        parser.error(f'--scale {args.scale} reads a built-in dataset: --data-dir would not be used')
    if args.max_cells is not None and args.max_cells < 0:
        parser.error('--max-cells must be >= 0')
    if args.world_size < 1:
        parser.error('--world-size must be >= 1')
    if args.jobs < 1:
        parser.error('--jobs must be >= 1')
    if args.jobs > 1 and args.launcher == 'submitit':
        parser.error('--jobs runs cells side by side on this machine; --launcher submitit runs each cell as a job of '
                     'its own: use one of them')
    if args.launcher == 'local' and args.launch_prefix:
        parser.error('--launch-prefix starts child processes: use --launcher subprocess or submitit')
    if args.launcher != 'submitit' and (args.submitit_cluster or args.submitit_params):
        parser.error('--submitit-cluster and --submitit-params need --launcher submitit')
    if args.dry_run or args.plan:
        mode = '--plan' if args.plan else '--dry-run'
        if args.record:
            parser.error(f'--record copies the results of a run: {mode} runs nothing')
        unused = [flag for flag, given in (('--max-cells', args.max_cells is not None),
                                           ('--launcher', args.launcher != 'local'),
                                           ('--jobs', args.jobs > 1 and not args.plan)) if given]
        if unused:
            parser.error(f'{mode} runs no cell: {" and ".join(unused)} would not be used')


def study_options(args: argparse.Namespace) -> StudyOptions:
    """The typed options of the study run `args` (as the parser returns them, checked) describe, filled by option
    name (`task.options_from_values`); ``--plan`` is a dry run too."""
    return options_from_values(StudyOptions, vars(args), dry_run=args.dry_run or args.plan)


def main(argv: Optional[Sequence[str]] = None, prog: str = PROG) -> int:
    """Run (or with ``--dry-run`` plan) the study `argv` names; returns the exit status. Bad input raises."""
    parser = get_args_parser(prog)
    args = parser.parse_args(argv)
    _check_args(parser, args)
    if not logging.root.handlers:
        setup_default_logging()
    docs = options_from_values(DocsUpdateOptions, vars(args))
    if docs.update_docs:
        changed = update_document(Path(docs.update_docs), Path(docs.record_root))
        done = ', '.join(changed) or 'nothing (up to date)'
        logging.getLogger('study').info(f'{docs.update_docs}: regenerated {done}')
        return 0
    run_study(study_options(args), CELL_COMMANDS, prog=PROG)
    return 0


def run(prog: str = PROG, argv: Optional[Sequence[str]] = None) -> int:
    """Command-line entry: `main`, with bad input reported as one line and exit status 2."""
    return run_cli(lambda a: main(a, prog=prog), prog, argv)


def console_main() -> None:
    """The ``timm-advnorm-study`` console command."""
    sys.exit(run(PROG))
