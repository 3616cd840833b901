"""The optimizer and learning-rate schedule of a training run, from timm's training flags.

timm's ``train.py`` builds both from its arguments (`timm.optim.optimizer_kwargs`, `timm.scheduler.scheduler_kwargs`);
so does `train_adv.py`, with three differences of its own: the learning rate is resolved first from the global batch
(`lr_scaling`), ``--wd-all-params`` decays every parameter (timm's factory skips biases and normalization weights),
and the schedule runs over the run's own epochs and decay points, which ``--same-budget`` scales (`epoch_schedule`).
"""
from dataclasses import dataclass
from typing import Optional, Tuple

import torch
import torch.nn as nn
from timm.optim import create_optimizer_v2, optimizer_kwargs
from timm.scheduler import create_scheduler_v2, scheduler_kwargs
from timm.scheduler.scheduler import Scheduler

from .lr_scaling import LearningRate, global_batch_size, resolve_lr
from .options import OptimizerOptions, ScheduleOptions

__all__ = ['EpochSchedule', 'epoch_schedule', 'run_learning_rate', 'create_run_optimizer', 'create_run_scheduler']


@dataclass(frozen=True)
class EpochSchedule:
    """The run's epoch counts, ``--same-budget`` applied.

    Attributes:
        epochs: Epochs of the schedule (``--epochs``; its cool-down is added by the scheduler).
        decay_milestones: Epochs at which the multistep schedule decays (``--decay-milestones``).
        decay_epochs: Epochs between two decays of the step schedule (``--decay-epochs``).
        running_stats_epochs: The last epochs trained on BN running statistics (``--running-stats-epochs``).
    """

    epochs: int
    decay_milestones: Tuple[int, ...]
    decay_epochs: float
    running_stats_epochs: int


def epoch_schedule(options: ScheduleOptions, passes_per_image: float) -> EpochSchedule:
    """The run's epochs, decay points and running-statistics epochs.

    With ``--same-budget`` each is divided by the method's passes per image, so that the run costs what ``--epochs``
    of vanilla training would and keeps the recipe's proportions (Xie & Yuille's last 10 of 110 epochs): the
    released Fast AdvProp code scales its epochs and decay schedule the same way. Warm-up and cool-down epochs are
    kept as given, as there.
    """
    schedule = EpochSchedule(epochs=options.epochs, decay_milestones=tuple(options.decay_milestones),
                             decay_epochs=options.decay_epochs, running_stats_epochs=options.running_stats_epochs)
    if not options.same_budget:
        return schedule

    def scaled(n: int) -> int:
        return max(1, int(round(n / passes_per_image)))

    epochs = scaled(schedule.epochs)
    running = min(epochs, scaled(schedule.running_stats_epochs)) if schedule.running_stats_epochs else 0
    return EpochSchedule(epochs=epochs, decay_milestones=tuple(scaled(m) for m in schedule.decay_milestones),
                         decay_epochs=schedule.decay_epochs / passes_per_image, running_stats_epochs=running)


def run_learning_rate(options: OptimizerOptions, batch_size: int, world_size: int) -> LearningRate:
    """The run's learning rate: ``--lr`` as given, else ``--lr-base`` scaled by the global batch, `batch_size`
    (``--batch-size``; Fast AdvProp: the clean rows, what its papers count) × `world_size` processes ×
    ``--grad-accum-steps``."""
    global_batch = global_batch_size(batch_size, world_size, options.grad_accum_steps)
    return resolve_lr(options.lr, options.lr_base, options.lr_base_size, options.lr_base_scale, options.opt,
                      global_batch)


def create_run_optimizer(model: nn.Module, options: OptimizerOptions) -> torch.optim.Optimizer:
    """timm's optimizer as its ``train.py`` makes it (``--opt``, ``--lr``, ``--weight-decay``, ``--momentum``,
    ``--opt-eps``, ``--opt-betas``, ``--layer-decay*``, ``--opt-kwargs``), decaying every parameter under
    ``--wd-all-params``. ``options.lr`` must be resolved (`run_learning_rate`)."""
    kwargs = {**optimizer_kwargs(cfg=options), **options.opt_kwargs}
    return create_optimizer_v2(model, filter_bias_and_bn=not options.wd_all_params, **kwargs)


def create_run_scheduler(optimizer: torch.optim.Optimizer, options: ScheduleOptions, schedule: EpochSchedule,
                         updates_per_epoch: int) -> Tuple[Optional[Scheduler], int]:
    """timm's learning-rate schedule from the schedule flags, over the epochs and decay points of `schedule` (the
    run's, after ``--same-budget``); returns it with the epochs to train, ``--cooldown-epochs`` (and a warm-up
    prefix) included. ``--sched none`` gives no schedule (None), as in timm: the lr stays constant.

    Args:
        updates_per_epoch: Optimizer updates per epoch (batches / ``--grad-accum-steps``, rounded up), what a
            schedule stepped on updates counts.
    """
    kwargs = scheduler_kwargs(options, decreasing_metric=False)  # the plateau schedule: metrics are accuracies
    kwargs.update(num_epochs=schedule.epochs, decay_milestones=list(schedule.decay_milestones),
                  decay_epochs=schedule.decay_epochs)
    return create_scheduler_v2(optimizer, **kwargs, updates_per_epoch=updates_per_epoch)
