"""Every study result the documentation quotes is generated from its committed record: each marked block of the
README equals what `timm-advnorm-study --update-docs` writes from ``docs/results/<study>/<scale>/``, and each
``.. study-results::`` table of the documentation site names a committed record (the site's build renders it from
there, `tests/test_docs.py`)."""
import re
from pathlib import Path

from timm_advnorm.study.document import BLOCK, update_document

REPO = Path(__file__).resolve().parents[1]
RECORDS = REPO / 'docs' / 'results'
#: A study-results directive of a documentation page: ``.. study-results:: galloway/digits``.
DIRECTIVE = re.compile(r'^\.\. study-results:: *(?P<record>\S+)', re.MULTILINE)


def test_every_documented_study_table_is_what_its_record_generates():
    readme = REPO / 'README.md'
    blocks = [f'{m["study"]}/{m["scale"]}' for m in BLOCK.finditer(readme.read_text(encoding='utf-8'))]
    assert len(blocks) == len(set(blocks)), 'a study result is quoted twice'
    assert all((RECORDS / block / 'provenance.json').is_file() for block in blocks)
    stale = update_document(readme, RECORDS, check=True)
    assert stale == [], f'README blocks differ from their records: {stale}; run timm-advnorm-study --update-docs README.md'


def test_every_study_table_of_the_site_names_a_committed_record():
    quoted = {(page.relative_to(REPO).as_posix(), m['record']) for page in (REPO / 'docs').rglob('*.rst')
              for m in DIRECTIVE.finditer(page.read_text(encoding='utf-8'))}
    assert {record for _, record in quoted} >= {'galloway/digits', 'xie2020/digits', 'nofrost/digits',
                                                'fast-advprop/digits'}
    missing = sorted((page, record) for page, record in quoted if not (RECORDS / record / 'provenance.json').is_file())
    assert missing == [], f'pages quote study results that are not committed: {missing}'


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


def test_the_galloway_calibration_table_is_its_evaluations_numbers():
    """``docs/results/galloway-mnist/calibration/calibration.csv`` (a table of the site): each row of ours is what its
    source evaluation's ``results.csv`` says, clean, loss, noise and the attack at ε = 0.1 (FGSM for the linear
    model, BIM for the MLPs; the [0, 1] run is one FGSM step, run as a one-iteration BIM)."""
    import csv

    folder = RECORDS / 'galloway-mnist' / 'calibration'
    rows = list(csv.DictReader((folder / 'calibration.csv').open(encoding='utf-8')))
    ours = [row for row in rows if row['Source'] != 'paper']
    assert len(ours) == 10 and len(rows) == 13
    for row in ours:
        results = {r['attack']: r for r in csv.DictReader((folder / row['Source']).open(encoding='utf-8'))}
        attack = results.get('fgsm-0.1' if row['Attack at ε = 0.1'] == 'FGSM' else 'bim-linf') or results['bim-linf']
        noise = results['gaussian-noise']['accuracy'] if 'gaussian-noise' in results else '—'
        assert (row['Clean'], row['Noise'], row['Accuracy']) == (results['clean']['accuracy'], noise,
                                                                 attack['accuracy']), row['Source']
        assert row['Clean loss'] in ('—', f"{float(results['clean']['loss'] or 'nan'):.4f}"), row['Source']
