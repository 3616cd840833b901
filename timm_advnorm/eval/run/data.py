"""The evaluation subset: a fixed, seeded sample of a dataset, split into disjoint shards across ranks.

Every sample keeps its *position* in the subset (0..N-1). Results are keyed by position, random targets are drawn
per position, and a rank's shard is a contiguous run of whole batches, so a sharded or resumed evaluation
reproduces the single-process one batch for batch (the random draws of a batch are seeded by where it starts).
Positions follow a seeded random order, so the prefixes some stages run on (sanity probes, metrics, the AMP check)
are uniform samples too, not the first classes of a dataset listed class by class.
"""
from typing import List, Sequence, Tuple

import torch
from torch.utils.data import Dataset

__all__ = ['seeded_subset', 'shard_range', 'IndexedSubset', 'target_offsets']


def seeded_subset(dataset_size: int, num_samples: int, seed: int) -> List[int]:
    """Dataset indices of a uniformly drawn subset of `num_samples` (all when 0 or larger than the dataset).

    The indices come in a random order (position p is the p-th draw), so every prefix is itself a uniform sample;
    the draw depends only on (`dataset_size`, `num_samples`, `seed`).
    """
    if dataset_size <= 0:
        raise ValueError('The dataset is empty.')
    if num_samples < 0:
        raise ValueError(f'num_samples must be >= 0, got {num_samples}.')
    generator = torch.Generator().manual_seed(seed)
    order = torch.randperm(dataset_size, generator=generator)
    return order[:num_samples or dataset_size].tolist()


def shard_range(num_samples: int, rank: int, world_size: int, batch_size: int = 1) -> Tuple[int, int]:
    """Contiguous ``[start, stop)`` range of subset positions evaluated by `rank`.

    Ranks get whole batches of `batch_size` (their counts differ by at most one), so every batch starts where it
    would in a single-process run and draws the same random numbers.
    """
    if not 0 <= rank < world_size:
        raise ValueError(f'rank must be in [0, {world_size}), got {rank}.')
    if batch_size < 1:
        raise ValueError(f'batch_size must be >= 1, got {batch_size}.')
    base, extra = divmod(-(-num_samples // batch_size), world_size)
    first = rank * base + min(rank, extra)
    last = first + base + (1 if rank < extra else 0)
    return min(first * batch_size, num_samples), min(last * batch_size, num_samples)


def target_offsets(num_samples: int, num_classes: int, seed: int) -> torch.Tensor:
    """Per-position offsets in [1, C-1]: the target of sample p is ``(label + offsets[p]) % C``.

    Uniform among the classes other than the label (never the label itself, see `attacks.core.random_targets`),
    fixed per position, so every targeted attack, variant and rank uses the same targets.
    """
    if num_classes < 2:
        raise ValueError('Targeted attacks need at least two classes.')
    generator = torch.Generator().manual_seed(seed)
    return torch.randint(1, num_classes, (num_samples,), generator=generator)


class IndexedSubset(Dataset):
    """``(image, label, position)`` for the subset positions in `positions`.

    Args:
        dataset: A map-style dataset returning ``(image, label)``.
        indices: Dataset index of every subset position (the full subset, not just this shard).
        positions: Subset positions to serve, in order.
    """

    def __init__(self, dataset: Dataset, indices: Sequence[int], positions: Sequence[int]):
        self.dataset = dataset
        self.indices = list(indices)
        self.positions = list(positions)

    def __len__(self) -> int:
        return len(self.positions)

    def __getitem__(self, item: int):
        position = self.positions[item]
        image, label = self.dataset[self.indices[position]]
        return image, label, position
