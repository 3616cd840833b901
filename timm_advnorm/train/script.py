"""The body of ``timm-advnorm-train`` / ``train_adv.py``: adversarial training of timm models, every method of the
papers on timm's data, optimizers and `timm.task`.

Single process:  timm-advnorm-train -c digits_demo_mbn   (or python train_adv.py, python -m timm_advnorm.train)
Many processes:  torchrun --nproc_per_node=8 -m timm_advnorm.train -c xie2020_mbn_resnet152 --data-dir /imagenet

Each epoch validates clean and robust (PGD) top-1 — on the branches the method trains — and appends them, with
the method's cost in forward+backward passes per image, to ``summary.csv`` in the run folder, after the epoch's
checkpoint (written atomically by timm's `CheckpointSaver`), so that every row has its checkpoint.

Every argument is checked before the run folder is made. A non-finite loss or gradient stops the run (or, with
``--skip-nonfinite N``, skips up to N such steps) and no checkpoint ever holds non-finite weights: ``last`` and
``model_best`` stay the last good ones, to resume from.
"""
import argparse
import contextlib
import itertools
import logging
import os
import sys
import time
from pathlib import Path
from typing import List, Optional, Tuple

import torch
import yaml
from timm.data import create_dataset, create_loader, create_transform, resolve_data_config
from timm.task import load_task_ema_checkpoint, resume_task_checkpoint
from timm.utils import CheckpointSaver, init_distributed_device, random_seed, setup_default_logging, update_summary
from timm.utils.checkpoint_saver import load_checkpoint_metadata
from timm.utils.distributed import is_distributed_env
from timm.utils.summary import trim_summary
from torch.utils.data import DataLoader

from .. import models  # noqa: F401  (registers the plugin's models)
from ..attacks import InputSpace, create_attack
from ..cli import AMP_DTYPES, check_pretrained_option, one_line, run_cli, show_progress
from ..data import DIGITS_NUM_CLASSES, fixed_subset, is_folder_dataset, resolve_dataset, split_folder
from ..data.preprocessing import record_preprocessing
from ..hub import MODEL_CONFIG_ARG, create_model_from_name_or_checkpoint, model_config
from ..hub.checkpoint import check_checkpoint_file
from ..layers import convert_sync_mixture_bn, has_mixture_bn, route, set_grad_checkpointing, set_inference_branch
from ..task import get_task_class, running_stats_active, use_running_statistics
from .accumulation import GradientAccumulation
from .args import parse_args
from .budget import RunBudget, count_budget, peak_memory_bytes, plan_budget, reset_peak_memory, write_budget
from .data_options import create_mixup, data_config_args, dataset_kwargs, train_loader_kwargs
from .distribute_bn import distribute_bn
from .loop import (DivergenceError, LossScaler, NonFiniteGuard, check_finite_state, eval_metric_for, metric_names,
                   train_one_epoch, validate, validation_message)
from .model_options import architecture_kwargs, create_model_kwargs, init_classifier_head, set_batchnorm_options
from .optimization import create_run_optimizer, create_run_scheduler, run_learning_rate
from .tracking import WandbRun, import_wandb

__all__ = ['main', 'epoch_schedule', 'new_run_folder', 'run']

_logger = logging.getLogger('train_adv')


def _val_attack(args, space: InputSpace, amp_dtype):
    targeted = args.attack_targeted if args.val_attack_targeted is None else args.val_attack_targeted
    return create_attack(
        'pgd', space=space, eps=args.attack_eps if args.val_attack_eps is None else args.val_attack_eps,
        step=args.attack_step if args.val_attack_step is None else args.val_attack_step, steps=args.val_attack_steps,
        norm=args.attack_norm,
        targeted=targeted, random_start=True, best_iterate=True, autocast_dtype=amp_dtype, seed=args.seed + args.rank)


def _check_args(args) -> None:
    """Checks between arguments (each numeric argument's own range is its parser type's), the method's included."""
    if args.running_stats_epochs > args.epochs:
        raise ValueError('--running-stats-epochs must be between 0 and --epochs.')
    for name in ('scale', 'ratio', 'cutmix_minmax'):
        low, high = getattr(args, name) or (0, 0)
        if low > high:
            raise ValueError(f'--{name.replace("_", "-")} is a range: its lower bound {low} is above its upper {high}.')
    get_task_class(args.method).check_args(args)
    if args.resume and not os.path.isfile(args.resume):
        raise FileNotFoundError(f'--resume checkpoint not found: {args.resume}')
    if args.resume:  # timm's loader would blame the serialisation format for a damaged file
        check_checkpoint_file(args.resume)


