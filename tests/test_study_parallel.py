"""timm-advnorm-study --jobs: cells side by side, each command a child process with its share of the CPUs and a log
of its own; a failed cell stops the study, a signal reaches the running commands. The children here are a short
Python script in place of the training and evaluation commands (a command prefix of ``python -c SCRIPT``)."""
import os
import signal
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest

from timm_advnorm.commands.study import get_args_parser, main, study_options
from timm_advnorm.signals import Interrupted, signals_as_interrupts
from timm_advnorm.study.cells import Cell
from timm_advnorm.study.parallel import ChildProcesses, cell_threads, makespan, run_cells_side_by_side
from timm_advnorm.study.runner import CellError
from timm_advnorm.usage import available_cpus

# A stand-in for both commands: ``python -c SCRIPT -m MODULE ARGS``. Training writes nothing (its cell stays "new"
# until evaluated); evaluation writes --results-file. A cell given "--wait-for X" trains only once cell X's training
# started (so that two cells must run at once), one whose id holds "fail" exits with status 3, one holding "sleep"
# sleeps until a signal ends it.
_CHILD = textwrap.dedent('''
    import os, signal, sys, time
    from pathlib import Path
    module, argv = sys.argv[2], sys.argv[3:]
    run_dir = Path(argv[argv.index('--run-dir') + 1])
    print(module, 'threads', os.environ['OMP_NUM_THREADS'], flush=True)
    if module.endswith('train'):
        run_dir.mkdir(parents=True, exist_ok=True)
        (run_dir / 'started').touch()
        if 'fail' in run_dir.name:
            sys.exit(3)
        if '--wait-for' in argv:
            other = run_dir.parent / argv[argv.index('--wait-for') + 1]
            deadline = time.monotonic() + 30
            while not (other / 'started').exists():
                if time.monotonic() > deadline:
                    print('the other cell never started', flush=True)
                    sys.exit(4)
                time.sleep(0.02)
        if 'sleep' in run_dir.name:
            signal.signal(signal.SIGTERM, lambda *_: (print('stopped by SIGTERM', flush=True), sys.exit(143)))
            time.sleep(60)
    else:
        Path(argv[argv.index('--results-file') + 1]).write_text('{}')
''')
_PREFIX = (sys.executable, '-c', _CHILD)


def _cell(root: Path, name: str, wait_for: str = '') -> Cell:
    run_dir = root / 'cells' / name
    waits = ('--wait-for', wait_for) if wait_for else ()
    return Cell(id=name, labels={'name': name}, seed=0, run_dir=run_dir,
                train_argv=('--run-dir', str(run_dir), *waits),
                validate_argv=('--run-dir', str(run_dir), '--results-file', str(run_dir / 'results.json')))


def test_a_schedule_starts_each_task_as_soon_as_a_slot_is_free():
    assert makespan([1.0, 1.0, 1.0, 1.0], 2) == 2.0
    assert makespan([3.0, 1.0, 1.0, 1.0], 2) == 3.0
    assert makespan([1.0, 2.0, 3.0], 1) == 6.0
    assert makespan([5.0], 4) == 5.0


def test_the_cpus_are_shared_out_among_the_cells_at_least_one_each():
    assert cell_threads(1) == available_cpus()
    assert cell_threads(available_cpus() * 4) == 1


def test_cells_run_at_once_each_on_its_share_of_the_cpus_with_a_log_of_its_own(tmp_path):
    cells = [_cell(tmp_path, 'a', wait_for='b'), _cell(tmp_path, 'b', wait_for='a')]
    told = []
    ran = run_cells_side_by_side(cells, 2, tmp_path / 'logs', _PREFIX, on_evaluated=told.append)
    assert sorted(cell.id for cell in ran) == sorted(cell.id for cell in cells)
    assert told == ran  # each cell told as it was evaluated
    assert all(cell.results_file.is_file() for cell in cells)
    for cell in cells:
        log = (tmp_path / 'logs' / f'{cell.id}.log').read_text().splitlines()
        assert log == [f'timm_advnorm.train threads {cell_threads(2)}', f'timm_advnorm.eval threads {cell_threads(2)}']
    assert run_cells_side_by_side(cells, 2, tmp_path / 'logs', _PREFIX) == []  # evaluated: not rerun


