"""Where a resumed run goes on, and the rule for resuming from a checkpoint that is not its run's latest.

A run goes on from its checkpoint's position (`epoch_record.ResumePosition`): after the checkpoint's epoch, or inside
it for a recovery checkpoint. Resuming from an earlier checkpoint than the run's latest (``model_best``, an older
``checkpoint-N``) rewinds the run, replacing the later epochs' rows and checkpoints, so it needs
``--resume-from-earlier`` and says what it replaces; with it the run is rewound first (`rewind_run`): ``last`` becomes
the resumed checkpoint and the later checkpoints go, so that no file of the abandoned epochs is taken for the run's.
"""
import contextlib
import csv
import glob
import io
import logging
import os
import shutil
from typing import List, NamedTuple, Optional

from timm.utils.checkpoint_saver import load_checkpoint_metadata

from ..messages import read_utf8
from ..write_guard import atomic_write
from .epoch_record import SUMMARY_FILE, ResumePosition, checkpoint_position

__all__ = ['SavedCheckpoint', 'latest_checkpoint', 'resume_position', 'record_missing', 'rewind_run']

_logger = logging.getLogger('train_adv')

_LAST, _BEST = 'last.pth.tar', 'model_best.pth.tar'


class SavedCheckpoint(NamedTuple):
    """A checkpoint of a run and the position it resumes at."""

    path: str
    position: ResumePosition


def _saved(path: str) -> Optional[SavedCheckpoint]:
    """The checkpoint at `path` with its position; None if it is missing or unreadable (a partial write)."""
    try:
        return SavedCheckpoint(path, checkpoint_position(load_checkpoint_metadata(path)))
    except Exception:  # noqa: BLE001 -- any damage means: not a checkpoint to resume from
        return None


def _recovery_files(run_dir: str) -> List[str]:
    return glob.glob(os.path.join(glob.escape(run_dir), 'recovery-*.pth.tar'))


def latest_checkpoint(run_dir: str) -> Optional[SavedCheckpoint]:
    """The run's checkpoint that goes on furthest: ``last`` or a later recovery checkpoint; None if it has none."""
    saved = [s for s in map(_saved, [os.path.join(run_dir, _LAST), *_recovery_files(run_dir)]) if s is not None]
    return max(saved, key=lambda s: s.position, default=None)


def _later_files(run_dir: str, position: ResumePosition, resumed: str) -> List[str]:
    """The checkpoints of `run_dir` past `position` that a rewind to it removes (never `resumed` itself)."""
    later = []
    for path in glob.glob(os.path.join(glob.escape(run_dir), '*.pth.tar')):
        saved = _saved(path)
        name = os.path.basename(path)
        if (saved is not None and saved.position > position and name != _LAST
                and not os.path.samefile(path, resumed)):
            later.append(path)
    return sorted(later)


def resume_position(checkpoint: str, from_earlier: bool) -> ResumePosition:
    """Where a run resumed from `checkpoint` goes on; refuses a checkpoint earlier than its run's latest without
    ``--resume-from-earlier`` (`from_earlier`), and says with it what the resumed run replaces.

    Raises:
        ValueError: An earlier checkpoint without ``--resume-from-earlier``.
    """
    position = checkpoint_position(load_checkpoint_metadata(checkpoint))
    run_dir = os.path.dirname(os.path.abspath(checkpoint))
    latest = latest_checkpoint(run_dir)
    if latest is None or latest.position <= position:
        return position
    replaced = (f'the summary rows from epoch {position.epoch} on, {_LAST} (now at {latest.position.describe()}) and '
                f'{len(_later_files(run_dir, position, checkpoint))} later checkpoint(s)')
    if not from_earlier:
        raise ValueError(f'--resume {checkpoint} is at {position.describe()}, but its run went on to '
                         f'{latest.position.describe()} ({latest.path}): resuming from it would replace {replaced}; '
                         f'resume from {latest.path}, or pass --resume-from-earlier to rewind the run')
    _logger.warning(f'--resume-from-earlier: rewinding {run_dir} to {position.describe()}: replacing {replaced}.')
    return position


def record_missing(checkpoint: str, position: ResumePosition) -> bool:
    """Whether the summary of the run of `checkpoint` (``--resume``) lacks the row of the checkpoint's epoch: a run
    killed between the checkpoint and its row, which resuming completes (`epoch_record`) even when no epoch is left
    to train."""
    if position.updates:  # a recovery checkpoint: its epoch has no record yet
        return False
    path = os.path.join(os.path.dirname(os.path.abspath(checkpoint)), SUMMARY_FILE)
    if not os.path.exists(path):
        return True
    return all(int(float(row['epoch'])) != position.epoch - 1 for row in csv.DictReader(io.StringIO(read_utf8(path))))


def rewind_run(run_dir: str, resumed: str, position: ResumePosition) -> None:
    """Make `resumed` the run's latest checkpoint: it becomes ``last`` and the checkpoints past it are removed
    (``model_best`` too if it is one of them; completing the resumed record makes it again, `epoch_record`)."""
    last = os.path.join(run_dir, _LAST)
    if not os.path.exists(last) or not os.path.samefile(last, resumed):
        atomic_write(last, lambda partial: shutil.copyfile(resumed, partial), temp=last + '.partial')
    for path in _later_files(run_dir, position, resumed):
        with contextlib.suppress(FileNotFoundError):
            os.remove(path)
            _logger.info(f'Removed {path}, a checkpoint past the one resumed from.')
