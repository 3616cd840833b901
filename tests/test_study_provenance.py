"""A study's ``provenance.json``: each invocation's entry is written when it starts and kept current, so that one
killed midway still says what it ran, and the record's top level sums every invocation."""
import json

import pytest

from timm_advnorm.study.provenance import PROVENANCE_FILE, InvocationRecord


def _invocations(study_dir):
    return json.loads((study_dir / PROVENANCE_FILE).read_text())


def test_an_invocation_killed_midway_keeps_the_cells_it_ran_and_the_next_one_appends(tmp_path):
    killed = InvocationRecord(tmp_path, 'aaa', 'timm-advnorm-study s --scale x', jobs=2, cell_threads=1)
    assert _invocations(tmp_path)['invocations'][0]['outcome'] == 'running'  # on disk before any cell ran
    killed.cell_evaluated('cell-1')
    killed.cell_evaluated('cell-2')  # then kill -9: finish() is never called

    resumed = InvocationRecord(tmp_path, 'bbb', 'timm-advnorm-study s --scale x')
    resumed.cell_evaluated('cell-3')
    record = resumed.finish()
    assert record == _invocations(tmp_path)
    first, second = record['invocations']
    assert (first['commit'], first['outcome'], first['cells_run'], first['jobs'], first['cell_threads']) == (
        'aaa', 'running', ['cell-1', 'cell-2'], 2, 1)
    assert (second['commit'], second['outcome'], second['cells_run']) == ('bbb', 'finished', ['cell-3'])
    assert list(first['evaluated_at_s']) == ['cell-1', 'cell-2']  # seconds into the invocation, in order
    assert 0 <= first['evaluated_at_s']['cell-1'] <= first['evaluated_at_s']['cell-2'] <= first['wall_s']
    assert record['commit'] == 'aaa' and record['started'] == first['started']  # the study began with the first
    assert record['wall_s'] == pytest.approx(first['wall_s'] + second['wall_s'], abs=0.11)
    assert {'cpu', 'cores', 'threads', 'torch', 'timm'} <= set(record['machine'])
    assert resumed.summary().startswith('2 invocations, ') and resumed.summary().endswith(' in all')


def test_an_interrupted_invocation_says_so(tmp_path):
    invocation = InvocationRecord(tmp_path, 'aaa', 'cmd')
    invocation.finish('interrupted')
    assert _invocations(tmp_path)['invocations'][0]['outcome'] == 'interrupted'