def test_a_failed_cell_starts_no_further_cell_and_is_named_with_its_log(tmp_path):
    cells = [_cell(tmp_path, 'fail'), _cell(tmp_path, 'later')]
    with pytest.raises(CellError, match=r'1 cell\(s\) failed: fail \(.*fail\.log\)'):
        run_cells_side_by_side(cells, 1, tmp_path / 'logs', _PREFIX)
    assert not (tmp_path / 'logs' / 'later.log').exists()
    assert not cells[1].run_dir.exists()


def test_a_cell_whose_log_cannot_be_written_stops_the_study_like_a_failed_one(tmp_path):
    cells = [_cell(tmp_path, 'unlogged'), _cell(tmp_path, 'later')]
    (tmp_path / 'logs' / 'unlogged.log').mkdir(parents=True)  # what open() refuses, as a full or read-only disk would
    refused = r"1 cell\(s\) failed: unlogged \(\[Errno \d+\] Is a directory: '.*unlogged\.log'\)"
    with pytest.raises(CellError, match=refused):
        run_cells_side_by_side(cells, 1, tmp_path / 'logs', _PREFIX)
    assert not (tmp_path / 'logs' / 'later.log').exists()
    assert not cells[1].run_dir.exists()


def test_stopped_children_get_the_signal_and_none_starts_after(tmp_path):
    children = ChildProcesses()
    log = tmp_path / 'child.log'
    script = 'import signal, sys, time; print("up", flush=True); time.sleep(60)'
    status = []
    runner = threading.Thread(target=lambda: status.append(children.run([sys.executable, '-c', script], os.environ,
                                                                       log)))
    runner.start()
    deadline = time.monotonic() + 30
    while 'up' not in (log.read_text() if log.exists() else '') and time.monotonic() < deadline:
        time.sleep(0.02)
    children.interrupt(signal.SIGTERM)
    runner.join(30)
    assert status == [-signal.SIGTERM]
    with pytest.raises(CellError, match='not started: the study was interrupted'):
        children.run([sys.executable, '-c', 'pass'], os.environ, log)


def test_a_signal_to_the_study_alone_stops_its_running_cells_which_keep_their_state(tmp_path):
    """SIGTERM sent to the study's process alone (as a scheduler sends it) reaches the cells' commands, and the study
    stops with an interruption that says how to go on; no further cell starts."""
    cells = [_cell(tmp_path, 'sleep-1'), _cell(tmp_path, 'sleep-2'), _cell(tmp_path, 'never')]
    waiting = threading.Event()

    def signal_once_both_started() -> None:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and waiting.is_set():
            if all((cell.run_dir / 'started').exists() for cell in cells[:2]):
                os.kill(os.getpid(), signal.SIGTERM)
                return
            time.sleep(0.02)

    with signals_as_interrupts():
        waiting.set()
        threading.Thread(target=signal_once_both_started, daemon=True).start()
        try:
            with pytest.raises(Interrupted) as interrupted:
                run_cells_side_by_side(cells, 2, tmp_path / 'logs', _PREFIX)
        finally:
            waiting.clear()
    assert interrupted.value.exit_status == 143
    assert str(interrupted.value).startswith('interrupted (SIGTERM) while running cells side by side')
    for cell in cells[:2]:
        assert 'stopped by SIGTERM' in (tmp_path / 'logs' / f'{cell.id}.log').read_text()
    assert not (tmp_path / 'logs' / 'never.log').exists()


@pytest.mark.parametrize('argv, message', [
    (['--jobs', '0'], '--jobs must be >= 1'),
    (['--jobs', '2', '--launcher', 'submitit'], '--jobs runs cells side by side on this machine'),
    (['--jobs', '2', '--dry-run'], '--dry-run runs no cell: --jobs would not be used'),
])
def test_bad_jobs_are_one_line_errors(argv, message, capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(['nofrost', *argv])
    assert exit_info.value.code == 2
    assert message in capsys.readouterr().err


def test_jobs_reach_the_study_options():
    assert study_options(get_args_parser().parse_args(['nofrost', '--jobs', '3', '--plan'])).jobs == 3
    assert study_options(get_args_parser().parse_args(['nofrost'])).jobs == 1
