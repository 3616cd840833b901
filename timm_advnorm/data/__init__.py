"""Built-in datasets and dataset-name resolution shared by `train_adv.py` and `validate_adv.py`."""
from pathlib import Path
from typing import Optional, Tuple

import torch
from torch.utils.data import Dataset, Subset

from .digits import DIGITS_NUM_CLASSES, default_digits_root, prepare_digits

__all__ = ['DIGITS_NUM_CLASSES', 'default_digits_root', 'fixed_subset', 'prepare_digits', 'resolve_dataset']


def resolve_dataset(dataset: str, data_dir: Optional[str], img_size: int = 32) -> Tuple[str, Optional[str]]:
    """Map our built-in dataset names onto what timm's `create_dataset` takes.

    ``digits`` becomes an image folder rendered on first use (under `data_dir` when given, else in the user
    cache); any other name is passed to timm unchanged.

    Returns:
        ``(timm_dataset_name, root)``.
    """
    if dataset == 'digits':
        root = prepare_digits(Path(data_dir) / f'digits-{img_size}px' if data_dir else None, img_size=img_size)
        return '', str(root)
    return dataset, data_dir


def fixed_subset(dataset: Dataset, num_samples: int, seed: int = 0, rank: int = 0, world_size: int = 1) -> Dataset:
    """This rank's share of a seeded random subset of `num_samples` images, in a fixed order.

    Image folders list their files class by class, so "the first N images" would be a handful of classes; a seeded
    draw keeps robust-accuracy estimates comparable across runs and representative of every class. Ranks take
    disjoint, interleaved shares whose union is the whole subset.
    """
    if num_samples < 1:
        raise ValueError(f'The evaluation subset needs at least one image, got {num_samples}.')
    indices = torch.randperm(len(dataset), generator=torch.Generator().manual_seed(seed))[:num_samples]
    return Subset(dataset, sorted(indices.tolist())[rank::world_size])
