"""Running a built evaluation: each data run's shard for this process, through a `RobustEvaluator`.

Under ``torchrun`` every rank evaluates a contiguous shard of each run's subset (whole batches, `shard_range`); the
records it returns are gathered on rank 0 by the caller. Finished work read back from the state file counts as
done, not as computed (`RunOutcome.units_computed`).

Before it runs, the evaluation states its plan (`evaluation_cost`: each stage's passes and share, the sanity probes'
cost against the attacks') with its time projected from one batch's forward and backward passes of the model and one
attack update of it on this device (`cost.time_passes`, `cost.time_input_step`), warned about when over an hour
(`LONG_EVALUATION_SECONDS`, naming the options that shorten it), which is all that ``--plan`` runs: it runs no stage (a
protocol's first batch would run its whole attacks, xie2020's PGD-2000 included); an evaluation then times its first
batch and projects the plan's time again from its stages. One progress bar covers the whole evaluation, every data run,
in passes of the model; the running attack reports its progress in it (`RobustEvaluator`).
"""
import logging
import time
from dataclasses import dataclass
from itertools import islice
from typing import List, Optional

from torch.utils.data import DataLoader
from tqdm import tqdm

from ...durations import duration_text
from ...layers import get_inference_branch
from ...usage import show_progress
from ..options import LOGGER, EvalOptions, EvalRuntimeOptions
from ..plan.cost import EvalCost, count_cost
from ..protocols.ood import get_ood_dataset
from .build import DataRun, EvalSetup
from .data import IndexedSubset, shard_range
from .distributed import DistributedInfo
from .evaluator import RobustEvaluator
from .records import Record
from .state import EvalState

__all__ = ['RunOutcome', 'evaluate_runs', 'evaluation_cost', 'plan_title', 'LONG_EVALUATION_SECONDS']

_logger = logging.getLogger(LOGGER)

#: An evaluation projected to take longer than this (seconds) on its device is warned about before it starts, with the
#: options that would shorten it.
LONG_EVALUATION_SECONDS = 3600.0


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


def _over_an_hour(options: EvalOptions, setup: EvalSetup, cost: EvalCost) -> Optional[str]:
    """A one-line warning when the time projected from the measured passes exceeds `LONG_EVALUATION_SECONDS`,
    naming what would shorten it (None otherwise)."""
    projected = cost.pass_projected_seconds
    if projected is None or projected <= LONG_EVALUATION_SECONDS:
        return None
    samples, variants = len(setup.runs[0].indices), len(setup.variants)
    cuts = []
    fit = int(samples * LONG_EVALUATION_SECONDS / projected)
    if 0 < fit < samples:
        cuts.append(f'--num-samples {fit} (about an hour, the same attacks on fewer samples)')
    if variants > 1:
        cuts.append(f'fewer --gammas (each of the {variants} variants is attacked in full)')
    if not options.attacks.reduced:
        cuts.append('--reduced (smoke-test budgets: the cube root of every iteration and query count)')
    cuts.append('--max-steps N / --max-queries N (caps on every attack)')
    return (f'The evaluation is projected to take {duration_text(projected)} on this device ({cost.timed_on}), over '
            f'an hour; shorter: {", ".join(cuts)}.')


def _evaluator(options: EvalOptions, setup: EvalSetup, run: DataRun, dist_info: DistributedInfo,
               state: Optional[EvalState], bar: Optional[tqdm]) -> RobustEvaluator:
    """The evaluator of `run`'s stages on this process."""
    return RobustEvaluator(setup.model, setup.variants, run.stages, setup.ctx,
                           run.num_classes or setup.model.num_classes, len(run.indices), options.runtime.seed,
                           dist_info.device, state=state, channels_last=options.runtime.channels_last, bar=bar,
                           classes=run.classes)


def evaluate_runs(options: EvalOptions, setup: EvalSetup, dist_info: DistributedInfo,
                  plan_only: bool = False) -> RunOutcome:
    """Evaluate this process's shard of every data run of `setup`, run after run; log the plan first (rank 0), with
    the time its passes take projected from one batch's forward and backward passes (and a warning when that is over
    an hour), and the time the first batch projects after it.

    Args:
        plan_only: ``--plan``: time the model's passes on the first batch and stop there, evaluating nothing;
            the outcome's `cost` is then the plan with the time projected from those passes, and no record.
    """
    branch, runtime = get_inference_branch(setup.model), options.runtime
    cost = evaluation_cost(options, setup, dist_info)
    if not plan_only:
        _logger.info('Evaluating %s (%s%s): protocol %s, variants %s.', setup.model_name,
                     options.model.checkpoint or 'no checkpoint', f', loaded on its {branch} branch' if branch else '',
                     setup.protocol.name, ', '.join(v.name for v in setup.variants))
    started = time.perf_counter()
    records, computed = [], 0
    state = setup.state
    first_run = setup.runs[0]
    evaluator = _evaluator(options, setup, first_run, dist_info, state, bar=None)
    batches = iter(_loader(runtime, first_run, _shard(runtime.batch_size, first_run, dist_info)))
    first = list(islice(batches, 1))
    if first:  # before any attack: what the plan's passes take on this device
        x, y, _ = first[0]
        pass_seconds, passes, step_seconds = evaluator.time_passes(x, y)
        cost = cost.with_pass_time(pass_seconds, passes, dist_info.device.type, step_seconds)
    if dist_info.is_primary:
        if not plan_only:
            _logger.info('%s', cost.format(plan_title(options, setup, dist_info)))
        warning = _over_an_hour(options, setup, cost)
        if warning:
            _logger.warning('%s', warning)
    if plan_only:  # the plan is projected from the timed passes: no stage runs (xie2020's PGD-2000 would)
        return RunOutcome([], 0, time.perf_counter() - started, cost)
    total = evaluation_cost(options, setup, dist_info, shard=True).total
    with tqdm(total=total, desc='robust eval', unit='pass', unit_scale=True, dynamic_ncols=True,
              disable=not (show_progress() and runtime.progress)) as bar:
        for run in setup.runs:
            positions = _shard(runtime.batch_size, run, dist_info)
            if run is not first_run:
                evaluator = _evaluator(options, setup, run, dist_info, state, bar)
                batches = iter(_loader(runtime, run, positions))
            evaluator.bar = bar
            _logger.info('%s: %d samples (%d on this rank)%s.', get_ood_dataset(run.name).title if run.name else
                         'Evaluation data', len(run.indices), len(positions),
                         f', scored on its {run.num_classes} classes' if run.classes else '')
            if run is first_run:
                records += evaluator.run(first)
                if evaluator.rows:  # nothing to time when the first batch was read back from the state file
                    cost = cost.measured(evaluator.seconds, evaluator.rows, min(runtime.batch_size, len(positions)))
                    if dist_info.is_primary:
                        _logger.info('Time: %s.', cost.time_text())
            records += evaluator.run(batches)
            computed += evaluator.computed
    return RunOutcome(records, computed, time.perf_counter() - started, cost)
