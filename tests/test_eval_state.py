"""Resumable state file, per-sample records and atomic result files."""
import json
import os
import stat

import numpy as np
import pytest
import torch

from timm_advnorm.eval.results.files import check_writable, write_csv, write_json
from timm_advnorm.eval.run.records import ResultTable, make_record
from timm_advnorm.eval.run.state import EvalState, check_state_path
from timm_advnorm.write_guard import atomic_write

FINGERPRINT = dict(model='m', protocol=dict(name='p', attacks=[1, 2]), seed=0)


def _record(stage: str, start: int, n: int = 3):
    positions = torch.arange(start, start + n)
    return make_record('model', stage, start, dict(position=positions, correct=positions % 2 == 0))


def test_records_survive_a_reload(tmp_path):
    path = tmp_path / 'state.jsonl'
    state = EvalState(path, FINGERPRINT)
    for start in (0, 3):
        state.append(_record('clean', start))
    reloaded = EvalState(path, FINGERPRINT)
    assert len(reloaded) == 2
    assert reloaded.get('model', 'clean', 3) == _record('clean', 3)
    assert reloaded.get('model', 'clean', 6) is None


def test_a_cut_short_write_is_dropped_and_cut_off_the_file(tmp_path):
    path = tmp_path / 'state.jsonl'
    state = EvalState(path, FINGERPRINT)
    state.append(_record('clean', 0))
    state.append(_record('clean', 3))
    data = path.read_bytes()
    path.write_bytes(data[:-7])  # kill -9 in the middle of the last append
    reloaded = EvalState(path, FINGERPRINT)
    assert len(reloaded) == 1 and reloaded.get('model', 'clean', 3) is None
    assert path.read_bytes().endswith(b'\n')
    reloaded.append(_record('clean', 3))
    assert len(EvalState(path, FINGERPRINT)) == 2


def test_another_evaluation_cannot_resume_the_file(tmp_path):
    path = tmp_path / 'state.jsonl'
    EvalState(path, FINGERPRINT)
    with pytest.raises(ValueError, match='seed'):
        EvalState(path, dict(FINGERPRINT, seed=1))


def test_corruption_before_the_last_line_is_an_error(tmp_path):
    path = tmp_path / 'state.jsonl'
    state = EvalState(path, FINGERPRINT)
    state.append(_record('clean', 0))
    state.append(_record('clean', 3))
    lines = path.read_text().splitlines(keepends=True)
    path.write_text(lines[0] + '{"broken\n' + lines[2])
    with pytest.raises(ValueError, match='corrupted'):
        EvalState(path, FINGERPRINT)


def test_a_foreign_file_is_rejected(tmp_path):
    path = tmp_path / 'other.jsonl'
    path.write_text(json.dumps({'hello': 1}) + '\n')
    with pytest.raises(ValueError, match='not an evaluation state'):
        EvalState(path, FINGERPRINT)


def test_result_table_sorts_by_position_and_refuses_duplicates():
    table = ResultTable([_record('clean', 3), _record('clean', 0)])
    assert table.column('model', 'clean', 'position').tolist() == [0, 1, 2, 3, 4, 5]
    np.testing.assert_array_equal(table.column('model', 'clean', 'correct'), np.arange(6) % 2 == 0)
    assert table.get('model', 'pgd') is None
    table.add(_record('clean', 0))
    with pytest.raises(ValueError, match='Duplicate'):
        table.get('model', 'clean')


def test_make_record_checks_its_columns():
    with pytest.raises(ValueError, match='position'):
        make_record('m', 's', 0, dict(correct=torch.ones(2)))
    with pytest.raises(ValueError, match='length'):
        make_record('m', 's', 0, dict(position=torch.arange(2), correct=torch.ones(3)))


def test_results_are_never_clobbered_nor_half_written(tmp_path):
    path = tmp_path / 'results.json'
    atomic_write(path, lambda tmp: tmp.write_text('first'))
    with pytest.raises(FileExistsError, match='--overwrite'):
        check_writable(path, overwrite=False)
    check_writable(path, overwrite=True)

    def crash(tmp):
        tmp.write_text('half')
        raise RuntimeError('killed')

    with pytest.raises(RuntimeError):
        atomic_write(path, crash)
    assert path.read_text() == 'first'
    assert sorted(p.name for p in tmp_path.iterdir()) == ['results.json']


@pytest.mark.parametrize('line', [
    '{"variant": "model", "stage": "clean"}', '[1, 2]',
    '{"variant": "model", "stage": "clean", "start": "0", "columns": {}}'])
def test_a_line_that_is_no_record_is_an_error_naming_it(tmp_path, line):
    path = tmp_path / 'state.jsonl'
    state = EvalState(path, FINGERPRINT)
    state.append(_record('clean', 0))
    with path.open('a') as f:
        f.write(line + '\n')
    with pytest.raises(ValueError, match=f'{path}: line 3 is not an evaluation record'):
        EvalState(path, FINGERPRINT)


def test_a_state_path_must_be_a_usable_file(tmp_path):
    with pytest.raises(ValueError, match='is a folder'):
        check_state_path(tmp_path)
    check_state_path(tmp_path / 'new' / 'state.jsonl')  # creates nothing: the folder comes with the state file
    assert list(tmp_path.iterdir()) == []
    (tmp_path / 'file').write_text('')
    with pytest.raises(ValueError, match='not a folder'):
        check_state_path(tmp_path / 'file' / 'state.jsonl')


def test_outputs_are_probed_up_front_and_nothing_is_left_behind(tmp_path):
    check_writable(tmp_path / 'a' / 'b' / 'results.json', overwrite=False)
    assert list(tmp_path.iterdir()) == []  # no folder: a run refused later leaves nothing behind
    (tmp_path / 'a').mkdir()
    with pytest.raises(ValueError, match='it is a folder'):
        check_writable(tmp_path / 'a', overwrite=True)
    (tmp_path / 'file').write_text('')
    with pytest.raises(ValueError, match='file: it is not a folder'):
        check_writable(tmp_path / 'file' / 'plot.png', overwrite=True)
    with pytest.raises(ValueError, match=r'file/sub: .*/file is not a folder'):  # a missing folder under a file
        check_writable(tmp_path / 'file' / 'sub' / 'plot.png', overwrite=True)
    assert sorted(p.name for p in tmp_path.iterdir()) == ['a', 'file']  # the probes left nothing


@pytest.mark.parametrize('umask', [0o022, 0o002, 0o077])
def test_result_files_get_the_mode_open_would_give(tmp_path, umask):
    previous = os.umask(umask)
    try:
        write_json(tmp_path / 'results.json', {'a': 1})
        write_csv(tmp_path / 'results.csv', [])
        atomic_write(tmp_path / 'plot.png', lambda tmp: tmp.write_bytes(b'png'))
    finally:
        os.umask(previous)
    for path in tmp_path.iterdir():
        assert stat.S_IMODE(path.stat().st_mode) == 0o666 & ~umask, path
