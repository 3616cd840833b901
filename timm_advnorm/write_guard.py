"""The rules every command that writes follows: where it may write, what ``--overwrite`` may replace, and how a
failed write is reported.

* A write target (an export folder, a results file, a state file, a run folder, a generated image folder) never
  equals, contains or lies inside anything the command reads: the checkpoint, the results, the data, the state file
  (`check_write_target`). Without this rule, replacing an export folder that holds its own source deletes the
  source, and files written into a data folder become samples of it.
* ``--overwrite`` replaces only a folder the package itself exported earlier: one that holds the manifest
  `EXPORT_MANIFEST` (written by `write_manifest`) and no file the manifest does not list (`check_replaceable`). A
  folder of the user's is never deleted, whatever flag is given.
* A path to be written is checked before anything is created (`check_creatable`, `check_folder_writable`): a name
  longer than its file system allows (``NAME_MAX``), a folder on a pseudo file system (``/proc``) or a read-only one,
  a missing permission. A command refused for it leaves no folder behind.
* An OS error while writing (a full disk, a read-only file system, a missing permission) is one line naming the file
  and the reason in words, and what was kept (`WriteError`, `reported_write`, `os_error_cause`), not a library's
  traceback about a truncated archive nor a raw ``[Errno N]``. torch's archive writer and safetensors report a failed
  write in their own exceptions, which `library_write_error` recognizes.
* A file is written whole or not at all (`atomic_write`): into a hidden temporary file beside it (or under a fixed
  name the next write reclaims, for a file one process writes), then renamed over it in one step, so a reader sees
  the old file or the new one, never half of one.
"""
import errno
import json
import os
import re
import secrets
import shutil
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Callable, Iterator, Mapping, Optional, Union

from safetensors import SafetensorError

from .messages import some_names

__all__ = ['EXPORT_MANIFEST', 'WriteError', 'atomic_write', 'check_creatable', 'check_folder_name',
           'check_folder_writable', 'check_names', 'check_replaceable', 'check_write_target', 'existing_ancestor',
           'library_write_error', 'new_temp_file', 'os_error_cause', 'reported_write', 'temp_name', 'write_manifest',
           'written_temp']

PathLike = Union[str, Path]
Writer = Callable[[Path], None]

#: The file an export folder holds to say the package wrote it, and which files it wrote.
EXPORT_MANIFEST = '.timm-advnorm-export.json'
_MANIFEST_FORMAT = 'timm_advnorm.export/1'
#: What torch's archive writer (``torch.save``, `PyTorchFileWriter`) says when a write fails: it keeps no OS error. A
#: full disk reads "basic_ios::clear: iostream error" then "unexpected pos N vs M" (torch 2.x on a small file), or
#: "PytorchStreamWriter failed writing file data/0: file write failed".
_STREAM_WRITER_FAILURES = ('PytorchStreamWriter failed writing file', 'file write failed', 'unexpected pos ',
                           'basic_ios::clear: iostream error')
#: Free space under which a failed write is put down to a full disk: less than one write of the writer's buffers.
_FULL_DISK_BYTES = 1 << 20
#: How safetensors (``save_file``, timm's `save_for_hf`) words the OS error of a failed write: "Error while
#: serializing: I/O error: No space left on device (os error 28)".
_SAFETENSORS_OS_ERROR = re.compile(r'I/O error: (.+?) \(os error (\d+)\)')


def _real(path: PathLike) -> Path:
    """`path` absolute, with every symbolic link resolved (also for a path that does not exist yet)."""
    return Path(os.path.realpath(Path(path).expanduser()))


def check_write_target(
        target: PathLike,
        option: str,
        reads: Mapping[str, Optional[PathLike]],
        kind: str = 'folder',
) -> None:
    """Refuse a write target that equals, contains or lies inside something the command reads.

    Paths are compared with symbolic links resolved; a read path that does not exist yet counts too (a state file
    the command will create). Reads given as None or empty (an unset option, a Hub name) are skipped.

    Args:
        target: What the command writes (a folder it replaces or writes into, or a file).
        option: The option that names `target`, for the message (``--local-dir``).
        reads: What the command reads, by description (``'the checkpoint being published'``) to path.
        kind: What `target` is (``'folder'``, ``'file'``), for the message's advice.

    Raises:
        ValueError: One line naming the option, the target, what it would touch, and what to do.
    """
    written = _real(target)
    for what, source in reads.items():
        if not source:
            continue
        read = _real(source)
        if written == read:
            relation = 'it is'
        elif written in read.parents:
            relation = 'it contains'
        elif read in written.parents:
            relation = 'it lies inside'
        else:
            continue
        raise ValueError(f'{option} {target}: {relation} {what} ({source}); choose another {kind}')


