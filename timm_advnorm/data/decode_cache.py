"""What earlier up-front decode checks verified, per file, so that a second run or a resume decodes only what changed.

The check of `timm_advnorm.data.readable` decodes every image before a run uses it: on ImageNet (1.33 M JPEGs) that
is minutes on an 8-GPU node and most of an hour on a workstation, again after every preemption. `DecodeCache` keeps
each file's verdict (readable, or the reason it failed) with its size and modification time (``st_mtime_ns``); a file
whose size and time are those recorded is not decoded again, whatever its verdict was: an unreadable file that has
not changed stays unreadable without being read.

Where it lives: one file per dataset root and image mode (the ``input_img_mode`` conversion is part of what was
verified), ``<cache>/decode-check/<digest>.json.gz`` under ``$TIMM_ADVNORM_DECODE_CACHE`` or else the package's
cache (``$TIMM_ADVNORM_CACHE/decode-check``, default ``~/.cache/timm_advnorm/decode-check``), the digest being that of
the root's resolved path and the mode. Not inside the data folder: it may be read-only or shared, and a file written
there becomes part of what the user gave as input (a cache that would land under the root is not used at all). Not
in the run folder: evaluation has none, and a second run of the same data (another method, a study's next cell)
should find the first's verdicts.

Safety: the file is written atomically (`write_guard.atomic_write`: a temporary file beside it, renamed over it in
one step), so a reader sees an old or a new cache, never half of one; of a distributed run only rank 0 writes (the
ranks have gathered every verdict first), and two jobs writing at once lose at most the other's additions, which are
decoded again. A damaged, truncated or foreign file (another root or mode, another format) is ignored with one
warning line and rebuilt.

Limits, as for make's and rsync's size+time checks: a file replaced by another of the same size whose modification
time is the same (within the file system's time granularity, or set back on purpose, e.g. ``touch -r`` or
``rsync --times`` from a source that differs) is taken for the file verified. A file modified while the check ran may
keep its time within that granularity: verdicts of files modified less than `RACY_SECONDS` before the check started
are not recorded (as git treats its "racily clean" entries), so they are decoded again next time.
"""
import gzip
import hashlib
import json
import logging
import os
import zlib
from pathlib import Path
from typing import Dict, Mapping, Optional, Tuple

from ..usage import one_line
from ..write_guard import atomic_write, os_error_cause
from .rendered import default_cache_root

__all__ = ['DecodeCache', 'Verdict', 'RACY_SECONDS', 'decode_cache_folder', 'file_stamp']

_logger = logging.getLogger(__name__)

#: A file's verdict: its size, its modification time (ns) and why it cannot be read (``''``: it decoded).
Verdict = Tuple[int, int, str]

_FORMAT = 'timm_advnorm.decode-check/1'
#: Verdicts of files modified this recently before the check started are not kept (see the module docstring): more
#: than the coarsest time granularity of common file systems (FAT's 2 s) and the kernel clock's lag.
RACY_SECONDS = 3
#: Compression of the cache file: ImageNet's 1.33 M names and stamps shrink about 5x at the fastest level.
_GZIP_LEVEL = 1


def decode_cache_folder() -> Path:
    """Folder of the decode-check caches: ``$TIMM_ADVNORM_DECODE_CACHE``, else ``decode-check`` in the package's cache
    (`default_cache_root`)."""
    return Path(os.environ.get('TIMM_ADVNORM_DECODE_CACHE') or default_cache_root() / 'decode-check')


def file_stamp(path: str) -> Optional[Tuple[int, int]]:
    """``(size, mtime_ns)`` of the file `path` (links followed, as the reader opens it); None when it cannot be
    stat'ed (then it is decoded, and its error reported from there)."""
    try:
        stat = os.stat(path)
    except OSError:
        return None
    return stat.st_size, stat.st_mtime_ns


