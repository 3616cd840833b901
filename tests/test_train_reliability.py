"""train_adv.py when things go wrong: divergence, interrupted writes, runs started together, runs with nothing to do.

A diverging run stops on one line (or skips a bounded number of non-finite steps) and never writes non-finite
weights; ``last`` and ``model_best`` stay the last good ones and resume. A run that fails before its first checkpoint
leaves no folder; a checkpoint write cut short is cleaned up when its run resumes, and ``summary.csv`` lists only
epochs whose checkpoint was written.
"""
import csv
import logging
import os
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import List, Tuple

import pytest
import torch
from timm.utils import CheckpointSaver

from timm_advnorm.train import runner
from timm_advnorm.train.run_folder import new_run_folder
from timm_advnorm.commands.train import main, run

# the README's digits recipe, shortened, with a one-epoch warm-up: epoch 0 runs at 1e-5 (timm warms up per epoch), so
# an --lr of 1e4 diverges in epoch 1
DEMO = ['-c', 'digits_demo_mbn', '--attack-steps', '1', '--val-attack-steps', '1', '--num-samples', '16',
        '--workers', '0', '--log-interval', '0', '--warmup-epochs', '1']


def _argv(digits_dir: Path, out: Path, *extra: str) -> List[str]:
    return ['--data-dir', str(digits_dir), '--output', str(out), '--experiment', 'run', *DEMO, *extra]


def _run(capsys, argv: List[str]) -> Tuple[int, List[str], str]:
    """Run the command in-process as the console does: its status, its error lines, its whole stderr."""
    capsys.readouterr()
    try:
        status = run('train_adv.py', argv)
    except SystemExit as e:  # argparse's usage errors exit from inside
        status = e.code
    err = capsys.readouterr().err
    return status, [line for line in err.splitlines() if 'error' in line.lower()], err


def _summary_epochs(folder: Path) -> List[str]:
    with open(folder / 'summary.csv') as f:
        return [row['epoch'] for row in csv.DictReader(f)]


def _checkpoint(path: Path) -> dict:
    return torch.load(path, map_location='cpu', weights_only=False)


def _all_finite(state_dict: dict) -> bool:
    return all(torch.isfinite(v).all() for v in state_dict.values() if v.is_floating_point())


def _snapshot(folder: Path) -> dict:
    return {p.name: p.read_bytes() for p in folder.iterdir()}


def test_a_diverging_run_stops_on_one_line_and_keeps_its_last_good_checkpoints_to_resume(digits_dir, tmp_path,
                                                                                         capsys):
    out = tmp_path / 'runs'
    status, errors, err = _run(capsys, _argv(digits_dir, out, '--epochs', '3', '--lr', '1e4'))
    folder = out / 'run'
    assert status == 2 and 'Traceback' not in err, err
    assert len(errors) == 1 and errors[0].startswith('train_adv.py: error: training diverged: non-finite'), err
    assert 'at epoch 1' in errors[0] and str(folder / 'last.pth.tar') in errors[0]
    assert _summary_epochs(folder) == ['0']
    for name in ('last', 'model_best', 'checkpoint-0'):
        checkpoint = _checkpoint(folder / f'{name}.pth.tar')
        assert checkpoint['epoch'] == 0 and _all_finite(checkpoint['state_dict']), name
    assert sorted(p.name for p in folder.iterdir()) == [
        'args.yaml', 'budget.yaml', 'checkpoint-0.pth.tar', 'last.pth.tar', 'model_best.pth.tar', 'summary.csv']

    # the optimizer state carries the diverging learning rate: a new one needs --no-resume-opt, and a change of the
    # recorded recipe --resume-with-changes, as the error says
    assert '--resume-with-changes --no-resume-opt' in errors[0]
    resume = ['--resume', str(folder / 'last.pth.tar'), '--epochs', '2']
    status, errors, err = _run(capsys, _argv(digits_dir, out, *resume, '--resume-with-changes', '--no-resume-opt',
                                             '--lr', '0.05'))
    assert status == 0, err
    assert _summary_epochs(folder) == ['0', '1']
    last = _checkpoint(folder / 'last.pth.tar')
    assert last['epoch'] == 1 and _all_finite(last['state_dict'])

    before = _snapshot(folder)  # resuming a finished run: no step to make, an error before anything is written
    status, errors, err = _run(capsys, _argv(digits_dir, out, *resume))
    assert status == 2 and len(errors) == 1 and 'nothing is left to train' in errors[0], err
    assert _snapshot(folder) == before


def test_a_run_diverging_before_its_first_checkpoint_leaves_no_folder(digits_dir, tmp_path, capsys):
    out = tmp_path / 'runs'
    status, errors, err = _run(capsys, _argv(digits_dir, out, '--epochs', '1', '--lr', '1e4', '--warmup-epochs', '0'))
    assert status == 2 and len(errors) == 1 and 'Traceback' not in err, err
    assert 'at epoch 0' in errors[0] and 'no checkpoint was written' in errors[0]
    assert not out.exists(), 'a folder holding only args.yaml (or the --output folder the run made) was left behind'


