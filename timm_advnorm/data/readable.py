"""Unreadable images, found before the first step of training or evaluation.

timm's `ImageDataset` quietly loads the next image in place of one it cannot read (a corrupt, truncated or non-image
file), with a warning that names an index, not the file: a run with bad files trains or is evaluated on duplicates
while claiming its size. `checked_indices` decodes the images up front and names those that fail: they are an error,
or with ``--skip-bad-images`` they are left out with a warning naming them (`keep_readable` takes them out of a
whole dataset, the evaluation takes the next readable images of its seeded order instead). Afterwards a dataset
never substitutes an image: a file that turns unreadable later is an error there and then.

The verdicts of an image folder's files are remembered with their size and modification time (`DecodeCache`): a
second run, or a resumed one, decodes only the files that are new or changed. What a check cost (found in the cache,
decoded, seconds) is its `DecodeReport`, logged, and stated by training's ``--plan``, which decodes only a sample of
the files to decode and projects the rest.
"""
import logging
import os
import time
from dataclasses import dataclass
from typing import Dict, List, Optional, Sequence, Tuple

import torch
import torch.distributed as dist
from PIL import Image, UnidentifiedImageError
from timm.data import ImageDataset
from timm.data.readers.reader import Reader
from timm.data.readers.reader_image_folder import ReaderImageFolder
from torch.utils.data import DataLoader, Dataset

from ..durations import duration_text
from ..usage import one_line
from .decode_cache import DecodeCache, file_stamp

__all__ = ['DecodeReport', 'find_unreadable', 'find_unreadable_across_ranks', 'readable_subset', 'checked_indices',
           'judge_unreadable', 'keep_readable', 'ReaderSubset', 'PLAN_SAMPLE']

_logger = logging.getLogger(__name__)

#: What decoding a damaged file raises: OSError (unidentified or truncated image, read errors), and from some PIL
#: plugins SyntaxError or ValueError; a decompression bomb is refused like a damaged file.
_DECODE_ERRORS = (OSError, SyntaxError, ValueError, Image.DecompressionBombError)
#: Images decoded per batch of the up-front check.
_CHECK_BATCH = 64
#: Unreadable files named in an error or warning line (an evaluation's results list all of them).
_LISTED_FILES = 3
#: Images a ``--plan`` decodes per rank to time the check (of those the cache does not vouch for); the rest are
#: projected from them.
PLAN_SAMPLE = 256

#: An image's check: its ``(size, mtime_ns)`` (None off an image folder), its verdict (``''``: readable, else why
#: not; None: not decoded, beyond a plan's sample) and whether it was decoded now (else the cache vouched for it).
_Checked = Tuple[Optional[Tuple[int, int]], Optional[str], bool]


@dataclass(frozen=True)
class DecodeReport:
    """What an up-front decode check cost, for the log and the plans.

    Attributes:
        where: The dataset's root.
        images: Images checked.
        cached: Of them, unchanged since an earlier check: its verdict was taken, nothing decoded.
        decoded: Of them, decoded now.
        seconds: Wall time of the decoding (the ranks decode side by side: the slowest one's).
        left: Of them, neither cached nor decoded: what a ``--plan`` leaves to the run.
        workers: Loader processes decoding on each rank (0: the main process).
        ranks: Ranks sharing the check.
    """

    where: str
    images: int
    cached: int
    decoded: int
    seconds: float
    left: int = 0
    workers: int = 0
    ranks: int = 1

    @property
    def images_per_second(self) -> Optional[float]:
        """Images decoded per second by all ranks together; None when none was decoded."""
        return self.decoded / self.seconds if self.decoded and self.seconds > 0 else None

    @property
    def projected_seconds(self) -> Optional[float]:
        """Wall time the `left` images will take at the measured rate (0 with none left; None unmeasured)."""
        if not self.left:
            return 0.0
        rate = self.images_per_second
        return None if rate is None else self.left / rate

    def text(self) -> str:
        """One line: the images, how many the cache vouched for, decoded at which rate, and what is left."""
        text = f'{self.images:,} images of {self.where}: {self.cached:,} unchanged since checked (cache), ' \
               f'{self.decoded:,} decoded in {duration_text(self.seconds)}'
        rate = self.images_per_second
        if rate is not None:
            per_worker = rate / (self.ranks * max(self.workers, 1))
            text += f' ({rate:,.0f} images/s, {per_worker:,.0f} per worker)'
        if self.left:
            text += f'; {self.left:,} left to decode, projected {duration_text(self.projected_seconds)}'
        return text


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


