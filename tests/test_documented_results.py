"""Every study result the documentation quotes is generated from its committed record: each marked block of the
README equals what `timm-advnorm-study --update-docs` writes from ``docs/results/<study>/<scale>/``."""
from pathlib import Path

from timm_advnorm.study.document import BLOCK, update_document

REPO = Path(__file__).resolve().parents[1]


def test_every_documented_study_table_is_what_its_record_generates():
    readme = REPO / 'README.md'
    blocks = [f'{m["study"]}/{m["scale"]}' for m in BLOCK.finditer(readme.read_text())]
    assert blocks, 'the README quotes no recorded study result'
    assert len(blocks) == len(set(blocks)), 'a study result is quoted twice'
    assert all((REPO / 'docs' / 'results' / block / 'provenance.json').is_file() for block in blocks)
    stale = update_document(readme, REPO / 'docs' / 'results', check=True)
    assert stale == [], f'README blocks differ from their records: {stale}; run timm-advnorm-study --update-docs README.md'


def _percentages(row: str):
    """The percentages of a markdown table row, in order (``97.8%`` and ``**83.3%**`` -> 97.8, 83.3)."""
    return [float(cell.strip(' *').split('%')[0]) for cell in row.strip('|').split('|') if '%' in cell]


def test_the_demo_table_is_the_recorded_demo_report():
    """The README's demo table (clean and PGD-20 top-1 per training and branch) is the recorded report's, row by row:
    ``docs/results/demo/report.md``, written by the demo of a fresh clone."""
    report = (REPO / 'docs' / 'results' / 'demo' / 'report.md').read_text(encoding='utf-8')
    readme = (REPO / 'README.md').read_text(encoding='utf-8')
    recorded = [_percentages(line)[:2] for line in report.splitlines() if line.startswith('| adversarial')
                or line.startswith('| clean')]
    table = readme[readme.index('| training | branch | clean top-1 | PGD-20 top-1 (ε=16) |'):]
    rows = table.split('\n\n', 1)[0].splitlines()[2:]  # the table ends at the first blank line
    documented = [_percentages(line) for line in rows]
    assert len(recorded) == 5 and documented == recorded