def test_skip_nonfinite_skips_a_bounded_number_of_steps_and_saves_finite_weights(digits_dir, tmp_path, capsys,
                                                                                 caplog):
    """Every step of epoch 1 at lr 7.5e3 is non-finite: skipped, none reaches the weights, the run completes."""
    out = tmp_path / 'runs'
    caplog.set_level(logging.WARNING)
    status, errors, err = _run(capsys, _argv(digits_dir, out, '--epochs', '2', '--lr', '1e4',
                                             '--skip-nonfinite', '1000'))
    assert status == 0, err
    assert 'Skipped a training step (1 of at most 1000' in caplog.text
    assert _summary_epochs(out / 'run') == ['0', '1']
    last = _checkpoint(out / 'run' / 'last.pth.tar')
    assert last['epoch'] == 1 and _all_finite(last['state_dict'])


def test_a_write_cut_short_leaves_no_summary_row_and_its_partial_file_goes_on_resume(digits_dir, tmp_path,
                                                                                     monkeypatch):
    """A kill while epoch 1's checkpoint is written: the partial ``tmp.pth.tar`` stays (nothing runs at a kill), the
    summary ends at epoch 0, whose checkpoint exists; resuming removes the partial file before training."""
    out, folder = tmp_path / 'runs', tmp_path / 'runs' / 'run'
    save = CheckpointSaver.save_checkpoint

    def killed_writing_epoch_1(self, epoch, metric=None):
        if epoch == 1:
            (Path(self.checkpoint_dir) / 'tmp.pth.tar').write_bytes(b'the first bytes of a checkpoint')
            raise KeyboardInterrupt
        return save(self, epoch, metric)

    monkeypatch.setattr(CheckpointSaver, 'save_checkpoint', killed_writing_epoch_1)
    with pytest.raises(KeyboardInterrupt):
        main(_argv(digits_dir, out, '--epochs', '2'))
    monkeypatch.undo()
    assert _summary_epochs(folder) == ['0'] and _checkpoint(folder / 'last.pth.tar')['epoch'] == 0
    assert (folder / 'tmp.pth.tar').exists()

    seen = []
    train_one_epoch = runner.train_one_epoch
    monkeypatch.setattr(runner, 'train_one_epoch', lambda *a, **k: seen.append(
        (folder / 'tmp.pth.tar').exists()) or train_one_epoch(*a, **k))
    assert main(_argv(digits_dir, out, '--epochs', '2', '--resume', str(folder / 'last.pth.tar'))) == 0
    assert seen == [False], 'the partial checkpoint must be gone when the resumed run starts'
    assert _summary_epochs(folder) == ['0', '1']


def test_a_run_interrupted_in_its_first_epoch_leaves_no_folder(digits_dir, tmp_path, monkeypatch):
    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(runner, 'train_one_epoch', interrupted)
    with pytest.raises(KeyboardInterrupt):
        main(_argv(digits_dir, tmp_path / 'runs', '--epochs', '1'))
    assert not (tmp_path / 'runs').exists()  # the run folder and the --output folder the run made


def test_runs_started_together_get_their_own_folders(tmp_path, monkeypatch):
    """timm's `get_outdir` looks, then creates: a run claiming the name in between made the other fail after its
    whole set-up. Each run now takes the next free name, as runs started one after the other do."""
    mkdir = os.mkdir

    def rival_first(path, *args, **kwargs):  # another run creates the folder between our look and our mkdir
        if os.path.basename(path) == 'run' and not os.path.exists(path):
            mkdir(path)
        return mkdir(path, *args, **kwargs)

    monkeypatch.setattr(os, 'mkdir', rival_first)
    assert new_run_folder(str(tmp_path / 'interleaved'), 'run') == str(tmp_path / 'interleaved' / 'run-1')
    monkeypatch.undo()

    root = str(tmp_path / 'threads')
    for trial in range(20):
        barrier = threading.Barrier(2)

        def start(name=f'run{trial}'):
            barrier.wait()
            return new_run_folder(root, name)

        with ThreadPoolExecutor(2) as pool:
            folders = sorted(f.result() for f in [pool.submit(start), pool.submit(start)])
        assert folders == [os.path.join(root, f'run{trial}'), os.path.join(root, f'run{trial}-1')]


def test_a_config_number_is_checked_as_the_command_line_one(digits_dir, tmp_path, capsys):
    config = tmp_path / 'nan.yaml'
    config.write_text('lr: .nan\n')
    status, errors, err = _run(capsys, ['-c', str(config), '--data-dir', str(digits_dir), '--output',
                                        str(tmp_path / 'runs')])
    assert status == 2 and len(errors) == 1 and 'lr' in errors[0] and 'nan' in errors[0], err
    assert not (tmp_path / 'runs').exists()


@pytest.mark.skipif(torch.cuda.is_available(), reason='needs a machine without a CUDA device')
def test_cuda_without_a_device_is_one_line(digits_dir, tmp_path, capsys):
    status, errors, err = _run(capsys, _argv(digits_dir, tmp_path / 'runs', '--device', 'cuda'))
    assert status == 2 and len(errors) == 1 and 'Traceback' not in err, err
    assert errors[0].startswith('train_adv.py: error: --device cuda: no CUDA device')
    assert not (tmp_path / 'runs').exists()
