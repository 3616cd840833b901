"""A study's cells side by side on one machine (``timm-advnorm-study --jobs N``).

The seed papers' small models gain little from more threads per step on a CPU: their matrix products are too small
to keep several cores busy, so one cell per core finishes a grid sooner than one cell on every core. Here N cells run
at once, each command a child process (`LoggedCommands`) with the machine's CPUs shared out among them
(``OMP_NUM_THREADS``), its output appended to a log file of its own (the lines of N runs interleaved would be
unreadable), while this process says when each cell starts and ends.

A failing cell stops the study as it does when cells run one after another: no further cell starts, the running
ones finish, and the error names every failed cell and its log. SIGINT and SIGTERM reach the children (a terminal
sends them to the whole process group; one sent to this process alone is passed on), which stop as they do on their
own (a training run keeps its checkpoint, an evaluation its state file), so that the same command resumes them.
"""
import heapq
import logging
import os
import signal
import subprocess
import sys
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor, as_completed
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Dict, List, Mapping, Optional, Sequence, Set

from ..durations import duration_text
from ..messages import read_utf8
from ..signals import Interrupted
from ..usage import available_cpus, one_line
from .cells import Cell
from .runner import CellError, SubprocessCommands, cell_state, check_status, pending_cells, run_cell

__all__ = ['ChildProcesses', 'LoggedCommands', 'cell_threads', 'makespan', 'run_cells_side_by_side', 'LOG_FOLDER']

#: The study folder's folder of cell logs, ``<cell id>.log``.
LOG_FOLDER = 'logs'
_logger = logging.getLogger(__name__)


