"""Running a study's cells, resumably: a finished cell is never rerun, an interrupted one resumes from its checkpoint.

A cell's state is read from its run folder alone, so any launcher, and a rerun after any interruption, agrees on it:

* evaluated: ``results.json`` is there: nothing to do;
* trained: ``summary.csv`` has a row for every epoch of the run: evaluate (``timm-advnorm-validate --resume-state``
  resumes an interrupted evaluation too);
* interrupted: ``last.pth.tar`` is there: train on with ``--resume``, then evaluate;
* new: train, then evaluate.

The commands run in this process (`InProcessCommands`), or each in a child process that a prefix such as
``torchrun --nproc_per_node 8`` can start (`SubprocessCommands`). The cells run one after another here
(`run_cells`), side by side on this machine in child processes (`timm_advnorm.study.parallel`), or are each
submitted as a job through submitit (`SubmititLauncher`: Slurm, or its local and debug executors): a cluster is
scheduled by its own scheduler, never by one of ours.
"""
import csv
import io
import json
import logging
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence


from ..messages import read_utf8
from ..strict_yaml import load_yaml
from ..train.run_folder import BUDGET_FILE
from .cells import Cell
from .options import CellCommands

__all__ = ['CellError', 'InProcessCommands', 'SubprocessCommands', 'SubmititLauncher', 'cell_state', 'check_status',
           'pending_cells', 'run_cell', 'run_cells', 'TIMING_FILE']

_logger = logging.getLogger(__name__)

TIMING_FILE = 'study_timing.json'
_TRAIN_MODULE = 'timm_advnorm.train'
_VALIDATE_MODULE = 'timm_advnorm.eval'


class CellError(RuntimeError):
    """A cell's command failed."""


@dataclass(frozen=True)
class InProcessCommands:
    """Runs the commands' `main` in this process.

    Attributes:
        commands: The commands (their `main` functions: `CellCommands.train_main`, `CellCommands.validate_main`).
    """

    commands: CellCommands

    def train(self, argv: Sequence[str]) -> None:
        check_status('timm-advnorm-train', self.commands.train_main(list(argv)))

    def validate(self, argv: Sequence[str]) -> None:
        check_status('timm-advnorm-validate', self.commands.validate_main(list(argv)))


@dataclass(frozen=True)
class SubprocessCommands:
    """Runs each command as ``<prefix> -m <module> <arguments>`` in a child process.

    Attributes:
        prefix: What starts the module: this Python (default) or e.g. ``torchrun --nproc_per_node 8``.
    """

    prefix: Sequence[str] = (sys.executable,)

    def train(self, argv: Sequence[str]) -> None:
        self._run(_TRAIN_MODULE, argv)

    def validate(self, argv: Sequence[str]) -> None:
        self._run(_VALIDATE_MODULE, argv)

    def _run(self, module: str, argv: Sequence[str]) -> None:
        """Run `module` with `argv` in a child process; a status other than 0 raises `CellError`."""
        check_status(module, subprocess.run([*self.prefix, '-m', module, *argv], check=False).returncode)


def check_status(command: str, status: int) -> None:
    """Raise `CellError` for a command that exited with a status other than 0."""
    if status != 0:
        raise CellError(f'{command} exited with status {status}.')


def _training_complete(run_dir: Path) -> bool:
    """Whether the run in `run_dir` has a summary row for every epoch it trains (rows follow their checkpoints): the
    epochs its budget file counts, which the run writes before it trains (the scheduler's, cool-down included)."""
    summary, budget_file = run_dir / 'summary.csv', run_dir / BUDGET_FILE
    if not summary.is_file() or not budget_file.is_file():
        return False
    rows = list(csv.DictReader(io.StringIO(read_utf8(summary))))
    return len(rows) >= int(load_yaml(read_utf8(budget_file), str(budget_file))['epochs'])


def cell_state(cell: Cell) -> str:
    """``evaluated``, ``trained``, ``interrupted`` or ``new`` (see the module docstring)."""
    if cell.results_file.is_file():
        return 'evaluated'
    if _training_complete(cell.run_dir):
        return 'trained'
    return 'interrupted' if cell.checkpoint.is_file() else 'new'


def _clear_unsaved_run(run_dir: Path) -> None:
    """Remove what a run killed before its first checkpoint left (its arguments and counted budget), so that
    training starts in the cell's own folder again rather than in a ``-1`` sibling; anything else in the folder is
    an error."""
    if not run_dir.exists():
        return
    others = [p.name for p in run_dir.iterdir()
              if not (p.name.startswith('args') and p.suffix == '.yaml') and p.name != BUDGET_FILE]
    if others:
        raise ValueError(f'{run_dir} holds {", ".join(sorted(others))} but no checkpoint: remove it to retrain the '
                         f'cell.')
    shutil.rmtree(run_dir)


