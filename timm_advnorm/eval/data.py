"""The evaluation subset: a fixed, seeded sample of a dataset, split into disjoint shards across ranks.

Every sample keeps its *position* in the subset (0..N-1). Results are keyed by position, random targets are drawn
per position, and a rank's shard is a contiguous run of whole batches, so a sharded or resumed evaluation
reproduces the single-process one batch for batch (the random draws of a batch are seeded by where it starts).
Positions follow a seeded random order, so the prefixes some stages run on (sanity probes, metrics, the AMP check)
are uniform samples too, not the first classes of a dataset listed class by class.

timm's `ImageDataset` quietly loads the next image in place of one it cannot read (a corrupt, truncated or non-image
file), so a subset with bad files would be evaluated on duplicates while claiming its size. `readable_subset` decodes
the subset's images up front and names those that fail: the caller refuses them, or skips them and evaluates the
next readable images of the seeded order instead.
"""
from typing import Dict, List, Sequence, Tuple

import torch
from PIL import Image, UnidentifiedImageError
from timm.data import ImageDataset
from torch.utils.data import DataLoader, Dataset

from ..cli import one_line

__all__ = ['seeded_subset', 'shard_range', 'IndexedSubset', 'target_offsets', 'find_unreadable', 'readable_subset']

#: What decoding a damaged file raises: OSError (unidentified or truncated image, read errors), and from some PIL
#: plugins SyntaxError or ValueError; a decompression bomb is refused like a damaged file.
_DECODE_ERRORS = (OSError, SyntaxError, ValueError, Image.DecompressionBombError)
#: Images decoded per batch of the up-front check.
_CHECK_BATCH = 64


def seeded_subset(dataset_size: int, num_samples: int, seed: int) -> List[int]:
    """Dataset indices of a uniformly drawn subset of `num_samples` (all when 0 or larger than the dataset).

    The indices come in a random order (position p is the p-th draw), so every prefix is itself a uniform sample;
    the draw depends only on (`dataset_size`, `num_samples`, `seed`).
    """
    if dataset_size <= 0:
        raise ValueError('The dataset is empty.')
    if num_samples < 0:
        raise ValueError(f'num_samples must be >= 0, got {num_samples}.')
    generator = torch.Generator().manual_seed(seed)
    order = torch.randperm(dataset_size, generator=generator)
    return order[:num_samples or dataset_size].tolist()


