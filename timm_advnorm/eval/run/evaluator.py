"""The robust-evaluation loop: every stage of every variant on every batch, resumable record by record.

Batches are the outer loop (the data are read once, whatever the number of variants), variants and stages the
inner ones. Each finished (variant, stage, batch) unit becomes a record; with an `EvalState` it is persisted before
the next unit starts and skipped when the state already holds it. Randomness (attack starts, Square's search) is
seeded per unit from the evaluation seed and the unit's key, so a resumed or sharded run draws the same numbers
as an uninterrupted single-process one.

A progress bar, when given, advances by each unit's passes of the model (`cost.stage_passes`), so that one bar over
the whole evaluation (`runner`) moves with the work and its ETA holds; its postfix names the running variant and stage
and, while the bar is shown, where the running attack is (`attacks.AttackProgress`: ``autoattack: apgd-t target 3/9,
restart 1/1, 40/100 it``), so that a long attack never looks hung. The evaluator times each stage's computed units
(`seconds`, `rows`): the first batch's times project the evaluation's (`cost.EvalCost.measured`); before that, the
times of the model's passes and of an attack update on a batch (`time_passes`, `time_input_step`) project it from
the plan's pass count.
"""
import contextlib
import hashlib
import logging
import time
from collections import defaultdict
from dataclasses import replace
from typing import Dict, Iterable, Iterator, List, Optional, Sequence, Tuple

import torch
import torch.nn as nn
from tqdm import tqdm

from ...attacks import AttackProgress
from ..plan.cost import stage_passes, time_input_step, time_passes
from ..plan.stages import Batch, Columns, EvalContext, Stage
from ..plan.variants import Variant
from ..protocols.ood import ClassSubset
from .data import target_offsets
from .records import Record, make_record
from .state import EvalState

__all__ = ['RobustEvaluator', 'derive_seed']

_logger = logging.getLogger(__name__)

#: The bar shows the running attack's progress at most this often (seconds): an attack reports every iteration.
ATTACK_REPORT_INTERVAL = 0.5


def derive_seed(*parts) -> int:
    """A non-negative 63-bit seed from `parts`, stable across processes and Python versions (unlike ``hash``)."""
    digest = hashlib.sha256('/'.join(str(p) for p in parts).encode()).digest()
    return int.from_bytes(digest[:8], 'little') >> 1


@contextlib.contextmanager
def _variant_net(model: nn.Module, variant: Variant, classes: Optional[torch.Tensor]) -> Iterator[nn.Module]:
    """`model` as `variant` evaluates it, restricted to `classes` when given (`ClassSubset`)."""
    with variant.activate(model) as net:
        yield net if classes is None else ClassSubset(net, classes)


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
        self._unit = ''
        self._reported = float('-inf')
        self.seconds: Dict[str, float] = defaultdict(float)
        self.rows: Dict[str, int] = defaultdict(int)

    def _inputs(self, x: torch.Tensor) -> torch.Tensor:
        x = x.to(self.device, non_blocking=True)
        return x.contiguous(memory_format=torch.channels_last) if self.channels_last else x

    def _batch(self, x: torch.Tensor, y: torch.Tensor, positions: torch.Tensor) -> Batch:
        x = self._inputs(x)
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
            columns = stage.run(net, batch.select(rows), previous, self._stage_context(), seed)
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

    def _stage_context(self) -> EvalContext:
        """The stages' context: while the bar is shown, the attacks report their progress to it."""
        if self.bar is None or getattr(self.bar, 'disable', False):
            return self.ctx
        return replace(self.ctx, progress=self._show_attack_progress)

    def _show_attack_progress(self, event: AttackProgress) -> None:
        """The running attack's report in the bar's postfix, beside the unit's variant and stage, redrawn at most every
        `ATTACK_REPORT_INTERVAL` seconds."""
        now = time.monotonic()
        if now - self._reported < ATTACK_REPORT_INTERVAL:
            return
        self._reported = now
        self.bar.set_postfix_str(f'{self._unit} | {event.text()}')

    def time_passes(self, x: torch.Tensor, y: torch.Tensor) -> Tuple[float, int, float]:
        """Seconds per pass of the model over one image of the loader batch `x`, `y`, the passes timed
        (`cost.time_passes`, as the first variant is attacked) and the seconds per image of an attack update of the
        batch (`cost.time_input_step`); nothing is recorded."""
        inputs = self._inputs(x)
        with _variant_net(self.model, self.variants[0], self.classes) as net:
            pass_seconds, passes = time_passes(net, inputs, y.to(self.device), self.ctx.autocast_dtype,
                                               self.ctx.fold_bn)
        return pass_seconds, passes, time_input_step(inputs)

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
                    with _variant_net(self.model, variant, self.classes) as net:
                        previous: Dict[str, Columns] = {}
                        for stage in self.stages:
                            self._unit = f'{variant.name}/{stage.name}'
                            if self.bar is not None:
                                self.bar.set_postfix_str(self._unit, refresh=False)
                            record = self._run_unit(net, variant, stage, batch, start, previous)
                            if record is not None:
                                records.append(record)
                _logger.debug('Batch at position %d done.', start)
        finally:
            for module, training in modes:
                module.training = training
        return records
