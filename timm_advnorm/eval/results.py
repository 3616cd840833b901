"""Writing results: JSON (everything) and CSV (one row per variant and attack), atomically, never clobbering.

A robust evaluation can take days; its results file must never be half-written (temp file + ``os.replace``) nor
silently overwritten by the next run (refused unless the caller allows it).
"""
import csv
import io
import json
import os
import tempfile
from pathlib import Path
from typing import Any, Callable, Dict, Iterable, List, Mapping, Union

__all__ = ['check_writable', 'atomic_write', 'write_json', 'write_csv', 'csv_rows', 'CSV_FIELDS']

CSV_FIELDS = ('model', 'variant', 'gamma', 'attack', 'threat', 'norm', 'eps', 'steps', 'targeted', 'accuracy',
              'success_rate', 'samples')


def check_writable(path: Union[str, Path], overwrite: bool) -> None:
    """Refuse an existing `path` unless `overwrite` (checked up front, before hours of evaluation).

    Raises:
        FileExistsError: `path` exists and `overwrite` is false.
    """
    if Path(path).exists() and not overwrite:
        raise FileExistsError(f'{path} exists; pass --overwrite to replace it.')


def atomic_write(path: Union[str, Path], write: Callable[[Path], None]) -> None:
    """Call ``write(tmp_path)`` on a temporary file next to `path`, then rename it over `path` in one step."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f'.{path.name}.', suffix=path.suffix)
    os.close(fd)
    try:
        write(Path(tmp))
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _write_text(path: Union[str, Path], text: str) -> None:
    atomic_write(path, lambda tmp: tmp.write_text(text))


def write_json(path: Union[str, Path], results: Mapping[str, Any]) -> None:
    """Write `results` as indented JSON, atomically."""
    _write_text(path, json.dumps(results, indent=2) + '\n')


def csv_rows(results: Mapping[str, Any]) -> List[Dict[str, Any]]:
    """One row per (variant, clean / attack / worst case) of a results dict."""
    rows = []
    for variant in results['variants']:
        base = dict(model=results['model'], variant=variant['name'], gamma=variant['gamma'], samples=variant['samples'])
        rows.append(dict(base, attack='clean', accuracy=variant['clean']))
        for attack in variant['attacks']:
            rows.append(dict(base, attack=attack['label'], threat=attack['threat'], norm=attack['norm'],
                             eps=attack['eps'], steps=attack['steps'], targeted=attack['targeted'],
                             accuracy=attack['accuracy'], success_rate=attack.get('success_rate')))
        if variant['worst_case'] is not None:
            rows.append(dict(base, attack='worst-case', accuracy=variant['worst_case']))
    return rows


def write_csv(path: Union[str, Path], rows: Iterable[Mapping[str, Any]]) -> None:
    """Write `rows` as CSV with `CSV_FIELDS` columns, atomically."""
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=CSV_FIELDS, extrasaction='ignore')
    writer.writeheader()
    writer.writerows(rows)
    _write_text(path, buffer.getvalue())
