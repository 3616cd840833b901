"""Running a built training run: its folder, then the epoch loop, each epoch trained, validated, and recorded
(checkpoints and ``summary.csv`` row, `epoch_record`) and added to the budget file (and wandb); a run that fails or
is interrupted before its first checkpoint leaves no folder behind."""
import logging
import os
import time

import torch
from timm.utils.summary import trim_summary

from ..signals import Interrupted, check_interrupted, interrupts_between_steps
from ..task import running_stats_active, use_running_statistics
from ..usage import show_progress
from .budget import peak_memory_bytes, reset_peak_memory, write_budget
from .build import TrainingRun, TrainingStart
from .console import epoch_line
from .distribute_bn import distribute_bn
from .epoch_record import EpochRecordSaver, ResumePosition, summary_row
from .loop import DivergenceError, NonFiniteGuard, check_finite_state, train_one_epoch, validate
from .options import ModelOptions
from .resume import latest_checkpoint, rewind_run
from .run_folder import BUDGET_FILE, discard_unsaved_run, kept_checkpoints, open_run_folder, resumed_budget
from .run_lock import release_run_lock
from .tracking import WandbRun

__all__ = ['run_training']

_logger = logging.getLogger('train_adv')


def _distribute_bn_statistics(task, model: ModelOptions, distributed: bool) -> None:
    """``--dist-bn``: the same BN running statistics on every process, of the model and its EMA, after an epoch of
    distributed training without ``--sync-bn`` (both mixture-BN branches)."""
    if not distributed or model.sync_bn or not model.dist_bn:
        return
    distribute_bn(task.trainable_module, model.dist_bn)
    if task.has_ema():
        distribute_bn(task.get_eval_model(ema=True), model.dist_bn)


def _saved_nothing(output_dir: str, start: ResumePosition) -> bool:
    """Whether the run has written no whole checkpoint past its start (a partial one does not count)."""
    latest = latest_checkpoint(output_dir)
    return latest is None or latest.position <= start


def _resume_hint(output_dir: str, discarded: bool) -> str:
    """How an interrupted run goes on, for its one line: the checkpoint to resume from."""
    if discarded:
        return 'before its first checkpoint: nothing to resume, the run folder is removed'
    latest = latest_checkpoint(output_dir)
    return f'resume with --resume {latest.path}' if latest else 'no checkpoint was written'


def run_training(run: TrainingRun, start: TrainingStart) -> int:
    """Train `run` from its start epoch to its last; returns the exit status (0).

    SIGINT and SIGTERM (under `timm_advnorm.signals.signals_as_interrupts`) stop the run between two steps, never
    inside one: not inside the making of the run folder, a DataLoader starting its workers, or a checkpoint's writing
    (`timm_advnorm.signals.interrupts_between_steps`). See `_run_training`.
    """
    with interrupts_between_steps():
        return _run_training(run, start)


