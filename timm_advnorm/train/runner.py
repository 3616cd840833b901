"""Running a built training run: its folder, then the epoch loop, each epoch trained, validated, checkpointed and
added to ``summary.csv`` and the budget file (and wandb); a run that fails before its first checkpoint leaves no
folder behind."""
import logging
import os
import time

import torch
from timm.utils import update_summary
from timm.utils.summary import trim_summary

from ..cli import show_progress
from ..task import running_stats_active, use_running_statistics
from .budget import peak_memory_bytes, reset_peak_memory, write_budget
from .build import TrainingRun, TrainingStart
from .checkpoint_saver import SafeCheckpointSaver
from .distribute_bn import distribute_bn
from .loop import DivergenceError, NonFiniteGuard, check_finite_state, train_one_epoch, validate, validation_message
from .run_folder import BUDGET_FILE, discard_unsaved_run, kept_checkpoints, open_run_folder, resumed_budget
from .tracking import WandbRun

__all__ = ['run_training']

_logger = logging.getLogger('train_adv')


def _distribute_bn_statistics(task, args) -> None:
    """``--dist-bn``: the same BN running statistics on every process, of the model and its EMA, after an epoch of
    distributed training without ``--sync-bn`` (both mixture-BN branches)."""
    if not args.distributed or args.sync_bn or not args.dist_bn:
        return
    distribute_bn(task.trainable_module, args.dist_bn)
    if task.has_ema():
        distribute_bn(task.get_eval_model(ema=True), args.dist_bn)