# Arguments a resumed run must share with its checkpoint: another value trains something else under the same run
# (or, for --model-ema, writes summary rows under another header).
RESUME_FIXED_ARGS = ('model', 'method', 'dataset', 'num_classes', 'model_ema')


def _check_resume_args(args, checkpoint_args: dict) -> None:
    """Refuse to resume with arguments that change what is trained; name the other changes, which take effect."""
    current = vars(args)
    fixed = [k for k in RESUME_FIXED_ARGS if k in checkpoint_args and checkpoint_args[k] != current.get(k)]
    if fixed:
        raise ValueError(f'--resume {args.resume} was trained with other ' + ', '.join(
            f'--{k.replace("_", "-")} ({checkpoint_args[k]!r}, now {current.get(k)!r})' for k in fixed))
    ignored = {'resume', 'epochs', MODEL_CONFIG_ARG, 'rank', 'world_size', 'local_rank', 'device', 'distributed'}
    changed = sorted(k for k, v in checkpoint_args.items() if k not in ignored and k in current and current[k] != v)
    if changed:
        _logger.warning('Resuming with changed arguments: %s (the optimizer state and learning-rate schedule are the '
                        "checkpoint's).", ', '.join(changed))


def _resolve_device(name: Optional[str]) -> str:
    """The device to train on (default: cuda when available, else cpu), checked before anything is built: timm
    asserts on a CUDA device it cannot use, and torch fails on a missing one only when the model moves there."""
    if name is None:
        return 'cuda' if torch.cuda.is_available() else 'cpu'
    try:
        device = torch.device(name)
    except RuntimeError as e:
        raise ValueError(f'--device {name}: not a device ({one_line(e)})') from e
    if device.type == 'cuda' and not torch.cuda.is_available():
        raise ValueError(f'--device {name}: no CUDA device is available here (torch.cuda.is_available() is False); '
                         f'use --device cpu')
    # under torchrun timm replaces the index by the process's local rank
    if device.type == 'cuda' and device.index is not None and not is_distributed_env() \
            and device.index >= torch.cuda.device_count():
        raise ValueError(f'--device {name}: there are {torch.cuda.device_count()} CUDA device(s), numbered from 0')
    return name


def _data_roots(dataset_name: str, root, args) -> Tuple[Optional[str], Optional[str], bool]:
    """Train and validation roots, and whether timm should search them for the split.

    For an image folder the root and both split folders must exist: timm asserts on a missing root, and would fall
    back to the root for a missing split, validating on the training images. A root that is a file (an archive)
    goes to timm's reader as it is.
    """
    if not is_folder_dataset(dataset_name):
        return root, root, True
    if root is None or not Path(root).exists():
        what = f'{root} does not exist' if root else 'is required'
        raise ValueError(f'--data-dir {what}: --dataset {args.dataset!r} reads images from a folder (with '
                         f'{args.train_split}/ and {args.val_split}/ split folders)')
    if not Path(root).is_dir():
        return root, root, True
    return str(split_folder(Path(root), args.train_split)), str(split_folder(Path(root), args.val_split)), False


def _dataset_classes(dataset) -> Optional[int]:
    """The number of classes an image-folder dataset found (None where timm's reader does not say)."""
    class_to_idx = getattr(getattr(dataset, 'reader', None), 'class_to_idx', None)
    return len(class_to_idx) if class_to_idx else None


def ranked_branch(eval_metric: str) -> str:
    """The branch whose accuracy `eval_metric` ranks checkpoints by: ``adv`` for ``adv_branch_*`` metrics (also of
    the EMA), ``clean`` otherwise; the branch a loaded checkpoint runs on."""
    return 'adv' if eval_metric.removeprefix('ema_').startswith('adv_branch_') else 'clean'


def epoch_schedule(args, passes_per_image: float) -> Tuple[int, List[int], int]:
    """Epochs, decay milestones and running-statistics epochs of the run.

    With ``--same-budget`` all three are divided by the method's passes per image, so that the run costs what
    ``--epochs`` of vanilla training would and keeps the recipe's proportions (Xie & Yuille's last 10 of 110 epochs).
    """
    epochs, milestones, running = args.epochs, list(args.decay_milestones), args.running_stats_epochs
    if not args.same_budget:
        return epochs, milestones, running

    def scaled(n: int) -> int:
        return max(1, int(round(n / passes_per_image)))

    epochs = scaled(epochs)
    return epochs, [scaled(m) for m in milestones], min(epochs, scaled(running)) if running else 0


