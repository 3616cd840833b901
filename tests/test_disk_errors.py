"""A full disk (or another OS error) while a command writes: one line naming the file and the OS reason, exit status
2, the files written before byte-identical, no partial file left in the way, and a rerun that proceeds.

The disk fills inside the real writers (``torch.save``, ``Path.write_text``, PIL's ``save``, the export's
``save_for_hf``, ``os.write``), each first writing part of its file, as a full disk does.
"""
import argparse
import errno
import json
import os
import shutil
from pathlib import Path
from typing import Callable, List

import numpy as np
import pytest
import timm
import torch
import torch.nn as nn
from PIL import Image
from safetensors import SafetensorError
from snapshots import folder_snapshot

from timm_advnorm import write_guard
from timm_advnorm.commands.deepaugment import run as run_generate
from timm_advnorm.commands.publish import run as run_publish
from timm_advnorm.commands.train import run as run_train
from timm_advnorm.commands.validate import run as run_validate
from timm_advnorm.eval.run import state as state_module
from timm_advnorm.eval.run.state import EvalState
from timm_advnorm.train.checkpoint_saver import SafeCheckpointSaver
from timm_advnorm.weights import export as export_module
from timm_advnorm.write_guard import WriteError

NO_SPACE = os.strerror(errno.ENOSPC)  # 'No space left on device'


def _disk_full() -> OSError:
    return OSError(errno.ENOSPC, NO_SPACE)