def write_manifest(folder: PathLike, made_by: str) -> None:
    """Record in `folder` that `made_by` wrote it, with the files it holds now (`EXPORT_MANIFEST`)."""
    folder = Path(folder)
    files = sorted(p.relative_to(folder).as_posix() for p in folder.rglob('*') if p.is_file())
    manifest = dict(format=_MANIFEST_FORMAT, made_by=made_by, files=files)
    (folder / EXPORT_MANIFEST).write_text(json.dumps(manifest, indent=2) + '\n')


def check_replaceable(folder: PathLike) -> None:
    """Check that ``--overwrite`` may replace the non-empty `folder`: the package exported it (it holds the manifest)
    and nothing was added to it since (every file is one the manifest lists).

    Raises:
        FileExistsError: The folder holds no manifest, an unreadable one, or files the manifest does not list.
    """
    folder = Path(folder)
    try:
        manifest = json.loads((folder / EXPORT_MANIFEST).read_text())
        listed = set(manifest['files']) if manifest.get('format') == _MANIFEST_FORMAT else None
    except (OSError, ValueError, TypeError, KeyError, AttributeError):
        listed = None
    if listed is None:
        raise FileExistsError(f'{folder} was not exported by timm-advnorm (it holds no {EXPORT_MANIFEST}): '
                              '--overwrite replaces only an earlier export; remove it yourself or choose another '
                              'folder')
    added = sorted(p.relative_to(folder).as_posix() for p in folder.rglob('*')
                   if p.is_file() and p.name != EXPORT_MANIFEST and p.relative_to(folder).as_posix() not in listed)
    if added:
        raise FileExistsError(f'{folder} holds files its export did not write ({some_names(added)}): --overwrite '
                              'would delete them; move them or choose another folder')


def existing_ancestor(path: PathLike) -> Path:
    """`path` (made absolute) itself if it exists, else its nearest existing ancestor: where creating it would
    start, on the file system it would be made on."""
    path = Path(os.path.abspath(Path(path).expanduser()))
    while not os.path.exists(path) and path != path.parent:  # False, not an error, for a name too long
        path = path.parent
    return path


def _on_pseudo_file_system(folder: Path) -> bool:
    """Whether `folder` is on a file system without storage (``/proc``, ``/sys``: no blocks), whose "no such file"
    or "permission denied" for a new file means that it holds no files of ours, not what the words say."""
    try:
        return os.statvfs(folder).f_blocks == 0
    except (OSError, AttributeError):  # no statvfs (Windows)
        return False


def os_error_cause(error: OSError, folder: Optional[PathLike] = None) -> str:
    """The cause of the OS error `error` in words, for a one-line message: the system's text (``No space left on
    device``) without its ``[Errno N]``, or what it means where the text misleads: a name longer than the file system
    allows, a folder `folder` (where the file was being created) on a pseudo file system."""
    if error.errno == errno.ENAMETOOLONG:
        return 'a name in the path is longer than the file system allows'
    if folder is not None and _on_pseudo_file_system(Path(folder)):
        return f'{folder} is on a pseudo file system (no disk behind it, as /proc and /sys), which takes no new files'
    return error.strerror or ' '.join(str(error).split())


def _limit(folder: Path, name: str, default: int) -> int:
    try:
        return os.pathconf(folder, name)
    except (OSError, ValueError, AttributeError):  # no such limit here (Windows), or none known
        return default


def check_names(path: PathLike, reserve: int = 0) -> None:
    """Refuse a path that its file system cannot hold, before anything is created: a name (of a file or folder
    still to be made) longer than the file system's ``NAME_MAX`` (``os.pathconf(folder, 'PC_NAME_MAX')`` of the
    nearest existing folder), or a whole path longer than its ``PATH_MAX``. Otherwise the first ``mkdir`` or
    ``open`` fails with ENAMETOOLONG, after the folders above it were made.

    Args:
        path: The file or folder to be made.
        reserve: Bytes the last name must leave free (a file first written under a longer temporary name).

    Raises:
        ValueError: One line naming the path, the name and the limit.
    """
    full = Path(os.path.abspath(Path(path).expanduser()))
    ancestor = existing_ancestor(full)
    name_max = _limit(ancestor, 'PC_NAME_MAX', 255)
    names = full.relative_to(ancestor).parts
    for i, name in enumerate(names):
        size, limit = len(os.fsencode(name)), name_max - (reserve if i == len(names) - 1 else 0)
        if size > limit:
            shown = name if len(name) <= 40 else f'{name[:20]}...{name[-12:]}'
            room = f' ({name_max} less {reserve} for the temporary name it is first written under)' \
                if limit < name_max else ''
            raise ValueError(f'cannot write {path}: the name {shown!r} is {size} bytes long, but the file system '
                             f'there allows at most {limit}{room}; choose a shorter name')
    path_max = _limit(ancestor, 'PC_PATH_MAX', 4096)
    if len(os.fsencode(str(full))) >= path_max:
        raise ValueError(f'cannot write {path}: the path is {len(os.fsencode(str(full)))} bytes long, but the file '
                         f'system there allows less than {path_max}; choose a shorter path')


