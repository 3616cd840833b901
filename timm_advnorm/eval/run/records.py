"""Per-sample evaluation records and the table they assemble into.

Every unit of work of an evaluation (one stage, e.g. an attack, of one variant on one batch) produces a record:
per-sample columns keyed by the sample's position in the seeded evaluation subset. Records are what the resumable
state file stores and what distributed ranks exchange; summaries, sanity checks and plots read the assembled
`ResultTable`, so they never care how the work was split.
"""
from collections import defaultdict
from typing import Any, Dict, Iterable, List, Mapping, Optional, Tuple

import numpy as np
import torch

__all__ = ['Record', 'make_record', 'ResultTable']

Record = Dict[str, Any]


def make_record(variant: str, stage: str, start: int, columns: Mapping[str, torch.Tensor]) -> Record:
    """A JSON-serialisable record; `columns` must hold a ``position`` column and equally long 1-D columns."""
    if 'position' not in columns:
        raise ValueError('A record needs a "position" column.')
    lengths = {name: len(values) for name, values in columns.items()}
    if len(set(lengths.values())) > 1:
        raise ValueError(f'Record columns differ in length: {lengths}.')
    return dict(variant=variant, stage=stage, start=int(start),
                columns={name: torch.as_tensor(values).detach().cpu().tolist() for name, values in columns.items()})


class ResultTable:
    """Per-sample results of every (variant, stage), assembled from records in any order."""

    def __init__(self, records: Iterable[Record] = ()):
        self._parts: Dict[Tuple[str, str], List[Mapping[str, list]]] = defaultdict(list)
        self._cache: Dict[Tuple[str, str], Dict[str, np.ndarray]] = {}
        for record in records:
            self.add(record)

    def add(self, record: Record) -> None:
        """Add one record."""
        key = (record['variant'], record['stage'])
        self._parts[key].append(record['columns'])
        self._cache.pop(key, None)

    def variants(self) -> List[str]:
        """Variant names, in first-seen order."""
        return list(dict.fromkeys(variant for variant, _ in self._parts))

    def has(self, variant: str, stage: str) -> bool:
        """Whether any sample has results for (variant, stage)."""
        return (variant, stage) in self._parts

    def get(self, variant: str, stage: str) -> Optional[Dict[str, np.ndarray]]:
        """Columns of (variant, stage) as arrays sorted by sample position, or None when absent.

        Raises:
            ValueError: A sample appears twice (overlapping shards or a corrupted state file).
        """
        key = (variant, stage)
        if key not in self._parts:
            return None
        if key not in self._cache:
            names = self._parts[key][0].keys()
            columns = {name: np.concatenate([np.asarray(part[name]) for part in self._parts[key]]) for name in names}
            order = np.argsort(columns['position'], kind='stable')
            columns = {name: values[order] for name, values in columns.items()}
            if np.any(np.diff(columns['position']) == 0):
                raise ValueError(f'Duplicate samples in the results of {variant}/{stage}.')
            self._cache[key] = columns
        return self._cache[key]

    def column(self, variant: str, stage: str, name: str) -> Optional[np.ndarray]:
        """One column of (variant, stage), sorted by position; None when absent."""
        columns = self.get(variant, stage)
        return None if columns is None or name not in columns else columns[name]
