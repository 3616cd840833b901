"""Damaged weights files and exports: one ValueError line naming the file and the damage (empty, truncated, not a
checkpoint, a member failing its checksum, config.json not valid JSON at line N), whichever reader meets them."""
import shutil
import struct
import zipfile
from pathlib import Path
from typing import Callable, Dict, Tuple

import numpy as np
import pytest
import safetensors.torch
import timm
import torch

import timm_advnorm  # noqa: F401  (registers test_mbn_resnet)
from timm_advnorm.convert import convert_fast_advprop, convert_nofrost, convert_tensorpack_resnet
from timm_advnorm.hub import create_model_from_name_or_checkpoint, read_checkpoint, write_export
from timm_advnorm.layers import set_inference_branch
from timm_advnorm.weights.checkpoint import check_checkpoint_file, load_weights_file

NUM_CLASSES = 5


@pytest.fixture(scope='module')
def good(tmp_path_factory) -> Path:
    """Whole files of every format: a training checkpoint, a legacy-format state dict, safetensors, an export."""
    folder = tmp_path_factory.mktemp('good')
    torch.manual_seed(0)
    model = timm.create_model('test_mbn_resnet', num_classes=NUM_CLASSES).eval()
    torch.save(dict(state_dict=model.state_dict(), arch='test_mbn_resnet', epoch=1), folder / 'ckpt.pth.tar')
    torch.save(model.state_dict(), folder / 'legacy.pth', _use_new_zipfile_serialization=False)
    safetensors.torch.save_file(model.state_dict(), folder / 'weights.safetensors')
    (folder / 'export').mkdir()
    write_export(set_inference_branch(model, 'clean'), folder / 'export')
    return folder


def _cut(source: Path, dst: Path, keep: float = 0.5) -> Path:
    """A copy of `source` that stops after `keep` of its bytes, as an interrupted save or download leaves it."""
    data = source.read_bytes()
    dst.write_bytes(data[:int(len(data) * keep)])
    return dst


def _flip_a_weight(source: Path, dst: Path) -> Path:
    """A copy of the torch.save archive `source` with one byte of a tensor's data inverted (torch loads it as is)."""
    data = bytearray(source.read_bytes())
    with zipfile.ZipFile(source) as archive:
        info = next(i for i in archive.infolist() if '/data/' in i.filename and i.file_size > 0)
    name_length, extra_length = struct.unpack('<HH', data[info.header_offset + 26:info.header_offset + 30])
    data[info.header_offset + 30 + name_length + extra_length] ^= 0xFF
    dst.write_bytes(bytes(data))
    return dst


def _text(dst: Path, text: str) -> Path:
    dst.write_text(text)
    return dst


def _bytes(dst: Path, data: bytes) -> Path:
    dst.write_bytes(data)
    return dst


def _other_zip(dst: Path) -> Path:
    with zipfile.ZipFile(dst, 'w') as archive:
        archive.writestr('notes/readme.txt', 'not weights')
    return dst


def _npz(dst: Path) -> Path:
    with dst.open('wb') as f:
        np.savez(f, weights=np.zeros(4, dtype=np.float32))
    return dst


