"""What a study run is told, as typed, frozen options: each option declared once, on the field it fills
(`task.method_options.option`), from which the ``timm-advnorm-study`` command generates its parser and converts the
parsed values (`timm_advnorm.commands.study`); read by `timm_advnorm.study.launch.run_study` and, for
``--update-docs``, `timm_advnorm.study.document.update_document`.

The commands a study drives, training and evaluation, are given to it the same way, as plain callables
(`CellCommands`): this package parses no command line of its own.
"""
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, List, Mapping, Optional, Tuple

from timm.utils import ParseKwargs

from ..task.method_options import option
from .spec import SCALES, list_studies

if TYPE_CHECKING:
    from ..eval.options import EvalOptions
    from ..train.options import TrainOptions

__all__ = ['CellCommands', 'LAUNCHERS', 'DocsUpdateOptions', 'StudyOptions']

#: ``--launcher``: where the cells' commands run.
LAUNCHERS = ('local', 'subprocess', 'submitit')


@dataclass(frozen=True)
class StudyOptions:
    """One study run, its fields in the order ``--help`` shows their options.

    Attributes:
        study: A shipped study's name or a study YAML file (the command's positional ``STUDY``).
        scale: The scale the cells run at (one of `timm_advnorm.study.spec.SCALES`).
        data_dir: Dataset root of every cell's commands (ImageNet scale); None for the built-in datasets.
        output: Root of the study folder, ``<output>/<study>-<scale>``.
        seeds: The seeds each cell is trained with instead of the study's (empty: the study's).
        device: ``--device`` of every cell's commands (None: theirs).
        dry_run: Only list the cells, their commands and planned budgets; train nothing (also set by `plan`).
        plan: With `dry_run`, also measure each grid point on this machine and project the study's time.
        world_size: Processes per cell that the dry run plans the budget for.
        max_cells: Run at most this many cells not yet evaluated (None: all; 0: only write the table).
        jobs: Cells run at once on this machine, each command a child process with the CPUs shared out
            (`timm_advnorm.study.parallel`); with `plan`, the cells the projection runs at once.
        launcher: Where the cells' commands run (one of `LAUNCHERS`).
        launch_prefix: The command line that starts a command's module in a child process (None: this Python).
        submitit_cluster: submitit's executor (None: Slurm where available, else local).
        submitit_params: submitit's executor parameters.
        record: Root of the recorded results (``docs/results``): the study's tables, plot and provenance are copied
            to ``<record>/<study>/<scale>/`` after it runs (None: not recorded).
    """

    study: Optional[str] = option(
        None, lambda: f'A shipped study ({", ".join(list_studies())}) or a study YAML file.', flags=('study',),
        metavar='STUDY', nargs='?')
    scale: str = option(
        'digits', 'digits: the built-in data and the tiny fair model family, on CPU in minutes; mnist: the built-in '
                  'mnist5k (real MNIST digits), the tiny family at 28 px (3-9 epochs, 13-15 min on a 2-core CPU) or, '
                  'for galloway-mnist, Galloway et al.\'s MNIST models at 28-112 px (50 epochs, about an hour); '
                  'paper: a paper\'s own data, models and training length on a CPU (galloway-mnist: full MNIST, five '
                  'seeds; see --plan); imagenet: the papers\' recipes and models (--data-dir).', choices=SCALES)
    data_dir: Optional[str] = option(None, 'ImageNet root (train/, val/).')
    output: str = option('output/studies', 'Root of the study folder, <output>/<study>-<scale>.', metavar='DIR')
    seeds: Tuple[int, ...] = option((), 'Train each cell with these seeds instead of the study\'s.', type=int,
                                    nargs='+', metavar='S')
    device: Optional[str] = option(None, '--device of every command (default: theirs).')
    dry_run: bool = option(False, 'List the cells, their commands and planned budgets (passes, FLOPs); train '
                                  'nothing.')
    plan: bool = option(False, '--dry-run, and each grid point\'s training step, validation and evaluation pass '
                               'measured on synthetic batches here: the time of every cell and of the cells not yet '
                               'evaluated, projected on this machine (seconds per grid point; once cells have run, '
                               'scaled by what they took against their projection); train nothing.')
    world_size: int = option(1, 'Processes per cell that --dry-run and --plan plan the budget for.', type=int,
                             metavar='N')
    max_cells: Optional[int] = option(None, 'Run at most N cells not yet evaluated, then write the table of what is '
                                            'done (0: only write it).', type=int, metavar='N')
    jobs: int = option(1, 'Run N cells at once on this machine, each command a child process with the CPUs shared '
                          'out (OMP_NUM_THREADS) and its output in <study folder>/logs/<cell>.log: small models '
                          'finish a grid sooner one cell per core than one cell on every core; with --plan, project '
                          'the time so. (default: 1, one after another)', type=int, metavar='N')
    launcher: str = option('local', 'local: cells one after another in this process; subprocess: each command in a '
                                    'child process (see --launch-prefix); submitit: each cell a submitit job (Slurm).',
                           choices=LAUNCHERS)
    launch_prefix: Optional[str] = option(
        None, 'What starts a command\'s module in a child process, e.g. "torchrun --nproc_per_node 8" (default: '
              'this Python); with --launcher subprocess or submitit.', metavar='COMMAND')
    submitit_cluster: Optional[str] = option(None, 'submitit executor (default: Slurm where available, else local).',
                                             choices=('slurm', 'local', 'debug'))
    submitit_params: Mapping[str, Any] = option(
        {}, 'Executor parameters: slurm_partition=gpu timeout_min=600 gpus_per_node=8 ...', nargs='*',
        action=ParseKwargs, metavar='KEY=VALUE')
    record: Optional[str] = option(
        None, 'After the run, copy the tables (results.csv, grid.csv, findings.csv, ratios.csv, results.md), the '
              'plot and provenance.json to DIR/<study>/<scale>/, where the documentation reads them (the repository '
              'keeps them under docs/results). A record holding cells this run would not record (other seeds, '
              'another study folder) is refused before the first cell.', metavar='DIR')


