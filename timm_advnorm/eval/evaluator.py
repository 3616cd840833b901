"""The robust-evaluation loop: every stage of every variant on every batch, resumable record by record.

Batches are the outer loop (the data are read once, whatever the number of variants), variants and stages the
inner ones. Each finished (variant, stage, batch) unit becomes a record; with an `EvalState` it is persisted before
the next unit starts and skipped when the state already holds it. Randomness (attack starts, Square's search) is
seeded per unit from the evaluation seed and the unit's key, so a resumed or sharded run draws the same numbers
as an uninterrupted single-process one.

A progress bar, when given, advances by each unit's passes of the model (`cost.stage_passes`), so that one bar over
the whole evaluation (`runner`) moves with the work and its ETA holds. The evaluator times each stage's computed units
(`seconds`, `rows`): the first batch's times project the evaluation's (`cost.EvalCost.measured`).
"""
import hashlib
import logging
import time
from collections import defaultdict
from typing import Dict, Iterable, List, Optional, Sequence

import torch
import torch.nn as nn
from tqdm import tqdm

from .cost import stage_passes
from .data import target_offsets
from .ood import ClassSubset
from .records import Record, make_record
from .stages import Batch, Columns, EvalContext, Stage
from .state import EvalState
from .variants import Variant

__all__ = ['RobustEvaluator', 'derive_seed']

_logger = logging.getLogger(__name__)


def derive_seed(*parts) -> int:
    """A non-negative 63-bit seed from `parts`, stable across processes and Python versions (unlike ``hash``)."""
    digest = hashlib.sha256('/'.join(str(p) for p in parts).encode()).digest()
    return int.from_bytes(digest[:8], 'little') >> 1


class RobustEvaluator:
    """Runs stages for model variants over a loader of ``(normalized images, labels, positions)``.

    Args:
        model: The model (eval mode is enforced for the whole run and restored after).
        variants: Classifiers derived from `model` (see `variants.model_variants`).
        stages: Work per batch, in dependency order (``clean`` first).
        ctx: Shared evaluation settings.
        num_classes: Number of classes (for random targets): with `classes`, of the subset.
        num_samples: Size of the whole evaluation subset (all ranks), for per-position targets.
        seed: Evaluation seed.
        device: Where inputs go.
        state: Resumable record store, optional.
        channels_last: Feed inputs in channels-last memory format.
        bar: A progress bar to advance by the passes of each finished unit (computed or read back).
        classes: Score and attack every variant as a classifier of these of its classes only (`ClassSubset`: an
            ImageNet model on ImageNet-R's 200 classes); ``None``: all.
    """

    def __init__(
            self,
            model: nn.Module,
            variants: Sequence[Variant],
            stages: Sequence[Stage],
            ctx: EvalContext,
            num_classes: int,
            num_samples: int,
            seed: int,
            device: torch.device,
            state: Optional[EvalState] = None,
            channels_last: bool = False,
            bar: Optional[tqdm] = None,
            classes: Optional[Sequence[int]] = None,
    ):
        names = [stage.name for stage in stages]
        if len(set(names)) != len(names):
            raise ValueError(f'Stage names must be unique, got {names}.')
        self.model = model
        self.variants = list(variants)
        self.stages = list(stages)
        self.ctx = ctx
        self.seed = seed
        self.device = torch.device(device)
        self.state = state
        self.channels_last = channels_last
        self.bar = bar
        self.passes = {stage.name: stage_passes(stage).total for stage in self.stages}
        self.offsets = target_offsets(num_samples, num_classes, seed).to(device)
        self.num_classes = num_classes
        self.classes = None if classes is None else torch.as_tensor(classes, dtype=torch.long, device=device)
        self.computed = 0
        self.seconds: Dict[str, float] = defaultdict(float)
        self.rows: Dict[str, int] = defaultdict(int)

    def _batch(self, x: torch.Tensor, y: torch.Tensor, positions: torch.Tensor) -> Batch:
        x = x.to(self.device, non_blocking=True)
        if self.channels_last:
            x = x.contiguous(memory_format=torch.channels_last)
        y = y.to(self.device, non_blocking=True)
        positions = positions.cpu().long()
        targets = (y + self.offsets[positions.to(self.device)]) % self.num_classes
        return Batch(x, y, positions, targets)

    def _run_unit(self, net: nn.Module, variant: Variant, stage: Stage, batch: Batch, start: int,
                  previous: Dict[str, Columns]) -> Optional[Record]:
        rows = stage.rows(batch.positions)
        if not rows.any():
            return None
        record = self.state.get(variant.name, stage.name, start) if self.state is not None else None
        if record is None:
            seed = derive_seed(self.seed, variant.name, stage.seed_name or stage.name, start)
            started = time.perf_counter()
            columns = stage.run(net, batch.select(rows), previous, self.ctx, seed)
            if self.device.type == 'cuda':  # the time of the work, not of its launch
                torch.cuda.synchronize(self.device)
            self.seconds[stage.name] += time.perf_counter() - started
            self.rows[stage.name] += int(rows.sum())
            record = make_record(variant.name, stage.name, start, columns)
            self.computed += 1
            if self.state is not None:
                self.state.append(record)
        if self.bar is not None:
            self.bar.update(self.passes[stage.name] * int(rows.sum()))
        previous[stage.name] = {name: torch.as_tensor(values) for name, values in record['columns'].items()}
        return record

    def run(self, loader: Iterable) -> List[Record]:
        """Evaluate every batch of `loader`; returns this process's records (stored ones included)."""
        records: List[Record] = []
        modes = [(module, module.training) for module in self.model.modules()]
        self.model.eval()
        try:
            for x, y, positions in loader:
                batch = self._batch(x, y, positions)
                start = int(batch.positions[0])
                for variant in self.variants:
                    with variant.activate(self.model) as net:
                        net = net if self.classes is None else ClassSubset(net, self.classes)
                        previous: Dict[str, Columns] = {}
                        for stage in self.stages:
                            if self.bar is not None:
                                self.bar.set_postfix_str(f'{variant.name}/{stage.name}', refresh=False)
                            record = self._run_unit(net, variant, stage, batch, start, previous)
                            if record is not None:
                                records.append(record)
                _logger.debug('Batch at position %d done.', start)
        finally:
            for module, training in modes:
                module.training = training
        return records
