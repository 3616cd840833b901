"""The decode check remembers what it verified: a second check decodes only new and changed files, keeps an unchanged
unreadable file's verdict, survives a damaged cache, never writes into the data, and ``--plan`` states its cost."""
import gzip
import importlib
import logging
import os
import time
from pathlib import Path
from typing import List

import pytest
from PIL import Image
from timm.data import ImageDataset

from timm_advnorm.data import decode_cache, readable
from timm_advnorm.data.decode_cache import DecodeCache, decode_cache_folder
from timm_advnorm.data.readable import keep_readable

REPO = Path(__file__).resolve().parents[1]
#: A time well before any check: files stamped with it are not "racily" fresh (`decode_cache.RACY_SECONDS`).
AN_HOUR_AGO = time.time_ns() - 3600 * 10 ** 9


def _stamp(path: Path, mtime_ns: int = AN_HOUR_AGO) -> None:
    os.utime(path, ns=(mtime_ns, mtime_ns))


def _folder(root: Path, per_class: int = 3) -> Path:
    """``root/<a|b>/<i>.png`` (and one JPEG), all modified an hour ago."""
    for shade, name in enumerate('ab'):
        (root / name).mkdir(parents=True)
        for i in range(per_class):
            Image.new('RGB', (8, 8), (80 * shade, 30 * i, 9)).save(root / name / f'{i}.png')
    Image.new('RGB', (8, 8), (1, 2, 3)).save(root / 'a' / 'photo.jpg', quality=90)
    for path in root.rglob('*.*'):
        _stamp(path)
    return root


@pytest.fixture
def decodes(monkeypatch) -> List[str]:
    """The files the check decodes (it opens each with PIL's `Image.open`, in this process without workers)."""
    opened: List[str] = []
    own_open = readable.Image.open

    def counting_open(source, *args, **kwargs):
        opened.append(Path(getattr(source, 'name', source)).name)
        return own_open(source, *args, **kwargs)

    monkeypatch.setattr(readable.Image, 'open', counting_open)
    return opened


@pytest.fixture
def cache_folder(tmp_path, monkeypatch) -> Path:
    folder = tmp_path / 'cache'
    monkeypatch.setenv('TIMM_ADVNORM_DECODE_CACHE', str(folder))
    return folder


def _check(root: Path, skip: bool = True, mode: str = 'RGB') -> readable.DecodeReport:
    """One run's check of `root`, on a dataset made afresh as a run makes it."""
    return keep_readable(ImageDataset(str(root), input_img_mode=mode), skip, 0, 'train on')


def test_a_second_check_decodes_nothing(tmp_path, cache_folder, decodes):
    root = _folder(tmp_path / 'data')
    first = _check(root)
    assert len(decodes) == 7 and (first.decoded, first.cached) == (7, 0)
    assert len(list(cache_folder.glob('*.json.gz'))) == 1
    decodes.clear()
    second = _check(root)
    assert decodes == [] and (second.decoded, second.cached, second.images) == (0, 7, 7)
    assert 'unchanged since checked (cache)' in second.text()


def test_changed_and_new_files_are_decoded_again_and_a_broken_one_is_found(tmp_path, cache_folder, decodes):
    root = _folder(tmp_path / 'data')
    _check(root)
    decodes.clear()
    _stamp(root / 'a' / '0.png', AN_HOUR_AGO + 10 ** 9)  # touched: same bytes, another time
    Image.new('RGB', (8, 8), (5, 5, 5)).save(root / 'b' / '1.png')  # rewritten, a second later
    _stamp(root / 'b' / '1.png', AN_HOUR_AGO + 10 ** 9)
    Image.new('RGB', (8, 8)).save(root / 'b' / 'new.png')
    _stamp(root / 'b' / 'new.png')
    (root / 'b' / '2.png').write_bytes(b'\x89PNG\r\n\x1a\n cut')  # turned unreadable
    _stamp(root / 'b' / '2.png')
    dataset = ImageDataset(str(root))
    report = keep_readable(dataset, True, 0, 'train on')
    assert sorted(decodes) == ['0.png', '1.png', '2.png', 'new.png'] and (report.decoded, report.cached) == (4, 4)
    assert 'b/2.png' not in dataset.filenames() and len(dataset) == 7


def test_an_unchanged_unreadable_file_stays_unreadable_without_being_decoded(tmp_path, cache_folder, decodes, capsys):
    root = _folder(tmp_path / 'data')
    (root / 'a' / 'text.png').write_bytes(b'not an image')
    _stamp(root / 'a' / 'text.png')
    with pytest.raises(ValueError, match=r'a/text.png \(cannot identify image file\)'):
        _check(root, skip=False)
    decodes.clear()
    with pytest.raises(ValueError, match=r'a/text.png \(cannot identify image file\)'):
        _check(root, skip=False)
    assert decodes == []


def test_freshly_modified_files_are_not_vouched_for(tmp_path, cache_folder, decodes):
    """A file modified just before the check may change again within its time's granularity: decoded next time."""
    root = _folder(tmp_path / 'data')
    (root / 'a' / '0.png').touch()  # now
    _check(root)
    decodes.clear()
    _check(root)
    assert decodes == ['0.png']


def test_the_image_mode_is_part_of_what_was_verified(tmp_path, cache_folder, decodes):
    root = _folder(tmp_path / 'data')
    _check(root, mode='RGB')
    decodes.clear()
    _check(root, mode='L')
    assert len(decodes) == 7 and len(list(cache_folder.glob('*.json.gz'))) == 2


