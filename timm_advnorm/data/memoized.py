"""A dataset whose items are kept once made, for small in-memory datasets read with a deterministic transform.

The built-in datasets (digits, mnist5k) are a few thousand small images that every epoch decodes and transforms again
into the same tensors: for a small model (Galloway et al.'s MNIST MLPs) that is most of an epoch's time. Holding each
transformed item after its first read gives the same tensors in the same order, once. Only for a transform with no
randomness (evaluation transforms, training with ``--no-aug``) and a loader without worker processes (each worker
would hold a copy of its own, lost when the epoch's workers end).

A grey image read as RGB (MNIST, the digits) is kept as one channel and handed out expanded to its channels, the
same values: a third of the memory (full MNIST at 112 px: 3 GB, not 9).
"""
import copy
from typing import Any, Callable, Dict, Optional

import torch
from torch.utils.data import Dataset

__all__ = ['MemoizedDataset']


class MemoizedDataset(Dataset):
    """`dataset`'s items, each made once (read and transformed) and then kept.

    Setting `transform` (as timm's `create_loader` does) sets the wrapped dataset's and forgets the kept items; a
    copy (`copy.copy`, as a run makes for its robust-validation subset) wraps a copy of the dataset, with its own
    transform and items. Other attributes (``reader``, ``filename``) are the wrapped dataset's.
    """

    def __init__(self, dataset: Dataset):
        self.dataset = dataset
        self._items: Dict[int, Any] = {}

    @property
    def transform(self) -> Optional[Callable]:
        return self.dataset.transform

    @transform.setter
    def transform(self, transform: Optional[Callable]) -> None:
        self.dataset.transform = transform
        self._items = {}

    def __len__(self) -> int:
        return len(self.dataset)

    def __getitem__(self, index: int) -> Any:
        if index not in self._items:
            self._items[index] = _compact(self.dataset[index])
        return _expanded(self._items[index])

    def __copy__(self) -> 'MemoizedDataset':
        return MemoizedDataset(copy.copy(self.dataset))

    def __getattr__(self, name: str) -> Any:
        if name in ('dataset', '_items'):  # not set yet (during unpickling): no recursion into the wrapped dataset
            raise AttributeError(name)
        return getattr(self.dataset, name)


class _GreyImage:
    """An image whose channels were all equal, kept as its first channel and the number of channels."""

    __slots__ = ('channel', 'channels')

    def __init__(self, channel: torch.Tensor, channels: int):
        self.channel, self.channels = channel, channels


def _compact(item: Any) -> Any:
    """`item` with its image (the first element of an ``(image, target)`` pair) kept as one channel where all its
    channels are equal."""
    if not isinstance(item, tuple) or not item or not isinstance(item[0], torch.Tensor):
        return item
    image = item[0]
    if image.dim() != 3 or image.shape[0] < 2 or not all(torch.equal(image[0], c) for c in image[1:]):
        return item
    return (_GreyImage(image[:1].clone(), image.shape[0]), *item[1:])


def _expanded(item: Any) -> Any:
    """A kept item as it was read: a grey image's channel expanded back to its channels (a view: no copy)."""
    if isinstance(item, tuple) and item and isinstance(item[0], _GreyImage):
        grey = item[0]
        return (grey.channel.expand(grey.channels, *grey.channel.shape[1:]), *item[1:])
    return item
