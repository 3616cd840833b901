"""The benchmarks' ``--record DIR`` (``benchmarks/_common.py``) and the page that shows what it recorded: a record is
the printed tables under a heading naming the command, beside the environment they ran in; an existing record is
replaced only with ``--overwrite``; the site's Markdown reader accepts what is written; and every benchmark table
of ``docs/benchmarks.rst`` is a committed record (no run here: the writer gets a fake table)."""
import argparse
import importlib
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
RECORDS = REPO / 'docs' / 'results'
sys.path.insert(0, str(REPO / 'docs' / '_ext'))

from docutils import nodes  # noqa: E402
from markdown_nodes import markdown_nodes  # noqa: E402  (docs/_ext on the path above)

#: What a benchmark prints: a settings line, a table, a goal line.
PRINTED = ('\nresnet26, 64px, batch 32, cpu, threads 2\n\n| variant | median step (ms) | ratio vs plain BN |\n'
           '|---|---:|---:|\n| plain BN | 100.0 | 1.000 |\n| mixture BN | 101.0 | 1.010 |\n\nGoal: met.\n')
#: A recorded-table directive of a page, and a download link of one.
DIRECTIVE = re.compile(r'^\.\. recorded-table:: *(?P<path>\S+)', re.MULTILINE)
DOWNLOAD = re.compile(r':download:`[^`<]*<(?P<path>[^>]+)>`')
SCRIPTS = sorted(path.stem for path in (REPO / 'benchmarks').glob('bench_*.py'))


@pytest.fixture
def common(monkeypatch):
    monkeypatch.syspath_prepend(str(REPO / 'benchmarks'))
    return importlib.import_module('_common')


def _parser(common) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog='bench_fake.py')
    common.add_record_args(parser)
    return parser


def test_a_record_is_the_printed_tables_and_their_environment_and_the_site_reads_it(common, tmp_path):
    folder = tmp_path / 'records'
    env = {'checkout': {'commit': 'abc', 'dirty': False, 'changed': []}, 'load_average_at_start': [1.0, 1.0, 1.0]}
    markdown, environment = common.write_record(folder, 'bench_fake', 'python benchmarks/bench_fake.py --rounds 3',
                                                PRINTED, env)
    assert sorted(p.name for p in folder.iterdir()) == ['bench_fake.environment.json', 'bench_fake.md']  # no temp
    text = markdown.read_text(encoding='utf-8')
    assert text.startswith('# bench_fake: `python benchmarks/bench_fake.py --rounds 3`\n\nresnet26, 64px')
    assert PRINTED.strip() in text
    assert json.loads(environment.read_text(encoding='utf-8')) == env
    found = markdown_nodes(text, str(markdown))
    assert [type(node) for node in found] == [nodes.rubric, nodes.paragraph, nodes.table, nodes.paragraph]
    assert '1.010' in found[2].astext()


def test_an_existing_record_is_replaced_only_with_overwrite(common, tmp_path):
    common.write_record(tmp_path, 'bench_fake', 'python benchmarks/bench_fake.py', PRINTED, {'run': 1})
    before = {p.name: p.read_bytes() for p in tmp_path.iterdir()}
    with pytest.raises(ValueError, match=r'bench_fake\.md exists: pass --overwrite to replace the record$'):
        common.write_record(tmp_path, 'bench_fake', 'python benchmarks/bench_fake.py', 'other', {'run': 2})
    assert {p.name: p.read_bytes() for p in tmp_path.iterdir()} == before
    (tmp_path / 'bench_fake.md').unlink()  # the environment file alone still holds the record
    with pytest.raises(ValueError, match=r'bench_fake\.environment\.json exists'):
        common.write_record(tmp_path, 'bench_fake', 'python benchmarks/bench_fake.py', 'other', {'run': 2})
    common.write_record(tmp_path, 'bench_fake', 'python benchmarks/bench_fake.py', 'other', {'run': 2},
                        overwrite=True)
    assert json.loads((tmp_path / 'bench_fake.environment.json').read_text()) == {'run': 2}
    assert (tmp_path / 'bench_fake.md').read_text().endswith('\n\nother\n')


def test_a_script_refuses_an_existing_record_before_it_runs(common, tmp_path, capsys):
    (tmp_path / 'bench_fake.md').write_text('kept')
    parser = _parser(common)
    argv = ['--record', str(tmp_path)]
    ran = []
    with pytest.raises(SystemExit) as exit_info:
        with common.recorded('bench_fake', parser, parser.parse_args(argv), argv):
            ran.append(True)
    assert exit_info.value.code == 2 and not ran
    assert capsys.readouterr().err == (f'bench_fake.py: error: {tmp_path / "bench_fake.md"} exists: pass '
                                       f'--overwrite to replace the record\n')
    assert (tmp_path / 'bench_fake.md').read_text() == 'kept'


