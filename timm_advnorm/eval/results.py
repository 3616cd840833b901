"""Writing results: JSON (everything) and CSV (one row per variant and attack), atomically, never clobbering.

A robust evaluation can take days; its results file must never be half-written (temp file + ``os.replace``) nor
silently overwritten by the next run (refused unless the caller allows it), and an output that cannot be written must
be found before the evaluation, not after it (`check_writable`, `check_folder_writable`).

The CSV says what ran (`CSV_FIELDS`): ``attack`` is the name of the budget that ran (``pgd-t-13``), next to the
protocol's name for it (``protocol_attack``: ``pgd-t-2000``); iterations and queries have their own columns;
``eps_255`` is the budget as a norm (``norm``) of the perturbation in 0-255 pixel units, k meaning k/255 on the
[0, 1] scale, for L2 too, and ``eps_rule`` says how it was set (``sqrt_dim``: Galloway's ε∞·√d, already applied);
noise rows have no norm nor ε but their ``noise`` model and, for Gaussian noise, ``sigma`` on ``sigma_scale``.
"""
import csv
import io
import json
import os
import secrets
from pathlib import Path
from typing import Any, Callable, Dict, Iterable, List, Mapping, Union

__all__ = ['check_writable', 'check_folder_writable', 'atomic_write', 'write_json', 'write_csv', 'csv_rows',
           'CSV_FIELDS']

CSV_FIELDS = ('model', 'variant', 'gamma', 'attack', 'protocol_attack', 'threat', 'norm', 'eps_255', 'eps_rule',
              'steps', 'queries', 'targeted', 'noise', 'sigma', 'sigma_scale', 'accuracy', 'success_rate', 'samples')
#: Attack-entry keys copied into a row under their own name.
_COPIED = ('threat', 'norm', 'eps_rule', 'steps', 'queries', 'targeted', 'noise', 'sigma', 'sigma_scale', 'accuracy',
           'success_rate')


def _new_temp_file(path: Path) -> Path:
    """Create an empty, uniquely named hidden file next to `path` and return its path.

    Created with mode 0666 so the umask applies, as with ``open()``: the file then has the permissions any other
    file the user writes has (`tempfile.mkstemp` always gives 0600, which would make results unreadable to others).
    """
    while True:
        tmp = path.with_name(f'.{path.name}.{secrets.token_hex(6)}{path.suffix}')
        try:
            os.close(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666))
            return tmp
        except FileExistsError:  # a 48-bit name collision: draw another
            continue


def check_folder_writable(folder: Union[str, Path]) -> None:
    """Create `folder` (and its parents) when missing, then create and remove a file in it.

    That is what writing into it will do, so a "folder" that is a file, a read-only or pseudo file system, or a
    missing permission shows up now, before hours of evaluation, and not when the results are written.

    Raises:
        ValueError: Nothing can be written into `folder`.
    """
    folder = Path(folder)
    if folder.exists() and not folder.is_dir():
        raise ValueError(f'cannot write into {folder}: it is not a folder.')
    try:
        folder.mkdir(parents=True, exist_ok=True)
        _new_temp_file(folder / 'write-probe').unlink()
    except OSError as e:
        raise ValueError(f'cannot write into {folder}: {e.strerror or e}.') from None


def check_writable(path: Union[str, Path], overwrite: bool) -> None:
    """Check up front that `path` can be written: not an existing file unless `overwrite`, in a writable folder.

    Creates the missing parent folders (see `check_folder_writable`).

    Raises:
        FileExistsError: `path` exists and `overwrite` is false.
        ValueError: `path` is a folder, or its folder cannot be written.
    """
    path = Path(path)
    if path.is_dir():
        raise ValueError(f'cannot write {path}: it is a folder.')
    if path.exists() and not overwrite:
        raise FileExistsError(f'{path} exists; pass --overwrite to replace it.')
    check_folder_writable(path.parent)


def atomic_write(path: Union[str, Path], write: Callable[[Path], None]) -> None:
    """Call ``write(tmp_path)`` on a temporary file next to `path`, then rename it over `path` in one step.

    The file gets the permissions ``open()`` would give it (0666 less the umask).
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = _new_temp_file(path)
    try:
        write(tmp)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def _write_text(path: Union[str, Path], text: str) -> None:
    atomic_write(path, lambda tmp: tmp.write_text(text))


def write_json(path: Union[str, Path], results: Mapping[str, Any]) -> None:
    """Write `results` as indented JSON, atomically."""
    _write_text(path, json.dumps(results, indent=2) + '\n')


def csv_rows(results: Mapping[str, Any]) -> List[Dict[str, Any]]:
    """One row per (variant, clean / attack / worst case) of a results dict (columns: see the module docstring)."""
    rows = []
    for variant in results['variants']:
        base = dict(model=results['model'], variant=variant['name'], gamma=variant['gamma'], samples=variant['samples'])
        rows.append(dict(base, attack='clean', accuracy=variant['clean']))
        for attack in variant['attacks']:
            rows.append(dict(base, attack=attack['label'], protocol_attack=attack['protocol_label'],
                             eps_255=attack.get('eps'), **{key: attack.get(key) for key in _COPIED}))
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
