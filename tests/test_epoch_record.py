"""train_adv.py's epoch record: the checkpoints of an epoch and its ``summary.csv`` row survive a kill between any two
of their writes (resuming completes what is missing), a recovery checkpoint resumes inside its epoch, one run folder
serves one training process at a time, and resuming from an earlier checkpoint than the run's latest is refused
unless ``--resume-from-earlier`` says to rewind the run.
"""
import csv
import itertools
import logging
import os
import shutil
import socket
import subprocess
import sys
from pathlib import Path
from typing import Callable, Dict, List, Tuple

import pytest
import torch

from tiny_runs import tiny_digits, tiny_train_argv
from timm_advnorm.train import runner
from timm_advnorm.train.epoch_record import EpochRecordSaver, write_summary_row
from timm_advnorm.train.run_lock import LOCK_FILE, acquire_run_lock, release_run_lock
from timm_advnorm.commands.train import main, run

# columns that measure the machine, not the training
_TIMING = ('train_seconds', 'train_images_per_sec', 'train_peak_memory_mb')


@pytest.fixture(scope='module')
def tiny(digits_dir, tmp_path_factory) -> Path:
    return tiny_digits(digits_dir, tmp_path_factory.mktemp('tiny'))


def _rank_epochs(monkeypatch, later_is_better: bool) -> List[str]:
    """Rank each epoch above (or below) the one before by ``--eval-metric top1`` (50 ± the epoch), so that the
    tests know which checkpoints a run keeps (the tiny runs' accuracies tie); returns the option to add."""
    epochs = []
    train_one_epoch, validate = runner.train_one_epoch, runner.validate

    def training(epoch, *args, **kwargs):
        epochs.append(epoch)
        return train_one_epoch(epoch, *args, **kwargs)

    def validation(*args, **kwargs):
        result = validate(*args, **kwargs)
        result.metrics['top1'] = 50.0 + (epochs[-1] if later_is_better else -epochs[-1])
        return result

    monkeypatch.setattr(runner, 'train_one_epoch', training)
    monkeypatch.setattr(runner, 'validate', validation)
    return ['--eval-metric', 'top1']


def _run(capsys, argv: List[str]) -> Tuple[int, List[str], str]:
    """Run the command in-process as the console does: its status, its error lines, its whole stderr."""
    capsys.readouterr()
    status = run('train_adv.py', argv)
    err = capsys.readouterr().err
    return status, [line for line in err.splitlines() if line.startswith('train_adv.py: error:')], err


def _snapshot(folder: Path) -> Dict[str, bytes]:
    return {p.name: p.read_bytes() for p in folder.iterdir()}


def _rows(folder: Path) -> List[Dict[str, str]]:
    with open(folder / 'summary.csv', newline='') as f:
        return [{k: v for k, v in row.items() if k not in _TIMING} for row in csv.DictReader(f)]


def _checkpoint_epochs(folder: Path) -> Dict[str, int]:
    return {p.name: torch.load(p, map_location='cpu', weights_only=False)['epoch']
            for p in sorted(folder.glob('*.pth.tar'))}


class _KillAt:
    """Raises KeyboardInterrupt (as a kill, it stops the run) before the `at`-th file write of epoch 1's record:
    checkpoint serialisation, rename, link, copy or removal."""

    def __init__(self, monkeypatch, at: int):
        self.at, self.count, self.armed = at, 0, False
        for owner, name in ((torch, 'save'), (os, 'replace'), (os, 'link'), (os, 'remove'), (shutil, 'copy2')):
            monkeypatch.setattr(owner, name, self._counted(getattr(owner, name)))
        save_epoch = EpochRecordSaver.save_epoch

        def armed_in_epoch_1(saver, epoch, row, metric):
            self.armed = epoch == 1
            try:
                save_epoch(saver, epoch, row, metric)
            finally:
                self.armed = False

        monkeypatch.setattr(EpochRecordSaver, 'save_epoch', armed_in_epoch_1)

    def _counted(self, write: Callable) -> Callable:
        def counted(*args, **kwargs):
            if self.armed:
                if self.count == self.at:
                    raise KeyboardInterrupt
                self.count += 1
            return write(*args, **kwargs)
        return counted


