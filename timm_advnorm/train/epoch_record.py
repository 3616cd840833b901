"""The record of a training epoch: its checkpoints (``last``; ``checkpoint-N`` when it ranks among the kept ones;
``model_best`` when it is the best) and its ``summary.csv`` row, whole after a kill.

timm's `CheckpointSaver` writes ``last``, then copies it to ``checkpoint-N`` and ``model_best`` (a hard link, or a
full copy where links fail); the summary row comes after. A kill between those writes used to lose the row, and the
copies, for good. Here every checkpoint carries its epoch's summary row, and a run resumed from a checkpoint first
completes the record of that checkpoint's epoch (`EpochRecordSaver.complete_record`): the copies are made again and
the row is written. Rows are keyed by epoch: writing one drops any row of that epoch or a later one, so a resumed run
never duplicates a row. Every file is put in place by a rename, so a kill never leaves a checkpoint missing or half
written under its final name.

Recovery checkpoints (``--recovery-interval``) carry the number of updates of their epoch already made
(`ResumePosition`), so that a run resumed from one finishes that epoch, its row and its checkpoints included.
"""
import csv
import io
import logging
import os
from pathlib import Path
from typing import Any, Dict, List, Mapping, NamedTuple, Optional

from timm.utils.checkpoint_saver import load_checkpoint_metadata

from ..messages import read_utf8
from ..write_guard import atomic_write
from .checkpoint_saver import SafeCheckpointSaver

__all__ = ['SUMMARY_FILE', 'ResumePosition', 'checkpoint_position', 'summary_row', 'write_summary_row',
           'EpochRecordSaver']

_logger = logging.getLogger('train_adv')

SUMMARY_FILE = 'summary.csv'


class ResumePosition(NamedTuple):
    """Where training goes on from a checkpoint: the epoch to train and the updates of it already made.

    Ordered as training advances, so positions of one run compare: the later checkpoint has the greater position.
    """

    epoch: int
    updates: int

    def describe(self) -> str:
        """The position in words: ``the end of epoch 2`` or ``update 40 of epoch 3``."""
        return f'update {self.updates} of epoch {self.epoch}' if self.updates else f'the end of epoch {self.epoch - 1}'


def checkpoint_position(checkpoint: Mapping[str, Any]) -> ResumePosition:
    """Where a run resumed from `checkpoint` (its metadata, `load_checkpoint_metadata`) goes on: after its epoch,
    or, for a recovery checkpoint written inside an epoch, inside that epoch after the updates already made."""
    epoch = int(checkpoint.get('epoch', -1))
    updates = (checkpoint.get('saver') or {}).get('updates_done')
    return ResumePosition(epoch, updates) if updates else ResumePosition(epoch + 1, 0)


def summary_row(epoch: int, train_metrics: Mapping[str, float], eval_metrics: Mapping[str, float],
                lr: float) -> Dict[str, Any]:
    """An epoch's ``summary.csv`` row, in the columns of timm's `update_summary`: ``epoch``, ``train_*``,
    ``eval_*``, ``lr``."""
    row: Dict[str, Any] = {'epoch': epoch}
    row.update((f'train_{k}', float(v)) for k, v in train_metrics.items())
    row.update((f'eval_{k}', float(v)) for k, v in eval_metrics.items())
    row['lr'] = float(lr)
    return row


def _read_rows(path: Path) -> List[Dict[str, str]]:
    if not path.exists():
        return []
    return list(csv.DictReader(io.StringIO(read_utf8(path))))


def write_summary_row(path: Path, row: Mapping[str, Any]) -> None:
    """Write `row` to the summary at `path` as its last row, dropping any row of its epoch or a later one.

    The file is rewritten through a temporary file and renamed into place, so a kill leaves the old summary or the
    new one, never half a row.
    """
    kept = [r for r in _read_rows(path) if int(float(r['epoch'])) < int(row['epoch'])]

    def write(partial: Path) -> None:
        with open(partial, 'w', newline='') as f:
            writer = csv.DictWriter(f, fieldnames=list(row), restval='', extrasaction='ignore')
            writer.writeheader()
            writer.writerows(kept)
            writer.writerow(row)

    atomic_write(path, write, kept='the earlier rows are intact; --resume writes this one again',
                 temp=path.with_name(path.name + '.partial'))


