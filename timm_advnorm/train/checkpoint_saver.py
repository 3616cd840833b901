"""timm's `CheckpointSaver` with writes that never put a damaged file in the place of a good one, and fail as one
line naming the file (a full disk used to end a run with torch's "unexpected pos ..." and nothing about space,
whether torch raised the OS error or its own RuntimeError), and whose checkpoints record the run's arguments as a
plain dict."""
import contextlib
import os
from typing import Any, Dict

import torch
from timm.utils import CheckpointSaver
from timm.utils.model import get_state_dict

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

    ``args`` is the run's record, a mapping of option names to plain values (timm's own saver takes its
    `argparse.Namespace`), saved as a dict (`checkpoint_state`).
    """

    def checkpoint_state(self, epoch: int, metric=None) -> Dict[str, Any]:
        """What a checkpoint of `epoch` holds: timm's `CheckpointSaver._save` content, with the record under
        ``args`` as a dict and ``arch`` its model. timm saves its arguments namespace as it is, which only loads where
        `argparse.Namespace` is allowed to unpickle (``torch.load(weights_only=True)``, torch's default, refuses
        it); a dict of plain values loads anywhere, and every reader of the record takes both
        (`weights.checkpoint.recorded_training_args`)."""
        state = {'epoch': epoch, 'arch': type(self.model).__name__.lower(), 'optimizer': self.optimizer.state_dict(),
                 'version': 2}  # timm's: before version 2 the epoch was incremented before saving
        if self.args is not None:
            state.update(arch=self.args['model'], args=dict(self.args))
        if self.amp_scaler is not None:
            state[self.amp_scaler.state_dict_key] = self.amp_scaler.state_dict()
        if self.task is not None:
            state.update(self.task.get_checkpoint_state(unwrap_fn=self.unwrap_fn))
            state.update(self.task.get_checkpoint_state(ema=True, unwrap_fn=self.unwrap_fn))
        else:
            state['state_dict'] = get_state_dict(self.model, self.unwrap_fn)
            if self.model_ema is not None:
                state['state_dict_ema'] = get_state_dict(self.model_ema, self.unwrap_fn)
        if metric is not None:
            state['metric'] = metric
        state['saver'] = self.state_dict(epoch, metric)
        return state

    def _save(self, save_path, epoch, metric=None):
        """Write one checkpoint file (`checkpoint_state`), removing what a failed write left. torch's writer reports
        a full disk as a RuntimeError: raised as the OS error it stands for, so that it is reported like any other."""
        try:
            torch.save(self.checkpoint_state(epoch, metric), save_path)
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
