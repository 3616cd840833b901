"""The training and validation datasets of `train_adv.py`, held to the data contracts before the first step.

An image-folder dataset's splits are scanned first (`timm_advnorm.data.folders`): symbolic-link loops and images
reached twice are refused, both splits get the training split's class indices (or the ``--class-map``'s), and the
model's classes must be the data's. Once made, every image of both splits is decoded (`keep_readable`; of an image
folder, only the files new or changed since an earlier check, `DecodeCache`): an unreadable one is an error naming it,
or with ``--skip-bad-images`` it is left out with a warning naming it. A built-in dataset
read without loader workers is held in memory once transformed (`memoized_splits`).
"""
from pathlib import Path
from typing import Dict, Optional, Tuple

from timm.data import create_dataset
from torch.utils.data import Dataset

from ..data import builtin_dataset
from ..data.folders import check_num_classes, scan_image_folder, split_class_map
from ..data.memoized import MemoizedDataset
from ..data.readable import DecodeReport, keep_readable
from .data_options import dataset_kwargs
from .options import DataOptions

__all__ = ['folder_class_map', 'create_split_datasets', 'memoized_splits']


def _model_classes(data: DataOptions) -> str:
    """What sets the model's class count, for messages."""
    return '--num-classes' if data.num_classes else f'the default of --dataset {data.dataset}'


def folder_class_map(data: DataOptions, train_root: str, val_root: str, search_split: bool,
                     num_classes: int) -> Optional[Dict[str, int]]:
    """The class-to-index map both splits of an image-folder dataset are read with, checked against the model's
    `num_classes` (`check_num_classes`); None for other datasets (`search_split`: timm finds the split itself).

    Raises:
        ValueError: A broken data contract (see `timm_advnorm.data.folders`).
    """
    if search_split:
        return None
    class_map = split_class_map(scan_image_folder(Path(train_root)), scan_image_folder(Path(val_root)),
                                data.class_map)
    check_num_classes(num_classes, class_map, bool(data.class_map), _model_classes(data))
    return class_map


def create_split_datasets(data: DataOptions, seed: int, dataset_name: str, roots: Tuple[str, str], search_split: bool,
                          batch_size: int, class_map: Optional[Dict[str, int]], num_classes: int,
                          plan: bool = False) -> Tuple[Dataset, Dataset, Tuple[DecodeReport, ...]]:
    """The training and validation datasets, with the class map of `folder_class_map` (when not None), their images
    decoded (`keep_readable`; under `plan`, a sample of them, to time the check), and what the checks cost.

    A dataset whose reader numbers its classes otherwise (a tar file) must have `num_classes` too. `seed` seeds
    the training split's shuffling where timm's reader shuffles (iterable datasets).

    Raises:
        ValueError: Unreadable images without ``--skip-bad-images``, or a class count other than the model's.
    """
    options = dataset_kwargs(data)
    if class_map is not None:
        options['class_map'] = class_map
    train_root, val_root = roots
    train_set = create_dataset(dataset_name, root=train_root, split=data.train_split, search_split=search_split,
                               is_training=True, batch_size=batch_size, seed=seed, **options)
    val_set = create_dataset(dataset_name, root=val_root, split=data.val_split, search_split=search_split,
                             batch_size=batch_size, **options)
    found = getattr(getattr(train_set, 'reader', None), 'class_to_idx', None)
    if class_map is None and found:
        check_num_classes(num_classes, found, bool(data.class_map), _model_classes(data))
    reports = (keep_readable(train_set, data.skip_bad_images, data.workers, 'train on', plan),
               keep_readable(val_set, data.skip_bad_images, data.workers, 'validate on', plan))
    return train_set, val_set, tuple(report for report in reports if report is not None)


def memoized_splits(train_set: Dataset, val_set: Dataset, data: DataOptions,
                    no_aug: bool) -> Tuple[Dataset, Dataset]:
    """The splits, each item kept once transformed (`MemoizedDataset`) where that gives the same tensors faster: a
    built-in dataset (a few thousand small images, re-decoded every epoch otherwise) read without loader workers; the
    validation split always (its transform is deterministic), the training split only with ``--no-aug``."""
    if builtin_dataset(data.dataset) is None or data.workers:
        return train_set, val_set
    return (MemoizedDataset(train_set) if no_aug else train_set), MemoizedDataset(val_set)