Make = Callable[[Path, Path], Path]
# name: (how the damaged file is made from the whole ones and a folder, what the message must say)
DAMAGED: Dict[str, Tuple[Make, str]] = {
    'empty': (lambda good, tmp: _cut(good / 'ckpt.pth.tar', tmp / 'empty.pth.tar', 0), 'empty file (0 bytes)'),
    'truncated_zip': (lambda good, tmp: _cut(good / 'ckpt.pth.tar', tmp / 'last.pth.tar'),
                      'truncated: a zip archive without the directory that ends one'),
    'flipped_byte': (lambda good, tmp: _flip_a_weight(good / 'ckpt.pth.tar', tmp / 'flipped.pth.tar'),
                     'fails its checksum'),
    'truncated_safetensors': (lambda good, tmp: _cut(good / 'weights.safetensors', tmp / 'w.safetensors'),
                              'truncated: '),
    'cut_safetensors_header': (lambda good, tmp: _cut(good / 'weights.safetensors', tmp / 'w.safetensors', 0.001),
                               'not even the whole safetensors header'),
    'text': (lambda good, tmp: _text(tmp / 'config.pth', 'model: resnet50\nepochs: 3\n'),
             "not a checkpoint: a text file, beginning 'model: resnet50'"),
    'blank_text': (lambda good, tmp: _text(tmp / 'blank.pth', '\n  \n'), "not a checkpoint: a text file, beginning ''"),
    'html_as_safetensors': (lambda good, tmp: _text(tmp / 'model.safetensors', '<!DOCTYPE html><html>Sign in'),
                            'not a checkpoint: a text file'),
    'npz': (lambda good, tmp: _npz(tmp / 'R50.pth'), 'a numpy .npz archive, not a torch.save file'),
    'other_zip': (lambda good, tmp: _other_zip(tmp / 'bundle.pth'), 'a zip archive torch.save did not write'),
    'binary': (lambda good, tmp: _bytes(tmp / 'noise.bin', bytes(range(256)) * 4),
               'neither a torch.save file (zip or legacy pickle) nor a safetensors file'),
    'tiny': (lambda good, tmp: _bytes(tmp / 'tiny.pth', b'\x80\x02'), 'only 2 bytes: truncated, or not a checkpoint'),
}


def _one_line_naming(error: BaseException, path: Path, message: str) -> None:
    text = str(error)
    assert str(path) in text and message in text and '\n' not in text, text


@pytest.mark.parametrize('damage', list(DAMAGED))
def test_a_damaged_file_is_one_line_naming_it_and_the_damage(good, tmp_path, damage):
    make, message = DAMAGED[damage]
    path = make(good, tmp_path)
    for read in (check_checkpoint_file, read_checkpoint, load_weights_file):
        with pytest.raises(ValueError) as error:
            read(path)
        _one_line_naming(error.value, path, message)


def test_a_legacy_format_file_cut_short_is_damaged_when_loaded(good, tmp_path):
    """A legacy (pickle) file has no directory to check beforehand: loading it fails, said of the file."""
    path = _cut(good / 'legacy.pth', tmp_path / 'legacy.pth')
    assert check_checkpoint_file(path) == 'torch'
    with pytest.raises(ValueError) as error:
        read_checkpoint(path)
    _one_line_naming(error.value, path, 'damaged: ')


def test_whole_files_pass_and_their_content_decides_how_they_load(good, tmp_path):
    assert check_checkpoint_file(good / 'ckpt.pth.tar') == 'torch'
    assert check_checkpoint_file(good / 'legacy.pth') == 'torch'
    assert check_checkpoint_file(good / 'weights.safetensors') == 'safetensors'
    misnamed = shutil.copy(good / 'weights.safetensors', tmp_path / 'weights.pth')
    assert check_checkpoint_file(misnamed) == 'safetensors'
    expected = read_checkpoint(good / 'ckpt.pth.tar').state_dict
    for path in (good / 'legacy.pth', good / 'weights.safetensors', misnamed, good / 'export'):
        state_dict = read_checkpoint(path).state_dict
        assert set(state_dict) == set(expected) and torch.equal(state_dict['fc.weight'], expected['fc.weight'])
    with pytest.raises(FileNotFoundError, match='missing.pth'):
        check_checkpoint_file(tmp_path / 'missing.pth')


def _damaged_export(good: Path, tmp: Path, damage: str) -> Path:
    """A copy of the good export with its weights cut short or its config.json broken in one of several ways."""
    folder = Path(shutil.copytree(good / 'export', tmp / 'export'))
    if damage == 'weights':
        _cut(good / 'export' / 'model.safetensors', folder / 'model.safetensors')
    elif damage == 'json':
        (folder / 'config.json').write_text('{\n  "architecture": "test_mbn_resnet",\n  num_classes: 5\n}\n')
    elif damage == 'json_list':
        (folder / 'config.json').write_text('["test_mbn_resnet"]')
    elif damage == 'json_binary':
        (folder / 'config.json').write_bytes(b'{"architecture": "r\xe9snet"}')  # Latin-1
    return folder


