"""A dataset whose items are kept once made, for small in-memory datasets read with a deterministic transform.

The built-in datasets (digits, mnist5k) are a few thousand small images that every epoch decodes and transforms again
into the same tensors: for a small model (Galloway et al.'s MNIST MLPs) that is most of an epoch's time. Holding each
transformed item after its first read gives the same tensors in the same order, once. Only for a transform with no
randomness (evaluation transforms, training with ``--no-aug``) and a loader without worker processes (each worker
would hold a copy of its own, lost when the epoch's workers end).
"""
import copy
from typing import Any, Callable, Dict, Optional

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
            self._items[index] = self.dataset[index]
        return self._items[index]

    def __copy__(self) -> 'MemoizedDataset':
        return MemoizedDataset(copy.copy(self.dataset))

    def __getattr__(self, name: str) -> Any:
        if name in ('dataset', '_items'):  # not set yet (during unpickling): no recursion into the wrapped dataset
            raise AttributeError(name)
        return getattr(self.dataset, name)