def test_a_script_records_what_it_printed_and_where_it_ran(common, tmp_path, capsys):
    parser = _parser(common)
    argv = ['--record', str(tmp_path / 'new'), '--overwrite']
    with common.recorded('bench_fake', parser, parser.parse_args(argv), argv):
        print(PRINTED)
    assert PRINTED in capsys.readouterr().out  # still printed
    text = (tmp_path / 'new' / 'bench_fake.md').read_text()
    assert text.startswith('# bench_fake: `python benchmarks/bench_fake.py`\n')  # without the recording options
    env = json.loads((tmp_path / 'new' / 'bench_fake.environment.json').read_text())
    assert re.fullmatch(r'[0-9a-f]{40}', env['checkout']['commit']) and isinstance(env['checkout']['dirty'], bool)
    assert env['device'] == 'cpu' and env['torch_threads'] >= 1 and env['machine']['cores'] >= 1
    assert {'cpu', 'torch', 'timm'} <= set(env['machine']) and env['torchvision'] and env['started']
    assert len(env['load_average_at_start']) == len(env['load_average_at_end']) == 3
    assert '--record' in env['command']


def test_the_shown_command_leaves_out_where_the_record_goes(common):
    argv = ['--rounds', '3', '--record', 'docs/results/benchmarks', '--overwrite', '--record=x', '--eps', '8', '16']
    assert common.shown_command('bench_eval', argv) == 'python benchmarks/bench_eval.py --rounds 3 --eps 8 16'


@pytest.mark.parametrize('script', SCRIPTS)
def test_every_benchmark_can_record(common, script):
    source = (REPO / 'benchmarks' / f'{script}.py').read_text(encoding='utf-8')
    assert 'add_record_args(parser)' in source and f"recorded('{script}', parser, args, argv" in source


def test_every_benchmark_figure_of_the_site_is_a_committed_record():
    page = (REPO / 'docs' / 'benchmarks.rst').read_text(encoding='utf-8')
    tables = DIRECTIVE.findall(page)
    assert tables and all(path.startswith('benchmarks/') for path in tables)
    downloads = {(REPO / 'docs' / path).resolve() for path in DOWNLOAD.findall(page)}
    committed = set(subprocess.run(['git', '-C', str(REPO), 'ls-files', 'docs/results/benchmarks'],
                                   capture_output=True, text=True, check=True).stdout.split())
    for path in tables:
        markdown = RECORDS / path
        environment = markdown.with_name(markdown.stem + '.environment.json')
        for file in (markdown, environment):
            assert file.relative_to(REPO).as_posix() in committed, f'{file} is not committed'
        assert environment.resolve() in downloads, f'the page does not link {environment.name}'
        markdown_nodes(markdown.read_text(encoding='utf-8'), str(markdown))
    assert '.. warning::' not in page


def test_the_checkout_state_is_read_once_for_studies_and_benchmarks(common, tmp_path, monkeypatch):
    """`code_commit` (studies) and the benchmarks' `checkout_state` read one git state: the commit, ``+dirty`` for
    any changed tracked file; a benchmark calls the checkout dirty only for changed code, not pages or records."""
    from timm_advnorm.study import provenance

    def git(*args):
        subprocess.run(['git', '-C', str(tmp_path), '-c', 'user.name=t', '-c', 'user.email=t@t', *args], check=True,
                       capture_output=True)

    git('init', '-q')
    (tmp_path / 'docs').mkdir()
    for name in ('code.py', 'docs/page.rst'):
        (tmp_path / name).write_text('a\n')
    git('add', '.')
    git('commit', '-qm', 'first')
    commit = subprocess.run(['git', '-C', str(tmp_path), 'rev-parse', 'HEAD'], capture_output=True, text=True,
                            check=True).stdout.strip()
    monkeypatch.setattr(provenance, '_PACKAGE_ROOT', tmp_path)
    assert provenance.code_commit() == commit
    (tmp_path / 'docs' / 'page.rst').write_text('b\n')
    assert provenance.code_commit() == commit + '+dirty'
    assert common.checkout_state() == {'commit': commit, 'dirty': False, 'changed': ['docs/page.rst']}
    (tmp_path / 'code.py').write_text('b\n')
    assert common.checkout_state()['dirty'] is True
    monkeypatch.setattr(provenance, '_PACKAGE_ROOT', tmp_path / 'not-a-checkout')
    assert provenance.code_commit() == 'unknown'
    assert common.checkout_state() == {'commit': None, 'dirty': None, 'changed': []}
