"""Built-in datasets and dataset-name resolution shared by `train_adv.py` and `validate_adv.py`."""
import logging
from pathlib import Path
from typing import Optional, Tuple

import torch
from torch.utils.data import Dataset, Subset

from .builtin import BUILTIN_DATASETS, BuiltinDataset, builtin_dataset, list_builtin_datasets, register_builtin_dataset
# Imported in the order `--dataset` lists the built-in datasets: each module registers its own.
from .digits import DIGITS_NUM_CLASSES, default_digits_root, prepare_digits
from .mnist5k import MNIST5K_NUM_CLASSES, default_mnist5k_root, prepare_mnist5k
from .mnist import MNIST_NUM_CLASSES, default_mnist_root, prepare_mnist
from .rendered import is_rendered, rendered_kept_on_success

__all__ = ['BUILTIN_DATASETS', 'SPLIT_SYNONYMS', 'DIGITS_NUM_CLASSES', 'MNIST5K_NUM_CLASSES', 'MNIST_NUM_CLASSES',
           'BuiltinDataset', 'builtin_dataset', 'dataset_img_size', 'dataset_num_classes', 'default_digits_root',
           'default_mnist5k_root', 'default_mnist_root', 'fixed_subset', 'is_folder_dataset', 'list_builtin_datasets',
           'prepare_digits', 'prepare_mnist5k', 'prepare_mnist', 'register_builtin_dataset', 'rendered_kept_on_success',
           'resolve_dataset', 'same_split', 'split_folder']

_logger = logging.getLogger(__name__)


def dataset_num_classes(dataset: str, num_classes: Optional[int]) -> int:
    """The classes of a model for `dataset`: `num_classes` when given, else the built-in dataset's.

    Raises:
        ValueError: Neither (a dataset other than the built-in ones, without `num_classes`).
    """
    builtin = builtin_dataset(dataset)
    if num_classes:
        return num_classes
    if builtin is None:
        raise ValueError('--num-classes is required for datasets other than the built-in digits, mnist5k and '
                         'mnist.')
    return builtin.num_classes


def dataset_img_size(dataset: str, img_size: Optional[int]) -> Optional[int]:
    """The image side a model for `dataset` takes: `img_size` when given, else the built-in dataset's (None for
    other datasets: the model's own)."""
    builtin = builtin_dataset(dataset)
    return builtin.img_size if img_size is None and builtin is not None else img_size


#: Folder names timm's split search (``timm.data.dataset_factory._search_split``) accepts for one another.
SPLIT_SYNONYMS = (('train', 'training'), ('val', 'valid', 'validation', 'eval', 'evaluation'))


def same_split(a: str, b: str) -> bool:
    """Whether the split names `a` and `b` read the same images: equal, or names timm's split search takes for one
    another (``train`` and ``training``). A slice (``train[:90%]``) is compared as written: two slices of one split
    are a held-out pair."""
    if '[' in a or '[' in b:
        return a == b
    return a == b or any(a in synonyms and b in synonyms for synonyms in SPLIT_SYNONYMS)


def resolve_dataset(dataset: str, data_dir: Optional[str], img_size: Optional[int] = None,
                    chosen_by: Optional[str] = None) -> Tuple[str, Optional[str]]:
    """Map our built-in dataset names onto what timm's `create_dataset` takes.

    A built-in dataset (`builtin_dataset`) becomes an image folder of `img_size` (default: its own) rendered on
    first use (under ``<data_dir>/<name>-<size>px`` when `data_dir` is given, else in the user cache); any other
    name is passed to timm unchanged.

    ``--data-dir`` is a folder the user gives as input: a built-in dataset is rendered into it only when ``--dataset``
    names it (`chosen_by` None). One the command chose otherwise (`chosen_by`: ``'the default of --dataset'``,
    ``"the checkpoint's record"``) is read from `data_dir` only where a complete copy is rendered there already.

    Returns:
        ``(timm_dataset_name, root)``.

    Raises:
        ValueError: A built-in dataset `chosen_by` the command, and a `data_dir` without its rendered copy.
    """
    builtin = builtin_dataset(dataset)
    if builtin is not None:
        img_size = img_size or builtin.img_size
        root = Path(data_dir) / f'{dataset}-{img_size}px' if data_dir else None
        if root is not None and chosen_by is not None and is_rendered(root):
            _logger.info(f'Dataset {dataset} ({chosen_by}): read from its copy in --data-dir {data_dir} '
                         f'({root.name}/).')
        elif root is not None and chosen_by is not None:
            raise ValueError(f"--data-dir {data_dir}: the dataset is {dataset} ({chosen_by}), built in, and the folder "
                             f"holds no rendered copy of it ({root.name}/); nothing is written into a folder given as "
                             f"input: pass --dataset '' to read the image folder {data_dir}, or --dataset {dataset} "
                             f"to render {dataset} there")
        return '', str(builtin.prepare(root, img_size=img_size))
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
