"""The evaluation subset: a fixed, seeded sample of a dataset, split into disjoint shards across ranks.

Every sample keeps its *position* in the subset (0..N-1). Results are keyed by position, random targets are drawn
per position, and a rank's shard is a contiguous range of positions, so a sharded or resumed evaluation reproduces
the single-process one batch for batch when the batch boundaries agree.
"""
from typing import List, Sequence, Tuple

import torch
from torch.utils.data import Dataset

__all__ = ['seeded_subset', 'shard_range', 'IndexedSubset', 'target_offsets']


def seeded_subset(dataset_size: int, num_samples: int, seed: int) -> List[int]:
    """Dataset indices of a uniformly drawn subset of `num_samples` (all when 0 or larger than the dataset).

    The indices are sorted (sequential reads), and the draw depends only on (`dataset_size`, `num_samples`, `seed`).
    """
    if dataset_size <= 0:
        raise ValueError('The dataset is empty.')
    if num_samples < 0:
        raise ValueError(f'num_samples must be >= 0, got {num_samples}.')
    if num_samples == 0 or num_samples >= dataset_size:
        return list(range(dataset_size))
    generator = torch.Generator().manual_seed(seed)
    return sorted(torch.randperm(dataset_size, generator=generator)[:num_samples].tolist())


def shard_range(num_samples: int, rank: int, world_size: int) -> Tuple[int, int]:
    """Contiguous ``[start, stop)`` range of subset positions evaluated by `rank` (sizes differ by at most one)."""
    if not 0 <= rank < world_size:
        raise ValueError(f'rank must be in [0, {world_size}), got {rank}.')
    base, extra = divmod(num_samples, world_size)
    start = rank * base + min(rank, extra)
    return start, start + base + (1 if rank < extra else 0)


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