class DecodeCache:
    """The verdicts of earlier checks of one dataset root read in one image mode, by file name relative to the root.

    Args:
        path: The cache file.
        root: The dataset root's resolved path.
        mode: The image mode the images were converted to (``''``: none).
        verdicts: What the cache file held.
    """

    def __init__(self, path: Path, root: str, mode: str, verdicts: Dict[str, Verdict]):
        self.path = path
        self.root = root
        self.mode = mode
        self.verdicts = verdicts

    @classmethod
    def open(cls, root: str, mode: Optional[str]) -> Optional['DecodeCache']:
        """The cache of `root` read in `mode`, with what its file holds (nothing when it is missing or damaged: one
        warning line); None when the cache file would lie inside `root`, which is never written into."""
        resolved, mode = os.path.realpath(root), mode or ''
        digest = hashlib.sha256(f'{resolved}\0{mode}'.encode()).hexdigest()[:32]
        path = decode_cache_folder() / f'{digest}.json.gz'
        if Path(os.path.realpath(path)).is_relative_to(resolved):
            _logger.info('Not caching the decode check of %s: the cache (%s) would lie inside it.', root, path)
            return None
        try:
            verdicts = _read(path, resolved, mode)
        except (FileNotFoundError, NotADirectoryError):  # none yet (a folder that cannot be made: see `save`)
            verdicts = {}
        except (OSError, EOFError, zlib.error, ValueError) as e:
            _logger.warning('Ignoring the decode-check cache %s, damaged or unreadable (%s); it is rebuilt.', path,
                            one_line(e, 200))
            verdicts = {}
        return cls(path, resolved, mode, verdicts)

    def verdict(self, name: str, stamp: Optional[Tuple[int, int]]) -> Optional[str]:
        """The recorded verdict of the file `name` (``''``: readable, else why not) if its `stamp` (size,
        mtime_ns) is the one recorded; None when it must be decoded (new, changed, or not stat'able)."""
        known = self.verdicts.get(name)
        if stamp is None or known is None or known[:2] != stamp:
            return None
        return known[2]

    def save(self, verdicts: Mapping[str, Verdict], started_ns: int, complete: bool) -> None:
        """Record `verdicts` of a check that started at `started_ns` (``time.time_ns()``), those of files modified
        within `RACY_SECONDS` before it left out; `complete`: they are the whole dataset's, so verdicts of files gone
        are dropped, else they are added to the recorded ones. Written only when it changes the file; a failed write
        is one warning line (the run goes on, the next one decodes again)."""
        recent = started_ns - RACY_SECONDS * 10 ** 9
        kept = {name: verdict for name, verdict in verdicts.items() if verdict[1] < recent}
        updated = kept if complete else {**self.verdicts, **kept}
        if updated == self.verdicts:
            return
        names = list(updated)
        record = dict(format=_FORMAT, root=self.root, input_img_mode=self.mode, files=names,
                      sizes=[updated[name][0] for name in names], mtime_ns=[updated[name][1] for name in names],
                      errors={name: updated[name][2] for name in names if updated[name][2]})

        def write(tmp: Path) -> None:
            with gzip.GzipFile(tmp, mode='wb', compresslevel=_GZIP_LEVEL, mtime=0) as out:
                out.write(json.dumps(record, separators=(',', ':')).encode())

        try:
            atomic_write(self.path, write)
        except OSError as e:  # a `WriteError`: the cache file is left as it was
            _logger.warning('Could not write the decode-check cache %s (%s); the next run decodes these images again.',
                            self.path, os_error_cause(e))
            return
        self.verdicts = updated


def _read(path: Path, root: str, mode: str) -> Dict[str, Verdict]:
    """The verdicts the cache file `path` of `root` in `mode` holds.

    Raises:
        FileNotFoundError: There is none.
        ValueError, OSError, EOFError, zlib.error: It is damaged, or another root's, mode's or format's.
    """
    with gzip.open(path, 'rb') as f:
        record = json.loads(f.read())
    if not isinstance(record, dict) or record.get('format') != _FORMAT:
        raise ValueError(f'not a {_FORMAT} file')
    if record.get('root') != root or record.get('input_img_mode') != mode:
        raise ValueError(f'it is the cache of {record.get("root")!r} in mode {record.get("input_img_mode")!r}')
    names, sizes, times, errors = (record.get(key) for key in ('files', 'sizes', 'mtime_ns', 'errors'))
    if not (isinstance(names, list) and isinstance(sizes, list) and isinstance(times, list)
            and isinstance(errors, dict) and len(names) == len(sizes) == len(times)):
        raise ValueError('its lists are missing or of different lengths')
    if not (all(type(name) is str for name in names) and all(type(n) is int for n in sizes)
            and all(type(n) is int for n in times) and all(type(e) is str for e in errors.values())):
        raise ValueError('it holds values of the wrong types')
    return {name: (size, time, errors.get(name, '')) for name, size, time in zip(names, sizes, times)}
