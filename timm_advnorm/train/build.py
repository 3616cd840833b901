"""Building a training run from its options: the device, model, method (task), optimizer, resumed state, EMA,
epoch schedule, data and loaders, learning-rate scheduler and compilation.

`build_training` does it all in an order that finds bad input before the run folder is made, and returns the
`TrainingRun` that ``--plan`` measures (`plan_training`) or the epoch loop trains (`timm_advnorm.train.runner`), once
`prepare_training` has counted its budget, wrapped it for distributed training and made its validation attack.
"""
import copy
import logging
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Dict, Mapping, Optional, Tuple

import torch
import yaml
from timm.data import Mixup, create_loader, create_transform, resolve_data_config
from timm.scheduler.scheduler import Scheduler
from timm.task import load_task_ema_checkpoint, resume_task_checkpoint
from timm.utils import random_seed
from timm.utils.distributed import init_distributed_device_so
from torch.utils.data import DataLoader

from .. import models  # noqa: F401  (registers the plugin's models)
from ..attacks import Attack, InputSpace, create_attack
from ..data import (
    builtin_dataset, dataset_img_size, dataset_num_classes, fixed_subset, is_folder_dataset, resolve_dataset,
    split_folder)
from ..data.preprocessing import check_input_channels, check_input_size, record_preprocessing
from ..data.readable import DecodeReport
from ..layers import convert_sync_mixture_bn, has_mixture_bn, route, set_grad_checkpointing, set_inference_branch
from ..strict_yaml import load_yaml
from ..task import AdversarialClassificationTask, TrainingContext, get_task_class
from ..usage import AMP_DTYPES, check_pretrained_option
from ..weights import MODEL_CONFIG_ARG, create_model_from_name_or_checkpoint, model_config
from ..weights.checkpoint import check_finite_weights
from ..write_guard import check_creatable, check_write_target
from .accumulation import GradientAccumulation
from .budget import RunBudget, count_budget, plan_budget, plan_validation
from .checks import check_options, check_steps, check_validation_split, resolve_device
from .data_options import create_mixup, data_config_args, train_loader_kwargs
from .datasets import create_split_datasets, folder_class_map, memoized_splits
from .epoch_record import ResumePosition
from .loop import LossScaler, eval_metric_for, metric_names
from .model_options import architecture_kwargs, create_model_kwargs, init_classifier_head, set_batchnorm_options
from .optimization import create_run_optimizer, create_run_scheduler, epoch_schedule, run_learning_rate
from .options import DataOptions, ModelOptions, RuntimeOptions, TrainOptions, ValidationOptions
from .recorded import changes_note, check_resume_args, read_recorded_args, recorded_with
from .resume import record_missing, resume_position
from .run_folder import planned_run_folder
from .tracking import import_wandb

__all__ = ['TrainingRun', 'TrainingStart', 'build_training', 'create_run_task', 'plan_text', 'plan_training',
           'prepare_training', 'ranked_branch', 'validation_attack']

_logger = logging.getLogger('train_adv')