def _one_error(capsys, command: Callable[..., int], argv: List) -> str:
    """Run `command`: exit status 2 and exactly one line on stderr, returned."""
    capsys.readouterr()
    assert command(argv=[str(a) for a in argv]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and 'Traceback' not in err[0], err
    return err[0]


# ----------------------------------------------------------------------------------------------------------------
# Training checkpoints


def _saver(folder: Path) -> SafeCheckpointSaver:
    model = nn.Linear(4, 2)
    return SafeCheckpointSaver(model, torch.optim.SGD(model.parameters(), lr=0.1), checkpoint_dir=str(folder),
                               recovery_dir=str(folder), max_history=1)


def _torch_writer_full() -> RuntimeError:
    """What ``torch.save`` really raises on a full disk (torch 2.x): its archive writer's RuntimeError, raised while
    handling the stream's, neither holding the OS error."""
    try:
        raise RuntimeError('basic_ios::clear: iostream error')
    except RuntimeError:
        try:
            raise RuntimeError('[enforce fail at inline_container.cc:672] . unexpected pos 704 vs 598')
        except RuntimeError as e:
            return e


def _disk_is_full(monkeypatch) -> None:
    """The disk the checkpoints go to has no space left (what `write_guard` measures after torch's writer fails)."""
    monkeypatch.setattr(write_guard.shutil, 'disk_usage', lambda path: shutil._ntuple_diskusage(10 ** 9, 10 ** 9, 0))


def _torch_save_fails_midway(monkeypatch, error: Callable[[], BaseException] = _disk_full) -> None:
    def partial_save(obj, path, *args, **kwargs):
        Path(path).write_bytes(b'PK\x03\x04 the first bytes of a checkpoint')
        raise error()
    monkeypatch.setattr(torch, 'save', partial_save)


@pytest.mark.parametrize('error', [_disk_full, _torch_writer_full], ids=['os-error', 'torch-writer-error'])
def test_a_checkpoint_save_on_a_full_disk_keeps_the_previous_one_and_removes_its_partial(tmp_path, monkeypatch, error):
    saver = _saver(tmp_path)
    saver.save_checkpoint(0, metric=1.0)
    before = folder_snapshot(tmp_path)
    _disk_is_full(monkeypatch)
    _torch_save_fails_midway(monkeypatch, error)
    with pytest.raises(WriteError) as error:
        saver.save_checkpoint(1, metric=2.0)
    last = tmp_path / 'last.pth.tar'
    assert str(error.value) == f'cannot write {last}: {NO_SPACE} (the previous checkpoint is intact)'
    assert error.value.errno == errno.ENOSPC
    assert folder_snapshot(tmp_path) == before  # no tmp.pth.tar taking the space the next save needs
    with pytest.raises(WriteError, match=r'recovery-1-7.pth.tar: No space left on device'):
        saver.save_recovery(1, batch_idx=7)
    assert folder_snapshot(tmp_path) == before


def test_a_torch_writer_failure_with_space_left_names_torch_and_other_runtime_errors_pass(tmp_path, monkeypatch):
    saver = _saver(tmp_path)
    _torch_save_fails_midway(monkeypatch, lambda: RuntimeError('PytorchStreamWriter failed writing file data/0: file '
                                                                'write failed'))
    with pytest.raises(WriteError, match=r'last.pth.tar: the write failed \(torch: PytorchStreamWriter failed writing '
                                         r'file data/0: file write failed\); is the disk or a quota full\? \(no '
                                         r'checkpoint was written\)$'):
        saver.save_checkpoint(0, metric=1.0)
    _torch_save_fails_midway(monkeypatch, lambda: RuntimeError('CUDA error: an illegal memory access'))
    with pytest.raises(RuntimeError, match='illegal memory access'):  # a defect, not the disk: its traceback stays
        saver.save_checkpoint(0, metric=1.0)
    assert not list(tmp_path.iterdir())


def test_a_failed_copy_never_replaces_model_best_by_a_partial_one(tmp_path, monkeypatch):
    """Where hard links fail, timm copies ``last`` onto ``model_best`` after removing it: a full disk lost it."""
    saver = _saver(tmp_path)
    saver.save_checkpoint(0, metric=1.0)
    best = (tmp_path / 'model_best.pth.tar').read_bytes()
    saver.can_hardlink = False

    copy = shutil.copy2

    def partial_copy(src, dst, *args, **kwargs):
        if 'model_best' not in Path(dst).name:
            return copy(src, dst, *args, **kwargs)
        Path(dst).write_bytes(Path(src).read_bytes()[:10])
        raise _disk_full()
    monkeypatch.setattr(shutil, 'copy2', partial_copy)
    with pytest.raises(WriteError, match=r'model_best.pth.tar: No space left on device \(.*last.pth.tar holds these '
                                         r'weights, .*model_best.pth.tar the previous ones\)'):
        saver.save_checkpoint(1, metric=2.0)
    assert (tmp_path / 'model_best.pth.tar').read_bytes() == best
    assert not [p for p in tmp_path.iterdir() if p.name.endswith('.partial')]


def test_a_fixed_temporary_name_is_reclaimed_and_a_failed_write_says_what_is_kept(tmp_path):
    """Training writes its files under fixed temporary names (`atomic_write`'s ``temp``), so that what a killed write
    left is reclaimed by the next one: never written through (it may be a hard link to a checkpoint), then removed."""
    target, checkpoint, partial = tmp_path / 'summary.csv', tmp_path / 'last.pth.tar', tmp_path / 'summary.csv.partial'
    checkpoint.write_bytes(b'weights')
    os.link(checkpoint, partial)  # what a kill between a link and its rename leaves
    write_guard.atomic_write(target, lambda tmp: tmp.write_text('rows'), temp=partial)
    assert target.read_text() == 'rows' and checkpoint.read_bytes() == b'weights' and not partial.exists()

    def full(tmp):
        tmp.write_text('half')
        raise _disk_full()
    with pytest.raises(WriteError, match=r'^cannot write .*summary.csv: No space left on device \(rows kept\)$'):
        write_guard.atomic_write(target, full, kept='rows kept', temp=partial)
    assert target.read_text() == 'rows'
    assert sorted(p.name for p in tmp_path.iterdir()) == ['last.pth.tar', 'summary.csv']


def _image_folder(root: Path, size: int = 16) -> Path:
    """A two-class image folder with train and validation splits of four images each: a training run of seconds."""
    rng = np.random.default_rng(0)
    for split in ('train', 'validation'):
        for label in range(2):
            (root / split / str(label)).mkdir(parents=True)
            for index in range(2):
                pixels = rng.integers(0, 256, (size, size, 3), dtype=np.uint8)
                Image.fromarray(pixels).save(root / split / str(label) / f'{index}.png')
    return root


def test_training_on_a_full_disk_stops_on_one_line_and_resumes(tmp_path, monkeypatch, capsys):
    folder = tmp_path / 'runs' / 'run'
    argv = ['--dataset', '', '--data-dir', _image_folder(tmp_path / 'data'), '--num-classes', '2', '--model',
            'test_mbn_resnet', '--method', 'mbn', '--img-size', '16', '--batch-size', '2', '--attack-steps', '1',
            '--val-attack-steps', '1', '--workers', '0', '--log-interval', '0', '--epochs', '2', '--output',
            tmp_path / 'runs', '--experiment', 'run']
    save, after_epoch_0 = torch.save, {}

    def disk_fills_in_epoch_1(obj, path, *args, **kwargs):
        if obj.get('epoch') == 1:
            after_epoch_0.update(folder_snapshot(folder))
            Path(path).write_bytes(b'PK\x03\x04 the first bytes of a checkpoint')
            raise _torch_writer_full()  # as torch.save fails on a full disk: no OSError
        return save(obj, path, *args, **kwargs)

    monkeypatch.setattr(torch, 'save', disk_fills_in_epoch_1)
    _disk_is_full(monkeypatch)
    error = _one_error(capsys, run_train, argv)
    assert error == (f'timm-advnorm-train: error: cannot write {folder / "last.pth.tar"}: {NO_SPACE} (the previous '
                     'checkpoint is intact)')
    kept = folder_snapshot(folder)
    assert {k: kept[k] for k in ('last.pth.tar', 'model_best.pth.tar', 'checkpoint-0.pth.tar')} == {
        k: after_epoch_0[k] for k in ('last.pth.tar', 'model_best.pth.tar', 'checkpoint-0.pth.tar')}
    assert 'tmp.pth.tar' not in kept
    monkeypatch.undo()
    assert run_train(argv=[str(a) for a in argv + ['--resume', folder / 'last.pth.tar']]) == 0
    assert torch.load(folder / 'last.pth.tar', map_location='cpu', weights_only=False)['epoch'] == 1


# ----------------------------------------------------------------------------------------------------------------
# Evaluation: results and the state file


def _validate_argv(digits_dir: Path, *extra) -> List:
    return ['--model', 'test_mbn_resnet', '--dataset', 'digits', '--data-dir', digits_dir, '--num-samples', '8',
            '--workers', '0', '--sanity-samples', '0', '--no-progress', '--attacks', 'fgsm', *extra]


def test_results_on_a_full_disk_leave_the_previous_results_intact(digits_dir, tmp_path, monkeypatch, capsys):
    for name in ('results.json', 'results.csv'):
        (tmp_path / name).write_text(f'the previous {name}\n')
    before = folder_snapshot(tmp_path)
    write_text = Path.write_text

    def full_disk(path, data, *args, **kwargs):
        if path.name.startswith('.results.'):  # the temporary file a result is written to
            write_text(path, data[:10])
            raise _disk_full()
        return write_text(path, data, *args, **kwargs)

    monkeypatch.setattr(Path, 'write_text', full_disk)
    error = _one_error(capsys, run_validate, _validate_argv(
        digits_dir, '--results-file', tmp_path / 'results.json', '--overwrite'))
    assert error.endswith(f': error: cannot write {tmp_path / "results.csv"}: {NO_SPACE} (no existing file was '
                          'replaced)')
    assert folder_snapshot(tmp_path) == before


@pytest.mark.parametrize('left', [b'', b'{"format":"timm_advnorm.eval.st', b'{"format":"timm_advnorm.eval.state/1",'
                                                                          b'"fingerprint":{"model":"test_m'])
def test_a_state_file_left_empty_or_cut_short_by_a_full_disk_never_blocks_the_rerun(digits_dir, tmp_path, caplog,
                                                                                    left):
    state = tmp_path / 'state.jsonl'
    state.write_bytes(left)
    argv = _validate_argv(digits_dir, '--resume-state', state, '--results-file', tmp_path / 'results.json')
    assert run_validate(argv=[str(a) for a in argv]) == 0
    assert 'replacing a state file whose first line was never completely written' in caplog.text
    assert json.loads(state.read_bytes().split(b'\n')[0])['format'] == 'timm_advnorm.eval.state/1'
    assert len(EvalState(state, json.loads(state.read_bytes().split(b'\n')[0])['fingerprint'])) > 0


def test_a_file_that_is_no_state_file_is_refused_not_replaced(tmp_path):
    path = tmp_path / 'notes.txt'
    path.write_bytes(b'my notes, no newline')
    with pytest.raises(ValueError, match='holds no evaluation state header'):
        EvalState(path, dict(model='m'))
    assert path.read_bytes() == b'my notes, no newline'


def test_a_record_on_a_full_disk_is_one_line_and_the_rerun_keeps_the_records_before(tmp_path, monkeypatch):
    path, fingerprint = tmp_path / 'state.jsonl', dict(model='m')
    state = EvalState(path, fingerprint)
    first = dict(variant='clean', stage='clean', start=0, columns={'correct': [1, 0]})
    state.append(first)
    write = os.write

    def full_disk(fd, data):
        write(fd, bytes(data[:7]))
        raise _disk_full()
    monkeypatch.setattr(state_module.os, 'write', full_disk)
    with pytest.raises(WriteError) as error:
        state.append(dict(first, start=2))
    assert str(error.value) == (f'cannot write {path}: {NO_SPACE} (the state file keeps every finished record: rerun '
                                'to resume)')
    monkeypatch.undo()
    resumed = EvalState(path, fingerprint)
    assert resumed.records() == [first]


def test_a_short_write_of_a_record_is_completed(tmp_path, monkeypatch):
    """``os.write`` may write part of its bytes and return their count: the rest follows, never a cut line."""
    path, fingerprint = tmp_path / 'state.jsonl', dict(model='m')
    write = os.write
    monkeypatch.setattr(state_module.os, 'write', lambda fd, data: write(fd, bytes(data[:5])))
    state = EvalState(path, fingerprint)
    record = dict(variant='clean', stage='clean', start=0, columns={'correct': [1, 0]})
    state.append(record)
    monkeypatch.undo()
    assert EvalState(path, fingerprint).records() == [record]


# ----------------------------------------------------------------------------------------------------------------
# Exports and generated images


def test_an_export_on_a_full_disk_leaves_the_previous_export_intact(tmp_path, monkeypatch, capsys):
    model = timm.create_model('test_resnet', num_classes=3)
    checkpoint = tmp_path / 'weights.pth.tar'
    torch.save(dict(epoch=0, arch='test_resnet', state_dict=model.state_dict(),
                    args=argparse.Namespace(model='test_resnet', num_classes=3)), checkpoint)
    out = tmp_path / 'export'
    argv = [checkpoint, '--local-dir', out, '--overwrite']
    assert run_publish(argv=[str(a) for a in argv]) == 0
    before = folder_snapshot(tmp_path)

    def full_disk(model, folder, **kwargs):  # as safetensors fails on a full disk: its own error, quoting the OS's
        (Path(folder) / 'model.safetensors').write_bytes(b'partial')
        raise SafetensorError(f'Error while serializing: I/O error: {NO_SPACE} (os error {errno.ENOSPC})')
    monkeypatch.setattr(export_module, 'save_for_hf', full_disk)
    error = _one_error(capsys, run_publish, argv)
    assert error.endswith(f': error: cannot write {out}: {NO_SPACE} (the previous export is intact)')
    assert folder_snapshot(tmp_path) == before  # no staging folder left either


def test_deepaugment_on_a_full_disk_keeps_the_images_written_and_resumes(tmp_path, monkeypatch, capsys):
    src, dst = tmp_path / 'src', tmp_path / 'dst'
    (src / 'n01').mkdir(parents=True)
    rng = np.random.default_rng(0)
    for name in ('a.png', 'b.png'):
        Image.fromarray(rng.integers(0, 256, (20, 20, 3), dtype=np.uint8)).save(src / 'n01' / name)
    argv = [src, dst, '--net', 'cae', '--allow-random-weights', '--input-size', '16', '--device', 'cpu',
            '--no-progress']
    save, saved = Image.Image.save, []

    def disk_fills_after_one(image, path, *args, **kwargs):
        if saved:
            Path(path).write_bytes(b'\x89PNG partial')
            raise _disk_full()
        saved.append(path)
        return save(image, path, *args, **kwargs)

    monkeypatch.setattr(Image.Image, 'save', disk_fills_after_one)
    error = _one_error(capsys, run_generate, argv)
    assert error.endswith(f': error: cannot write {dst / "n01" / "b.png"}: {NO_SPACE} (the images written before '
                          'are kept: a rerun resumes)')
    assert sorted(folder_snapshot(dst)) == ['n01', 'n01/a.png']  # no partial file
    first = folder_snapshot(dst)
    monkeypatch.undo()
    assert run_generate(argv=[str(a) for a in argv]) == 0
    assert sorted(folder_snapshot(dst)) == ['n01', 'n01/a.png', 'n01/b.png']
    assert {k: v for k, v in folder_snapshot(dst).items() if k in first} == first
