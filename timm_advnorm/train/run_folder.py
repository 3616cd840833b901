"""The folder of a training run: made (or, when resuming, reopened) with the run's arguments in it, its budget file,
and what is removed or named when the run fails."""
import contextlib
import itertools
import logging
import os
from typing import NamedTuple, Tuple

from ..messages import read_utf8
from ..strict_yaml import load_yaml
from ..write_guard import reported_write
from .budget import RunBudget
from .run_lock import LOCK_FILE, acquire_run_lock

__all__ = ['BUDGET_FILE', 'RunFolder', 'new_run_folder', 'planned_run_folder', 'open_run_folder', 'discard_unsaved_run',
           'kept_checkpoints', 'resumed_budget']

_logger = logging.getLogger('train_adv')

# The run's budget (`budget.RunBudget`) in its folder: counted at the start, each finished epoch's time and peak memory
# added as the run goes.
BUDGET_FILE = 'budget.yaml'


# The partial file timm's `CheckpointSaver` writes each checkpoint to before renaming it.
_PARTIAL_CHECKPOINT = 'tmp.pth.tar'


def new_run_folder(root: str, name: str) -> str:
    """Make and return a new folder `root`/`name`, or `name`-1, -2, ... when taken (as timm's `get_outdir`).

    Each name is claimed with an exclusive ``mkdir``, so runs started at the same moment never share a folder: timm
    tests, then creates, and the loser of that race fails after its whole set-up.
    """
    os.makedirs(root, exist_ok=True)
    for count in itertools.count():
        path = os.path.join(root, name if count == 0 else f'{name}-{count}')
        try:
            os.mkdir(path)
            return path
        except FileExistsError:
            continue


def planned_run_folder(output: str, name: str, resume: str = '') -> str:
    """The folder the run will write, as known before it is made: the folder of the checkpoint it resumes
    (`resume`), else `output`/`name` (where a run already took `name`, the run takes `name`-1, ... beside it)."""
    if resume:
        return os.path.dirname(os.path.abspath(resume))
    return os.path.join(output, name)


class RunFolder(NamedTuple):
    """A run's folder, the name of the arguments file the run wrote in it, and the folders the run made (the run
    folder, then the ``--output`` folders above it that did not exist; none when resuming)."""
    path: str
    args_file: str
    made: Tuple[str, ...]


def _missing_folders(path: str) -> Tuple[str, ...]:
    """`path` and its ancestors that do not exist yet, innermost first."""
    missing = []
    path = os.path.abspath(path)
    while not os.path.exists(path):
        missing.append(path)
        path = os.path.dirname(path)
    return tuple(missing)


def _remove_empty(folders: Tuple[str, ...]) -> None:
    """Remove `folders` (innermost first) that the run made, stopping at the first that holds something."""
    with contextlib.suppress(OSError):
        for folder in folders:
            os.rmdir(folder)


def open_run_folder(output: str, name: str, resume: str, args_text: str, start_epoch: int) -> RunFolder:
    """The run folder, locked for this process (`run_lock`), with the arguments file written in it: a new folder
    `name` under `output` (``--output``), or, when resuming (`resume`: the checkpoint), the checkpoint's own, whose
    ``args.yaml`` is kept (the resumed run's arguments go beside it, named by the epoch it resumes at) and whose
    partial checkpoint, left by a run killed while saving, is removed.

    Raises:
        ValueError: The checkpoint's folder is in use by another training process.
    """
    if resume:
        output_dir = os.path.dirname(os.path.abspath(resume))
        acquire_run_lock(output_dir)
        args_file = 'args.yaml' if not os.path.exists(os.path.join(output_dir, 'args.yaml')) else \
            f'args-resumed-epoch{start_epoch}.yaml'
        partial = os.path.join(output_dir, _PARTIAL_CHECKPOINT)
        if os.path.exists(partial):
            os.remove(partial)
            _logger.info(f'Removed {partial}, a checkpoint whose writing was interrupted.')
        made: Tuple[str, ...] = ()
    else:
        made_parents = _missing_folders(output)
        try:
            with reported_write(os.path.join(output, name), 'nothing was written'):
                output_dir = new_run_folder(output, name)
        except OSError:
            _remove_empty(made_parents)
            raise
        made = (output_dir, *made_parents)
        acquire_run_lock(output_dir)
        args_file = 'args.yaml'
    with open(os.path.join(output_dir, args_file), 'w') as f:
        f.write(args_text)
    return RunFolder(output_dir, args_file, made)


def discard_unsaved_run(folder: RunFolder) -> None:
    """Remove what a run that failed before saving any whole checkpoint wrote: its arguments file and, when the run
    made the folder, its budget, its lock, its partial checkpoint, the folder and the empty ``--output`` folders it
    made above it. A folder of arguments alone only hides the runs that trained.

    Best effort: this runs while another error is on its way to the user.
    """
    with contextlib.suppress(OSError):
        os.remove(os.path.join(folder.path, folder.args_file))
        if folder.made:
            for name in (BUDGET_FILE, LOCK_FILE, _PARTIAL_CHECKPOINT):
                if os.path.exists(os.path.join(folder.path, name)):
                    os.remove(os.path.join(folder.path, name))
            os.rmdir(folder.path)  # fails, keeping it, if anything else is in it
            _logger.info(f'Removed {folder.path}: the run failed before its first checkpoint.')
            _remove_empty(folder.made[1:])


def kept_checkpoints(output_dir: str) -> str:
    """What a diverged run leaves to resume from, for its error line."""
    last = os.path.join(output_dir, 'last.pth.tar')
    if not os.path.exists(last):
        return 'no checkpoint was written'
    return (f'{last} holds the last finite weights (model_best.pth.tar beside it the best): resume from it, with '
            f'--resume-with-changes --no-resume-opt for a new --lr (the optimizer state carries the learning rate)')


def resumed_budget(output_dir: str, budget: RunBudget, start_epoch: int) -> RunBudget:
    """`budget` with the epochs before `start_epoch` that the resumed run's ``budget.yaml`` measured (none without
    such a file)."""
    path = os.path.join(output_dir, BUDGET_FILE)
    if not os.path.exists(path):
        return budget
    return budget.with_measured(load_yaml(read_utf8(path), str(path)) or {}, start_epoch)
