"""Built-in datasets and dataset-name resolution shared by `train_adv.py` and `validate_adv.py`."""
from pathlib import Path
from typing import Optional, Tuple

import torch
from torch.utils.data import Dataset, Subset

from .digits import DIGITS_NUM_CLASSES, default_digits_root, prepare_digits

__all__ = ['DIGITS_NUM_CLASSES', 'default_digits_root', 'fixed_subset', 'is_folder_dataset', 'prepare_digits',
           'resolve_dataset', 'split_folder']

#: Folder names timm's split search (``timm.data.dataset_factory._search_split``) accepts for one another.
SPLIT_SYNONYMS = (('train', 'training'), ('val', 'valid', 'validation', 'eval', 'evaluation'))


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


def is_folder_dataset(name: str) -> bool:
    """Whether timm reads the dataset `name` from an image folder, searching it for the split's subfolder."""
    return '/' not in name or name.lower() in ('torch/image_folder', 'torch/folder')


def split_folder(root: Path, split: str) -> Path:
    """The folder of `split` under the folder dataset `root`, found as timm's split search finds it.

    timm falls back to `root` itself when no folder matches, so a mistyped split would silently use every image under
    it, training and validation images alike: here that is an error. An empty `split` names `root` itself.

    Raises:
        ValueError: `root` holds no folder of `split`.
    """
    name = split.split('[')[0]
    candidates = [name] + next(([s for s in synonyms if s != name] for synonyms in SPLIT_SYNONYMS
                                if name in synonyms), [])
    for candidate in candidates:
        if (root / candidate).exists():
            return root / candidate
    raise ValueError(f'no folder of split {split!r} under {root} (looked for {", ".join(candidates)}); name an '
                     "existing split folder, or an empty split ('') for every image under the root")


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