def check_folder_writable(folder: PathLike) -> None:
    """Check that files can be written into `folder`, creating nothing that outlives the check.

    The names still to be made are checked against the file system's limits (`check_names`), then a file is
    created and removed in `folder`, or, when it is missing, in its nearest existing ancestor, where creating it
    would start: that is what writing will do, so a "folder" that is a file, a read-only or pseudo file system, or a
    missing permission shows up now, before hours of work, and not when the results are written. Missing folders are
    created when the first file is written into them, so a run refused for another reason leaves no empty folder
    behind.

    Raises:
        ValueError: Nothing can be written into `folder`: one line naming it and the cause in words.
    """
    folder = Path(folder)
    ancestor = existing_ancestor(folder)
    missing = ancestor != Path(os.path.abspath(folder.expanduser()))
    if not ancestor.is_dir():
        raise ValueError(f'cannot write into {folder}: {ancestor if missing else "it"} is not a folder.')
    check_names(folder)
    probe = ancestor / f'.write-probe.{secrets.token_hex(6)}'
    try:
        os.close(os.open(probe, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666))
        os.unlink(probe)
    except OSError as e:
        where = f' (it would be created in {ancestor})' if missing else ''
        raise ValueError(f'cannot write into {folder}{where}: {os_error_cause(e, ancestor)}.') from None


def check_folder_name(name: str, option: str, root: str, root_option: str) -> None:
    """Refuse a folder name (``--experiment``) that is not one path component: absolute, holding a separator, ``.``
    or ``..``. Joined to `root` (the folder it is named under), such a name would put the folder elsewhere, without
    a word.

    Args:
        name: The name.
        option: The option that gives it, for the message.
        root: The folder it is made in.
        root_option: The option that gives `root`, where the user's parent folders belong.

    Raises:
        ValueError: One line naming the option, the name and the folder it must stay in.
    """
    separators = sorted({sep for sep in (os.sep, os.altsep, '/') if sep})
    if os.path.isabs(name) or any(sep in name for sep in separators) or name in ('.', '..') or '\0' in name:
        raise ValueError(f'{option} {name}: must be one folder name, made inside {root_option} {root} (no '
                         f'{" or ".join(separators)}, not . or ..); give the folders above it with {root_option}')


def check_creatable(path: PathLike, kind: str = 'folder') -> None:
    """Check, creating nothing, that `path` can be made (or written into, for an existing folder): its names fit
    the file system (`check_names`) and the folder it would be made in takes files (`check_folder_writable`).

    Args:
        path: The file or folder a command will write.
        kind: ``'folder'`` (`path` is a folder to make or write into) or ``'file'``.

    Raises:
        ValueError: One line naming `path` and the cause in words.
    """
    path = Path(path)
    check_names(path)
    check_folder_writable(path if kind == 'folder' and path.is_dir() else path.parent)


class WriteError(OSError):
    """An OS error while writing `path`, as one line: ``cannot write PATH: REASON (WHAT WAS KEPT)``.

    An `OSError` (keeping the original's ``errno``), so every command reports it as bad input: one line on stderr
    and exit status 2.

    Args:
        path: The file or folder being written (the one the user knows, not a temporary name).
        error: The OS error.
        kept: What the failure left intact, e.g. ``'the previous checkpoint is intact'``.
    """

    def __init__(self, path: PathLike, error: OSError, kept: str = ''):
        super().__init__(error.errno, error.strerror or str(error))
        self.path = path
        self.message = f'cannot write {path}: {os_error_cause(error)}' + (f' ({kept})' if kept else '')

    def __str__(self) -> str:
        return self.message


