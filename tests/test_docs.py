"""The documentation site builds with warnings as errors (a broken link, a missing reference, a malformed table, an
undocumented public name fail), its recorded tables are the study records', and its commands page is their parsers'
``--help`` (generated when the site is built, so the build itself holds it)."""
import html
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip('sphinx', reason='the docs extra is not installed (bash scripts/setup.sh installs it)')

REPO = Path(__file__).resolve().parents[1]
DOCS = REPO / 'docs'
sys.path.insert(0, str(DOCS / '_ext'))

from command_help import COMMANDS, command_help  # noqa: E402  (docs/_ext on the path above)
from markdown_nodes import MarkdownError, markdown_nodes  # noqa: E402

from timm_advnorm.study.document import record_folder, render_record  # noqa: E402


def _build(source: Path, out: Path) -> subprocess.CompletedProcess:
    """``python -m sphinx -W --keep-going`` of the pages in `source` with the site's configuration."""
    return subprocess.run([sys.executable, '-m', 'sphinx', '-W', '--keep-going', '-q', '-b', 'html', '-c', str(DOCS),
                           str(source), str(out)], capture_output=True, text=True, timeout=300)


@pytest.fixture(scope='module')
def site(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp('html')
    result = _build(DOCS, out)
    assert result.returncode == 0 and not result.stderr, result.stderr[-5000:]
    return out


def test_the_site_builds_with_warnings_as_errors_and_shows_the_api(site):
    layers = (site / 'api' / 'layers.html').read_text(encoding='utf-8')
    assert 'id="timm_advnorm.layers.MixtureBatchNorm2d"' in layers
    attacks = (site / 'api' / 'attacks.html').read_text(encoding='utf-8')
    assert all(f'id="timm_advnorm.attacks.{name}"' in attacks for name in ('PGD', 'AutoAttack', 'APGDCE', 'FABT'))


def test_the_commands_page_is_every_command_s_help(site):
    page = (site / 'commands.html').read_text(encoding='utf-8')
    for name in COMMANDS:
        for line, text in command_help(name):
            assert html.escape(text, quote=False) in page, f'{line} is not on the commands page as its parser prints it'


def _table_cells(nodes) -> list:
    return [[entry.astext() for entry in row.findall(lambda n: n.tagname == 'entry')]
            for table in nodes if table.tagname == 'table' for row in table.findall(lambda n: n.tagname == 'row')]


def test_a_study_s_tables_are_what_update_docs_writes():
    """``study-results`` renders what ``--update-docs`` writes into a Markdown page: the same rows, cell by cell."""
    study, scale = 'galloway', 'digits'
    markdown = render_record(record_folder(DOCS / 'results', study, scale), study)
    expected = [[cell.strip().replace('`', '') for cell in line.strip().strip('|').split('|')]
                for line in markdown.splitlines() if line.startswith('|') and not line.startswith('| ---')]
    assert _table_cells(markdown_nodes(markdown, 'block')) == expected


def test_markdown_outside_the_recorded_subset_is_refused_with_its_line():
    with pytest.raises(MarkdownError, match=r'^f\.md:3: a table row has 1 cells, its header 2$'):
        markdown_nodes('| a | b |\n| --- | --- |\n| 1 |\n', 'f.md')
    with pytest.raises(MarkdownError, match=r'^f\.md:2: an image is not supported'):
        markdown_nodes('text\n![plot](p.png)\n', 'f.md')


def test_a_page_with_a_broken_link_or_an_unrecorded_study_fails_the_build(tmp_path):
    """One build of two pages: the page using the directives as documented builds clean, the other fails it."""
    source = tmp_path / 'pages'
    source.mkdir()
    (source / 'index.rst').write_text('Good\n====\n\n.. study-results:: galloway/digits\n   :part: results\n\n'
                                      '.. recorded-table:: demo/report.md\n   :tables-only:\n\n.. toctree::\n\n   bad\n')
    (source / 'bad.rst').write_text('Bad\n===\n\nSee :doc:`no-such-page`.\n\n.. study-results:: galloway/no-scale\n')
    result = _build(source, tmp_path / 'html')
    assert result.returncode != 0
    assert "unknown document: 'no-such-page'" in result.stderr
    assert 'galloway/no-scale has no recorded results in' in result.stderr
    assert 'index.rst' not in result.stderr, result.stderr
    page = (tmp_path / 'html' / 'index.html').read_text(encoding='utf-8')
    assert 'Every grid point' in page and 'finding' not in page and '<table' in page