def test_a_kill_between_any_two_writes_of_an_epoch_record_is_completed_by_resuming(tiny, tmp_path, monkeypatch):
    """From one run's epoch 0, epoch 1 is trained again and again, killed before each write of its record in turn,
    then resumed from the ``last.pth.tar`` left: the rows and checkpoints always end as the uninterrupted run's.

    On a file system without hard links, where ``checkpoint-N`` and ``model_best`` are full copies of ``last``: the
    longest record (with hard links each copy is a link, written at the same points).
    """
    def no_links(*args, **kwargs):
        raise OSError(1, 'Operation not permitted')

    monkeypatch.setattr(os, 'link', no_links)
    each_epoch_best = _rank_epochs(monkeypatch, later_is_better=True)  # each epoch writes checkpoint-N and model_best
    epoch_0 = tmp_path / 'epoch-0'
    assert main(tiny_train_argv(tiny, epoch_0, *each_epoch_best, '--epochs', '1')) == 0

    uninterrupted = tmp_path / 'uninterrupted' / 'run'
    shutil.copytree(epoch_0 / 'run', uninterrupted)
    assert main(tiny_train_argv(tiny, uninterrupted.parent, *each_epoch_best, '--epochs', '2', '--resume-with-changes',
                                '--resume', str(uninterrupted / 'last.pth.tar'))) == 0
    expected_rows, expected_checkpoints = _rows(uninterrupted), _checkpoint_epochs(uninterrupted)
    assert [r['epoch'] for r in expected_rows] == ['0', '1']
    assert expected_checkpoints == {'checkpoint-0.pth.tar': 0, 'checkpoint-1.pth.tar': 1, 'last.pth.tar': 1,
                                    'model_best.pth.tar': 1}

    for at in itertools.count():
        folder = tmp_path / f'killed-{at}' / 'run'
        shutil.copytree(epoch_0 / 'run', folder)
        argv = tiny_train_argv(tiny, folder.parent, *each_epoch_best, '--epochs', '2', '--resume-with-changes',
                               '--resume', str(folder / 'last.pth.tar'))
        with monkeypatch.context() as patches:
            _KillAt(patches, at)
            try:
                finished = main(argv) == 0  # the record has fewer writes than `at`
            except KeyboardInterrupt:
                finished = False
        if not finished:
            assert main(argv) == 0
        assert _rows(folder) == expected_rows, f'killed before write {at}'
        assert _checkpoint_epochs(folder) == expected_checkpoints, f'killed before write {at}'
        assert not [p.name for p in folder.iterdir() if 'partial' in p.name or p.name in ('tmp.pth.tar', LOCK_FILE)]
        if finished:
            break
    assert at >= 7  # the checkpoint, last, checkpoint-1, model_best (each made and renamed), the row


def test_a_resume_from_a_recovery_checkpoint_finishes_its_epoch(tiny, tmp_path, monkeypatch):
    """A run stopped after two of its epoch's three updates, each followed by a recovery checkpoint, resumes from the
    second: it makes the third update, then writes the epoch's record (before, it went on at the next epoch, and the
    epoch had no row)."""
    out, folder = tmp_path / 'runs', tmp_path / 'runs' / 'run'
    save_recovery = EpochRecordSaver.save_recovery

    def stopped_after_update_2(saver, epoch, batch_idx=0):
        save_recovery(saver, epoch, batch_idx)
        if batch_idx == 1:
            raise KeyboardInterrupt

    with monkeypatch.context() as patches:
        patches.setattr(EpochRecordSaver, 'save_recovery', stopped_after_update_2)
        with pytest.raises(KeyboardInterrupt):
            main(tiny_train_argv(tiny, out, '--epochs', '1', '--recovery-interval', '1'))
    recovery = folder / 'recovery-0-1.pth.tar'
    assert recovery.exists() and (folder / 'args.yaml').exists() and not (folder / 'last.pth.tar').exists()

    resumed_at = []
    train_one_epoch = runner.train_one_epoch
    monkeypatch.setattr(runner, 'train_one_epoch', lambda epoch, *args, **kwargs: resumed_at.append(
        (epoch, kwargs['updates_done'])) or train_one_epoch(epoch, *args, **kwargs))
    assert main(tiny_train_argv(tiny, out, '--epochs', '1', '--resume', str(recovery))) == 0
    assert resumed_at == [(0, 2)]
    assert [row['epoch'] for row in _rows(folder)] == ['0']
    assert _checkpoint_epochs(folder)['last.pth.tar'] == 0