def _check_steps(args, steps_per_epoch: int, train_images: int, batch_size: int, start_epoch: int,
                 epochs: int) -> None:
    """Refuse a run that would make no optimizer step: it would exit successfully with nothing trained."""
    if steps_per_epoch == 0:
        raise ValueError(f'the training split has {train_images} image(s) for {args.world_size} process(es), fewer '
                         f'than one batch of {batch_size} (training drops the last partial batch): no step would be '
                         f'made; lower --batch-size or add images')
    if start_epoch >= epochs:
        raise ValueError(f'--resume {args.resume} ends at epoch {start_epoch - 1}, the last of {epochs} epochs: '
                         f'nothing is left to train; raise --epochs')


# The run's budget (`budget.RunBudget`) in its folder: counted at the start, each finished epoch's time and peak memory
# added as the run goes.
BUDGET_FILE = 'budget.yaml'


# The partial file timm's `CheckpointSaver` writes each checkpoint to before renaming it.
_PARTIAL_CHECKPOINT = 'tmp.pth.tar'


def new_run_folder(root: str, name: str) -> str:
    """Make and return a new folder `root`/`name`, or `name`-1, -2, ... when taken (as timm's `get_outdir`).

    Each name is claimed with an exclusive ``mkdir``, so runs started at the same moment never share a folder: timm
    tests, then creates, and the loser of that race fails after its whole set-up.
    """
    os.makedirs(root, exist_ok=True)
    for count in itertools.count():
        path = os.path.join(root, name if count == 0 else f'{name}-{count}')
        try:
            os.mkdir(path)
            return path
        except FileExistsError:
            continue


def _open_run_folder(args, args_text: str, start_epoch: int) -> Tuple[str, str]:
    """The run folder and the name of the arguments file written in it: a new folder under ``--output``, or, when
    resuming, the checkpoint's own, whose ``args.yaml`` is kept (the resumed run's arguments go beside it, named by
    the epoch it resumes at) and whose partial checkpoint, left by a run killed while saving, is removed."""
    if args.resume:
        output_dir = os.path.dirname(os.path.abspath(args.resume))
        args_file = 'args.yaml' if not os.path.exists(os.path.join(output_dir, 'args.yaml')) else \
            f'args-resumed-epoch{start_epoch}.yaml'
        partial = os.path.join(output_dir, _PARTIAL_CHECKPOINT)
        if os.path.exists(partial):
            os.remove(partial)
            _logger.info(f'Removed {partial}, a checkpoint whose writing was interrupted.')
    else:
        output_dir = new_run_folder(args.output, args.experiment or f'{args.model.replace("/", "_")}-{args.method}')
        args_file = 'args.yaml'
    with open(os.path.join(output_dir, args_file), 'w') as f:
        f.write(args_text)
    return output_dir, args_file


def _discard_unsaved_run(output_dir: str, args_file: str, made_folder: bool) -> None:
    """Remove what a run that failed before saving any checkpoint wrote: its arguments file and, when the run made
    the folder, its budget and the folder. A folder of arguments alone only hides the runs that trained.

    Best effort: this runs while another error is on its way to the user.
    """
    with contextlib.suppress(OSError):
        os.remove(os.path.join(output_dir, args_file))
        if os.path.exists(os.path.join(output_dir, BUDGET_FILE)) and made_folder:
            os.remove(os.path.join(output_dir, BUDGET_FILE))
        if made_folder:
            os.rmdir(output_dir)  # fails, keeping it, if anything else is in it
            _logger.info(f'Removed {output_dir}: the run failed before its first checkpoint.')


def _kept_checkpoints(output_dir: str) -> str:
    """What a diverged run leaves to resume from, for its error line."""
    last = os.path.join(output_dir, 'last.pth.tar')
    if not os.path.exists(last):
        return 'no checkpoint was written'
    return (f'{last} holds the last finite weights (model_best.pth.tar beside it the best): resume from it, with '
            f'--no-resume-opt for a new --lr (the optimizer state carries the learning rate)')