def _run_training(run: TrainingRun, start: TrainingStart) -> int:
    """`run_training`'s body.

    Rank 0 opens and locks the run folder (`run_folder.open_run_folder`); a resumed run completes the record of the
    epoch it resumes from (`epoch_record`), after rewinding the run to it under ``--resume-from-earlier``. Then it
    writes the budget and, each epoch, the epoch's record (checkpoints, then the summary row) and the measured budget.
    A failure before the first checkpoint removes what the run wrote; a divergence names the checkpoints left to
    resume from, an interruption (SIGINT, SIGTERM) the one to resume from.
    """
    options, model, task, optimizer, device = run.options, run.model, run.task, run.optimizer, run.device
    runtime, output, resume = options.runtime, options.output, options.resume
    eval_metric = options.validation.eval_metric
    leader = runtime.rank == 0
    amp_dtype, loss_scaler, start_epoch, epochs = run.amp_dtype, run.loss_scaler, run.start_epoch, run.epochs
    loader_train, loader_val, loader_robust = run.loader_train, run.loader_val, run.loader_robust
    budget, val_attack, branches = start.budget, start.val_attack, start.branches
    saver = output_dir = run_folder = tracker = None
    if leader:
        run_folder = open_run_folder(output.output, options.run_name, resume.resume, run.args_text, start_epoch)
        output_dir = run_folder.path
    epoch = start_epoch
    try:
        check_interrupted()  # a signal that came while the run folder was made
        if leader:
            saver = EpochRecordSaver(model=model, optimizer=optimizer, args=run.recorded, task=task,
                                     checkpoint_dir=output_dir, recovery_dir=output_dir, decreasing=False,
                                     max_history=output.checkpoint_hist, amp_scaler=loss_scaler)
            if resume.resume:  # the resumed epoch's record completed, the rows after it dropped
                if resume.resume_from_earlier:
                    rewind_run(output_dir, resume.resume, ResumePosition(start_epoch, run.start_updates))
                saver.complete_record(resume.resume)
                trim_summary(str(saver.summary_path), start_epoch)
                if start_epoch >= epochs:
                    _logger.info(f'Nothing left to train: the record of epoch {start_epoch - 1} is complete.')
            budget = resumed_budget(output_dir, budget, start_epoch) if resume.resume else budget
            write_budget(os.path.join(output_dir, BUDGET_FILE), budget)
            _logger.info(budget.format())
            if options.tracking.log_wandb:
                tracker = WandbRun(options.tracking, dict(run.recorded), output_dir, name=output.experiment or None)
                tracker.log_budget(budget.to_dict())
            _logger.info(f'{options.method}: {task.passes_per_image:g} forward+backward passes per image, '
                         f'{epochs} epochs ({task.passes_per_image * epochs:g} vanilla-epoch budget), validating the '
                         f'{" and ".join(branches)} branch{"es" if len(branches) > 1 else ""}, checkpoints ranked by '
                         f'{eval_metric}; {runtime.world_size} process(es); run in {output_dir}')

        progress = leader and not output.no_progress and show_progress()

        def validate_model(module: torch.nn.Module, desc: str):  # the model and its EMA, validated alike
            return validate(module, loader_val, device, val_attack, robust_loader=loader_robust, branches=branches,
                            amp_dtype=amp_dtype, channels_last=options.model.channels_last,
                            distributed=runtime.distributed, progress=progress, desc=desc)

        guard = NonFiniteGuard(options.optimizer.skip_nonfinite)
        mixup_off_epoch = options.augment.mixup_off_epoch
        for epoch in range(start_epoch, epochs):
            if runtime.distributed and hasattr(loader_train.sampler, 'set_epoch'):
                loader_train.sampler.set_epoch(epoch)
            running = running_stats_active(epoch, epochs, run.running_stats_epochs)
            if run.mixup_fn is not None and mixup_off_epoch and epoch >= mixup_off_epoch:
                run.mixup_fn.mixup_enabled = False
            reset_peak_memory(device)
            epoch_start = time.perf_counter()
            train_metrics = train_one_epoch(
                epoch, task, loader_train, optimizer, device, lr_scheduler=run.scheduler, amp_dtype=amp_dtype,
                clip_grad=options.optimizer.clip_grad, clip_mode=options.optimizer.clip_mode,
                channels_last=options.model.channels_last,
                before_forward=(lambda: use_running_statistics(model)) if running else None,
                log_interval=output.log_interval if leader else 0, distributed=runtime.distributed, guard=guard,
                progress=progress, loss_scaler=loss_scaler,
                grad_accum_steps=options.optimizer.grad_accum_steps, recovery_interval=output.recovery_interval,
                recovery=(lambda update: saver.save_recovery(epoch, batch_idx=update)) if leader else None,
                updates_done=run.start_updates if epoch == start_epoch else 0)
            _distribute_bn_statistics(task, options.model, runtime.distributed)
            train_metrics['seconds'] = time.perf_counter() - epoch_start
            train_metrics['peak_memory_mb'] = peak_memory_bytes(device) / 2 ** 20
            train_metrics['running_stats'] = float(running)
            # before validation, which changes no weight: what is validated is what is saved
            check_finite_state(task, optimizer, epoch, distributed=runtime.distributed)
            validation_start = time.perf_counter()
            validation = validate_model(model, f'validate {epoch}')
            eval_metrics = validation.metrics
            if task.has_ema():
                eval_metrics.update((f'ema_{k}', v) for k, v in validate_model(
                    task.get_eval_model(ema=True), f'validate {epoch} (EMA)').metrics.items())
            validation_seconds = time.perf_counter() - validation_start
            if run.scheduler is not None:
                run.scheduler.step(epoch + 1, eval_metrics.get(eval_metric))
            if leader:
                lr = train_metrics.pop('lr')
                _logger.info(epoch_line(epoch, epochs, train_metrics, lr, eval_metrics, validation_seconds, val_attack,
                                        validation.robust_samples))
                saver.save_epoch(epoch, summary_row(epoch, train_metrics, eval_metrics, lr),
                                 metric=eval_metrics[eval_metric])
                budget = budget.record_epoch(train_metrics['seconds'], int(train_metrics['peak_memory_mb'] * 2 ** 20))
                write_budget(os.path.join(output_dir, BUDGET_FILE), budget)
                if tracker is not None:
                    tracker.log_epoch(epoch, train_metrics, eval_metrics, lr)
                    tracker.log_budget(budget.to_dict())
        check_interrupted()  # a signal that came while the last epoch was recorded
    except BaseException as e:
        if tracker is not None:
            tracker.finish(exit_code=1)
        unsaved = leader and _saved_nothing(output_dir, ResumePosition(start_epoch, run.start_updates))
        if unsaved:
            discard_unsaved_run(run_folder)
        if isinstance(e, DivergenceError) and leader:
            raise DivergenceError(f'{e}; {kept_checkpoints(output_dir)}') from e
        if isinstance(e, Interrupted) and leader:
            discarded = unsaved and not resume.resume
            raise e.with_detail(f'in epoch {epoch}; {_resume_hint(output_dir, discarded)}') from e
        raise
    finally:
        if output_dir is not None:
            release_run_lock(output_dir)
    if tracker is not None:
        tracker.finish()
    if leader and saver.best_metric is not None:
        _logger.info(f'*** Best {eval_metric}: {saver.best_metric:.2f} (epoch {saver.best_epoch}); '
                     f'run in {output_dir}')
    if runtime.distributed:
        torch.distributed.destroy_process_group()
    return 0
