"""Writing results: JSON (everything) and CSV (one row per variant and attack), atomically, never clobbering.

A robust evaluation can take days; its results file must never be half-written (a temporary file published in one
step) nor silently overwritten by another run, not even one that ran at the same time (`OutputFiles`: the target is
claimed by ``os.link``, which fails when it exists, so the check and the write are one step), and an output that
cannot be written must be found before the evaluation, not after it, without leaving anything behind when the run
is refused (`check_writable`, `check_folder_writable` create no folder).

The CSV says what ran (`CSV_FIELDS`): ``attack`` is the name of the budget that ran (``pgd-t-13``), next to the
protocol's name for it (``protocol_attack``: ``pgd-t-2000``); iterations and queries have their own columns;
``eps_255`` is the budget as a norm (``norm``) of the perturbation in 0-255 pixel units, k meaning k/255 on the
[0, 1] scale, for L2 too, and ``eps_rule`` says how it was set (``sqrt_dim``: Galloway's ε∞·√d, already applied;
``std``, ``std_sqrt_dim``: declared in units of the standardized input and resolved from the model's std, both of
which ``description`` names: ``ε = 0.03 of the standardized input (the model's std 0.226)``);
``step_255`` is the size of every step on the same scale and ``step_rule`` how the attack steps (``sign step,
max(1/255, ε/N)``; empty in rows of results written before steps were recorded), ``iterate`` which iterate
``accuracy`` is on (``best``, ``last``), ``reduced`` whether the protocol's budgets were reduced for a smoke test, and
``description`` the attack in one line as every other output names it (`schema.AttackResult.describe`: ``PGD-20 L∞,
ε = 8/255, α = 2/255 (sign step), untargeted, best iterate``); noise rows have no norm, ε nor step but their ``noise``
model and, for Gaussian noise, ``sigma`` on ``sigma_scale``; the clean accuracy on an out-of-distribution set of
the protocol is a row named by the set (``imagenet-r``).
``accuracy`` and ``success_rate`` are on the best iterate (per sample the first iterate that fools the model);
``accuracy_last_iterate`` and ``success_rate_last_iterate`` on the last PGD iterate of the same run, the papers'
convention, where the protocol scores it (``xie2020``, ``nofrost``; empty otherwise). ``loss`` is the mean
cross-entropy loss over every sample, clean or at the attack's results, where the protocol records it
(``galloway-mnist``; empty otherwise).
"""
import csv
import errno
import io
import json
import os
import secrets
from pathlib import Path
from typing import Any, Dict, Iterable, List, Mapping, Optional, Tuple, Union

from ...write_guard import (
    Writer, atomic_write, check_folder_writable, check_names, reported_write, temp_name, written_temp)
from ..schema import EvalResults

__all__ = ['OutputFiles', 'kept_name', 'check_writable', 'write_json',
           'write_csv', 'csv_rows', 'json_text', 'csv_text', 'CSV_FIELDS']

CSV_FIELDS = ('model', 'variant', 'gamma', 'attack', 'protocol_attack', 'threat', 'norm', 'eps_255', 'eps_rule',
              'step_255', 'step_rule', 'steps', 'queries', 'targeted', 'iterate', 'noise', 'sigma', 'sigma_scale',
              'accuracy', 'success_rate', 'accuracy_last_iterate', 'success_rate_last_iterate', 'loss', 'samples',
              'reduced', 'description')
#: `AttackResult` fields copied into a row under their own name.
_COPIED = ('threat', 'norm', 'eps_rule', 'step_rule', 'steps', 'queries', 'targeted', 'iterate', 'noise', 'sigma',
           'sigma_scale', 'accuracy', 'success_rate', 'accuracy_last_iterate', 'success_rate_last_iterate', 'loss')
#: ``os.link`` errors of file systems without hard links (FAT, some FUSE and object-store mounts).
_NO_HARD_LINKS = (errno.EPERM, errno.ENOTSUP, errno.EOPNOTSUPP, errno.ENOSYS)

PathLike = Union[str, Path]


def check_writable(path: PathLike, overwrite: bool) -> None:
    """Check up front that `path` can be written: not an existing file unless `overwrite`, in a writable folder.

    Creates nothing (see `check_folder_writable`). This only catches what exists now; `OutputFiles` enforces the
    rule when the file is written.

    Raises:
        FileExistsError: `path` exists and `overwrite` is false.
        ValueError: `path` is a folder, or its folder cannot be written.
    """
    path = Path(path)
    check_names(path, reserve=len(os.fsencode(temp_name(path))) - len(os.fsencode(path.name)))
    if path.is_dir():
        raise ValueError(f'cannot write {path}: it is a folder.')
    if path.exists() and not overwrite:
        raise FileExistsError(f'{path} exists; pass --overwrite to replace it.')
    check_folder_writable(path.parent)


def _link_new(tmp: Path, path: Path) -> None:
    """Publish `tmp` as `path` only if `path` does not exist, in one step.

    ``os.link`` fails with FileExistsError when `path` exists, whoever created it and however recently. On a file
    system without hard links the target is claimed by an exclusive create (one step too), then replaced by `tmp`:
    a reader may briefly see it empty, but no other run's file is ever replaced.

    Raises:
        FileExistsError: `path` exists.
    """
    try:
        os.link(tmp, path)
    except OSError as e:
        if e.errno not in _NO_HARD_LINKS:  # FileExistsError included
            raise
        os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666))
        os.replace(tmp, path)