def library_write_error(error: BaseException, path: PathLike) -> Optional[OSError]:
    """The OS error behind a writing library's own exception while writing `path` (in `error` or the error it was
    raised during), or None for any other error.

    * safetensors raises a `SafetensorError` quoting the OS error and its number: that error.
    * torch's archive writer (``torch.save``) raises a RuntimeError without the OS error (`_STREAM_WRITER_FAILURES`):
      a full disk (less than `_FULL_DISK_BYTES` free where `path` is written; call this before removing the partial
      file) is ``ENOSPC``; otherwise the write failed for a reason torch kept to itself (a quota, an I/O error),
      said as ``EIO`` with torch's words.
    """
    chain, seen = [], error
    while seen is not None and len(chain) < 4:
        chain.append(seen)
        seen = seen.__cause__ or seen.__context__
    for failure in chain:
        quoted = _SAFETENSORS_OS_ERROR.search(str(failure)) if isinstance(failure, SafetensorError) else None
        if quoted is not None:
            return OSError(int(quoted.group(2)), quoted.group(1))
    failures = [e for e in chain if isinstance(e, RuntimeError)
                and any(text in str(e) for text in _STREAM_WRITER_FAILURES)]
    if not failures:
        return None
    try:
        free = shutil.disk_usage(os.path.dirname(os.path.abspath(path))).free
    except OSError:
        free = None
    if free is not None and free < _FULL_DISK_BYTES:
        return OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
    torch_says = ' '.join(str(failures[-1]).split())[:200]
    return OSError(errno.EIO, f'the write failed (torch: {torch_says}); is the disk or a quota full?')


@contextmanager
def reported_write(path: PathLike, kept: str = '') -> Iterator[None]:
    """Report an OS error raised in the block as a `WriteError` naming `path` and what was `kept`; also one a
    writing library raised as its own exception (`library_write_error`).

    Errors that already say what happened pass unchanged: a `WriteError` from an inner write, and an
    "already exists" refusal (the no-clobber rules raise those on purpose).
    """
    try:
        yield
    except WriteError:
        raise
    except OSError as e:
        if e.errno is None or e.errno == errno.EEXIST:
            raise
        raise WriteError(path, e, kept) from e
    except (RuntimeError, SafetensorError) as e:
        failure = library_write_error(e, path)
        if failure is None:
            raise
        raise WriteError(path, failure, kept) from e


def temp_name(path: Path) -> str:
    """The name `path` is written under before it is renamed into place: hidden, random, same suffix."""
    return f'.{path.name}.{secrets.token_hex(6)}{path.suffix}'


def new_temp_file(path: Path) -> Path:
    """Create an empty, uniquely named hidden file next to `path` and return its path.

    Created with mode 0666 so the umask applies, as with ``open()``: the file then has the permissions any other
    file the user writes has (`tempfile.mkstemp` always gives 0600, which would make results unreadable to others).
    """
    while True:
        tmp = path.with_name(temp_name(path))
        try:
            os.close(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666))
            return tmp
        except FileExistsError:  # a 48-bit name collision: draw another
            continue


def _fixed_temp_file(tmp: Path) -> Path:
    """Create `tmp` empty (as `new_temp_file`), removing what a killed write left under that name first."""
    tmp.unlink(missing_ok=True)  # never written through: it may be a hard link to another file
    os.close(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666))
    return tmp


def _remove_quietly(path: Path) -> None:
    """Remove a temporary file, best effort: this runs while an error is on its way to the user, which it must not
    replace."""
    with suppress(OSError):
        path.unlink(missing_ok=True)


def written_temp(path: Path, write: Writer, temp: Optional[PathLike] = None) -> Path:
    """A temporary file next to `path` (its folders created) holding what ``write(tmp)`` wrote; removed on failure.

    Args:
        path: The file the temporary file will be renamed to.
        write: Writes the file it is given.
        temp: A fixed temporary name (`atomic_write`); default: a new hidden random name (`new_temp_file`).
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = _fixed_temp_file(Path(temp)) if temp is not None else new_temp_file(path)
    try:
        write(tmp)
    except BaseException:
        _remove_quietly(tmp)
        raise
    return tmp


def atomic_write(path: PathLike, write: Writer, kept: Optional[str] = None, temp: Optional[PathLike] = None) -> None:
    """Call ``write(tmp_path)`` on a temporary file next to `path`, then rename it over `path` in one step.

    Replaces an existing `path`. The file gets the permissions ``open()`` would give it (0666 less the umask). An OS
    error (a full disk) is a `WriteError` naming `path`, which is left as it was; the temporary file is removed.

    Args:
        path: The file to write.
        write: Writes the file it is given.
        kept: What a failure leaves intact, for the `WriteError`; default: ``the previous file is intact`` where
            `path` exists.
        temp: A fixed temporary name beside `path`, for a file one process writes at a time. A killed write leaves
            its temporary file behind; under a fixed name the next write reclaims it (a training run resumed after
            a kill, whose checkpoints are hundreds of megabytes), where a random name would stay. Default: a new
            hidden random name, safe for writers racing on one file.
    """
    path = Path(path)
    if kept is None:
        kept = 'the previous file is intact' if path.exists() else ''
    with reported_write(path, kept):
        tmp = written_temp(path, write, temp)
        try:
            os.replace(tmp, path)
        except BaseException:
            _remove_quietly(tmp)
            raise