def _loss_scaler(task, amp_dtype: Optional[torch.dtype], device: torch.device) -> Optional[LossScaler]:
    """A loss scaler for float16 training; None otherwise (bfloat16 and fp32 need none)."""
    if amp_dtype != torch.float16:
        return None
    if not task.supports_loss_scaling:
        raise ValueError(f'--amp-dtype float16: --method {task.method} back-propagates inside its step, outside the '
                         f'loss scaler float16 needs; use --amp-dtype bfloat16')
    return LossScaler(device.type)


def _first_batch(loader, device: torch.device) -> Tuple[torch.Tensor, torch.Tensor]:
    """The training loader's first batch, on `device`."""
    input, target = next(iter(loader))
    return input.to(device), target.to(device)


def _resumed_budget(output_dir: str, budget: RunBudget, start_epoch: int) -> RunBudget:
    """`budget` with the epochs before `start_epoch` that the resumed run's ``budget.yaml`` measured (none without
    such a file)."""
    path = os.path.join(output_dir, BUDGET_FILE)
    if not os.path.exists(path):
        return budget
    return budget.with_measured(yaml.safe_load(Path(path).read_text()) or {}, start_epoch)


def _with_values(args_text: str, **values) -> str:
    """The arguments' YAML text with `values` set: what the run resolved (learning rate, metric) is what it saves."""
    return yaml.safe_dump({**yaml.safe_load(args_text), **values}, default_flow_style=False)


def _model_config(model, args) -> dict:
    """`model_config` with the creation arguments that shape the model (``--gp``, ``--model-kwargs``), which a loaded
    checkpoint is rebuilt with."""
    config = model_config(model)
    shaping = architecture_kwargs(args)
    if shaping:
        config['model_args'] = {**config.get('model_args', {}), **shaping}
    return config


def _distribute_bn_statistics(task, args) -> None:
    """``--dist-bn``: the same BN running statistics on every process, of the model and its EMA, after an epoch of
    distributed training without ``--sync-bn`` (both mixture-BN branches)."""
    if not args.distributed or args.sync_bn or not args.dist_bn:
        return
    distribute_bn(task.trainable_module, args.dist_bn)
    if task.has_ema():
        distribute_bn(task.get_eval_model(ema=True), args.dist_bn)


