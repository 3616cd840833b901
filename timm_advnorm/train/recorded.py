"""A resumed run keeps its recipe: the arguments its checkpoint records are the defaults of ``--resume``.

timm's `CheckpointSaver` saves the run's arguments in every checkpoint (resolved: the learning rate scaled from
``--lr-base``, the method's eval metric), so a checkpoint records exactly the recipe of the run that wrote it, also
after a resume with changes. ``train_adv.py --resume CKPT`` takes those arguments as this invocation's defaults
(`apply_recorded_args`); options given on the command line or by a ``-c`` file still win, but `FIXED_ARGS` (model,
method, dataset, classes, EMA) never change: that would train another model under the run. Once the run is built,
`check_resume_args` compares what it resolved with the record:

* `FREE_ARGS` (loading, logging, compilation, memory layout, checkpoint keeping) may change freely: they change
  neither what is trained nor what is measured;
* any other change (method options, attack, data, preprocessing, augmentation, optimizer, schedule, epochs,
  validation, seed) is refused with one line listing each ``--option: recorded -> given``, unless
  ``--resume-with-changes`` is given: then the changes are logged and written at the top of the resumed run's
  arguments file (``args-resumed-epochN.yaml``).

`INVOCATION_ARGS` (how to resume, ``--plan``, the device) are this invocation's alone: neither taken nor compared.
A checkpoint that records no ``train_adv.py`` arguments resumes with this invocation's options, with a warning.
"""
import logging
import os
from typing import Any, Collection, Dict, Mapping, MutableMapping, Optional, Tuple

from ..weights.checkpoint import recorded_training_args

__all__ = ['INVOCATION_ARGS', 'FREE_ARGS', 'FIXED_ARGS', 'check_resume_path', 'read_recorded_args',
           'apply_recorded_args', 'check_resume_args', 'changes_note', 'recorded_with']

_logger = logging.getLogger('train_adv')

#: Options of one invocation: never taken from a checkpoint's record, never compared with it. The device is chosen
#: anew on each machine (the record holds the resolved one, ``cuda:3`` under torchrun).
INVOCATION_ARGS = frozenset({
    'config', 'resume', 'resume_from_earlier', 'resume_with_changes', 'no_resume_opt', 'plan', 'plan_world_size',
    'wandb_resume_id', 'device'})

#: Options that change neither what is trained nor what is measured: data loading, memory layout, compilation,
#: logging and checkpoint keeping. A resumed run takes the recorded value unless one is given, and may change them.
FREE_ARGS = frozenset({
    'workers', 'pin_mem', 'validation_batch_size', 'dataset_download', 'dataset_trust_remote_code', 'channels_last',
    'grad_checkpointing', 'torchcompile', 'torchcompile_mode', 'output', 'experiment', 'checkpoint_hist',
    'recovery_interval', 'log_interval', 'no_progress', 'log_wandb', 'wandb_project', 'wandb_tags'})

#: Options a resumed run never changes, not even with ``--resume-with-changes``: another value trains another model
#: under the same run (``--model-ema`` also changes the summary's columns).
FIXED_ARGS = ('model', 'method', 'dataset', 'num_classes', 'model_ema')

def _option(dest: str) -> str:
    return '--' + dest.replace('_', '-')


def _listing(changes: Dict[str, Tuple[Any, Any]]) -> str:
    """``--epochs: 1 -> 2, --lr: 0.1 -> 0.05``."""
    return ', '.join(f'{_option(dest)}: {recorded!r} -> {given!r}' for dest, (recorded, given) in changes.items())


def check_resume_path(checkpoint: str) -> None:
    """Refuse a ``--resume`` that names no file: a folder (a run folder, most likely) or nothing.

    Raises:
        FileNotFoundError: Nothing at `checkpoint`.
        ValueError: A folder.
    """
    if os.path.isdir(checkpoint):
        raise ValueError(f'--resume {checkpoint} is a folder: give the checkpoint file to resume from '
                         f'({os.path.join(checkpoint, "last.pth.tar")} of a run folder)')
    if not os.path.isfile(checkpoint):
        raise FileNotFoundError(f'--resume checkpoint not found: {checkpoint}')