@pytest.mark.parametrize('damage', ['truncated', 'not gzip', 'foreign', 'wrong types'])
def test_a_damaged_cache_is_one_warning_and_rebuilt(tmp_path, cache_folder, decodes, caplog, damage):
    root = _folder(tmp_path / 'data')
    _check(root)
    path, = cache_folder.glob('*.json.gz')
    if damage == 'truncated':
        path.write_bytes(path.read_bytes()[:40])
    elif damage == 'not gzip':
        path.write_text('{"format": ')
    elif damage == 'foreign':  # another dataset's cache under this one's name
        other = _folder(tmp_path / 'other')
        _check(other)
        path.write_bytes(DecodeCache.open(str(other), 'RGB').path.read_bytes())
    else:
        path.write_bytes(gzip.compress(b'{"format": "timm_advnorm.decode-check/1", "root": "%s", "input_img_mode": '
                                       b'"RGB", "files": ["a/0.png"], "sizes": ["x"], "mtime_ns": [1], "errors": {}}'
                                       % os.path.realpath(root).encode()))
    decodes.clear()
    with caplog.at_level(logging.WARNING):
        report = _check(root)
    warnings = [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(warnings) == 1 and 'damaged or unreadable' in warnings[0].getMessage()
    assert '\n' not in warnings[0].getMessage() and report.decoded == 7
    decodes.clear()
    assert _check(root).decoded == 0 and decodes == []  # rebuilt


def test_the_cache_is_never_written_into_the_data(tmp_path, monkeypatch, decodes, caplog):
    root = _folder(tmp_path / 'data')
    before = sorted(root.rglob('*'))
    monkeypatch.setenv('TIMM_ADVNORM_DECODE_CACHE', str(root / 'cache'))
    with caplog.at_level(logging.INFO):
        _check(root)
    assert sorted(root.rglob('*')) == before and 'would lie inside it' in caplog.text
    monkeypatch.delenv('TIMM_ADVNORM_DECODE_CACHE')
    monkeypatch.setenv('TIMM_ADVNORM_CACHE', str(tmp_path / 'package-cache'))
    _check(root)
    assert sorted(root.rglob('*')) == before
    assert decode_cache_folder() == tmp_path / 'package-cache' / 'decode-check'
    assert len(list(decode_cache_folder().glob('*.json.gz'))) == 1


def test_a_cache_that_cannot_be_written_is_one_warning_and_the_check_goes_on(tmp_path, monkeypatch, caplog):
    root = _folder(tmp_path / 'data')
    (tmp_path / 'a-file').write_text('')
    monkeypatch.setenv('TIMM_ADVNORM_DECODE_CACHE', str(tmp_path / 'a-file' / 'cache'))
    with caplog.at_level(logging.WARNING):
        assert _check(root).decoded == 7
    warnings = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(warnings) == 1 and 'Could not write the decode-check cache' in warnings[0], warnings


def test_the_evaluated_subset_is_checked_through_the_cache(tmp_path, cache_folder, decodes):
    root = _folder(tmp_path / 'data')
    dataset = ImageDataset(str(root))
    assert readable.readable_subset(dataset, range(7), 4, skip_unreadable=True)[0] == [0, 1, 2, 3]
    assert len(decodes) == 4
    decodes.clear()
    assert readable.readable_subset(dataset, range(7), 0, skip_unreadable=True)[0] == list(range(7))
    assert len(decodes) == 3  # the others were checked the first time


def test_plan_states_the_decode_checks_cost(tmp_path, cache_folder, monkeypatch, capsys):
    from timm_advnorm.commands.train import run as run_train

    data = tmp_path / 'data'
    for split in ('train', 'validation'):
        _folder(data / split)
    monkeypatch.setattr(readable, 'PLAN_SAMPLE', 2)
    argv = ['--dataset', '', '--data-dir', data, '--model', 'test_mbn_resnet', '--img-size', 16, '--epochs', 1,
            '--attack-steps', 1, '--val-attack-steps', 1, '--num-samples', 4, '-b', 4, '--workers', 0,
            '--num-classes', 2, '--output', tmp_path / 'runs', '--plan']
    assert run_train('train_adv.py', [str(a) for a in argv]) == 0
    out = capsys.readouterr().out
    lines = [line for line in out.splitlines() if 'decode check' in line]
    assert len(lines) == 2, out
    assert f'7 images of {data / "train"}: 0 unchanged since checked (cache), 2 decoded in' in lines[0]
    assert '5 left to decode, projected' in lines[0] and 'per worker' in lines[0]
    assert not (tmp_path / 'runs').exists()


def test_the_benchmark_checks_a_tiny_folder_twice(tmp_path, monkeypatch, capsys):
    monkeypatch.syspath_prepend(str(REPO / 'benchmarks'))
    bench = importlib.import_module('bench_decode_check')
    monkeypatch.setattr(bench, 'RACY_SECONDS', 0)  # no wait: the cache keeps files made just before the check
    monkeypatch.setattr(decode_cache, 'RACY_SECONDS', 0)
    monkeypatch.setenv('TIMM_ADVNORM_DECODE_CACHE', str(tmp_path / 'unused'))  # the benchmark sets its own
    bench.main(['--classes', '4', '--per-class', '5', '--size', '16', '--root', str(tmp_path)])
    out = capsys.readouterr().out
    assert '| first check (empty cache) |' in out and '| 20 | 0 |' in out, out
    assert '| second check (cached) |' in out and '| 0 | 20 |' in out, out
    assert 'First check / cached check:' in out
