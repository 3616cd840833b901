"""Checks of `train_adv.py`'s input that its parser cannot make: between arguments, of the device, of a resumed
checkpoint file, and of a run that would make no optimizer step; each run before the run folder is made."""
import logging
import os
from pathlib import Path
from typing import Optional

import torch
from timm.data import create_transform

from ..data import list_builtin_datasets, same_split
from ..data.folders import check_class_map_file
from ..data.names import check_dataset_name
from ..usage import check_device, check_normalization_lengths, one_line
from ..weights.checkpoint import check_checkpoint_file
from ..write_guard import check_folder_name
from .options import DataOptions, TrainOptions
from .recorded import check_resume_path

__all__ = ['check_options', 'check_auto_augment', 'resolve_device', 'check_steps', 'check_validation_split']

_logger = logging.getLogger('train_adv')


def check_options(options: TrainOptions) -> None:
    """Checks between options (each numeric option's own range is its parser type's), of the preprocessing and of
    the checkpoint to resume; the method checks its own (`check_options` of its task class)."""
    if options.output.experiment:  # joined to --output: one name, or the run lands elsewhere
        check_folder_name(options.output.experiment, '--experiment', options.output.output, '--output')
    if options.schedule.running_stats_epochs > options.schedule.epochs:
        raise ValueError('--running-stats-epochs must be between 0 and --epochs.')
    for name, bounds in (('scale', options.augment.scale), ('ratio', options.augment.ratio),
                         ('cutmix_minmax', options.augment.cutmix_minmax)):
        low, high = bounds or (0, 0)
        if low > high:
            raise ValueError(f'--{name.replace("_", "-")} is a range: its lower bound {low} is above its upper {high}.')
    data = options.data
    check_dataset_name(data.dataset, list_builtin_datasets())
    check_class_map_file(data.class_map)
    check_normalization_lengths(data.mean, data.std, data.input_size)
    if options.augment.aa:
        check_auto_augment(options.augment.aa)
    resume = options.resume.resume
    if resume:
        check_resume_path(resume)  # timm's loader would blame the serialisation format for a damaged file
        check_checkpoint_file(resume)


def check_validation_split(data: DataOptions, train_root: Optional[str], val_root: Optional[str], search: bool,
                           verbose: bool) -> None:
    """Warn once when the validation split holds the training images: ``--val-split`` names the training split
    (or a synonym timm takes for it), or, of an image folder, its folder is the training folder or one around it
    (``--val-split ''``: the root). The run is valid, but it ranks its checkpoints on images it trained on.

    Args:
        data: The data options.
        train_root: The training split's folder (of an image folder), as the build resolved it.
        val_root: The validation split's folder.
        search: Whether the dataset's reader finds the splits by name (no split folders resolved).
        verbose: Whether this process logs (rank 0).
    """
    if search or not train_root or not val_root:
        same = same_split(data.train_split, data.val_split)
    else:
        train, val = Path(os.path.realpath(train_root)), Path(os.path.realpath(val_root))
        same = train == val or val in train.parents
    if same and verbose:
        _logger.warning(f'--val-split {data.val_split!r} holds the training images (--train-split '
                        f'{data.train_split!r}): the checkpoints are ranked on images the run trains on, so '
                        f'model_best and the validation numbers are optimistic; validate on a held-out split')


def check_auto_augment(policy: str) -> None:
    """``--aa`` names a policy timm knows, found now rather than as timm's AssertionError when the loader is built.

    Raises:
        ValueError: timm refuses the policy.
    """
    try:
        create_transform(32, is_training=True, auto_augment=policy)
    except (AssertionError, ValueError, KeyError, IndexError) as e:
        raise ValueError(f'--aa {policy}: {one_line(e)} (timm\'s policies: rand-m9-mstd0.5 and other rand-..., '
                         f'augmix-..., original, originalr, v0, v0r, 3a)') from e


def resolve_device(name: Optional[str]) -> str:
    """The device to train on (default: cuda when available, else cpu), checked before anything is built
    (`check_device`): timm asserts on a CUDA device it cannot use, and torch fails on a missing one only when the
    model moves there."""
    if name is None:
        return 'cuda' if torch.cuda.is_available() else 'cpu'
    check_device(name)
    return name


def check_steps(steps_per_epoch: int, train_images: int, batch_size: int, world_size: int, start_epoch: int,
                epochs: int, resume: str = '', completes_record: bool = False) -> None:
    """Refuse a run that would make no optimizer step: it would exit successfully with nothing trained, unless it
    resumes (from `resume`) to complete its checkpoint's record (`completes_record`: the summary row a kill kept
    from being written), which needs no step."""
    if steps_per_epoch == 0:
        raise ValueError(f'the training split has {train_images} image(s) for {world_size} process(es), fewer '
                         f'than one batch of {batch_size} (training drops the last partial batch): no step would be '
                         f'made; lower --batch-size or add images')
    if start_epoch >= epochs and not completes_record:
        raise ValueError(f'--resume {resume} ends at epoch {start_epoch - 1}, the last of {epochs} epochs: '
                         f'nothing is left to train; raise --epochs')