class EpochRecordSaver(SafeCheckpointSaver):
    """timm's `CheckpointSaver` (with `SafeCheckpointSaver`'s reported, damage-free writes) whose checkpoints carry
    their epoch's summary row (or, for recovery checkpoints, the updates made in their epoch), and which writes an
    epoch's whole record (`save_epoch`) and completes it on resume (`complete_record`). Arguments as timm's;
    ``summary.csv`` lives in `checkpoint_dir`."""

    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self._row: Optional[Dict[str, Any]] = None
        self._updates_done: Optional[int] = None

    @property
    def summary_path(self) -> Path:
        """The run's ``summary.csv``."""
        return Path(self.checkpoint_dir) / SUMMARY_FILE

    @property
    def _best_path(self) -> str:
        return os.path.join(self.checkpoint_dir, 'model_best' + self.extension)

    def state_dict(self, epoch=None, metric=None) -> Dict[str, Any]:
        """timm's bookkeeping, with the epoch's summary row (epoch checkpoints) or the updates made in the epoch
        (recovery checkpoints)."""
        return {**super().state_dict(epoch, metric), 'summary_row': self._row, 'updates_done': self._updates_done}

    def save_epoch(self, epoch: int, row: Dict[str, Any], metric: Optional[float]) -> None:
        """Write the record of `epoch`: its checkpoints, carrying `row`, then `row` in ``summary.csv``."""
        self._row = row
        try:
            self.save_checkpoint(epoch, metric=metric)
        finally:
            self._row = None
        write_summary_row(self.summary_path, row)

    def save_recovery(self, epoch: int, batch_idx: int = 0) -> None:
        """A recovery checkpoint after update `batch_idx` of `epoch` (timm names it by that index), recording that
        ``batch_idx + 1`` updates of the epoch are made."""
        self._updates_done = batch_idx + 1
        try:
            super().save_recovery(epoch, batch_idx=batch_idx)
        finally:
            self._updates_done = None

    def _replace(self, src: str, dst: str) -> None:
        """Rename `src` to `dst` in one step (timm unlinks `dst` first, so that a kill in between left no ``last``)."""
        os.replace(src, dst)

    def _duplicate(self, src: str, dst: str) -> None:
        """`src` also under the name `dst`, put in place in one step (`SafeCheckpointSaver`); nothing to do where
        `dst` is already a link to `src` (a rename onto the same file would leave the temporary name behind)."""
        if os.path.exists(dst) and os.path.samefile(src, dst):
            return
        super()._duplicate(src, dst)

    def complete_record(self, checkpoint_path: str) -> None:
        """Take up the bookkeeping of the run that wrote `checkpoint_path` (a checkpoint in `checkpoint_dir`) and
        complete the record of its epoch: the ``checkpoint-N`` and ``model_best`` copies the run made or was about to
        make, made again from the checkpoint, and its summary row. What a kill cut short is thereby re-created, and
        what was whole is rewritten the same."""
        state = load_checkpoint_metadata(checkpoint_path).get('saver')
        if state is None:
            _logger.warning(f'{checkpoint_path} holds no checkpoint history (not written by this training script): '
                            f'ranked checkpoints start afresh.')
            return
        row = state.get('summary_row')
        if row is None:  # a recovery checkpoint (its epoch has no record yet), or one of timm's own saver
            self.load_state_dict(state)
        else:
            self.checkpoint_files = [(os.path.join(self.checkpoint_dir, f), m) for f, m in state['checkpoint_files']
                                     if os.path.exists(os.path.join(self.checkpoint_dir, f))]
            self.best_epoch, self.best_metric = state['best_epoch'], state['best_metric']
            epoch, metric = state['pending']
            self._complete_copies(checkpoint_path, epoch, metric)
            write_summary_row(self.summary_path, row)
            _logger.info(f'Completed the record of epoch {epoch} from {checkpoint_path}.')
        best, best_kept = self._best_path, self._checkpoint_path(self.best_epoch or 0)
        if self.best_epoch is not None and not os.path.exists(best) and os.path.exists(best_kept):
            self._duplicate(best_kept, best)  # removed by a rewind past it (`resume.rewind_run`)

    def _complete_copies(self, source: str, epoch: int, metric: Optional[float]) -> None:
        """The copies of `save_checkpoint` after ``last``, made from `source` (a checkpoint of `epoch`)."""
        worst = self.checkpoint_files[-1] if self.checkpoint_files else None
        if not (len(self.checkpoint_files) < self.max_history or worst[1] is None
                or (metric is not None and self.cmp(metric, worst[1]))):
            return
        if len(self.checkpoint_files) >= self.max_history:
            self._cleanup_checkpoints(1)
        self._copy(source, self._checkpoint_path(epoch))
        self._track_checkpoint(self._checkpoint_path(epoch), epoch, metric, update_best_file=False)
        if self.best_epoch == epoch:
            self._copy(source, self._best_path)

    def _copy(self, source: str, target: str) -> None:
        if os.path.abspath(source) != os.path.abspath(target):
            self._duplicate(source, target)
