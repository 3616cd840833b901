"""SIGINT and SIGTERM stop training and evaluation with one line, exit status 128 + the signal's number, and a state
to resume from, named in the line; a run stopped before its first checkpoint leaves no folder.

Each test starts the command as a process of its own and, once its run is under way, sends the signal to the
command's process group, as a terminal sends Ctrl-C (data-loading workers included).
"""
import json
import multiprocessing
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Callable, List, Tuple

import pytest

from tiny_runs import tiny_digits, tiny_train_argv
from timm_advnorm.eval.run import state as state_module
from timm_advnorm.signals import Interrupted, check_interrupted, interrupts_between_steps, signals_as_interrupts
from timm_advnorm.commands.train import main

_ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope='module')
def tiny(digits_dir, tmp_path_factory) -> Path:
    return tiny_digits(digits_dir, tmp_path_factory.mktemp('tiny'))


def _interrupted(script: str, argv: List[str], ready: Callable[[], bool], signum: int,
                 timeout: float = 300) -> Tuple[int, List[str]]:
    """Run `script` with `argv` in a process group of its own, send `signum` to the group once `ready()`; its exit
    status and the lines of its stderr."""
    process = subprocess.Popen([sys.executable, str(_ROOT / script), *argv], cwd=_ROOT, stdout=subprocess.DEVNULL,
                               stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        deadline = time.monotonic() + timeout
        while not ready():
            assert process.poll() is None, f'{script} ended before it was ready to be interrupted'
            assert time.monotonic() < deadline, f'{script} was not ready within {timeout} s'
            time.sleep(0.05)
        os.killpg(process.pid, signum)
        _, err = process.communicate(timeout=timeout)
    finally:
        process.kill()
    return process.returncode, err.splitlines()


def _own_lines(prog: str, lines: List[str]) -> List[str]:
    """The lines the command says itself (``<prog>: ...``), not its log."""
    return [line for line in lines if line.startswith(f'{prog}:')]


@pytest.mark.parametrize('signum, workers', [(signal.SIGINT, '2'), (signal.SIGTERM, '0')], ids=['SIGINT', 'SIGTERM'])
def test_a_signal_stops_training_with_one_line_naming_the_checkpoint_to_resume(tiny, tmp_path, signum, workers):
    """Ctrl-C reaches the data-loading workers too: still one line, no worker's traceback."""
    out, folder = tmp_path / 'runs', tmp_path / 'runs' / 'run'
    status, lines = _interrupted('train_adv.py', tiny_train_argv(tiny, out, '--epochs', '2', '--workers', workers),
                                 lambda: (folder / 'summary.csv').exists(), signum)
    said = _own_lines('train_adv.py', lines)
    assert status == 128 + signum and not [line for line in lines if "Traceback" in line], "\n".join(lines)
    name = signal.Signals(signum).name
    assert len(said) == 1 and re.fullmatch(  # in epoch 1, or still writing epoch 0's budget after its row
        rf'train_adv\.py: interrupted \({name}\) in epoch [01]; resume with --resume '
        rf'{re.escape(str(folder / "last.pth.tar"))}', said[0]), said
    assert sorted(p.name for p in folder.iterdir()) == [
        'args.yaml', 'budget.yaml', 'checkpoint-0.pth.tar', 'last.pth.tar', 'model_best.pth.tar', 'summary.csv']

    resume = re.search(r'--resume (\S+)$', said[0]).group(1)
    assert main(tiny_train_argv(tiny, out, '--epochs', '2', '--resume', resume)) == 0
    assert (folder / 'checkpoint-1.pth.tar').exists() and len((folder / 'summary.csv').read_text().splitlines()) == 3


def test_a_training_stopped_before_its_first_checkpoint_leaves_no_folder(tiny, tmp_path):
    out = tmp_path / 'outputs' / 'runs'  # neither exists: the run makes both, and removes both
    status, lines = _interrupted('train_adv.py', tiny_train_argv(tiny, out, '--epochs', '1'),
                                 lambda: (out / 'run' / 'args.yaml').exists(), signal.SIGTERM)
    assert status == 143, lines
    assert _own_lines('train_adv.py', lines) == [
        'train_adv.py: interrupted (SIGTERM) in epoch 0; before its first checkpoint: nothing to resume, the run '
        'folder is removed']
    assert not (tmp_path / 'outputs').exists(), 'the next run would have moved to run-1, beside empty folders'


def test_a_stopped_run_keeps_an_output_folder_that_existed_or_holds_other_runs(tiny, tmp_path):
    out = tmp_path / 'runs'
    (out / 'earlier').mkdir(parents=True)
    status, _ = _interrupted('train_adv.py', tiny_train_argv(tiny, out, '--epochs', '1'),
                             lambda: (out / 'run' / 'args.yaml').exists(), signal.SIGTERM)
    assert status == 143 and [p.name for p in out.iterdir()] == ['earlier']


def test_a_signal_stops_evaluation_with_one_line_and_its_state_file_keeps_what_was_done(digits_dir, tmp_path):
    state, results = tmp_path / 'state.jsonl', tmp_path / 'results.json'
    argv = ['--model', 'test_mbn_resnet', '--dataset', 'digits', '--data-dir', str(digits_dir), '--num-samples', '64',
            '-b', '8', '-j', '0', '--attacks', 'pgd', '--attack-steps', '2000', '--gammas', '1', '--no-progress',
            '--resume-state', str(state), '--results-file', str(results)]

    def records() -> List[dict]:
        return [json.loads(line) for line in state.read_text().splitlines()[1:]] if state.exists() else []

    status, lines = _interrupted('validate_adv.py', argv, lambda: len(records()) >= 1, signal.SIGINT)
    said = _own_lines('validate_adv.py', lines)
    assert status == 130 and not [line for line in lines if 'Traceback' in line], lines
    kept = len(records())
    assert said == [f'validate_adv.py: interrupted (SIGINT) while evaluating: {kept} finished record(s) are kept in '
                    f'{state}; run the same command again to resume'], said
    assert kept >= 1 and not results.exists()


# Where a signal lands -------------------------------------------------------------------------------------------------

def _signal_self(signum: int = signal.SIGINT) -> None:
    os.kill(os.getpid(), signum)
    time.sleep(0.01)  # the handler runs at the next bytecode of the main thread


def test_a_held_signal_raises_at_the_next_check_and_a_second_one_at_once():
    with signals_as_interrupts():
        with pytest.raises(Interrupted) as stopped:
            with interrupts_between_steps():
                _signal_self(signal.SIGTERM)
                reached = True  # held: the step goes on to its end
                check_interrupted()
        assert reached and stopped.value.signum == signal.SIGTERM
    with signals_as_interrupts():
        with pytest.raises(Interrupted):
            with interrupts_between_steps():
                _signal_self()
                _signal_self()  # a loop stuck in a step stops on the second Ctrl-C
                pytest.fail('the second signal did not raise')


def test_a_signal_held_past_the_last_check_raises_when_the_block_ends():
    with signals_as_interrupts():
        with pytest.raises(Interrupted):
            with interrupts_between_steps():
                _signal_self()
        check_interrupted()  # raised once: nothing is held any more


def test_outside_a_holding_block_a_signal_raises_where_it_lands():
    with signals_as_interrupts():
        with pytest.raises(Interrupted):
            _signal_self()
            pytest.fail('the signal did not raise')


def test_a_forked_worker_leaves_the_signal_to_the_process_that_forked_it():
    """A data-loading worker gets Ctrl-C with its group; it must neither print a traceback nor stop on its own."""
    context = multiprocessing.get_context('fork')
    with signals_as_interrupts():
        worker = context.Process(target=_signal_self)
        worker.start()
        worker.join(timeout=60)
    assert worker.exitcode == 0


def test_a_signal_during_a_state_write_is_held_until_the_count_holds_the_record(tmp_path, monkeypatch):
    """The interrupted evaluation's line counts the records its state file keeps, even when the signal lands between
    writing a record and counting it."""
    state = state_module.EvalState(tmp_path / 'state.jsonl', dict(model='m'))
    fsync = os.fsync
    monkeypatch.setattr(state_module.os, 'fsync', lambda fd: (fsync(fd), _signal_self()))
    with signals_as_interrupts(), pytest.raises(Interrupted):
        state.append(dict(variant='v', stage='clean', start=0, columns={}))
    assert len(state) == len(state_module.EvalState(tmp_path / 'state.jsonl', dict(model='m'))) == 1
