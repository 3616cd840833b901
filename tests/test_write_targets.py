"""Where the commands may write: never onto, around or inside what they read, and ``--overwrite`` replaces only an
earlier export (a folder holding the manifest the package writes), never a folder of the user's.

Each refusal is one line on stderr and exit status 2, and every file that was there before is byte-identical after.
"""
import argparse
from pathlib import Path
from typing import Callable, List, Tuple

import numpy as np
import pytest
import timm
import torch
import torch.nn as nn
from PIL import Image

from snapshots import folder_snapshot
from timm_advnorm.commands.deepaugment import run as run_generate
from timm_advnorm.commands.convert import run as run_convert
from timm_advnorm.commands.validate import run as run_validate
from timm_advnorm.commands.publish import run as run_publish
from timm_advnorm.commands.train import run as run_train
from timm_advnorm.write_guard import EXPORT_MANIFEST, check_replaceable, check_write_target, write_manifest

NUM_CLASSES = 5


def _refused(capsys, command: Callable[..., int], argv: List, root: Path) -> str:
    """Run `command` on `argv`; check exit status 2, one error line and nothing changed under `root`; return the
    error line."""
    before = folder_snapshot(root)
    capsys.readouterr()
    assert command(argv=[str(a) for a in argv]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and ': error: ' in err[0], err
    assert folder_snapshot(root) == before
    return err[0]


@pytest.fixture(scope='module')
def training_run(tmp_path_factory) -> Path:
    """A run folder as train_adv.py leaves it: checkpoints, summary and arguments."""
    folder = tmp_path_factory.mktemp('run')
    model = timm.create_model('test_mbn_resnet', num_classes=NUM_CLASSES)
    args = argparse.Namespace(model='test_mbn_resnet', num_classes=NUM_CLASSES, method='mbn', epochs=2)
    for name in ('last', 'checkpoint-1', 'model_best'):
        torch.save(dict(epoch=1, arch='test_mbn_resnet', state_dict=model.state_dict(), args=args),
                   folder / f'{name}.pth.tar')
    (folder / 'summary.csv').write_text('epoch,eval_top1\n0,20.0\n1,30.0\n')
    (folder / 'args.yaml').write_text('model: test_mbn_resnet\n')
    return folder


# ----------------------------------------------------------------------------------------------------------------
# The rule itself


def test_a_target_equal_to_around_or_inside_a_read_path_is_refused_by_name(tmp_path):
    data = tmp_path / 'data'
    (data / 'train').mkdir(parents=True)
    checkpoint = tmp_path / 'run' / 'last.pth.tar'
    checkpoint.parent.mkdir()
    checkpoint.write_bytes(b'weights')
    reads = {'the data': data, 'the checkpoint': checkpoint, 'a Hub name': None, 'the state file': tmp_path / 'new'}
    cases = [(data, 'it is the data'), (data / 'train' / 'out', 'it lies inside the data'),
             (tmp_path / 'run', 'it contains the checkpoint'), (checkpoint, 'it is the checkpoint'),
             (tmp_path, 'it contains the data'), (tmp_path / 'new', 'it is the state file')]
    for target, relation in cases:
        with pytest.raises(ValueError, match=f'^--out {target}: {relation} '):
            check_write_target(target, '--out', reads)
    check_write_target(tmp_path / 'elsewhere', '--out', reads)


def test_a_symlink_does_not_hide_a_read_path(tmp_path):
    (tmp_path / 'data').mkdir()
    (tmp_path / 'alias').symlink_to(tmp_path / 'data', target_is_directory=True)
    with pytest.raises(ValueError, match='lies inside the data'):
        check_write_target(tmp_path / 'alias' / 'results.json', '--results-file', {'the data': tmp_path / 'data'})


def test_only_an_unchanged_earlier_export_is_replaceable(tmp_path):
    (tmp_path / 'config.json').write_text('{}')
    with pytest.raises(FileExistsError, match=f'holds no {EXPORT_MANIFEST}'):
        check_replaceable(tmp_path)
    write_manifest(tmp_path, 'test')
    check_replaceable(tmp_path)
    (tmp_path / 'sub').mkdir()
    (tmp_path / 'sub' / 'notes.txt').write_text('mine')
    with pytest.raises(FileExistsError, match=r'holds files its export did not write \(sub/notes.txt\)'):
        check_replaceable(tmp_path)
    (tmp_path / EXPORT_MANIFEST).write_text('{"files": ')  # damaged: not proof of an export
    with pytest.raises(FileExistsError, match='was not exported by timm-advnorm'):
        check_replaceable(tmp_path)


# ----------------------------------------------------------------------------------------------------------------
# publish


def test_publish_into_the_checkpoints_own_run_folder_deletes_nothing(training_run, capsys):
    """The issue's worst case: ``--local-dir`` the run folder, with ``--overwrite``, replaced the whole run."""
    error = _refused(capsys, run_publish, [training_run / 'last.pth.tar', '--inference-branch', 'clean',
                                           '--local-dir', training_run, '--overwrite'], training_run)
    assert f'--local-dir {training_run}: it contains the checkpoint being published ({training_run}' in error
    assert error.endswith('choose another folder')


def test_publish_inside_or_onto_its_inputs_is_refused(training_run, tmp_path, capsys):
    export = tmp_path / 'export'
    assert run_publish(argv=[str(training_run / 'last.pth.tar'), '--inference-branch', 'clean',
                             '--local-dir', str(export)]) == 0
    error = _refused(capsys, run_publish, [f'local-dir:{export}', '--local-dir', export, '--overwrite'], tmp_path)
    assert 'it is the checkpoint being published' in error  # an export is an earlier export, and the source too
    error = _refused(capsys, run_publish, [export, '--local-dir', export / 'again'], tmp_path)
    assert 'it lies inside the checkpoint being published' in error
    results = tmp_path / 'results' / 'r.json'
    results.parent.mkdir()
    results.write_text('{}')
    error = _refused(capsys, run_publish, [training_run / 'last.pth.tar', '--inference-branch', 'clean',
                                           '--results', results, '--local-dir', results.parent], tmp_path)
    assert 'it contains the results file' in error


def test_publish_overwrite_replaces_only_an_unchanged_earlier_export(training_run, tmp_path, capsys):
    mine = tmp_path / 'mine'
    mine.mkdir()
    (mine / 'notes.txt').write_text('mine')
    argv = [training_run / 'last.pth.tar', '--inference-branch', 'clean', '--overwrite', '--local-dir']
    assert 'was not exported by timm-advnorm' in _refused(capsys, run_publish, argv + [mine], tmp_path)

    export = tmp_path / 'export'
    assert run_publish(argv=[str(a) for a in argv + [export]]) == 0
    (export / 'notes.txt').write_text('added after the export')
    assert 'holds files its export did not write (notes.txt)' in _refused(capsys, run_publish, argv + [export],
                                                                          tmp_path)
    (export / 'notes.txt').unlink()
    assert run_publish(argv=[str(a) for a in argv + [export]]) == 0
    assert (export / EXPORT_MANIFEST).is_file() and (export / 'model.safetensors').is_file()


# ----------------------------------------------------------------------------------------------------------------
# convert


@pytest.fixture(scope='module')
def nofrost_release(tmp_path_factory) -> Path:
    """A folder holding a NoFrost checkpoint as released (DataParallel keys of timm's nf_resnet26)."""
    folder = tmp_path_factory.mktemp('release')
    torch.save(nn.DataParallel(timm.create_model('nf_resnet26', num_classes=10)).state_dict(), folder / 'best_RA.pth')
    return folder


def test_convert_into_a_folder_holding_its_source_deletes_nothing(nofrost_release, capsys):
    source = nofrost_release / 'best_RA.pth'
    error = _refused(capsys, run_convert, ['nofrost', source, nofrost_release, '--overwrite'], nofrost_release)
    assert f'DST {nofrost_release}: it contains the checkpoint being converted ({source})' in error
    error = _refused(capsys, run_convert, ['nofrost', source, source, '--overwrite'], nofrost_release)
    assert 'it is the checkpoint being converted' in error


def test_convert_overwrite_replaces_an_earlier_conversion_only(nofrost_release, tmp_path, capsys):
    source, dst = nofrost_release / 'best_RA.pth', tmp_path / 'export'
    dst.mkdir()
    (dst / 'model.safetensors').write_bytes(b'a file of the user')
    assert 'was not exported by timm-advnorm' in _refused(
        capsys, run_convert, ['nofrost', source, dst, '--overwrite'], tmp_path)
    (dst / 'model.safetensors').unlink()
    assert run_convert(argv=['nofrost', str(source), str(dst)]) == 0
    assert run_convert(argv=['nofrost', str(source), str(dst), '--overwrite']) == 0
    assert (dst / EXPORT_MANIFEST).is_file()


# ----------------------------------------------------------------------------------------------------------------
# validate


def _validate_argv(digits_dir: Path, *extra) -> List:
    return ['--model', 'test_mbn_resnet', '--dataset', 'digits', '--data-dir', digits_dir, '--num-samples', '8',
            '--workers', '0', '--sanity-samples', '0', '--no-progress', '--attacks', 'fgsm', *extra]


def test_evaluation_outputs_never_land_on_or_inside_what_it_reads(digits_dir, training_run, tmp_path, capsys):
    export = tmp_path / 'export'
    assert run_publish(argv=[str(training_run / 'last.pth.tar'), '--inference-branch', 'clean',
                             '--local-dir', str(export)]) == 0
    cases: List[Tuple[List, Path, str]] = [
        (['--results-file', digits_dir / 'results.json'], digits_dir,
         f'--results-file {digits_dir / "results.json"}: it lies inside the evaluation data ({digits_dir})'),
        (['--plot-dir', digits_dir / 'train' / 'plots'], digits_dir, 'it lies inside the evaluation data'),
        (['--checkpoint', training_run / 'last.pth.tar', '--resume-state', training_run / 'last.pth.tar'],
         training_run, f'--resume-state {training_run / "last.pth.tar"}: it is the checkpoint being evaluated'),
        (['--checkpoint', export, '--results-file', export / 'results.json'], export,
         'it lies inside the checkpoint being evaluated'),
        (['--model', f'local-dir:{export}', '--results-file', export / 'eval' / 'results.json'], export,
         'it lies inside the model folder being evaluated'),
        (['--resume-state', tmp_path / 'state.json', '--results-file', tmp_path / 'state.json'], tmp_path,
         'it is the state file'),
    ]
    for extra, root, message in cases:
        error = _refused(capsys, run_validate, _validate_argv(digits_dir, *extra), root)
        assert message in error, error
    assert not (tmp_path / 'state.json').exists()


# ----------------------------------------------------------------------------------------------------------------
# train


def test_training_output_inside_the_data_is_refused(digits_dir, tmp_path, capsys):
    data = tmp_path / 'data'  # an image folder of its own: the session's digits are shared by other tests
    for split in ('train', 'validation'):
        for label in range(2):
            (data / split / str(label)).mkdir(parents=True)
            Image.new('RGB', (8, 8), (80 * label, 0, 0)).save(data / split / str(label) / 'a.png')
    argv = ['--dataset', '', '--num-classes', '2', '--img-size', '8', '--epochs', '1', '--workers', '0',
            '--experiment', 'run', '--data-dir']
    error = _refused(capsys, run_train, argv + [data, '--output', data], tmp_path)
    assert f'--output {data / "run"}: it lies inside the data folder ({data})' in error
    error = _refused(capsys, run_train, argv + [data, '--output', data / 'validation' / '1'], tmp_path)
    assert 'it lies inside the data folder' in error
    error = _refused(capsys, run_train, ['--data-dir', digits_dir, '--output', digits_dir / 'digits-32px', '--epochs',
                                         '1', '--experiment', 'run'], digits_dir)
    assert 'it lies inside the data folder' in error


# ----------------------------------------------------------------------------------------------------------------
# DeepAugment generation


@pytest.fixture
def images(tmp_path) -> Path:
    """A class folder of two small images, and a weights file beside them."""
    root = tmp_path / 'src'
    (root / 'n01').mkdir(parents=True)
    rng = np.random.default_rng(0)
    for name in ('a.png', 'b.png'):
        Image.fromarray(rng.integers(0, 256, (12, 12, 3), dtype=np.uint8)).save(root / 'n01' / name)
    return root


@pytest.mark.parametrize('where, relation', [
    (lambda src: src / 'n01' / 'out', 'it lies inside the source images'),
    (lambda src: src, 'it is the source images'),
    (lambda src: src.parent, 'it contains the source images'),
])
def test_deepaugment_output_apart_from_its_input(images, capsys, where, relation):
    argv = [images, where(images), '--net', 'cae', '--allow-random-weights', '--input-size', '8', '--device', 'cpu',
            '--no-progress']
    assert relation in _refused(capsys, run_generate, argv, images.parent)
