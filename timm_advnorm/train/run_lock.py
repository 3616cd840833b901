"""One training process per run folder: a lock file holding the owner's process id and host.

Two runs resumed from one checkpoint at once would train in one folder, overwrite each other's checkpoints and
duplicate summary rows. The lock is taken with an exclusive create when the run folder is opened and removed when the
run ends; a lock whose process has died without removing it (a kill) is stale and taken over.
"""
import contextlib
import logging
import os
import socket
from pathlib import Path
from typing import Optional, Tuple

__all__ = ['LOCK_FILE', 'acquire_run_lock', 'release_run_lock']

_logger = logging.getLogger('train_adv')

LOCK_FILE = 'train.lock'


def _owner(lock: Path) -> Optional[Tuple[int, str]]:
    """The process id and host written in `lock`; None if it is gone or holds no owner (a lock cut short while
    being written, by a kill)."""
    try:
        pid, host = lock.read_text().split()
        return int(pid), host
    except (OSError, ValueError):
        return None


def _alive(pid: int, host: str) -> bool:
    """Whether process `pid` of `host` may still run: on another host it cannot be asked, so it is taken as alive."""
    if host != socket.gethostname():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process
        return True
    return True


def _create(lock: Path) -> None:
    """Create `lock` holding this process's id and host, whole or not at all: written under a name of its own and
    linked into place, which fails if the lock exists (an exclusive create would show a rival an empty lock for a
    moment, which it would take for a stale one; only a file system without hard links leaves that moment open).

    Raises:
        FileExistsError: The lock exists.
    """
    owner = f'{os.getpid()} {socket.gethostname()}\n'
    partial = lock.with_name(f'{lock.name}.{os.getpid()}')
    partial.write_text(owner)
    try:
        os.link(partial, lock)
    except FileExistsError:
        raise
    except OSError:  # a file system without hard links: an exclusive create, written at once
        with os.fdopen(os.open(lock, os.O_CREAT | os.O_EXCL | os.O_WRONLY), 'w') as f:
            f.write(owner)
    finally:
        partial.unlink()


def acquire_run_lock(run_dir: str) -> None:
    """Take the run folder's lock for this process.

    Raises:
        ValueError: Another live process holds it.
    """
    lock = Path(run_dir) / LOCK_FILE
    for _ in range(2):  # a stale lock is removed once, then taken
        try:
            _create(lock)
            return
        except FileExistsError:
            owner = _owner(lock)
            if owner is not None and _alive(*owner):
                raise ValueError(f'{run_dir} is in use by training process {owner[0]} on {owner[1]} ({lock}): two '
                                 f'runs in one folder would overwrite each other\'s checkpoints; wait for it to end '
                                 f'(remove the lock if that process is not training)') from None
            _logger.info(f'Removed the stale lock {lock} of a run that ended without removing it.')
            with contextlib.suppress(FileNotFoundError):
                lock.unlink()
    raise ValueError(f'{run_dir}: another process took the lock {lock} as this one did; retry')


def release_run_lock(run_dir: str) -> None:
    """Remove the run folder's lock if this process holds it."""
    lock = Path(run_dir) / LOCK_FILE
    if _owner(lock) == (os.getpid(), socket.gethostname()):
        with contextlib.suppress(FileNotFoundError):
            lock.unlink()