@dataclass(frozen=True)
class TrainingRun:
    """A training run as built from its options (`build_training`).

    Attributes:
        options: Its options, with what the build resolved (device and processes, learning rate, image size, eval
            metric).
        recorded: Its arguments as its checkpoints and Weights & Biases config record them, by option name: the
            parsed arguments with the resolved values (and the model config a loaded checkpoint is rebuilt with).
        args_text: Its arguments as the YAML text saved in the run folder, with the resolved values.
        device: The device it trains on.
        amp_dtype: The autocast dtype (None without ``--amp``).
        model: The model, on `device`.
        task: The method training it (with its EMA under ``--model-ema``), compiled under ``--torchcompile``.
        optimizer: The optimizer, with the resumed state.
        scheduler: The learning-rate scheduler, stepped to `start_epoch` (None with ``--sched none``: a constant lr).
        loss_scaler: The float16 loss scaler (None otherwise).
        mixup_fn: timm's Mixup/CutMix (None without).
        space: The model's input space, which attacks work in.
        loader_train: The training loader.
        loader_val: The validation loader (clean accuracy).
        loader_robust: The robust validation loader (`loader_val` itself, or its ``--num-samples`` fixed subset).
        train_images: Images in the training split.
        step_shape: The input shape of one training step: rows, then the model's input size.
        start_epoch: The first epoch to train (that after the resumed checkpoint's, or a recovery checkpoint's own;
            0 for a new run).
        start_updates: The updates of `start_epoch` already made (by a resumed recovery checkpoint's run).
        epochs: The epochs to train (``--same-budget`` applied, the schedule's cool-down and warm-up prefix
            included).
        running_stats_epochs: The last epochs trained on running BN statistics.
        decode_checks: What the up-front decode check of each split cost (under ``--plan``: on a sample, the rest
            projected).
    """

    options: TrainOptions
    recorded: Mapping[str, Any]
    args_text: str
    device: torch.device
    amp_dtype: Optional[torch.dtype]
    model: torch.nn.Module
    task: AdversarialClassificationTask
    optimizer: torch.optim.Optimizer
    scheduler: Optional[Scheduler]
    loss_scaler: Optional[LossScaler]
    mixup_fn: Optional[Mixup]
    space: InputSpace
    loader_train: DataLoader
    loader_val: DataLoader
    loader_robust: DataLoader
    train_images: int
    step_shape: Tuple[int, ...]
    start_epoch: int
    start_updates: int
    epochs: int
    running_stats_epochs: int
    decode_checks: Tuple[DecodeReport, ...] = ()


@dataclass(frozen=True)
class TrainingStart:
    """What a run that trains adds to its build, past the point ``--plan`` stops at (`prepare_training`).

    Attributes:
        budget: The run's counted budget.
        val_attack: The PGD attack of the robust validation.
        branches: The branches validated each epoch.
    """

    budget: RunBudget
    val_attack: Attack
    branches: Tuple[str, ...]


def create_run_task(options: TrainOptions, model: torch.nn.Module, space: InputSpace, *, num_classes: int,
                    rank: int = 0, mixup_fn: Optional[Mixup] = None, amp_dtype: Optional[torch.dtype] = None,
                    device: Optional[torch.device] = None, verbose: bool = True) -> AdversarialClassificationTask:
    """The run's method for `model`, built from its typed options (``options.method_options``, ``options.attack``)
    as the training command builds it, in process `rank`."""
    context = TrainingContext(space=space, num_classes=num_classes, smoothing=options.augment.smoothing,
                              seed=options.runtime.seed, rank=rank, amp_dtype=amp_dtype)
    return get_task_class(options.method).from_options(
        model, options.method_options, options.attack, context, mixup_fn=mixup_fn, device=device, verbose=verbose)


def validation_attack(validation: ValidationOptions, space: InputSpace, amp_dtype: Optional[torch.dtype],
                seed: int) -> Attack:
    """The PGD attack of the robust validation: ``--val-attack-steps`` steps, in the training attack's norm, with
    its ε, step size and targeting where no ``--val-attack-*`` option sets another (`ValidationOptions`)."""
    return create_attack(
        'pgd', space=space, eps=validation.attack_eps, step=validation.attack_step, steps=validation.attack_steps,
        norm=validation.attack_norm, targeted=validation.attack_targeted, random_start=True, best_iterate=True,
        autocast_dtype=amp_dtype, seed=seed)


def _set_up_runtime(runtime: RuntimeOptions) -> RuntimeOptions:
    """Set up the process as timm's ``train.py`` does (the distributed device under torchrun, the seed of its rank)
    and return `runtime` with its device and processes resolved."""
    process = init_distributed_device_so(device=resolve_device(runtime.device))
    runtime = replace(runtime, device=process['device'], rank=process['global_rank'],
                      world_size=process['world_size'], local_rank=process['local_rank'],
                      distributed=process['distributed'])
    random_seed(runtime.seed, runtime.rank)
    return runtime