def kept_name(path: PathLike, tag: str) -> Path:
    """Where a file that could not take `path` is kept: ``results.json`` -> ``results.kept-<tag>.json``
    (``results.bn_stats.json`` -> ``results.kept-<tag>.bn_stats.json``, so the set keeps its suffixes)."""
    path = Path(path)
    stem, dot, suffixes = path.name.partition('.')
    return path.with_name(f'{stem}.kept-{tag}{dot}{suffixes}')


class OutputFiles:
    """The output files of one run, published so that no run ever silently replaces another's.

    Each file is written to a temporary file next to its target, then published in one step: with `overwrite` by
    ``os.replace``; without it by ``os.link``, which fails when the target exists, so of two runs that publish the
    same name at once exactly one succeeds, however recently the other checked. The other loses nothing: from its
    first clash on, it publishes every file under a name tagged ``kept-<tag>`` (`kept_name`, one tag for the run,
    so its files stay a set) and `check_nothing_kept` reports where they are.

    Args:
        overwrite: Replace existing files (``--overwrite``).
    """

    def __init__(self, overwrite: bool = False):
        self.overwrite = overwrite
        #: ``(wanted, written)`` for every file published under a kept name, in publishing order.
        self.kept: List[Tuple[Path, Path]] = []
        self._tag: Optional[str] = None

    def publish(self, path: PathLike, write: Writer) -> Path:
        """Write a file with ``write(tmp_path)`` and publish it at `path`, or under its kept name once a clash
        happened (this file's or an earlier one's); returns where it went.

        Raises:
            WriteError: An OS error (a full disk), naming `path`; no existing file was replaced.
        """
        path = Path(path)
        with reported_write(path, 'no existing file was replaced'):
            tmp = written_temp(path, write)
            try:
                return self._publish_temp(tmp, path)
            finally:
                tmp.unlink(missing_ok=True)

    def _publish_temp(self, tmp: Path, path: Path) -> Path:
        """Publish the written `tmp` as `path` (see `publish`)."""
        if self.overwrite:
            os.replace(tmp, path)
            return path
        if self._tag is None:
            try:
                _link_new(tmp, path)
                return path
            except FileExistsError:
                self._tag = secrets.token_hex(4)
        while True:
            kept = kept_name(path, self._tag)
            try:
                _link_new(tmp, kept)
                self.kept.append((path, kept))
                return kept
            except FileExistsError:  # a 32-bit tag collision: draw another for this and later files
                self._tag = secrets.token_hex(4)

    def check_nothing_kept(self) -> None:
        """Say where this run's files went if another run took their names while it ran.

        Raises:
            FileExistsError: A file was kept under another name; the message names every one.
        """
        if self.kept:
            first = self.kept[0][0]
            raise FileExistsError(f'{first} was written by another run while this one ran; nothing was replaced, and '
                                  f'this run\'s outputs were kept as {", ".join(str(k) for _, k in self.kept)} '
                                  '(--overwrite replaces existing files).')


def json_text(data: Mapping[str, Any]) -> str:
    """`data` as indented JSON text."""
    return json.dumps(data, indent=2) + '\n'


def write_json(path: PathLike, data: Mapping[str, Any]) -> None:
    """Write `data` as indented JSON, atomically."""
    atomic_write(path, lambda tmp: tmp.write_text(json_text(data)))


def csv_rows(results: EvalResults) -> List[Dict[str, Any]]:
    """One row per (variant, clean / attack / worst case / out-of-distribution set) of `results` (columns: see the
    module docstring; an out-of-distribution set's row is named by the set, with its own sample count)."""
    rows, reduced = [], results.protocol.reduced
    for variant in results.variants:
        base = dict(model=results.model, variant=variant.name, gamma=variant.gamma, samples=variant.samples,
                    reduced=reduced)
        rows.append(dict(base, attack='clean', accuracy=variant.clean, loss=variant.clean_loss))
        for attack in variant.attacks:
            rows.append(dict(base, attack=attack.label, protocol_attack=attack.protocol_label, eps_255=attack.eps,
                             step_255=attack.step, description=attack.describe(reduced),
                             **{key: getattr(attack, key) for key in _COPIED}))
        if variant.worst_case is not None:
            rows.append(dict(base, attack='worst-case', accuracy=variant.worst_case))
        for name, entry in variant.ood.items():
            rows.append(dict(base, attack=name, accuracy=entry.accuracy, samples=entry.samples))
    return rows


def csv_text(rows: Iterable[Mapping[str, Any]]) -> str:
    """`rows` as CSV text with `CSV_FIELDS` columns."""
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=CSV_FIELDS, extrasaction='ignore')
    writer.writeheader()
    writer.writerows(rows)
    return buffer.getvalue()


def write_csv(path: PathLike, rows: Iterable[Mapping[str, Any]]) -> None:
    """Write `rows` as CSV with `CSV_FIELDS` columns, atomically."""
    atomic_write(path, lambda tmp: tmp.write_text(csv_text(rows)))
