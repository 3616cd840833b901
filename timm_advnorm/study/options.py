"""What a study run is told, as typed, frozen options: built once from the ``timm-advnorm-study`` command line
(`timm_advnorm.commands.study.study_options`) and read by `timm_advnorm.study.launch.run_study`.

The commands a study drives, training and evaluation, are given to it the same way, as plain callables
(`CellCommands`): this package parses no command line of its own.
"""
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, List, Mapping, Optional, Sequence, Tuple

if TYPE_CHECKING:
    from ..eval.options import EvalOptions
    from ..train.options import TrainOptions

__all__ = ['CellCommands', 'StudyOptions']


@dataclass(frozen=True)
class StudyOptions:
    """One study run.

    Attributes:
        study: A shipped study's name or a study YAML file.
        scale: The scale the cells run at (one of `timm_advnorm.study.spec.SCALES`).
        data_dir: Dataset root of every cell's commands (ImageNet scale); None for the built-in datasets.
        output: Root of the study folder, ``<output>/<study>-<scale>``.
        seeds: The seeds each cell is trained with instead of the study's (empty: the study's).
        device: ``--device`` of every cell's commands (None: theirs).
        dry_run: Only list the cells, their commands and planned budgets; train nothing.
        plan: With `dry_run`, also measure each grid point on this machine and project the study's time.
        world_size: Processes per cell that the dry run plans the budget for.
        max_cells: Run at most this many cells not yet evaluated (None: all; 0: only write the table).
        launcher: Where the cells' commands run (one of `timm_advnorm.study.launch.LAUNCHERS`).
        launch_prefix: The command line that starts a command's module in a child process (None: this Python).
        submitit_cluster: submitit's executor (None: Slurm where available, else local).
        submitit_params: submitit's executor parameters.
        jobs: Cells run at once on this machine, each command a child process with the CPUs shared out
            (`timm_advnorm.study.parallel`); with `plan`, the cells the projection runs at once.
        record: Root of the recorded results (``docs/results``): the study's tables, plot and provenance are copied
            to ``<record>/<study>/<scale>/`` after it runs (None: not recorded).
    """

    study: str
    scale: str
    data_dir: Optional[str]
    output: str
    seeds: Tuple[int, ...]
    device: Optional[str]
    dry_run: bool
    world_size: int
    max_cells: Optional[int]
    launcher: str
    launch_prefix: Optional[str]
    submitit_cluster: Optional[str]
    submitit_params: Mapping[str, Any]
    record: Optional[str] = None
    plan: bool = False
    jobs: int = 1


@dataclass(frozen=True)
class CellCommands:
    """The training and evaluation commands as a study drives them, given by the command layer that owns their
    parsers (`timm_advnorm.commands.study_cells.CELL_COMMANDS`). Module-level functions, so that a submitit job
    can pickle them.

    Attributes:
        train_argv: A cell's training options (long option names with underscores, as in a ``-c`` YAML file) as
            ``timm-advnorm-train`` arguments; raises ValueError on an option the command does not have.
        validate_argv: A cell's evaluation options as ``timm-advnorm-validate`` arguments, likewise.
        train_options: ``timm-advnorm-train`` arguments parsed and checked into the run's typed options.
        validate_options: ``timm-advnorm-validate`` arguments parsed and checked into the evaluation's typed options
            (a checkpoint that does not exist yet is not read).
        train_main: ``timm-advnorm-train`` run in this process on its arguments; returns its exit status.
        validate_main: ``timm-advnorm-validate`` run in this process on its arguments; returns its exit status.
    """

    train_argv: Callable[[Mapping[str, Any]], List[str]]
    validate_argv: Callable[[Mapping[str, Any]], List[str]]
    train_options: Callable[[Sequence[str]], 'TrainOptions']
    validate_options: Callable[[Sequence[str]], 'EvalOptions']
    train_main: Callable[[List[str]], int]
    validate_main: Callable[[List[str]], int]
