"""Unreadable images, found before the first step of training or evaluation.

timm's `ImageDataset` quietly loads the next image in place of one it cannot read (a corrupt, truncated or non-image
file), with a warning that names an index, not the file: a run with bad files trains or is evaluated on duplicates
while claiming its size. `checked_indices` decodes the images up front and names those that fail: they are an error,
or with ``--skip-bad-images`` they are left out with a warning naming them (`keep_readable` takes them out of a
whole dataset, the evaluation takes the next readable images of its seeded order instead). Afterwards a dataset
never substitutes an image: a file that turns unreadable later is an error there and then.
"""
import logging
from typing import Dict, List, Sequence, Tuple

import torch
import torch.distributed as dist
from PIL import Image, UnidentifiedImageError
from timm.data import ImageDataset
from timm.data.readers.reader import Reader
from torch.utils.data import DataLoader, Dataset

from ..usage import one_line

__all__ = ['find_unreadable', 'find_unreadable_across_ranks', 'readable_subset', 'checked_indices',
           'judge_unreadable', 'keep_readable', 'ReaderSubset']

_logger = logging.getLogger(__name__)

#: What decoding a damaged file raises: OSError (unidentified or truncated image, read errors), and from some PIL
#: plugins SyntaxError or ValueError; a decompression bomb is refused like a damaged file.
_DECODE_ERRORS = (OSError, SyntaxError, ValueError, Image.DecompressionBombError)
#: Images decoded per batch of the up-front check.
_CHECK_BATCH = 64
#: Unreadable files named in an error or warning line (an evaluation's results list all of them).
_LISTED_FILES = 3


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


def checked_indices(dataset: Dataset, order: Sequence[int], num_samples: int, skip_unreadable: bool, workers: int,
                    purpose: str) -> Tuple[List[int], List[Dict[str, str]]]:
    """`readable_subset`, with its unreadable images refused by name or, when `skip_unreadable`, left out with a
    warning naming them (`judge_unreadable`).

    Args:
        purpose: What the images are for, completing "images to ..." in the messages (``'evaluate'``, ``'train on'``).

    Returns:
        The dataset indices, and the skipped files as ``{file, error}`` entries (file names relative to the root).

    Raises:
        ValueError: Unreadable images without `skip_unreadable`, or no readable image at all.
    """
    indices, unreadable = readable_subset(dataset, order, num_samples, skip_unreadable, workers)
    return judge_unreadable(dataset, indices, unreadable, skip_unreadable, purpose)


def judge_unreadable(dataset: Dataset, indices: List[int], unreadable: Dict[int, Tuple[str, str]],
                     skip_unreadable: bool, purpose: str) -> Tuple[List[int], List[Dict[str, str]]]:
    """Refuse the `unreadable` images found among those to use by name or, when `skip_unreadable`, warn naming them.

    Args:
        indices: The dataset indices to use (without the unreadable ones when `skip_unreadable`).
        unreadable: ``{index: (file name, reason)}`` of `find_unreadable`.
        purpose: What the images are for, completing "images to ..." in the messages (``'evaluate'``, ``'train on'``).

    Returns:
        `indices`, and the skipped files as ``{file, error}`` entries (file names relative to the root).

    Raises:
        ValueError: Unreadable images without `skip_unreadable`, or no readable image at all.
    """
    named = [f'{name} ({error})' for name, error in unreadable.values()]
    listed = ', '.join(named[:_LISTED_FILES]) + (f' and {len(named) - _LISTED_FILES} more'
                                                  if len(named) > _LISTED_FILES else '')
    where = getattr(getattr(dataset, 'reader', None), 'root', None) or 'the dataset'
    if unreadable and not skip_unreadable:
        raise ValueError(f'{len(unreadable)} of the {len(indices)} images to {purpose} in {where} cannot be read: '
                         f'{listed}; repair or remove them, or pass --skip-bad-images to leave them out')
    if not indices:
        raise ValueError(f'none of the images in {where} can be read: {listed}')
    if unreadable:
        _logger.warning('Skipped %d unreadable images in %s: %s.', len(unreadable), where, listed)
    return indices, [dict(file=name, error=error) for name, error in unreadable.values()]


def find_unreadable_across_ranks(dataset: Dataset, indices: Sequence[int],
                                 workers: int = 0) -> Dict[int, Tuple[str, str]]:
    """`find_unreadable` with the decoding shared by the ranks of a distributed run: each rank decodes every
    world-size-th image and all ranks get the whole answer, so a run over many GPUs pays for one decoding pass of
    its data, not one per rank, and every rank makes the same decision about the same files."""
    indices = list(indices)
    if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() == 1:
        return find_unreadable(dataset, indices, workers)
    found = find_unreadable(dataset, indices[dist.get_rank()::dist.get_world_size()], workers)
    gathered: List[Dict[int, Tuple[str, str]]] = [{} for _ in range(dist.get_world_size())]
    dist.all_gather_object(gathered, found)
    return dict(sorted((index, entry) for part in gathered for index, entry in part.items()))


class ReaderSubset(Reader):
    """The samples `indices` of another timm reader, numbered from 0: a dataset without its unreadable files."""

    def __init__(self, reader: Reader, indices: Sequence[int]):
        super().__init__()
        self.reader = reader
        self.indices = list(indices)
        self.root = getattr(reader, 'root', None)

    def __getitem__(self, index: int):
        return self.reader[self.indices[index]]

    def __len__(self) -> int:
        return len(self.indices)

    def _filename(self, index: int, basename: bool = False, absolute: bool = False):
        return self.reader.filename(self.indices[index], basename=basename, absolute=absolute)


def keep_readable(dataset: Dataset, skip_unreadable: bool, workers: int, purpose: str) -> None:
    """Decode every image of `dataset`, shared among the ranks of a distributed run (`find_unreadable_across_ranks`),
    and refuse the unreadable ones by name (`judge_unreadable`) or, with `skip_unreadable`, take them out of it.

    From then on the dataset never loads another image in place of one it cannot read.
    """
    if not isinstance(dataset, ImageDataset):  # other datasets raise on a bad file themselves
        return
    dataset._max_retries = 1  # timm's ImageDataset would try the next 9 images in place of an unreadable one
    _logger.info('Decoding the %d images to %s in %s, to find unreadable files.', len(dataset), purpose,
                 getattr(dataset.reader, 'root', None) or 'the dataset')
    with torch.random.fork_rng(devices=[]):  # its loader draws a seed: the run's random numbers stay as without it
        unreadable = find_unreadable_across_ranks(dataset, range(len(dataset)), workers)
    indices = [index for index in range(len(dataset)) if not (skip_unreadable and index in unreadable)]
    indices, skipped = judge_unreadable(dataset, indices, unreadable, skip_unreadable, purpose)
    if skipped:
        dataset.reader = ReaderSubset(dataset.reader, indices)