def cell_threads(jobs: int) -> int:
    """Threads of each of `jobs` cells run at once: this process's CPUs shared out, at least one each."""
    return max(1, available_cpus() // jobs)


def makespan(seconds: Sequence[float], jobs: int) -> float:
    """The wall time of tasks of these `seconds`, started in order, each as soon as one of `jobs` slots is free."""
    slots = [0.0] * jobs
    for duration in seconds:
        heapq.heappush(slots, heapq.heappop(slots) + duration)
    return max(slots)


class ChildProcesses:
    """The command processes running now, so that a signal this process receives reaches them, and after it none
    starts."""

    def __init__(self):
        self._lock = threading.Lock()
        self._running: Set[subprocess.Popen] = set()
        self._stopped = False

    def run(self, command: Sequence[str], env: Mapping[str, str], log: Path) -> int:
        """Run `command` with its output appended to `log`; returns its exit status.

        Raises:
            CellError: The processes were interrupted (`interrupt`) before this one started.
        """
        with open(log, 'ab') as output, self._lock:
            if self._stopped:
                raise CellError('not started: the study was interrupted')
            process = subprocess.Popen(list(command), env=dict(env), stdout=output, stderr=subprocess.STDOUT)
            self._running.add(process)
        try:
            return process.wait()
        finally:
            with self._lock:
                self._running.discard(process)

    def interrupt(self, signum: int) -> None:
        """Send `signum` to the processes running, and start no further one."""
        with self._lock:
            self._stopped = True
            running = list(self._running)
        for process in running:
            try:
                process.send_signal(signum)
            except ProcessLookupError:  # it ended meanwhile
                pass


@dataclass(frozen=True, kw_only=True)
class LoggedCommands(SubprocessCommands):
    """`runner.SubprocessCommands` whose child processes are those of `children`, with `env` and their output
    appended to `log`."""

    env: Mapping[str, str] = field(repr=False)
    log: Path
    children: ChildProcesses = field(repr=False, compare=False)

    def _run(self, module: str, argv: Sequence[str]) -> None:
        check_status(module, self.children.run([*self.prefix, '-m', module, *argv], self.env, self.log))


def _last_line(log: Path) -> str:
    """The log's last line that says something, where a failed command says why."""
    try:
        lines = [line.strip() for line in read_utf8(log).splitlines() if line.strip()]
    except (OSError, ValueError):
        return ''
    return lines[-1][:300] if lines else ''


def _run_logged(cell: Cell, commands: LoggedCommands, position: str, failed: threading.Event) -> bool:
    """Run `cell` unless a cell failed before it started (then False); a failure of its own sets `failed`."""
    if failed.is_set():
        return False
    state = cell_state(cell)
    _logger.info(f'Cell {position} started: {cell.id} ({state}); its output: {commands.log}')
    started = time.perf_counter()
    try:
        run_cell(cell, commands)
    except (CellError, OSError):  # OSError: its log or its files could not be written (full disk, no permission)
        failed.set()
        raise
    _logger.info(f'Cell {cell.id} evaluated in {duration_text(time.perf_counter() - started)}')
    return True


def run_cells_side_by_side(cells: Sequence[Cell], jobs: int, log_dir: Path, prefix: Sequence[str] = (sys.executable,),
                           max_cells: Optional[int] = None,
                           on_evaluated: Optional[Callable[[Cell], None]] = None) -> List[Cell]:
    """Run the cells not yet evaluated (at most `max_cells`, in order), `jobs` at a time, each command a child process
    started by `prefix` with `cell_threads` threads and its output in ``<log_dir>/<cell id>.log``; returns the cells
    evaluated, each told to `on_evaluated` (in this thread) as it is.

    Raises:
        CellError: A cell's command failed (after the running cells finished; none started after it).
        Interrupted: SIGINT or SIGTERM (after the running commands stopped on it).
    """
    pending = pending_cells(cells)[:max_cells]
    if not pending:
        return []
    threads = cell_threads(jobs)
    if jobs > available_cpus():
        _logger.warning(f'--jobs {jobs} on {available_cpus()} CPUs: the cells share cores and each runs slower.')
    _logger.info(f'{len(pending)} cells to run, {jobs} at a time, {threads} thread(s) each.')
    env = {**os.environ, 'OMP_NUM_THREADS': str(threads), 'MKL_NUM_THREADS': str(threads)}
    log_dir.mkdir(parents=True, exist_ok=True)
    children, failure = ChildProcesses(), threading.Event()
    evaluated: List[Cell] = []
    failed: List[str] = []
    with ThreadPoolExecutor(max_workers=jobs, thread_name_prefix='study-cell') as pool:
        futures: Dict[Future, Cell] = {}
        for index, cell in enumerate(pending):
            commands = LoggedCommands(prefix=tuple(prefix), env=env, log=log_dir / f'{cell.id}.log', children=children)
            futures[pool.submit(_run_logged, cell, commands, f'{index + 1}/{len(pending)}', failure)] = cell
        try:
            for future in as_completed(futures):
                cell = futures[future]
                if future.cancelled():
                    continue
                try:
                    if future.result():
                        evaluated.append(cell)
                        if on_evaluated is not None:
                            on_evaluated(cell)
                except CellError as e:
                    log = log_dir / f'{cell.id}.log'
                    _logger.error(f'{cell.id}: {e} ({log}: {_last_line(log)})')
                    failed.append(f'{cell.id} ({log})')
                except OSError as e:
                    failed.append(f'{cell.id} ({one_line(e)})')
        except KeyboardInterrupt as e:
            children.interrupt(e.signum if isinstance(e, Interrupted) else signal.SIGINT)
            for other in futures:
                other.cancel()
            pool.shutdown(wait=True)  # the running commands stop on the signal and keep what they did
            if isinstance(e, Interrupted):
                raise e.with_detail('while running cells side by side: their runs keep their checkpoints and '
                                    'evaluation states; run the same command again to resume them') from None
            raise
    if failed:
        raise CellError(f'{len(failed)} cell(s) failed: {", ".join(failed)}; the cells running then ran to their end, '
                        f'none started after.')
    return evaluated
