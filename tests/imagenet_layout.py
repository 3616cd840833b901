"""A synthetic image folder laid out like ImageNet, for end-to-end tests of the full-resolution path.

ImageNet as timm reads it from disk is ``train/`` and ``val/``, each with one folder per class named by WordNet id
(``n01440764``) holding JPEG files. `write_imagenet_folder` writes a tiny copy of that layout: a few classes of smooth
random colour fields, so that decoding, resizing and cropping run as on the real data. Nothing in it is learnable;
the tests using it check that the path runs and records what it ran, not what a model learns.
"""
import itertools
from pathlib import Path
from typing import Sequence

import numpy as np
from PIL import Image

__all__ = ['IMAGENET_WNIDS', 'write_imagenet_folder']

#: The first WordNet ids of ImageNet-1k's class order (tench, goldfish, great white shark, tiger shark).
IMAGENET_WNIDS = ('n01440764', 'n01443537', 'n01484850', 'n01491361')


def _colour_field(rng: np.random.Generator, size: int) -> Image.Image:
    """A smooth random RGB image: a 4x4 grid of random colours upscaled bicubically to `size` px."""
    grid = rng.integers(0, 256, size=(4, 4, 3), dtype=np.uint8)
    return Image.fromarray(grid).resize((size, size), Image.Resampling.BICUBIC)


def write_imagenet_folder(root: Path, images_per_class: Sequence[int] = (2, 1), size: int = 224,
                          wnids: Sequence[str] = IMAGENET_WNIDS, seed: int = 0) -> Path:
    """Write ``train/`` and ``val/`` under `root`, each with one folder per WordNet id of JPEG images.

    Args:
        root: Folder to write into (made if missing).
        images_per_class: Images per class folder of ``train/`` and of ``val/``.
        size: Side of the square images in pixels.
        wnids: The class folders' names.
        seed: Seed of the images' colours.

    Returns:
        `root`.
    """
    rng = np.random.default_rng(seed)
    val_number = itertools.count(1)  # ImageNet numbers its validation images across all classes
    for split, count in zip(('train', 'val'), images_per_class):
        for wnid in wnids:
            folder = root / split / wnid
            folder.mkdir(parents=True, exist_ok=True)
            for index in range(count):
                name = f'{wnid}_{index}.JPEG' if split == 'train' else f'ILSVRC2012_val_{next(val_number):08d}.JPEG'
                _colour_field(rng, size).save(folder / name, quality=90)
    return root
