"""The built-in datasets by ``--dataset`` name, as the attacks are found by ``--attack`` name: each module that renders
one (`digits`, `mnist5k`, `mnist`) registers its ``prepare`` function with `register_builtin_dataset`."""
from pathlib import Path
from typing import Callable, List, Mapping, NamedTuple, Optional

from ..registry import Registry

__all__ = ['BUILTIN_DATASETS', 'BuiltinDataset', 'builtin_dataset', 'list_builtin_datasets',
           'register_builtin_dataset']


class BuiltinDataset(NamedTuple):
    """A dataset rendered into an image folder on first use, from arrays a package ships (no download).

    Attributes:
        num_classes: Its classes.
        img_size: Its default image side.
        prepare: ``prepare(root, img_size)`` renders it (once) and returns the folder of its splits.
    """

    num_classes: int
    img_size: int
    prepare: Callable[..., Path]


_BUILTIN_DATASETS: Registry[BuiltinDataset] = Registry('built-in dataset')

#: The built-in datasets by ``--dataset`` name: a read-only view of the registry.
BUILTIN_DATASETS: Mapping[str, BuiltinDataset] = _BUILTIN_DATASETS.entries


def register_builtin_dataset(name: str, num_classes: int, img_size: int) -> Callable:
    """Decorator registering a ``prepare(root, img_size)`` function as the built-in dataset `name` of `num_classes`
    classes and default side `img_size`; returns the function unchanged."""
    def _register(prepare: Callable[..., Path]) -> Callable[..., Path]:
        _BUILTIN_DATASETS.register(name, BuiltinDataset(num_classes, img_size, prepare))
        return prepare
    return _register


def builtin_dataset(name: str) -> Optional[BuiltinDataset]:
    """The built-in dataset `name` (``digits``, ``mnist5k``, ``mnist``), or None for any other name."""
    return _BUILTIN_DATASETS.get(name) if name in _BUILTIN_DATASETS else None


def list_builtin_datasets() -> List[str]:
    """Names of the built-in datasets, in registration order (``digits``, ``mnist5k``, ``mnist``)."""
    return _BUILTIN_DATASETS.names()
