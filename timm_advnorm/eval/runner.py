"""Running a built evaluation: each data run's shard for this process, through a `RobustEvaluator`.

Under ``torchrun`` every rank evaluates a contiguous shard of each run's subset (whole batches, `shard_range`); the
records it returns are gathered on rank 0 by the caller. Finished work read back from the state file counts as
done, not as computed (`RunOutcome.units_computed`).

Before it runs, the evaluation states its plan (`evaluation_cost`: each stage's passes and share, the sanity probes'
cost against the attacks'); the first batch is timed and the plan's time projected from it, which is all that
``--plan`` runs. One progress bar covers the whole evaluation, every data run, in passes of the model.
"""
import logging
import time
from dataclasses import dataclass
from itertools import islice
from typing import List

from torch.utils.data import DataLoader
from tqdm import tqdm

from ..layers import get_inference_branch
from .build import DataRun, EvalSetup
from .cost import EvalCost, count_cost
from .data import IndexedSubset, shard_range
from .distributed import DistributedInfo
from .evaluator import RobustEvaluator
from .options import LOGGER, EvalOptions, EvalRuntimeOptions
from .ood import get_ood_dataset
from .records import Record

__all__ = ['RunOutcome', 'evaluate_runs', 'evaluation_cost', 'plan_title']

_logger = logging.getLogger(LOGGER)


@dataclass(frozen=True)
class RunOutcome:
    """What this process evaluated.

    Attributes:
        records: Its per-sample records, of every run.
        units_computed: Units of work it computed (those read back from the state file not counted).
        seconds: Seconds it spent evaluating.
        cost: The evaluation's plan, its time projected from this process's first batch (unless that batch was read
            back from the state file).
    """

    records: List[Record]
    units_computed: int
    seconds: float
    cost: EvalCost


def _shard(batch_size: int, run: DataRun, dist_info: DistributedInfo) -> range:
    """The positions of `run`'s subset this process evaluates."""
    return range(*shard_range(len(run.indices), dist_info.rank, dist_info.world_size, batch_size))


def evaluation_cost(options: EvalOptions, setup: EvalSetup, dist_info: DistributedInfo, shard: bool = False
                    ) -> EvalCost:
    """The cost of every data run's stages for every variant: on the whole subsets (the evaluation's plan), or on this
    process's shards (what its progress bar counts)."""
    batch_size = options.runtime.batch_size
    runs = [(run.stages, _shard(batch_size, run, dist_info) if shard else range(len(run.indices)))
            for run in setup.runs]
    return count_cost(runs, len(setup.variants), dist_info.world_size, options.checks.sanity)


def plan_title(options: EvalOptions, setup: EvalSetup, dist_info: DistributedInfo) -> str:
    """The plan's first line: what is evaluated, on how much, where."""
    variants = len(setup.variants)
    return (f'Plan of the evaluation of {setup.model_name} (protocol {setup.protocol.name}, {variants} '
            f'variant{"s" if variants > 1 else ""} x {len(setup.runs[0].indices)} samples, '
            f'{dist_info.world_size} process{"es" if dist_info.world_size > 1 else ""} on {dist_info.device.type}; '
            f'batches of {options.runtime.batch_size})')


def _loader(runtime: EvalRuntimeOptions, run: DataRun, positions: range) -> DataLoader:
    return DataLoader(IndexedSubset(run.dataset, run.indices, positions), batch_size=runtime.batch_size,
                      shuffle=False, num_workers=runtime.workers, pin_memory=runtime.pin_memory)


def evaluate_runs(options: EvalOptions, setup: EvalSetup, dist_info: DistributedInfo,
                  first_batch_only: bool = False) -> RunOutcome:
    """Evaluate this process's shard of every data run of `setup`, run after run; log the plan first (rank 0) and
    its projected time after the first batch.

    Args:
        first_batch_only: Evaluate the first batch alone, without the state file (``--plan``): the outcome's `cost`
            is then the plan with its time.
    """
    model, branch, runtime = setup.model, get_inference_branch(setup.model), options.runtime
    cost = evaluation_cost(options, setup, dist_info)
    if not first_batch_only:
        _logger.info('Evaluating %s (%s%s): protocol %s, variants %s.', setup.model_name,
                     options.model.checkpoint or 'no checkpoint', f', loaded on its {branch} branch' if branch else '',
                     setup.protocol.name, ', '.join(v.name for v in setup.variants))
        if dist_info.is_primary:
            _logger.info('%s', cost.format(plan_title(options, setup, dist_info)))
    started = time.perf_counter()
    records, computed = [], 0
    state = None if first_batch_only else setup.state
    total = evaluation_cost(options, setup, dist_info, shard=True).total
    with tqdm(total=total, desc='robust eval', unit='pass', unit_scale=True, dynamic_ncols=True,
              disable=not setup.ctx.progress or first_batch_only) as bar:
        for run in setup.runs:
            positions = _shard(runtime.batch_size, run, dist_info)
            if not first_batch_only:
                _logger.info('%s: %d samples (%d on this rank)%s.', get_ood_dataset(run.name).title if run.name else
                             'Evaluation data', len(run.indices), len(positions),
                             f', scored on its {run.num_classes} classes' if run.classes else '')
            evaluator = RobustEvaluator(model, setup.variants, run.stages, setup.ctx,
                                        run.num_classes or model.num_classes, len(run.indices), runtime.seed,
                                        dist_info.device, state=state, channels_last=runtime.channels_last, bar=bar,
                                        classes=run.classes)
            batches = iter(_loader(runtime, run, positions))
            if run is setup.runs[0]:
                records += evaluator.run(islice(batches, 1))
                if evaluator.rows:  # nothing to time when the first batch was read back from the state file
                    cost = cost.measured(evaluator.seconds, evaluator.rows, min(runtime.batch_size, len(positions)))
                    if not first_batch_only and dist_info.is_primary:
                        _logger.info('Time: %s.', cost.time_text())
                if first_batch_only:
                    return RunOutcome(records, evaluator.computed, time.perf_counter() - started, cost)
            records += evaluator.run(batches)
            computed += evaluator.computed
    return RunOutcome(records, computed, time.perf_counter() - started, cost)