def run_training(run: TrainingRun, start: TrainingStart) -> int:
    """Train `run` from its start epoch to its last; returns the exit status (0).

    Rank 0 opens the run folder (`run_folder.open_run_folder`), writes the budget and, each epoch, the checkpoint,
    then the summary row and the measured budget. A failure before the first checkpoint removes what the run wrote;
    a divergence names the checkpoints left to resume from.
    """
    args, model, task, optimizer, device = run.args, run.model, run.task, run.optimizer, run.device
    amp_dtype, loss_scaler, start_epoch, epochs = run.amp_dtype, run.loss_scaler, run.start_epoch, run.epochs
    loader_train, loader_val, loader_robust = run.loader_train, run.loader_val, run.loader_robust
    budget, val_attack, branches = start.budget, start.val_attack, start.branches
    saver = output_dir = tracker = None
    if args.rank == 0:
        output_dir, args_file = open_run_folder(args, run.args_text, start_epoch)
    saving = False  # whether this run has begun to write a checkpoint
    try:
        if args.rank == 0:
            saver = SafeCheckpointSaver(model=model, optimizer=optimizer, args=args, task=task,
                                        checkpoint_dir=output_dir, recovery_dir=output_dir, decreasing=False,
                                        max_history=args.checkpoint_hist, amp_scaler=loss_scaler)
            budget = resumed_budget(output_dir, budget, start_epoch) if args.resume else budget
            write_budget(os.path.join(output_dir, BUDGET_FILE), budget)
            _logger.info(budget.format())
            if args.log_wandb:
                tracker = WandbRun(args, output_dir)
                tracker.log_budget(budget.to_dict())
            if args.resume:  # ranked checkpoints and summary rows of the resumed run, up to the resumed epoch
                saver.load_state_dict_from_checkpoint(args.resume)
                trim_summary(os.path.join(output_dir, 'summary.csv'), start_epoch)
            _logger.info(f'{args.method}: {task.passes_per_image:g} forward+backward passes per image, '
                         f'{epochs} epochs ({task.passes_per_image * epochs:g} vanilla-epoch budget), validating the '
                         f'{" and ".join(branches)} branch{"es" if len(branches) > 1 else ""}, checkpoints ranked by '
                         f'{args.eval_metric}; {args.world_size} process(es); run in {output_dir}')

        def validate_model(module: torch.nn.Module):  # the model and its EMA, validated alike
            return validate(module, loader_val, device, val_attack, robust_loader=loader_robust, branches=branches,
                            amp_dtype=amp_dtype, channels_last=args.channels_last, distributed=args.distributed)

        guard = NonFiniteGuard(args.skip_nonfinite)
        for epoch in range(start_epoch, epochs):
            if args.distributed and hasattr(loader_train.sampler, 'set_epoch'):
                loader_train.sampler.set_epoch(epoch)
            running = running_stats_active(epoch, epochs, run.running_stats_epochs)
            if run.mixup_fn is not None and args.mixup_off_epoch and epoch >= args.mixup_off_epoch:
                run.mixup_fn.mixup_enabled = False
            reset_peak_memory(device)
            epoch_start = time.perf_counter()
            train_metrics = train_one_epoch(
                epoch, task, loader_train, optimizer, device, lr_scheduler=run.scheduler, amp_dtype=amp_dtype,
                clip_grad=args.clip_grad, clip_mode=args.clip_mode, channels_last=args.channels_last,
                before_forward=(lambda: use_running_statistics(model)) if running else None,
                log_interval=args.log_interval if args.rank == 0 else 0, distributed=args.distributed, guard=guard,
                progress=args.rank == 0 and not args.no_progress and show_progress(), loss_scaler=loss_scaler,
                grad_accum_steps=args.grad_accum_steps, recovery_interval=args.recovery_interval,
                recovery=(lambda update: saver.save_recovery(epoch, batch_idx=update)) if args.rank == 0 else None)
            _distribute_bn_statistics(task, args)
            train_metrics['seconds'] = time.perf_counter() - epoch_start
            train_metrics['peak_memory_mb'] = peak_memory_bytes(device) / 2 ** 20
            train_metrics['running_stats'] = float(running)
            # before validation, which changes no weight: what is validated is what is saved
            check_finite_state(task, optimizer, epoch, distributed=args.distributed)
            validation = validate_model(model)
            eval_metrics = validation.metrics
            if task.has_ema():
                eval_metrics.update((f'ema_{k}', v) for k, v in validate_model(task.get_eval_model(ema=True))
                                    .metrics.items())
            run.scheduler.step(epoch + 1, eval_metrics.get(args.eval_metric))
            if args.rank == 0:
                _logger.info('Validation: ' + validation_message(eval_metrics, validation.robust_samples))
                saving = True  # from here the folder holds a checkpoint, or a partial one the next resume removes
                saver.save_checkpoint(epoch, metric=eval_metrics[args.eval_metric])
                # after the checkpoint: a run killed while saving leaves no row without its checkpoint
                lr = train_metrics.pop('lr')
                update_summary(epoch, train_metrics, eval_metrics, os.path.join(output_dir, 'summary.csv'), lr=lr)
                budget = budget.record_epoch(train_metrics['seconds'], int(train_metrics['peak_memory_mb'] * 2 ** 20))
                write_budget(os.path.join(output_dir, BUDGET_FILE), budget)
                if tracker is not None:
                    tracker.log_epoch(epoch, train_metrics, eval_metrics, lr)
                    tracker.log_budget(budget.to_dict())
    except BaseException as e:
        if tracker is not None:
            tracker.finish(exit_code=1)
        if args.rank == 0 and not saving:
            discard_unsaved_run(output_dir, args_file, made_folder=not args.resume)
        if isinstance(e, DivergenceError) and args.rank == 0:
            raise DivergenceError(f'{e}; {kept_checkpoints(output_dir)}') from e
        raise
    if tracker is not None:
        tracker.finish()
    if args.rank == 0 and saver.best_metric is not None:
        _logger.info(f'*** Best {args.eval_metric}: {saver.best_metric:.2f} (epoch {saver.best_epoch}); '
                     f'run in {output_dir}')
    if args.distributed:
        torch.distributed.destroy_process_group()
    return 0
