"""A study's results on the record: the files the documentation quotes, copied out of the study folder.

``timm-advnorm-study NAME --scale S --record docs/results`` copies the study's tables (``results.csv``: every cell
and seed; ``grid.csv``: the grid points pooled; ``findings.csv``; ``ratios.csv``), its ``results.md``, its plot and
``provenance.json`` to ``docs/results/NAME/S/``, where they are committed: every number a page quotes about the
study is read from these files (`timm_advnorm.study.document`), never typed into prose.
"""
import shutil
from pathlib import Path

from ..write_guard import atomic_write
from .provenance import PROVENANCE_FILE

__all__ = ['RECORDED_FILES', 'record_study']

#: What a record holds, when the study wrote it (``ratios.csv`` only for a study with ratio tables).
RECORDED_FILES = ('results.csv', 'grid.csv', 'findings.csv', 'ratios.csv', 'results.md', 'study.png',
                  PROVENANCE_FILE)


def record_study(study_dir: Path, target: Path) -> Path:
    """Copy `study_dir`'s `RECORDED_FILES` into `target` (created if needed), each file replaced atomically; files
    of an earlier record that this study no longer writes are removed. Returns `target`."""
    target.mkdir(parents=True, exist_ok=True)
    for name in RECORDED_FILES:
        source, destination = study_dir / name, target / name
        if source.is_file():
            atomic_write(destination, lambda tmp: shutil.copyfile(source, tmp))
        elif destination.is_file():
            destination.unlink()
    return target
