"""scikit-learn's handwritten digits rendered once into an image folder: the built-in, download-free dataset.

The 1 797 8×8 grey-level digits (values 0-16) ship inside scikit-learn. They are upscaled to RGB PNGs
(default 32×32) under ``<root>/train/<class>/`` and ``<root>/validation/<class>/`` with a fixed, stratified
split, so timm's own `create_dataset` and loaders read them like any ImageNet-style folder.
"""
from pathlib import Path
from typing import Union

import numpy as np
from PIL import Image

from .builtin import register_builtin_dataset
from .rendered import default_cache_root, prepare_at_size, render_stratified_split

__all__ = ['DIGITS_NUM_CLASSES', 'default_digits_root', 'prepare_digits']

DIGITS_NUM_CLASSES = 10
_VAL_FRACTION = 0.2
_SPLIT_SEED = 0


def default_digits_root() -> Path:
    """Cache folder for the rendered digits (``$TIMM_ADVNORM_CACHE`` or ``~/.cache/timm_advnorm``)."""
    return default_cache_root() / 'digits'


def _render(image_8x8: np.ndarray, img_size: int) -> Image.Image:
    grey = Image.fromarray((image_8x8 * (255.0 / 16.0)).astype(np.uint8), mode='L')
    return grey.resize((img_size, img_size), Image.Resampling.BILINEAR).convert('RGB')


def _render_split(folder: Path, img_size: int) -> int:
    """Render every digit into ``folder/<split>/<class>/<index>.png`` with the fixed stratified split; returns
    the number of images."""
    from sklearn.datasets import load_digits  # the dataset ships with scikit-learn: no download

    digits = load_digits()
    images = ((index, int(label), _render(image, img_size))
              for index, (image, label) in enumerate(zip(digits.images, digits.target)))
    return render_stratified_split(folder, images, digits.target, _VAL_FRACTION, _SPLIT_SEED)


@register_builtin_dataset('digits', DIGITS_NUM_CLASSES, img_size=32)
def prepare_digits(root: Union[str, Path, None] = None, img_size: int = 32) -> Path:
    """Render the digits into ``root`` (once) and return the folder holding ``train/`` and ``validation/``.

    Rendering is atomic and safe for runs rendering at the same time (`timm_advnorm.data.rendered.prepare_rendered`).

    Args:
        root: Destination; defaults to `default_digits_root()` with a per-size subfolder.
        img_size: Side of the rendered square images.

    Raises:
        ValueError: `img_size` is below 1.
        FileExistsError: ``root`` holds something else than a complete digits dataset.
    """
    return prepare_at_size(root, default_digits_root(), img_size, _render_split, 'digits')
