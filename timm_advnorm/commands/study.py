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
(`timm_advnorm.study.runner`). This module parses and checks the arguments and converts them into `StudyOptions`
(`study_options`); `timm_advnorm.study.launch` runs the study they describe, its cells as the training and evaluation
commands' runs (`study_cells.CELL_COMMANDS`).
"""
import argparse
import logging
import sys
from pathlib import Path
from typing import Optional, Sequence

from timm.utils import ParseKwargs, setup_default_logging

from ..study.document import update_document
from ..study.launch import LAUNCHERS, run_study
from ..study.options import StudyOptions
from ..study.spec import SCALES, list_studies
from .options import DATA_DIR, DEVICE
from .parser import ArgumentParser, run_cli
from .study_cells import CELL_COMMANDS

__all__ = ['get_args_parser', 'study_options', 'main', 'run', 'console_main']

PROG = 'timm-advnorm-study'


def get_args_parser(prog: str = PROG) -> ArgumentParser:
    """The command-line parser (importable, so tests can drive it)."""
    parser = ArgumentParser(prog=prog, description='Run a seed paper\'s comparison grid: every cell an ordinary '
                                                   'timm-advnorm-train run and its timm-advnorm-validate '
                                                   'evaluation.')
    parser.add_argument('study', metavar='STUDY', nargs='?',
                        help=f'A shipped study ({", ".join(list_studies())}) or a study YAML file.')
    parser.add_argument('--scale', default='digits', choices=SCALES,
                        help='digits: the built-in data and the tiny fair model family, on CPU in minutes; '
                             'mnist: the built-in mnist5k (real MNIST digits), the tiny family at 28 px (3-9 epochs, '
                             '13-15 min on a 2-core CPU) or, for galloway-mnist, Galloway et al.\'s MNIST models at '
                             '28-112 px (50 epochs, about an hour); '
                             'paper: a paper\'s own data, models and training length on a CPU (galloway-mnist: full '
                             'MNIST, five seeds; see --plan); '
                             'imagenet: the papers\' recipes and models (--data-dir).')
    DATA_DIR.add(parser, help='ImageNet root (train/, val/).')
    parser.add_argument('--output', default='output/studies', metavar='DIR',
                        help='Root of the study folder, <output>/<study>-<scale>.')
    parser.add_argument('--seeds', type=int, nargs='+', default=None, metavar='S',
                        help='Train each cell with these seeds instead of the study\'s.')
    DEVICE.add(parser, default=None, help='--device of every command (default: theirs).')
    parser.add_argument('--dry-run', action='store_true',
                        help='List the cells, their commands and planned budgets (passes, FLOPs); train nothing.')
    parser.add_argument('--plan', action='store_true',
                        help='--dry-run, and each grid point\'s training step, validation and evaluation pass measured '
                             'on synthetic batches here: the time of every cell and of the cells not yet evaluated, '
                             'projected on this machine (seconds per grid point; once cells have run, scaled by what '
                             'they took against their projection); train nothing.')
    parser.add_argument('--world-size', type=int, default=1, metavar='N',
                        help='Processes per cell that --dry-run and --plan plan the budget for.')
    parser.add_argument('--max-cells', type=int, default=None, metavar='N',
                        help='Run at most N cells not yet evaluated, then write the table of what is done (0: only '
                             'write it).')
    parser.add_argument('--jobs', type=int, default=1, metavar='N',
                        help='Run N cells at once on this machine, each command a child process with the CPUs shared '
                             'out (OMP_NUM_THREADS) and its output in <study folder>/logs/<cell>.log: small models '
                             'finish a grid sooner one cell per core than one cell on every core; with --plan, '
                             'project the time so. (default: 1, one after another)')
    parser.add_argument('--launcher', default='local', choices=LAUNCHERS,
                        help='local: cells one after another in this process; subprocess: each command in a child '
                             'process (see --launch-prefix); submitit: each cell a submitit job (Slurm).')
    parser.add_argument('--launch-prefix', default=None, metavar='COMMAND',
                        help='What starts a command\'s module in a child process, e.g. "torchrun --nproc_per_node '
                             '8" (default: this Python); with --launcher subprocess or submitit.')
    parser.add_argument('--submitit-cluster', default=None, choices=('slurm', 'local', 'debug'),
                        help='submitit executor (default: Slurm where available, else local).')
    parser.add_argument('--submitit-params', nargs='*', default={}, action=ParseKwargs, metavar='KEY=VALUE',
                        help='Executor parameters: slurm_partition=gpu timeout_min=600 gpus_per_node=8 ...')
    parser.add_argument('--record', default=None, metavar='DIR',
                        help='After the run, copy the tables (results.csv, grid.csv, findings.csv, ratios.csv, '
                             'results.md), the plot and provenance.json to DIR/<study>/<scale>/, where the '
                             'documentation reads them (the repository keeps them under docs/results).')
    parser.add_argument('--update-docs', default=None, metavar='FILE',
                        help='Regenerate the marked study-results blocks of FILE (e.g. README.md) from the recorded '
                             'results under --record-root, instead of running a study.')
    parser.add_argument('--record-root', default='docs/results', metavar='DIR',
                        help='Where --update-docs reads the recorded results (default: docs/results).')
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
    """The typed options of the study run `args` (as the parser returns them, checked) describe."""
    return StudyOptions(
        study=args.study, scale=args.scale, data_dir=args.data_dir, output=args.output, seeds=tuple(args.seeds or ()),
        device=args.device, dry_run=args.dry_run or args.plan, plan=args.plan, world_size=args.world_size,
        max_cells=args.max_cells, launcher=args.launcher, launch_prefix=args.launch_prefix,
        submitit_cluster=args.submitit_cluster, submitit_params=dict(args.submitit_params), record=args.record,
        jobs=args.jobs)


def main(argv: Optional[Sequence[str]] = None, prog: str = PROG) -> int:
    """Run (or with ``--dry-run`` plan) the study `argv` names; returns the exit status. Bad input raises."""
    parser = get_args_parser(prog)
    args = parser.parse_args(argv)
    _check_args(parser, args)
    if not logging.root.handlers:
        setup_default_logging()
    if args.update_docs:
        changed = update_document(Path(args.update_docs), Path(args.record_root))
        logging.getLogger('study').info(f'{args.update_docs}: regenerated {", ".join(changed) or "nothing (up to date)"}')
        return 0
    run_study(study_options(args), CELL_COMMANDS, prog=PROG)
    return 0


def run(prog: str = PROG, argv: Optional[Sequence[str]] = None) -> int:
    """Command-line entry: `main`, with bad input reported as one line and exit status 2."""
    return run_cli(lambda a: main(a, prog=prog), prog, argv)


def console_main() -> None:
    """The ``timm-advnorm-study`` console command."""
    sys.exit(run(PROG))
