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