def main(argv: Optional[List[str]] = None, prog: str = 'train_adv.py') -> int:
    """Train as `argv` says; returns the exit status. Bad input raises (see `run`)."""
    if not logging.root.handlers:  # a host application (or pytest) may have configured logging already
        setup_default_logging()
    args, args_text = parse_args(argv, prog=prog)
    _check_args(args)
    args.device = _resolve_device(args.device)
    device = init_distributed_device(args)
    random_seed(args.seed, args.rank)
    learning_rate = run_learning_rate(args)
    args.lr = learning_rate.lr
    args_text = _with_values(args_text, lr=args.lr)
    if args.rank == 0:
        _logger.info(learning_rate.describe())
    amp_dtype = AMP_DTYPES[args.amp_dtype] if args.amp else None
    if args.log_wandb:
        import_wandb()  # missing, an error now rather than after the set-up

    dataset_name, root = resolve_dataset(args.dataset, args.data_dir, img_size=args.img_size or 32)
    train_root, val_root, search = _data_roots(dataset_name, root, args)
    num_classes = args.num_classes or (DIGITS_NUM_CLASSES if args.dataset == 'digits' else None)
    if num_classes is None:
        raise ValueError('--num-classes is required for datasets other than digits.')
    if args.dataset == 'digits' and args.img_size is None:
        args.img_size = 32

    if args.pretrained and not args.initial_checkpoint:
        check_pretrained_option(args.model, num_classes, args.reset_classifier, '--initial-checkpoint')
    model = create_model_from_name_or_checkpoint(
        args.model, args.initial_checkpoint or None, pretrained=args.pretrained,
        reset_classifier=args.reset_classifier, num_classes=num_classes, **create_model_kwargs(args))
    init_classifier_head(model, args.head_init_scale, args.head_init_bias)
    data_config = resolve_data_config(data_config_args(args), model=model, verbose=args.rank == 0)
    record_preprocessing(model, data_config)
    if has_mixture_bn(model):  # the methods' single-route passes run on the default route: the clean branch
        set_inference_branch(model, 'clean')
    space = InputSpace.from_data_config(data_config)

    if args.sync_bn and args.distributed:
        model = convert_sync_mixture_bn(model)
    set_batchnorm_options(model, momentum=args.bn_momentum, eps=args.bn_eps)
    model.to(device)
    if args.channels_last:
        model.to(memory_format=torch.channels_last)
    if args.grad_checkpointing:  # BN statistics guarded: recomputed blocks count no batch twice
        set_grad_checkpointing(model)

    mixup_fn = create_mixup(args, num_classes)
    task = get_task_class(args.method).from_args(args, model, space, num_classes=num_classes, mixup_fn=mixup_fn,
                                                 amp_dtype=amp_dtype, device=device, verbose=args.rank == 0)
    task.to(device)
    loss_scaler = _loss_scaler(task, amp_dtype, device)
    if args.eval_metric is None:  # the method's own; resolved before the resume check and saved with the run
        args.eval_metric = eval_metric_for(task)
        args_text = _with_values(args_text, eval_metric=args.eval_metric)
    # checkpoints save the args: evaluation and publishing rebuild the model with its preprocessing, padding and the
    # branch its checkpoints are ranked by (mixture BN), which a loaded checkpoint then runs on
    with route(model, ranked_branch(args.eval_metric)):
        setattr(args, MODEL_CONFIG_ARG, _model_config(model, args))

    optimizer = create_run_optimizer(model, args)
    start_epoch = 0
    if args.resume:
        _check_resume_args(args, vars(load_checkpoint_metadata(args.resume).get('args') or argparse.Namespace()))
        resumed = resume_task_checkpoint(task, args.resume, optimizer=None if args.no_resume_opt else optimizer,
                                         loss_scaler=loss_scaler, log_info=args.rank == 0)
        start_epoch = resumed or 0
    if args.model_ema:  # after resuming: the EMA starts from the checkpoint's EMA, else from the resumed weights
        task.setup_ema(decay=args.model_ema_decay, use_warmup=args.model_ema_warmup, device=device)
        if args.resume:
            load_task_ema_checkpoint(task, args.resume)

    epochs, milestones, running_stats_epochs = epoch_schedule(args, task.passes_per_image)

    batch_size = int(round(args.batch_size * task.batch_scale))
    mixed_rows = task.mixed_rows(batch_size)  # also checks that the method can split such a batch
    if mixup_fn is not None and mixed_rows % 2:
        raise ValueError(f'Mixup/CutMix mix pairs of images: the {mixed_rows} rows mixed per batch must be even '
                         f'(change --batch-size).')
    data_options = dataset_kwargs(args)
    train_set = create_dataset(dataset_name, root=train_root, split=args.train_split, search_split=search,
                               is_training=True, batch_size=batch_size, seed=args.seed, **data_options)
    val_set = create_dataset(dataset_name, root=val_root, split=args.val_split, search_split=search,
                             batch_size=batch_size, **data_options)
    found = _dataset_classes(train_set)
    if found is not None and found > num_classes:
        raise ValueError(f'The training data has {found} classes but the model {num_classes} (--num-classes).')
    common = dict(input_size=data_config['input_size'], mean=data_config['mean'], std=data_config['std'],
                  num_workers=args.workers, distributed=args.distributed, crop_pct=data_config['crop_pct'],
                  device=device, use_prefetcher=False, persistent_workers=False, pin_memory=args.pin_mem)
    # augmentation on the clean images, before any attack
    loader_train = create_loader(train_set, batch_size=batch_size, is_training=True, **train_loader_kwargs(args),
                                 **common)
    updates_per_epoch = GradientAccumulation(len(loader_train), args.grad_accum_steps).updates_per_epoch
    scheduler, epochs = create_run_scheduler(optimizer, args, epochs, milestones, updates_per_epoch)
    _check_steps(args, len(loader_train), len(train_set), batch_size, start_epoch, epochs)
    val_batch_size = args.validation_batch_size or args.batch_size
    loader_val = create_loader(val_set, batch_size=val_batch_size, interpolation=data_config['interpolation'],
                               **common)
    loader_robust = loader_val
    if args.num_samples is not None:
        robust_set = create_dataset(dataset_name, root=val_root, split=args.val_split, search_split=search,
                                    **data_options)
        robust_set.transform = create_transform(**{k: data_config[k] for k in (
            'input_size', 'interpolation', 'mean', 'std', 'crop_pct', 'crop_mode')})
        shard = fixed_subset(robust_set, args.num_samples, seed=args.seed, rank=args.rank, world_size=args.world_size)
        loader_robust = DataLoader(shard, batch_size=val_batch_size, num_workers=args.workers,
                                   pin_memory=args.pin_mem)
    if start_epoch and args.sched_on_updates:
        scheduler.step_update(start_epoch * updates_per_epoch)
    elif start_epoch:
        scheduler.step(start_epoch)

    if args.torchcompile:
        task.compile(backend=args.torchcompile, mode=args.torchcompile_mode)
    world_size = args.plan_world_size or args.world_size
    if args.plan:  # one measured step, on the task before it is wrapped for distributed training
        budget = plan_budget(task, optimizer, _first_batch(loader_train, device), train_images=len(train_set),
                             epochs=epochs, world_size=world_size, model_name=args.model, amp_dtype=amp_dtype,
                             clip_grad=args.clip_grad, clip_mode=args.clip_mode, channels_last=args.channels_last,
                             loss_scaler=loss_scaler)
        if args.rank == 0:
            print(budget.format())
        return 0
    budget = count_budget(task, (batch_size, *data_config['input_size']), train_images=len(train_set), epochs=epochs,
                          world_size=args.world_size, model_name=args.model, device=device)
    if args.distributed:
        task.prepare_distributed(device_ids=[device.index] if device.type == 'cuda' else None)

    val_attack = _val_attack(args, space, amp_dtype)
    branches = task.validated_branches
    known_metrics = metric_names(branches, ema=task.has_ema())
    if args.eval_metric not in known_metrics:
        raise ValueError(f'--eval-metric {args.eval_metric!r} is not one of {", ".join(known_metrics)} '
                         f'(what --method {args.method} validates).')
    saver = output_dir = tracker = None
    if args.rank == 0:
        output_dir, args_file = _open_run_folder(args, args_text, start_epoch)
    saving = False  # whether this run has begun to write a checkpoint
    try:
        if args.rank == 0:
            saver = CheckpointSaver(model=model, optimizer=optimizer, args=args, task=task, checkpoint_dir=output_dir,
                                    recovery_dir=output_dir, decreasing=False, max_history=args.checkpoint_hist,
                                    amp_scaler=loss_scaler)
            budget = _resumed_budget(output_dir, budget, start_epoch) if args.resume else budget
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

        guard = NonFiniteGuard(args.skip_nonfinite)
        for epoch in range(start_epoch, epochs):
            if args.distributed and hasattr(loader_train.sampler, 'set_epoch'):
                loader_train.sampler.set_epoch(epoch)
            running = running_stats_active(epoch, epochs, running_stats_epochs)
            if mixup_fn is not None and args.mixup_off_epoch and epoch >= args.mixup_off_epoch:
                mixup_fn.mixup_enabled = False
            reset_peak_memory(device)
            epoch_start = time.perf_counter()
            train_metrics = train_one_epoch(
                epoch, task, loader_train, optimizer, device, lr_scheduler=scheduler, amp_dtype=amp_dtype,
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
            validation = validate(model, loader_val, device, val_attack, robust_loader=loader_robust,
                                  branches=branches, amp_dtype=amp_dtype,
                                  channels_last=args.channels_last, distributed=args.distributed)
            eval_metrics = validation.metrics
            if task.has_ema():
                ema = validate(task.get_eval_model(ema=True), loader_val, device, val_attack,
                               robust_loader=loader_robust, branches=branches, amp_dtype=amp_dtype,
                               channels_last=args.channels_last, distributed=args.distributed)
                eval_metrics.update((f'ema_{k}', v) for k, v in ema.metrics.items())
            scheduler.step(epoch + 1, eval_metrics.get(args.eval_metric))
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
            _discard_unsaved_run(output_dir, args_file, made_folder=not args.resume)
        if isinstance(e, DivergenceError) and args.rank == 0:
            raise DivergenceError(f'{e}; {_kept_checkpoints(output_dir)}') from e
        raise
    if tracker is not None:
        tracker.finish()
    if args.rank == 0 and saver.best_metric is not None:
        _logger.info(f'*** Best {args.eval_metric}: {saver.best_metric:.2f} (epoch {saver.best_epoch}); '
                     f'run in {output_dir}')
    if args.distributed:
        torch.distributed.destroy_process_group()
    return 0


def run(prog: str = 'train_adv.py', argv: Optional[List[str]] = None) -> int:
    """Command-line entry: `main`, with bad input reported as one line and exit status 2."""
    return run_cli(lambda a: main(a, prog=prog), prog, argv)


def console_main() -> None:
    """The ``timm-advnorm-train`` console command."""
    sys.exit(run('timm-advnorm-train'))