def _process_record(runtime: RuntimeOptions) -> Dict[str, Any]:
    """The resolved device and processes as the run records them, in the order timm's `init_distributed_device`
    sets them on its arguments."""
    return dict(distributed=runtime.distributed, world_size=runtime.world_size, rank=runtime.rank,
                local_rank=runtime.local_rank, device=runtime.device)


def _data_roots(dataset_name: str, root, data: DataOptions) -> Tuple[Optional[str], Optional[str], bool]:
    """Train and validation roots, and whether timm should search them for the split.

    For an image folder the root and both split folders must exist: timm asserts on a missing root, and would fall
    back to the root for a missing split, validating on the training images. A root that is a file (an archive)
    goes to timm's reader as it is.
    """
    if not is_folder_dataset(dataset_name):
        return root, root, True
    if root is None or not Path(root).exists():
        what = f'{root} does not exist' if root else 'is required'
        raise ValueError(f'--data-dir {what}: --dataset {data.dataset!r} reads images from a folder (with '
                         f'{data.train_split}/ and {data.val_split}/ split folders)')
    if not Path(root).is_dir():
        return root, root, True
    return str(split_folder(Path(root), data.train_split)), str(split_folder(Path(root), data.val_split)), False


def _attack_as_run(recorded: Mapping[str, Any], task: AdversarialClassificationTask, verbose: bool) -> Dict[str, Any]:
    """The iterations and step rule the training attack runs with where it fixes them itself, unlike the `recorded`
    arguments (``--attack fgsm``: one fixed step, whatever ``--attack-steps`` says), so that the run's record, and a
    card published from it, says what was run."""
    attack = task.attack
    ran = dict(attack_steps=getattr(attack, 'steps', None), attack_step_rule=getattr(attack, 'step_rule', None))
    changed = {name: value for name, value in ran.items()
               if value is not None and value != recorded[name]}
    if changed and verbose:
        _logger.info(f'--attack {recorded["attack"]} runs with ' + ', '.join(
            f'--{name.replace("_", "-")} {value}' for name, value in changed.items()) + '; the run records that.')
    return changed


def _check_eval_metric(eval_metric: str, task: AdversarialClassificationTask, ema: bool) -> None:
    """Refuse an ``--eval-metric`` that the method's validation does not report (``--plan`` included)."""
    known_metrics = metric_names(task.validated_branches, ema=ema)
    if eval_metric not in known_metrics:
        raise ValueError(f'--eval-metric {eval_metric!r} is not one of {", ".join(known_metrics)} '
                         f'(what --method {task.method} validates).')


def ranked_branch(eval_metric: str) -> str:
    """The branch whose accuracy `eval_metric` ranks checkpoints by: ``adv`` for ``adv_branch_*`` metrics (also of
    the EMA), ``clean`` otherwise; the branch a loaded checkpoint runs on."""
    return 'adv' if eval_metric.removeprefix('ema_').startswith('adv_branch_') else 'clean'


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


def _with_values(args_text: str, **values) -> str:
    """The arguments' YAML text with `values` set: what the run resolved (learning rate, metric) is what it saves."""
    return yaml.safe_dump({**load_yaml(args_text, 'the run\'s arguments'), **values}, default_flow_style=False)


def _model_config(model, options: ModelOptions) -> dict:
    """`model_config` with the creation arguments that shape the model (``--gp``, ``--model-kwargs``), which a loaded
    checkpoint is rebuilt with."""
    config = model_config(model)
    shaping = architecture_kwargs(options)
    if shaping:
        config['model_args'] = {**config.get('model_args', {}), **shaping}
    return config


