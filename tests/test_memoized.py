"""Built-in datasets held in memory once transformed: the same items, made once (`data.memoized`)."""
import copy
from pathlib import Path

import torch
from torch.utils.data import Dataset

from tiny_runs import tiny_train_argv
from timm_advnorm.commands.train import parse_args, train_options
from timm_advnorm.data.memoized import MemoizedDataset
from timm_advnorm.train.build import build_training


class CountingDataset(Dataset):
    """Items ``transform(index)``, counting the reads."""

    def __init__(self):
        self.transform = lambda index: torch.full((2,), float(index))
        self.reads = 0
        self.reader = 'the reader'

    def __len__(self):
        return 3

    def __getitem__(self, index):
        self.reads += 1
        return self.transform(index), index


def test_each_item_is_made_once_and_is_the_wrapped_datasets():
    inner = CountingDataset()
    dataset = MemoizedDataset(inner)
    first = [dataset[i] for i in range(len(dataset))]
    again = [dataset[i] for i in range(len(dataset))]
    assert inner.reads == 3 and len(dataset) == 3 and dataset.reader == 'the reader'
    for (x, y), (x_again, y_again), index in zip(first, again, range(3)):
        assert torch.equal(x, torch.full((2,), float(index))) and y == index
        assert x_again is x and y_again == y


class ImageDataset(Dataset):
    """(3, 4, 4) images: grey ones (equal channels) at even indices, colour ones at odd."""

    transform = None

    def __len__(self):
        return 4

    def __getitem__(self, index):
        generator = torch.Generator().manual_seed(index)
        if index % 2:
            return torch.randn(3, 4, 4, generator=generator), index
        return torch.randn(1, 4, 4, generator=generator).repeat(3, 1, 1), index


def test_a_grey_image_is_kept_as_one_channel_and_read_back_with_the_same_values():
    dataset, plain = MemoizedDataset(ImageDataset()), ImageDataset()
    for _ in range(2):  # made, then kept
        for index in range(len(dataset)):
            x, y = dataset[index]
            assert torch.equal(x, plain[index][0]) and x.shape == (3, 4, 4) and y == index
    kept = {index: item[0] for index, item in dataset._items.items()}
    kept_bytes = {index: getattr(image, 'channel', image).untyped_storage().nbytes() for index, image in kept.items()}
    assert kept_bytes == {0: 64, 1: 192, 2: 64, 3: 192}  # grey: one channel of 16 floats


def test_a_new_transform_forgets_the_items_and_a_copy_keeps_its_own_transform():
    dataset = MemoizedDataset(CountingDataset())
    dataset[0]
    dataset.transform = lambda index: torch.zeros(2) - index
    assert torch.equal(dataset[1][0], torch.full((2,), -1.0)) and dataset.dataset.transform is dataset.transform
    robust = copy.copy(dataset)  # as a run makes its robust-validation subset
    robust.transform = lambda index: torch.ones(2)
    assert torch.equal(robust[1][0], torch.ones(2)) and torch.equal(dataset[1][0], torch.full((2,), -1.0))


def _built(digits_dir: Path, out: Path, *extra: str):
    args, text = parse_args(tiny_train_argv(digits_dir, out, '--dataset', 'digits', '--device', 'cpu', *extra))
    return build_training(train_options(args), text)


def test_a_built_in_dataset_without_workers_is_held_in_memory_and_reads_the_same(digits_dir, tmp_path: Path):
    run = _built(digits_dir, tmp_path / 'no-aug', '--no-aug')
    assert isinstance(run.loader_train.dataset, MemoizedDataset) and isinstance(run.loader_val.dataset, MemoizedDataset)
    x, y = next(iter(run.loader_val))
    plain = run.loader_val.dataset.dataset  # the timm dataset it wraps, with the same transform
    assert torch.equal(x, torch.stack([plain[i][0] for i in range(len(x))]))
    assert y.tolist() == [plain[i][1] for i in range(len(y))]
    augmented = _built(digits_dir, tmp_path / 'aug')  # random crops: each epoch's images differ, nothing is kept
    assert not isinstance(augmented.loader_train.dataset, MemoizedDataset)
    assert isinstance(augmented.loader_val.dataset, MemoizedDataset)
    workers = _built(digits_dir, tmp_path / 'workers', '--no-aug', '--workers', '1')  # each worker's copy is lost
    assert not isinstance(workers.loader_val.dataset, MemoizedDataset)