def _add_timing(run_dir: Path, key: str, seconds: float) -> None:
    path = run_dir / TIMING_FILE
    timing: Dict[str, float] = json.loads(read_utf8(path)) if path.is_file() else {}
    timing[key] = timing.get(key, 0.0) + seconds
    path.write_text(json.dumps(timing, indent=2))


def run_cell(cell: Cell, commands: Any) -> str:
    """Bring `cell` to ``evaluated`` with `commands` (`InProcessCommands` or `SubprocessCommands`); returns the
    state it was found in. The wall time of each finished command is added up in the run folder's timing file."""
    state = cell_state(cell)
    if state == 'evaluated':
        return state
    if state in ('new', 'interrupted'):
        argv = list(cell.train_argv)
        if state == 'interrupted':
            argv += ['--resume', str(cell.checkpoint)]
            _logger.info(f'{cell.id}: resuming from {cell.checkpoint}')
        else:
            _clear_unsaved_run(cell.run_dir)
        started = time.perf_counter()
        commands.train(argv)
        _add_timing(cell.run_dir, 'train_seconds', time.perf_counter() - started)
    started = time.perf_counter()
    commands.validate(cell.validate_argv)
    _add_timing(cell.run_dir, 'validate_seconds', time.perf_counter() - started)
    return state


def pending_cells(cells: Sequence[Cell]) -> List[Cell]:
    """The cells not yet evaluated, in order; says how many others are, which are not rerun."""
    pending = [cell for cell in cells if cell_state(cell) != 'evaluated']
    done = len(cells) - len(pending)
    if done:
        _logger.info(f'{done} of {len(cells)} cells already evaluated: not rerun.')
    return pending


def run_cells(cells: Sequence[Cell], commands: Any, max_cells: Optional[int] = None,
              on_evaluated: Optional[Callable[[Cell], None]] = None) -> List[Cell]:
    """Run the cells not yet evaluated, one after another, at most `max_cells` of them, telling `on_evaluated` of
    each as it is evaluated; returns those run."""
    pending = pending_cells(cells)
    ran = []
    for index, cell in enumerate(pending[:max_cells]):
        _logger.info(f'Cell {index + 1}/{len(pending)} to run: {cell.id} ({cell_state(cell)})')
        run_cell(cell, commands)
        ran.append(cell)
        if on_evaluated is not None:
            on_evaluated(cell)
    return ran


class SubmititLauncher:
    """Submits each pending cell as a submitit job and waits for them all.

    Args:
        folder: submitit's folder of job logs and pickles.
        cluster: submitit's executor: ``slurm``, ``local`` or ``debug`` (None: Slurm where available, else local).
        parameters: Executor parameters (``slurm_partition``, ``timeout_min``, ``gpus_per_node``, ...).
    """

    def __init__(self, folder: Path, cluster: Optional[str] = None, parameters: Optional[Mapping[str, Any]] = None):
        try:
            import submitit
        except ImportError as e:
            raise ValueError('--launcher submitit needs submitit: pip install "timm-advnorm[slurm]"') from e
        self.executor = submitit.AutoExecutor(folder=str(folder), cluster=cluster)
        if parameters:
            self.executor.update_parameters(**parameters)

    def run(self, cells: Sequence[Cell], commands: Any, max_cells: Optional[int] = None,
            on_evaluated: Optional[Callable[[Cell], None]] = None) -> List[Cell]:
        """Submit the cells not yet evaluated (at most `max_cells`), then wait for every job, telling `on_evaluated`
        of each cell whose job succeeded; a failed job raises `CellError` after the others finished."""
        pending = pending_cells(cells)[:max_cells]
        jobs = [(cell, self.executor.submit(run_cell, cell, commands)) for cell in pending]
        failed = []
        for cell, job in jobs:
            try:
                job.result()
                if on_evaluated is not None:
                    on_evaluated(cell)
            except Exception as e:  # noqa: BLE001  (submitit re-raises the job's error in a wrapper of its own)
                _logger.error(f'{cell.id}: job {job.job_id} failed: {" ".join(str(e).split())[:300]}')
                failed.append(cell.id)
        if failed:
            raise CellError(f'{len(failed)} cell job(s) failed: {", ".join(failed)} (logs under the submitit folder).')
        return pending