def build_training(options: TrainOptions, args_text: str) -> TrainingRun:
    """Build the run `options` (converted from the arguments `args_text` saves) describe, up to the point ``--plan``
    measures.

    Sets up the process (distributed device, seed) and resolves options as it goes, into the returned run's
    `TrainingRun.options` and `TrainingRun.recorded` (`options` itself is unchanged): device and processes, learning
    rate, image size, eval metric, the model config checkpoints record. The order matters: the options are checked
    first; the eval metric is resolved before the model config is recorded; the resumed checkpoint is checked and
    loaded before the EMA is set up, which starts from its EMA or the resumed weights.
    """
    check_options(options)
    runtime = _set_up_runtime(options.runtime)
    verbose = runtime.rank == 0
    args = recorded_with(options.recorded, **_process_record(runtime))
    device = torch.device(runtime.device)
    data, model_options, resume = options.data, options.model, options.resume.resume
    learning_rate = run_learning_rate(options.optimizer, data.batch_size, runtime.world_size)
    optimizer_options = replace(options.optimizer, lr=learning_rate.lr)
    resumed_args = read_recorded_args(resume, options.resume.option_names) if resume else None
    if verbose:
        from_record = resumed_args is not None and resumed_args.get('lr') == learning_rate.lr
        _logger.info(learning_rate.describe(resumed=resume if from_record else None))
    amp_dtype = AMP_DTYPES[runtime.amp_dtype] if runtime.amp else None
    if options.tracking.log_wandb:
        import_wandb()  # missing, an error now rather than after the set-up

    run_folder = planned_run_folder(options.output.output, options.run_name, resume)
    if not resume:  # a name too long, a pseudo or read-only file system: said now, not after the set-up
        check_creatable(run_folder)
    # a built-in data set is rendered at the image size, which the model checks first; the user's data, first of all
    rendered = builtin_dataset(data.dataset) is not None
    if not rendered:
        dataset_name, root = resolve_dataset(data.dataset, data.data_dir, chosen_by=data.dataset_chosen_by)
        train_root, val_root, search = _data_roots(dataset_name, root, data)
    num_classes = dataset_num_classes(data.dataset, data.num_classes)
    img_size = data.img_size
    data = replace(data, img_size=dataset_img_size(data.dataset, data.img_size))
    if model_options.pretrained and not model_options.initial_checkpoint:
        check_pretrained_option(model_options.model, num_classes, model_options.reset_classifier,
                                '--initial-checkpoint')
    model = create_model_from_name_or_checkpoint(
        model_options.model, model_options.initial_checkpoint or None, pretrained=model_options.pretrained,
        reset_classifier=model_options.reset_classifier, num_classes=num_classes,
        **create_model_kwargs(model_options))
    init_classifier_head(model, model_options.head_init_scale, model_options.head_init_bias)
    data_config = resolve_data_config(data_config_args(data), model=model, verbose=verbose)
    check_input_channels(model, data_config)
    check_input_size(model, data_config)

    if rendered:
        dataset_name, root = resolve_dataset(data.dataset, data.data_dir, img_size=img_size,
                                             chosen_by=data.dataset_chosen_by)
        train_root, val_root, search = _data_roots(dataset_name, root, data)
    check_write_target(run_folder, '--output', {
        'the data folder': data.data_dir, 'the training data': root, 'the training split': train_root,
        'the validation split': val_root, 'the class map': data.class_map,
        'the initial checkpoint': model_options.initial_checkpoint})
    check_validation_split(data, train_root, val_root, search, verbose)
    class_map = folder_class_map(data, train_root, val_root, search, num_classes)
    record_preprocessing(model, data_config)
    if has_mixture_bn(model):  # the methods' single-route passes run on the default route: the clean branch
        set_inference_branch(model, 'clean')
    space = InputSpace.from_data_config(data_config)

    if model_options.sync_bn and runtime.distributed:
        model = convert_sync_mixture_bn(model)
    set_batchnorm_options(model, momentum=model_options.bn_momentum, eps=model_options.bn_eps)
    model.to(device)
    if model_options.channels_last:
        model.to(memory_format=torch.channels_last)
    if model_options.grad_checkpointing:  # BN statistics guarded: recomputed blocks count no batch twice
        set_grad_checkpointing(model)

    mixup_fn = create_mixup(options.augment, num_classes)
    task = create_run_task(options, model, space, num_classes=num_classes, rank=runtime.rank, mixup_fn=mixup_fn,
                           amp_dtype=amp_dtype, device=device, verbose=verbose)
    task.to(device)
    attack_as_run = _attack_as_run(args, task, verbose)
    loss_scaler = _loss_scaler(task, amp_dtype, device)
    validation = options.validation
    if validation.eval_metric is None:  # the method's own; resolved before the resume check and saved with the run
        validation = replace(validation, eval_metric=eval_metric_for(task))
    _check_eval_metric(validation.eval_metric, task, ema=model_options.model_ema)
    # checkpoints record the args: evaluation and publishing rebuild the model with its preprocessing, padding and
    # the branch its checkpoints are ranked by (mixture BN), which a loaded checkpoint then runs on
    with route(model, ranked_branch(validation.eval_metric)):
        config = _model_config(model, model_options)
    recorded = recorded_with(args, lr=learning_rate.lr, img_size=data.img_size, **attack_as_run,
                             eval_metric=validation.eval_metric, **{MODEL_CONFIG_ARG: config})
    args_text = _with_values(args_text, lr=learning_rate.lr, **attack_as_run, eval_metric=validation.eval_metric)

    optimizer = create_run_optimizer(model, optimizer_options)
    start = ResumePosition(0, 0)
    if resume:
        changes = check_resume_args(recorded, resumed_args, resume,
                                    options.resume.resume_with_changes, verbose=verbose)
        if changes:
            args_text = changes_note(resume, changes) + args_text
        start = resume_position(resume, options.resume.resume_from_earlier)
        resume_task_checkpoint(task, resume, optimizer=None if options.resume.no_resume_opt else optimizer,
                               loss_scaler=loss_scaler, log_info=verbose)
        check_finite_weights(task.get_eval_model().state_dict(), resume)  # timm loaded them, unchecked
    start_epoch = start.epoch
    if model_options.model_ema:  # after resuming: the EMA starts from the checkpoint's EMA, else the resumed weights
        task.setup_ema(decay=model_options.model_ema_decay, use_warmup=model_options.model_ema_warmup, device=device)
        if resume:
            load_task_ema_checkpoint(task, resume)
            check_finite_weights(task.get_eval_model(ema=True).state_dict(), f'{resume} (EMA weights)')

    schedule = epoch_schedule(options.schedule, task.passes_per_image)

    batch_size = int(round(data.batch_size * task.batch_scale))
    mixed_rows = task.mixed_rows(batch_size)  # also checks that the method can split such a batch
    if mixup_fn is not None and mixed_rows % 2:
        raise ValueError(f'Mixup/CutMix mix pairs of images: the {mixed_rows} rows mixed per batch must be even '
                         f'(change --batch-size).')
    train_set, val_set, decode_checks = create_split_datasets(
        data, runtime.seed, dataset_name, (train_root, val_root), search, batch_size, class_map, num_classes,
        plan=options.plan)
    train_set, val_set = memoized_splits(train_set, val_set, data, options.augment.no_aug)
    common = dict(input_size=data_config['input_size'], mean=data_config['mean'], std=data_config['std'],
                  num_workers=data.workers, distributed=runtime.distributed, crop_pct=data_config['crop_pct'],
                  device=device, use_prefetcher=False, persistent_workers=False, pin_memory=data.pin_mem)
    # augmentation on the clean images, before any attack
    loader_train = create_loader(train_set, batch_size=batch_size, is_training=True,
                                 **train_loader_kwargs(options.augment, runtime.distributed), **common)
    updates_per_epoch = GradientAccumulation(len(loader_train), optimizer_options.grad_accum_steps).updates_per_epoch
    scheduler, epochs = create_run_scheduler(optimizer, options.schedule, schedule, updates_per_epoch)
    check_steps(len(loader_train), len(train_set), batch_size, runtime.world_size, start_epoch, epochs,
                resume=resume, completes_record=bool(resume) and record_missing(resume, start))
    val_batch_size = data.validation_batch_size or data.batch_size
    loader_val = create_loader(val_set, batch_size=val_batch_size, interpolation=data_config['interpolation'],
                               **common)
    loader_robust = loader_val
    if validation.num_samples is not None:
        robust_set = copy.copy(val_set)  # the same images, with the evaluation's transform
        robust_set.transform = create_transform(**{k: data_config[k] for k in (
            'input_size', 'interpolation', 'mean', 'std', 'crop_pct', 'crop_mode')})
        shard = fixed_subset(robust_set, validation.num_samples, seed=runtime.seed, rank=runtime.rank,
                             world_size=runtime.world_size)
        loader_robust = DataLoader(shard, batch_size=val_batch_size, num_workers=data.workers,
                                   pin_memory=data.pin_mem)
    if scheduler is not None and options.schedule.sched_on_updates and (start_epoch or start.updates):
        scheduler.step_update(start_epoch * updates_per_epoch + start.updates)
    elif scheduler is not None and start_epoch:  # (--sched none: no schedule, the lr stays constant)
        scheduler.step(start_epoch)

    if model_options.torchcompile:
        task.compile(backend=model_options.torchcompile, mode=model_options.torchcompile_mode)
    resolved = replace(options, data=data, optimizer=optimizer_options, runtime=runtime, validation=validation)
    return TrainingRun(
        options=resolved, recorded=recorded, args_text=args_text, device=device, amp_dtype=amp_dtype, model=model,
        task=task, optimizer=optimizer, scheduler=scheduler, loss_scaler=loss_scaler, mixup_fn=mixup_fn, space=space,
        loader_train=loader_train, loader_val=loader_val, loader_robust=loader_robust, train_images=len(train_set),
        step_shape=(batch_size, *data_config['input_size']), start_epoch=start_epoch,
        start_updates=start.updates, epochs=epochs,
        running_stats_epochs=schedule.running_stats_epochs, decode_checks=decode_checks)