def _open_cache(dataset: Dataset) -> Optional[DecodeCache]:
    """The decode-check cache of `dataset`'s root and image mode: image folders only (a tar file's or a Hugging Face
    dataset's members have no file to stat, and are always decoded)."""
    reader = getattr(dataset, 'reader', None)
    if not isinstance(dataset, ImageDataset) or not isinstance(reader, ReaderImageFolder):
        return None
    return DecodeCache.open(reader.root, dataset.input_img_mode)


def _file_names(dataset: ImageDataset, indices: Sequence[int]) -> Tuple[List[str], List[str]]:
    """The paths of `indices`' files in an image-folder dataset, and their names relative to its root (without
    `os.path.relpath` per file, which alone costs seconds on ImageNet)."""
    reader = dataset.reader
    paths = [reader.samples[index][0] for index in indices]
    prefix = os.path.join(reader.root, '')
    names = [path[len(prefix):] if path.startswith(prefix) else os.path.relpath(path, reader.root) for path in paths]
    return paths, names


def _check_share(dataset: Dataset, indices: Sequence[int], workers: int, cache: Optional[DecodeCache],
                 limit: Optional[int]) -> Tuple[List[_Checked], float]:
    """The check of each of `indices` (`_Checked`): the cache's verdict for an unchanged file, else decoded now (the
    first `limit` of them when given), and the seconds the decoding took."""
    if cache is None:
        stamps, known = [None] * len(indices), [None] * len(indices)
    else:
        paths, names = _file_names(dataset, indices)
        stamps = [file_stamp(path) for path in paths]
        known = [cache.verdict(name, stamp) for name, stamp in zip(names, stamps)]
    todo = [position for position, verdict in enumerate(known) if verdict is None][:limit]
    started = time.perf_counter()
    found = find_unreadable(dataset, [indices[position] for position in todo], workers)
    seconds = time.perf_counter() - started
    checked: List[_Checked] = [(stamp, verdict, False) for stamp, verdict in zip(stamps, known)]
    for position in todo:
        checked[position] = (stamps[position], found.get(indices[position], ('', ''))[1], True)
    return checked, seconds


def _report(dataset: Dataset, checked: Sequence[_Checked], seconds: float, workers: int,
            ranks: int = 1) -> DecodeReport:
    """The `DecodeReport` of `checked` images of `dataset`, decoded in `seconds` by `workers` on each of `ranks`."""
    decoded = sum(now for _, _, now in checked)
    left = sum(verdict is None for _, verdict, _ in checked)
    where = str(getattr(getattr(dataset, 'reader', None), 'root', None) or 'the dataset')
    return DecodeReport(where=where, images=len(checked), cached=len(checked) - decoded - left, decoded=decoded,
                        seconds=seconds, left=left, workers=workers, ranks=ranks)


def _unreadable(dataset: Dataset, indices: Sequence[int], checked: Sequence[_Checked]) -> Dict[int, Tuple[str, str]]:
    """``{index: (file name, reason)}`` of the unreadable ones among the checked `indices`."""
    return {index: (str(dataset.filename(index)), verdict)
            for index, (_, verdict, _) in zip(indices, checked) if verdict}


def _remember(dataset: Dataset, cache: Optional[DecodeCache], indices: Sequence[int], checked: Sequence[_Checked],
              started_ns: int, complete: bool) -> None:
    """Record the verdicts of `indices` in `cache` (`DecodeCache.save`): by rank 0 only, or a process outside a
    distributed run, which has every verdict (the ranks of an evaluation check the same images)."""
    if cache is None or (dist.is_available() and dist.is_initialized() and dist.get_rank() != 0):
        return
    _, names = _file_names(dataset, indices)
    cache.save({name: (*stamp, verdict) for name, (stamp, verdict, _) in zip(names, checked)
                if stamp is not None and verdict is not None}, started_ns, complete)


