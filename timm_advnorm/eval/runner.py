"""Running a built evaluation: each data run's shard for this process, through a `RobustEvaluator`.

Under ``torchrun`` every rank evaluates a contiguous shard of each run's subset (whole batches, `shard_range`); the
records it returns are gathered on rank 0 by the caller. Finished work read back from the state file counts as
done, not as computed (`RunOutcome.units_computed`).
"""
import argparse
import logging
import time
from dataclasses import dataclass
from typing import List

from torch.utils.data import DataLoader

from ..layers import get_inference_branch
from .args import LOGGER
from .build import EvalSetup
from .data import IndexedSubset, shard_range
from .distributed import DistributedInfo
from .evaluator import RobustEvaluator
from .ood import get_ood_dataset
from .records import Record

__all__ = ['RunOutcome', 'evaluate_runs']

_logger = logging.getLogger(LOGGER)


@dataclass(frozen=True)
class RunOutcome:
    """What this process evaluated.

    Attributes:
        records: Its per-sample records, of every run.
        units_computed: Units of work it computed (those read back from the state file not counted).
        seconds: Seconds it spent evaluating.
    """

    records: List[Record]
    units_computed: int
    seconds: float


def evaluate_runs(args: argparse.Namespace, setup: EvalSetup, dist_info: DistributedInfo) -> RunOutcome:
    """Evaluate this process's shard of every data run of `setup`, run after run."""
    model, branch = setup.model, get_inference_branch(setup.model)
    _logger.info('Evaluating %s (%s%s): protocol %s, variants %s.', setup.model_name,
                 args.checkpoint or 'no checkpoint', f', loaded on its {branch} branch' if branch else '',
                 setup.protocol.name, ', '.join(v.name for v in setup.variants))
    started = time.perf_counter()
    records, computed = [], 0
    for run in setup.runs:
        start, stop = shard_range(len(run.indices), dist_info.rank, dist_info.world_size, args.batch_size)
        loader = DataLoader(IndexedSubset(run.dataset, run.indices, range(start, stop)), batch_size=args.batch_size,
                            shuffle=False, num_workers=args.workers, pin_memory=args.pin_mem)
        _logger.info('%s: %d samples (%d on this rank)%s.', get_ood_dataset(run.name).title if run.name else
                     'Evaluation data', len(run.indices), stop - start,
                     f', scored on its {run.num_classes} classes' if run.classes else '')
        evaluator = RobustEvaluator(model, setup.variants, run.stages, setup.ctx, run.num_classes or model.num_classes,
                                    len(run.indices), args.seed, dist_info.device, state=setup.state,
                                    channels_last=args.channels_last, progress=setup.ctx.progress,
                                    classes=run.classes)
        records += evaluator.run(loader)
        computed += evaluator.computed
    return RunOutcome(records, computed, time.perf_counter() - started)
