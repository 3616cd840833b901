"""timm's `CheckpointSaver` with writes that never put a damaged file in the place of a good one, and fail as one
line naming the file (a full disk used to end a run with torch's "unexpected pos ..." and nothing about space,
whether torch raised the OS error or its own RuntimeError)."""
import contextlib
import os

from timm.utils import CheckpointSaver

from ..write_guard import atomic_write, library_write_error, reported_write

__all__ = ['SafeCheckpointSaver']


def _remove_quietly(path: str) -> None:
    """Remove a partial file, best effort: this runs while a write error is on its way to the user."""
    with contextlib.suppress(OSError):
        os.remove(path)


class SafeCheckpointSaver(CheckpointSaver):
    """A `CheckpointSaver` whose failed writes leave every earlier checkpoint whole and free the space of the partial.

    timm writes each checkpoint to a temporary file renamed into place, but leaves the partial file of a failed
    write (on a full disk, hundreds of megabytes), and copies ``checkpoint-N``/``model_best`` straight onto their
    names where hard links fail, so a failed copy destroyed the previous ``model_best``. Here the partial file is
    removed, every copy is written beside its target and renamed into place, and an OS error is a
    `write_guard.WriteError` naming the checkpoint and what is intact.
    """

    def _save(self, save_path, epoch, metric=None):
        """timm's write of one checkpoint file, removing what a failed write left. torch's writer reports a full
        disk as a RuntimeError: raised as the OS error it stands for, so that it is reported like any other."""
        try:
            super()._save(save_path, epoch, metric)
        except BaseException as e:
            failure = library_write_error(e, save_path)  # before the removal frees the space
            _remove_quietly(save_path)
            if failure is not None:
                raise failure from e
            raise

    def _duplicate(self, src, dst):
        """`src` linked or copied beside `dst`, then renamed onto it: `dst` is never a partial copy."""
        duplicate = super()._duplicate
        kept = f'{src} holds these weights' + (f', {dst} the previous ones' if os.path.exists(dst) else '')
        atomic_write(dst, lambda partial: duplicate(src, str(partial)), kept=kept,
                     temp=os.path.join(os.path.dirname(dst), f'.{os.path.basename(dst)}.partial'))

    def save_checkpoint(self, epoch, metric=None):
        """timm's `save_checkpoint`; an OS error names ``last.pth.tar`` (or the copy that failed)."""
        last = os.path.join(self.checkpoint_dir, 'last' + self.extension)
        with reported_write(last, 'the previous checkpoint is intact' if os.path.exists(last) else
                            'no checkpoint was written'):
            return super().save_checkpoint(epoch, metric)

    def save_recovery(self, epoch, batch_idx=0):
        """timm's `save_recovery`; an OS error names the recovery checkpoint."""
        recovery = os.path.join(self.recovery_dir, f'{self.recovery_prefix}-{epoch}-{batch_idx}{self.extension}')
        with reported_write(recovery, 'the earlier checkpoints are intact'):
            super().save_recovery(epoch, batch_idx)