def shard_range(num_samples: int, rank: int, world_size: int, batch_size: int = 1) -> Tuple[int, int]:
    """Contiguous ``[start, stop)`` range of subset positions evaluated by `rank`.

    Ranks get whole batches of `batch_size` (their counts differ by at most one), so every batch starts where it
    would in a single-process run and draws the same random numbers.
    """
    if not 0 <= rank < world_size:
        raise ValueError(f'rank must be in [0, {world_size}), got {rank}.')
    if batch_size < 1:
        raise ValueError(f'batch_size must be >= 1, got {batch_size}.')
    base, extra = divmod(-(-num_samples // batch_size), world_size)
    first = rank * base + min(rank, extra)
    last = first + base + (1 if rank < extra else 0)
    return min(first * batch_size, num_samples), min(last * batch_size, num_samples)


def target_offsets(num_samples: int, num_classes: int, seed: int) -> torch.Tensor:
    """Per-position offsets in [1, C-1]: the target of sample p is ``(label + offsets[p]) % C``.

    Uniform among the classes other than the label (never the label itself, see `attacks.core.random_targets`),
    fixed per position, so every targeted attack, variant and rank uses the same targets.
    """
    if num_classes < 2:
        raise ValueError('Targeted attacks need at least two classes.')
    generator = torch.Generator().manual_seed(seed)
    return torch.randint(1, num_classes, (num_samples,), generator=generator)


class IndexedSubset(Dataset):
    """``(image, label, position)`` for the subset positions in `positions`.

    Args:
        dataset: A map-style dataset returning ``(image, label)``.
        indices: Dataset index of every subset position (the full subset, not just this shard).
        positions: Subset positions to serve, in order.
    """

    def __init__(self, dataset: Dataset, indices: Sequence[int], positions: Sequence[int]):
        self.dataset = dataset
        self.indices = list(indices)
        self.positions = list(positions)

    def __len__(self) -> int:
        return len(self.positions)

    def __getitem__(self, item: int):
        position = self.positions[item]
        image, label = self.dataset[self.indices[position]]
        return image, label, position


class _DecodeCheck(Dataset):
    """``(index, error)`` for dataset indices: decodes each image as `ImageDataset.__getitem__` loads it, ``error``
    being the reason it failed (``''`` when it decoded), so a loader's workers can check images in parallel."""

    def __init__(self, dataset: ImageDataset, indices: Sequence[int]):
        self.dataset = dataset
        self.indices = list(indices)

    def __len__(self) -> int:
        return len(self.indices)

    def __getitem__(self, item: int) -> Tuple[int, str]:
        index = self.indices[item]
        try:
            source, *_ = self.dataset.reader[index]
            try:
                with Image.open(source) as image:
                    image.load()  # decodes every pixel, as loading does (Image.open only reads the header)
                    if self.dataset.input_img_mode:
                        image.convert(self.dataset.input_img_mode)
            finally:
                source.close()  # the reader opened it; PIL leaves a file object it was given open
        except UnidentifiedImageError:  # its message holds the file object's repr: the name is reported anyway
            return index, 'cannot identify image file'
        except _DECODE_ERRORS as e:
            return index, one_line(e, limit=200)
        return index, ''


def _batch_as_list(batch: List[Tuple[int, str]]) -> List[Tuple[int, str]]:
    return batch


def find_unreadable(dataset: Dataset, indices: Sequence[int], workers: int = 0) -> Dict[int, Tuple[str, str]]:
    """The images among `indices` that `dataset` cannot load: ``{index: (file name, reason)}``.

    Only timm's `ImageDataset` (image folders, tar files, Hugging Face datasets) substitutes unreadable images, so
    only its images are decoded (by `workers` loader processes); any other dataset raises on a bad file itself and
    gets an empty answer. File names are relative to the dataset's root.
    """
    if not isinstance(dataset, ImageDataset) or not indices:
        return {}
    loader = DataLoader(_DecodeCheck(dataset, indices), batch_size=_CHECK_BATCH, num_workers=workers,
                        collate_fn=_batch_as_list)
    return {index: (str(dataset.filename(index)), error) for batch in loader for index, error in batch if error}


def readable_subset(dataset: Dataset, order: Sequence[int], num_samples: int, skip_unreadable: bool,
                    workers: int = 0) -> Tuple[List[int], Dict[int, Tuple[str, str]]]:
    """The first `num_samples` images of `order` (the seeded order, `seeded_subset`, or a named subset's list) with
    their unreadable images found (`find_unreadable`).

    Args:
        dataset: The dataset.
        order: Dataset indices in the order they are taken.
        num_samples: Size of the subset (0: all of `order`).
        skip_unreadable: Replace unreadable images by the next readable ones of `order`, so that the subset keeps its
            size while there are images left (a subset without bad files is the plain prefix of `order`).
            Otherwise the subset is returned as drawn, for the caller to refuse its bad files.
        workers: Loader processes decoding the images.

    Returns:
        The indices to evaluate, and the unreadable images found, ``{index: (file name, reason)}``.
    """
    order = list(order)
    wanted = min(num_samples or len(order), len(order))
    chosen, unreadable, checked = [], {}, 0
    while len(chosen) < wanted and checked < len(order):
        batch = order[checked:checked + wanted - len(chosen)]
        checked += len(batch)
        found = find_unreadable(dataset, batch, workers)
        unreadable.update(found)
        if not skip_unreadable:
            return batch, unreadable
        chosen += [index for index in batch if index not in found]
    return chosen, unreadable