def read_recorded_args(checkpoint: str, dests: Collection[str]) -> Optional[Dict[str, Any]]:
    """The arguments `checkpoint` records for the options `dests` (`INVOCATION_ARGS` left out); None when it records
    none of ``train_adv.py`` (a state dict, another tool's checkpoint).

    Raises:
        FileNotFoundError: No file at `checkpoint`.
        ValueError: A damaged file (`check_checkpoint_file`).
    """
    check_resume_path(checkpoint)
    recorded = recorded_training_args(checkpoint)
    if recorded is None:
        return None
    return {dest: value for dest, value in recorded.items() if dest in dests and dest not in INVOCATION_ARGS}


def apply_recorded_args(values: MutableMapping[str, Any], recorded: Dict[str, Any], given: Collection[str]) -> None:
    """Set in `values` (this invocation's parsed arguments, by option name) each recorded argument that this
    invocation does not give (`given`, as `commands.parser.given_options`).

    Raises:
        ValueError: A given `FIXED_ARGS` option differs from the record (found before anything is built on it).
    """
    fixed = {dest: (recorded[dest], values[dest]) for dest in FIXED_ARGS
             if dest in recorded and dest in given and recorded[dest] != values[dest]}
    if fixed:
        resume = values['resume']
        raise ValueError(f'--resume {resume} cannot change {_listing(fixed)}: a resumed run trains the model it '
                         f'started; start a new run (with --initial-checkpoint {resume} for its weights)')
    values.update((dest, value) for dest, value in recorded.items() if dest not in given)


def recorded_with(record: Mapping[str, Any], **values: Any) -> Dict[str, Any]:
    """A copy of the run's record (its arguments by option name) with `values` set: what the run resolved (device,
    processes, learning rate, eval metric, model config) is what it records; `record` itself is unchanged."""
    return {**record, **values}


def check_resume_args(current: Mapping[str, Any], recorded: Optional[Dict[str, Any]], checkpoint: str,
                      with_changes: bool, verbose: bool = True) -> Dict[str, Tuple[Any, Any]]:
    """Compare the built run's arguments `current` with its checkpoint's record (`read_recorded_args`), once the
    build has resolved them (learning rate, eval metric, what the attack fixes), so that a ``-c`` file stating the
    recipe as first given (``lr: null``) is no change; logs (when `verbose`) what the resumed run takes and what it
    changes.

    Args:
        checkpoint: ``--resume``, for messages.
        with_changes: ``--resume-with-changes``.

    Returns:
        The changes ``--resume-with-changes`` allowed, as ``{dest: (recorded, given)}`` (empty without).

    Raises:
        ValueError: A change outside `FREE_ARGS` without ``--resume-with-changes``; one line listing each.
    """
    if recorded is None:
        if verbose:
            _logger.warning(f'--resume {checkpoint} records no timm-advnorm-train arguments: this command line and its '
                            f'defaults set the whole recipe, unchecked against the run\'s.')
        return {}
    changed = {dest: (value, current[dest]) for dest, value in recorded.items()
               if dest in current and current[dest] != value}  # `FIXED_ARGS` are the record's (`apply_recorded_args`)
    free = {dest: change for dest, change in changed.items() if dest in FREE_ARGS}
    changes = {dest: change for dest, change in changed.items() if dest not in FREE_ARGS}
    if changes and not with_changes:
        raise ValueError(f'--resume {checkpoint} records another recipe: {_listing(changes)}; drop these options to '
                         f'resume the run as recorded, or pass --resume-with-changes to go on with them')
    if verbose:
        _logger.info(f'Resuming {checkpoint} with the arguments its run recorded'
                     + (f'; changed here, free to change: {_listing(free)}' if free else '') + '.')
        if changes:
            _logger.warning(f'--resume-with-changes: the resumed run changes its recorded recipe: {_listing(changes)} '
                            f'(recorded at the top of its args-resumed file).')
    return changes


def changes_note(checkpoint: str, changes: Dict[str, Tuple[Any, Any]]) -> str:
    """The YAML comment that heads the arguments file of a run resumed with `changes`: the file stays a ``-c``
    config, and says what the resumed run changed."""
    lines = [f'# Resumed from {checkpoint} with --resume-with-changes (recorded -> given):']
    lines += [f'#   {dest}: {recorded!r} -> {given!r}' for dest, (recorded, given) in changes.items()]
    return '\n'.join(lines) + '\n'
