"""A study's results on the record: the files the documentation quotes, copied out of the study folder.

``timm-advnorm-study NAME --scale S --record docs/results`` copies the study's tables (``results.csv``: every cell
and seed; ``grid.csv``: the grid points pooled; ``findings.csv``; ``ratios.csv``), its ``results.md``, its plot and
``provenance.json`` to ``docs/results/NAME/S/``, where they are committed: every number a page quotes about the
study is read from these files (`timm_advnorm.study.document`), never typed into prose.
"""
import csv
import shutil
from pathlib import Path
from typing import Collection, Set

from ..write_guard import atomic_write
from .provenance import PROVENANCE_FILE

__all__ = ['RECORDED_FILES', 'check_record_keeps', 'record_study']

#: What a record holds, when the study wrote it (``ratios.csv`` only for a study with ratio tables).
RECORDED_FILES = ('results.csv', 'grid.csv', 'findings.csv', 'ratios.csv', 'results.md', 'study.png',
                  PROVENANCE_FILE)


def _recorded_cells(record: Path) -> Set[str]:
    """The ids of the cells a record's ``results.csv`` holds (none without one)."""
    path = record / 'results.csv'
    if not path.is_file():
        return set()
    with open(path, newline='', encoding='utf-8') as f:
        return {row['cell'] for row in csv.DictReader(f) if row.get('cell')}


def check_record_keeps(target: Path, cells: Collection[str]) -> None:
    """Refuse (ValueError) to replace the record at `target` with one of `cells` when it holds cells they lack: a
    record of another study folder, of fewer seeds or of a partial run would lose evaluated results."""
    lost = sorted(_recorded_cells(target) - set(cells))
    if lost:
        shown = ', '.join(lost[:3]) + (f' and {len(lost) - 3} more' if len(lost) > 3 else '')
        raise ValueError(f'--record: {target} holds {len(lost)} evaluated cell(s) this study would not record '
                         f'({shown}): recording would lose them. Run from the study folder (--output, --seeds) that '
                         f'evaluated them, or record to another folder.')


def record_study(study_dir: Path, target: Path) -> Path:
    """Copy `study_dir`'s `RECORDED_FILES` into `target` (created if needed), each file replaced atomically; files
    of an earlier record that this study no longer writes are removed. Returns `target`.

    Raises:
        ValueError: `target` holds cells the study's tables lack (`check_record_keeps`); nothing is copied.
    """
    check_record_keeps(target, _recorded_cells(study_dir))
    target.mkdir(parents=True, exist_ok=True)
    for name in RECORDED_FILES:
        source, destination = study_dir / name, target / name
        if source.is_file():
            atomic_write(destination, lambda tmp: shutil.copyfile(source, tmp))
        elif destination.is_file():
            destination.unlink()
    return target