@dataclass(frozen=True)
class DocsUpdateOptions:
    """``--update-docs``: the documentation's study-results blocks regenerated from the recorded results, instead of
    a study run (`timm_advnorm.study.document.update_document`).

    Attributes:
        update_docs: The file whose marked blocks are regenerated (None: run a study instead).
        record_root: Where the recorded results are read.
    """

    update_docs: Optional[str] = option(
        None, 'Regenerate the marked study-results blocks of FILE (e.g. README.md) from the recorded results under '
              '--record-root, instead of running a study.', metavar='FILE')
    record_root: str = option('docs/results', 'Where --update-docs reads the recorded results (default: '
                                              'docs/results).', metavar='DIR')


@dataclass(frozen=True)
class CellCommands:
    """The training and evaluation commands as a study drives them, given by the command layer that owns their
    parsers (`timm_advnorm.commands.study_cells.CELL_COMMANDS`). Module-level functions, so that a submitit job
    can pickle them.

    Attributes:
        train_argv: A cell's training options (long option names with underscores, as in a ``-c`` YAML file; its
            ``config``, the ``-c`` recipe) as ``timm-advnorm-train`` arguments, for what runs the command; raises
            ValueError on an option the command does not have.
        validate_argv: A cell's evaluation options as ``timm-advnorm-validate`` arguments, likewise.
        train_options: A cell's training options built into the run's typed options, checked, as the command builds
            its own: the options that parsing `train_argv`'s arguments gives.
        validate_options: A cell's evaluation options built into the evaluation's typed options, likewise (a
            checkpoint that does not exist yet is not read).
        train_main: ``timm-advnorm-train`` run in this process on its arguments; returns its exit status.
        validate_main: ``timm-advnorm-validate`` run in this process on its arguments; returns its exit status.
    """

    train_argv: Callable[[Mapping[str, Any]], List[str]]
    validate_argv: Callable[[Mapping[str, Any]], List[str]]
    train_options: Callable[[Mapping[str, Any]], 'TrainOptions']
    validate_options: Callable[[Mapping[str, Any]], 'EvalOptions']
    train_main: Callable[[List[str]], int]
    validate_main: Callable[[List[str]], int]