def plan_training(run: TrainingRun) -> RunBudget:
    """``--plan``: the run's budget with one step and an epoch's validation measured, on the task before it is
    wrapped for distributed training (for ``--plan-world-size`` processes, if given)."""
    options, runtime = run.options, run.options.runtime
    budget = plan_budget(run.task, run.optimizer, _first_batch(run.loader_train, run.device),
                         train_images=run.train_images, epochs=run.epochs,
                         world_size=options.plan_world_size or runtime.world_size, model_name=options.model.model,
                         amp_dtype=run.amp_dtype, clip_grad=options.optimizer.clip_grad,
                         clip_mode=options.optimizer.clip_mode, channels_last=options.model.channels_last,
                         loss_scaler=run.loss_scaler)
    val_images = len(run.loader_val.dataset)
    val_attack = validation_attack(options.validation, run.space, run.amp_dtype, runtime.seed + runtime.rank)
    return plan_validation(
        budget, run.model, val_attack, _first_batch(run.loader_val, run.device),
        _first_batch(run.loader_robust, run.device), batch_size=run.loader_val.batch_size, val_images=val_images,
        robust_images=min(options.validation.num_samples or val_images, val_images),
        branches=run.task.validated_branches, models=2 if run.task.has_ema() else 1, amp_dtype=run.amp_dtype,
        channels_last=options.model.channels_last)


def plan_text(run: TrainingRun, budget: RunBudget) -> str:
    """What ``--plan`` prints: the `budget` (`plan_training`), and what the decode check of each split will cost
    (the files it decodes and those unchanged since an earlier check, the measured or projected time)."""
    return budget.format([('decode check', report.text()) for report in run.decode_checks])


def prepare_training(run: TrainingRun) -> TrainingStart:
    """Past the plan's point, for a run that trains: count its budget, wrap its task for distributed training and
    make its validation attack."""
    options, runtime, task = run.options, run.options.runtime, run.task
    budget = count_budget(task, run.step_shape, train_images=run.train_images, epochs=run.epochs,
                          world_size=runtime.world_size, model_name=options.model.model, device=run.device)
    if runtime.distributed:
        task.prepare_distributed(device_ids=[run.device.index] if run.device.type == 'cuda' else None)

    val_attack = validation_attack(options.validation, run.space, run.amp_dtype, runtime.seed + runtime.rank)
    return TrainingStart(budget=budget, val_attack=val_attack, branches=task.validated_branches)