def readable_subset(dataset: Dataset, order: Sequence[int], num_samples: int, skip_unreadable: bool,
                    workers: int = 0) -> Tuple[List[int], Dict[int, Tuple[str, str]]]:
    """The first `num_samples` images of `order` (the seeded order, `seeded_subset`, or a named subset's list) with
    their unreadable images found (`find_unreadable`, of the images the decode-check cache does not vouch for; the
    cache then records what was decoded, and the check's `DecodeReport` is logged).

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
    cache, started_ns = _open_cache(dataset), time.time_ns()
    chosen, unreadable, checked, seconds = [], {}, [], 0.0
    while len(chosen) < wanted and len(checked) < len(order):
        batch = order[len(checked):len(checked) + wanted - len(chosen)]
        batch_checked, batch_seconds = _check_share(dataset, batch, workers, cache, None)
        checked += batch_checked
        seconds += batch_seconds
        found = _unreadable(dataset, batch, batch_checked)
        unreadable.update(found)
        if not skip_unreadable:
            chosen = batch
            break
        chosen += [index for index in batch if index not in found]
    _remember(dataset, cache, order[:len(checked)], checked, started_ns, complete=False)
    if isinstance(dataset, ImageDataset):
        _logger.info('Decode check: %s.', _report(dataset, checked, seconds, workers).text())
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


def find_unreadable_across_ranks(dataset: Dataset, indices: Sequence[int], workers: int = 0,
                                 limit: Optional[int] = None) -> Tuple[Dict[int, Tuple[str, str]], DecodeReport]:
    """The unreadable images among `indices` (``{index: (file name, reason)}``), found with the decoding shared by the
    ranks of a distributed run, and what the check cost.

    Each rank checks every world-size-th image (`find_unreadable` decoding those the decode-check cache does not
    vouch for, at most `limit` of them) and all ranks get the whole answer, so a run over many GPUs pays for one
    decoding pass of its data, not one per rank, and every rank makes the same decision about the same files. Rank 0
    then records the verdicts in the cache (the whole dataset's when `indices` are all of it and all were decoded).
    """
    indices = list(indices)
    cache, started_ns = _open_cache(dataset), time.time_ns()
    distributed = dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1
    rank, ranks = (dist.get_rank(), dist.get_world_size()) if distributed else (0, 1)
    share, seconds = _check_share(dataset, indices[rank::ranks], workers, cache, limit)
    gathered: List[Tuple[List[_Checked], float]] = [([], 0.0) for _ in range(ranks)]
    if distributed:
        dist.all_gather_object(gathered, (share, seconds))
    else:
        gathered[0] = (share, seconds)
    checked = [gathered[position % ranks][0][position // ranks] for position in range(len(indices))]
    report = _report(dataset, checked, max(part_seconds for _, part_seconds in gathered), workers, ranks)
    complete = report.left == 0 and isinstance(dataset, ImageDataset) and len(indices) == len(dataset)
    _remember(dataset, cache, indices, checked, started_ns, complete)
    return _unreadable(dataset, indices, checked), report


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


def keep_readable(dataset: Dataset, skip_unreadable: bool, workers: int, purpose: str,
                  plan: bool = False) -> Optional[DecodeReport]:
    """Decode every image of `dataset` that the decode-check cache does not vouch for, shared among the ranks of a
    distributed run (`find_unreadable_across_ranks`), and refuse the unreadable ones by name (`judge_unreadable`)
    or, with `skip_unreadable`, take them out of it.

    From then on the dataset never loads another image in place of one it cannot read.

    Args:
        plan: Decode at most `PLAN_SAMPLE` images per rank, to time the check, and project the rest (``--plan``).

    Returns:
        What the check cost (None for a dataset that is not checked: one that raises on a bad file itself).
    """
    if not isinstance(dataset, ImageDataset):  # other datasets raise on a bad file themselves
        return None
    dataset._max_retries = 1  # timm's ImageDataset would try the next 9 images in place of an unreadable one
    where = getattr(dataset.reader, 'root', None) or 'the dataset'
    _logger.info('Checking the %d images to %s in %s for unreadable files (decoding those new or changed since an '
                 'earlier check).', len(dataset), purpose, where)
    with torch.random.fork_rng(devices=[]):  # its loader draws a seed: the run's random numbers stay as without it
        unreadable, report = find_unreadable_across_ranks(dataset, range(len(dataset)), workers,
                                                          PLAN_SAMPLE if plan else None)
    _logger.info('Decode check: %s.', report.text())
    indices = [index for index in range(len(dataset)) if not (skip_unreadable and index in unreadable)]
    indices, skipped = judge_unreadable(dataset, indices, unreadable, skip_unreadable, purpose)
    if skipped:
        dataset.reader = ReaderSubset(dataset.reader, indices)
    return report