EXPORT_DAMAGES = {
    'weights': ('model.safetensors', 'truncated: '),
    'json': ('config.json', 'not valid JSON at line 3, column 3: Expecting property name enclosed in double quotes'),
    'json_list': ('config.json', 'expected a JSON object, got a list'),
    'json_binary': ('config.json', 'not valid JSON: not UTF-8 text'),
}


@pytest.mark.parametrize('damage', list(EXPORT_DAMAGES))
def test_a_damaged_export_names_the_file_inside_it(good, tmp_path, damage):
    folder = _damaged_export(good, tmp_path, damage)
    name, message = EXPORT_DAMAGES[damage]
    for source in (folder, f'local-dir:{folder}'):
        with pytest.raises(ValueError) as error:
            read_checkpoint(source)
        _one_line_naming(error.value, folder / name, message)
        with pytest.raises(ValueError) as error:  # validate_adv.py --checkpoint, train_adv.py --initial-checkpoint
            create_model_from_name_or_checkpoint(checkpoint=str(source))
        _one_line_naming(error.value, folder / name, message)


@pytest.mark.parametrize('damage', ['weights', 'json'])
def test_a_damaged_export_loaded_by_name_is_checked_before_timm_reads_it(good, tmp_path, damage):
    """``--model local-dir:PATH`` (timm loads the weights; its loader's errors name neither file nor damage)."""
    folder = _damaged_export(good, tmp_path, damage)
    name, message = EXPORT_DAMAGES[damage]
    with pytest.raises(ValueError) as error:
        create_model_from_name_or_checkpoint(f'local-dir:{folder}', pretrained=True)
    _one_line_naming(error.value, folder / name, message)


CONVERTERS = {
    'fast-advprop': convert_fast_advprop,
    'nofrost': convert_nofrost,
    'tensorpack-resnet': convert_tensorpack_resnet,
}
# What a converter says of a damaged source: the torch readers as `read_checkpoint`, the npz reader in its terms.
CONVERTER_DAMAGES = [
    ('fast-advprop', 'truncated_zip', 'truncated'),
    ('fast-advprop', 'text', 'not a checkpoint: a text file'),
    ('fast-advprop', 'npz', 'a numpy .npz archive, not a torch.save file'),
    ('nofrost', 'empty', 'empty file (0 bytes)'),
    ('nofrost', 'flipped_byte', 'fails its checksum'),
    ('tensorpack-resnet', 'empty', 'not an npz archive (as tensorpack writes): an empty file (0 bytes)'),
    ('tensorpack-resnet', 'text', 'not an npz archive (as tensorpack writes): a text file'),
    ('tensorpack-resnet', 'html_as_safetensors', 'not an npz archive (as tensorpack writes): a text file'),
]


@pytest.mark.parametrize('fmt, damage, message', CONVERTER_DAMAGES)
def test_converters_name_a_damaged_source(good, tmp_path, fmt, damage, message):
    path = DAMAGED[damage][0](good, tmp_path)
    with pytest.raises(ValueError) as error:
        CONVERTERS[fmt](path, tmp_path / 'out')
    _one_line_naming(error.value, path, message)
    assert not (tmp_path / 'out').exists()


def test_a_cut_npz_is_truncated_for_the_tensorpack_converter(tmp_path):
    path = _cut(_npz(tmp_path / 'whole.npz'), tmp_path / 'R152.npz')
    with pytest.raises(ValueError) as error:
        convert_tensorpack_resnet(path, tmp_path / 'out')
    _one_line_naming(error.value, path, 'truncated')


def test_a_resume_file_is_checked_as_any_checkpoint(good, tmp_path):
    """What ``train_adv.py --resume`` calls before timm's loader, which blames the zip serialization format."""
    text = _text(tmp_path / 'last.pth.tar', 'epoch: 3\n')
    with pytest.raises(ValueError, match='not a checkpoint: a text file'):
        check_checkpoint_file(text)
    assert check_checkpoint_file(good / 'ckpt.pth.tar') == 'torch'
