"""scikit-learn's handwritten digits rendered once into an image folder: the built-in, download-free dataset.

The 1 797 8×8 grey-level digits (values 0-16) ship inside scikit-learn. They are upscaled to RGB PNGs
(default 32×32) under ``<root>/train/<class>/`` and ``<root>/validation/<class>/`` with a fixed, stratified
split, so timm's own `create_dataset` and loaders read them like any ImageNet-style folder.
"""
import errno
import logging
import os
import tempfile
from pathlib import Path
from typing import Union

import numpy as np
from PIL import Image

__all__ = ['DIGITS_NUM_CLASSES', 'default_digits_root', 'prepare_digits']

_logger = logging.getLogger(__name__)

DIGITS_NUM_CLASSES = 10
_VAL_FRACTION = 0.2
_SPLIT_SEED = 0
_DONE_MARKER = '.complete'


def default_digits_root() -> Path:
    """Cache folder for the rendered digits (``$TIMM_ADVNORM_CACHE`` or ``~/.cache/timm_advnorm``)."""
    base = os.environ.get('TIMM_ADVNORM_CACHE') or Path.home() / '.cache' / 'timm_advnorm'
    return Path(base) / 'digits'


def _render(image_8x8: np.ndarray, img_size: int) -> Image.Image:
    grey = Image.fromarray((image_8x8 * (255.0 / 16.0)).astype(np.uint8), mode='L')
    return grey.resize((img_size, img_size), Image.Resampling.BILINEAR).convert('RGB')


def _render_split(folder: Path, img_size: int) -> int:
    """Render every digit into ``folder/<split>/<class>/<index>.png`` with the fixed stratified split; returns
    the number of images."""
    from sklearn.datasets import load_digits  # the dataset ships with scikit-learn: no download

    digits = load_digits()
    rng = np.random.default_rng(_SPLIT_SEED)
    for label in range(DIGITS_NUM_CLASSES):
        indices = rng.permutation(np.flatnonzero(digits.target == label))
        n_val = int(round(len(indices) * _VAL_FRACTION))
        for split, split_indices in (('validation', indices[:n_val]), ('train', indices[n_val:])):
            class_folder = folder / split / str(label)
            class_folder.mkdir(parents=True, exist_ok=True)
            for index in split_indices:
                _render(digits.images[index], img_size).save(class_folder / f'{index:04d}.png')
    return len(digits.target)


def _not_digits(root: Path) -> FileExistsError:
    """The error for a ``root`` that holds something other than a complete digits dataset."""
    return FileExistsError(f'{root} exists, is not empty and holds no complete digits dataset; remove it first.')


def prepare_digits(root: Union[str, Path, None] = None, img_size: int = 32) -> Path:
    """Render the digits into ``root`` (once) and return the folder holding ``train/`` and ``validation/``.

    Rendering goes to a private temporary folder next to ``root``, renamed into place in one step at the end, so an
    interrupted run never leaves a half-written dataset behind, and of runs rendering at the same time (two first
    uses, ``torchrun`` jobs sharing the cache) one puts its copy in place and the others use it.

    Args:
        root: Destination; defaults to `default_digits_root()` with a per-size subfolder.
        img_size: Side of the rendered square images.

    Raises:
        FileExistsError: ``root`` holds something else than a complete digits dataset.
    """
    root = Path(root) if root is not None else default_digits_root() / f'{img_size}px'
    if (root / _DONE_MARKER).exists():
        return root
    if root.exists() and (not root.is_dir() or any(root.iterdir())):
        raise _not_digits(root)
    root.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=root.parent, prefix=f'.{root.name}-') as tmp:
        staging = Path(tmp) / 'data'
        count = _render_split(staging, img_size)
        (staging / _DONE_MARKER).touch()
        try:
            os.rename(staging, root)  # replaces a missing or empty folder, fails on a filled one
        except OSError as e:
            if e.errno not in (errno.ENOTEMPTY, errno.EEXIST):
                raise
            if not (root / _DONE_MARKER).exists():
                raise _not_digits(root) from None
            _logger.info('Another run rendered the digits into %s meanwhile; using its copy.', root)
            return root
    _logger.info('Rendered scikit-learn digits (%d images, %dpx) into %s', count, img_size, root)
    return root