def test_resuming_from_an_earlier_checkpoint_needs_resume_from_earlier_and_rewinds_the_run(tiny, tmp_path,
                                                                                          monkeypatch, capsys,
                                                                                          caplog):
    """``--resume model_best.pth.tar`` of a finished run whose best epoch is its first: refused before anything is
    written, naming what it would replace; with ``--resume-from-earlier`` the run goes on from there, its later
    rows and checkpoints replaced, none duplicated."""
    out, folder = tmp_path / 'runs', tmp_path / 'runs' / 'run'
    ranked = _rank_epochs(monkeypatch, later_is_better=False)
    assert main(tiny_train_argv(tiny, out, *ranked, '--epochs', '2')) == 0
    assert _checkpoint_epochs(folder) == {'checkpoint-0.pth.tar': 0, 'checkpoint-1.pth.tar': 1, 'last.pth.tar': 1,
                                          'model_best.pth.tar': 0}
    before = _snapshot(folder)
    argv = tiny_train_argv(tiny, out, *ranked, '--epochs', '2', '--resume', str(folder / 'model_best.pth.tar'))
    status, errors, err = _run(capsys, argv)
    assert status == 2 and len(errors) == 1 and 'Traceback' not in err, err
    assert ('is at the end of epoch 0, but its run went on to the end of epoch 1' in errors[0]
            and 'summary rows from epoch 1 on' in errors[0] and '--resume-from-earlier' in errors[0]), errors[0]
    assert _snapshot(folder) == before

    caplog.set_level(logging.WARNING, logger='train_adv')
    status, errors, err = _run(capsys, argv + ['--resume-from-earlier'])
    assert status == 0, err
    assert 'rewinding' in caplog.text and 'summary rows from epoch 1 on' in caplog.text
    assert [row['epoch'] for row in _rows(folder)] == ['0', '1']
    assert _checkpoint_epochs(folder) == {'checkpoint-0.pth.tar': 0, 'checkpoint-1.pth.tar': 1, 'last.pth.tar': 1,
                                          'model_best.pth.tar': 0}
    assert (folder / 'last.pth.tar').read_bytes() != before['last.pth.tar']  # epoch 1 trained again


def test_a_resume_of_a_run_another_process_trains_is_refused(tiny, tmp_path, capsys):
    out, folder = tmp_path / 'runs', tmp_path / 'runs' / 'run'
    assert main(tiny_train_argv(tiny, out, '--epochs', '1')) == 0
    assert not (folder / LOCK_FILE).exists(), 'a finished run leaves no lock'
    with subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(120)']) as other:
        try:
            (folder / LOCK_FILE).write_text(f'{other.pid} {socket.gethostname()}\n')
            before = _snapshot(folder)
            status, errors, err = _run(capsys, tiny_train_argv(tiny, out, '--epochs', '2', '--resume-with-changes',
                                                               '--resume', str(folder / 'last.pth.tar')))
        finally:
            other.kill()
    assert status == 2 and len(errors) == 1 and 'Traceback' not in err, err
    assert f'in use by training process {other.pid}' in errors[0]
    assert _snapshot(folder) == before


def test_a_run_lock_names_its_owner_and_a_dead_owner_s_lock_is_taken_over(tmp_path):
    acquire_run_lock(str(tmp_path))
    assert (tmp_path / LOCK_FILE).read_text().split() == [str(os.getpid()), socket.gethostname()]
    with pytest.raises(ValueError, match=f'in use by training process {os.getpid()}'):
        acquire_run_lock(str(tmp_path))
    release_run_lock(str(tmp_path))
    assert not (tmp_path / LOCK_FILE).exists()

    ended = subprocess.run([sys.executable, '-c', 'import os; print(os.getpid())'], capture_output=True, text=True)
    for stale in (f'{ended.stdout.strip()} {socket.gethostname()}\n', ''):  # a dead owner; a lock cut short
        (tmp_path / LOCK_FILE).write_text(stale)
        acquire_run_lock(str(tmp_path))
        assert (tmp_path / LOCK_FILE).read_text().split()[0] == str(os.getpid())
        release_run_lock(str(tmp_path))
    (tmp_path / LOCK_FILE).write_text('1 another-host\n')  # its process cannot be asked: taken as alive
    with pytest.raises(ValueError, match='in use by training process 1 on another-host'):
        acquire_run_lock(str(tmp_path))


def test_summary_rows_are_keyed_by_epoch(tmp_path):
    """Writing an epoch's row replaces that epoch's row and drops the later ones: a resumed run never duplicates."""
    path = tmp_path / 'summary.csv'
    for epoch, loss in ((0, 2.0), (1, 1.5), (2, 1.0), (1, 1.25)):
        write_summary_row(path, {'epoch': epoch, 'train_loss': loss})
    with open(path, newline='') as f:
        assert list(csv.DictReader(f)) == [{'epoch': '0', 'train_loss': '2.0'}, {'epoch': '1', 'train_loss': '1.25'}]
    assert [p.name for p in tmp_path.iterdir()] == ['summary.csv']
