"""Building a training run from its arguments: the device, model, method (task), optimizer, resumed state, EMA,
epoch schedule, data and loaders, learning-rate scheduler and compilation.

`build_training` does it all in an order that finds bad input before the run folder is made, and returns the
`TrainingRun` that ``--plan`` measures (`plan_training`) or the epoch loop trains (`timm_advnorm.train.runner`), once
`prepare_training` has counted its budget, wrapped it for distributed training and made its validation attack.
"""
import argparse
import copy
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Optional, Tuple

import torch
import yaml
from timm.data import Mixup, create_loader, create_transform, resolve_data_config
from timm.scheduler.scheduler import Scheduler
from timm.task import load_task_ema_checkpoint, resume_task_checkpoint
from timm.utils import init_distributed_device, random_seed
from torch.utils.data import DataLoader

from .. import models  # noqa: F401  (registers the plugin's models)
from ..attacks import Attack, InputSpace, create_attack
from ..data import builtin_dataset, fixed_subset, is_folder_dataset, resolve_dataset, split_folder
from ..data.preprocessing import check_input_channels, record_preprocessing
from ..hub import MODEL_CONFIG_ARG, create_model_from_name_or_checkpoint, model_config
from ..hub.checkpoint import check_finite_weights
from ..layers import convert_sync_mixture_bn, has_mixture_bn, route, set_grad_checkpointing, set_inference_branch
from ..task import (
    AdversarialClassificationTask, MethodOptions, TrainingAttackOptions, TrainingContext, get_task_class,
    options_from_values)
from ..usage import AMP_DTYPES, check_pretrained_option
from ..write_guard import check_write_target
from .accumulation import GradientAccumulation
from .budget import RunBudget, count_budget, plan_budget, plan_validation
from .checks import check_args, check_steps, resolve_device
from .data_options import create_mixup, data_config_args, train_loader_kwargs
from .datasets import create_split_datasets, folder_class_map
from .epoch_record import ResumePosition
from .loop import LossScaler, eval_metric_for, metric_names
from .model_options import architecture_kwargs, create_model_kwargs, init_classifier_head, set_batchnorm_options
from .optimization import create_run_optimizer, create_run_scheduler, epoch_schedule, run_learning_rate
from .recorded import changes_note, check_resume_args, read_recorded_args
from .resume import record_missing, resume_position
from .run_folder import planned_run_folder
from .tracking import import_wandb

__all__ = ['TrainingRun', 'TrainingStart', 'build_training', 'create_run_task', 'plan_training', 'prepare_training',
           'ranked_branch', 'task_options']

_logger = logging.getLogger('train_adv')


@dataclass(frozen=True)
class TrainingRun:
    """A training run as built from its arguments (`build_training`).

    Attributes:
        args: Its arguments, with what the build resolved (device, learning rate, eval metric, model config).
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
    """

    args: argparse.Namespace
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


def task_options(args: argparse.Namespace) -> Tuple[MethodOptions, TrainingAttackOptions]:
    """The options of the method `args` names (its `options_class`) and of the training attack, from the parsed
    arguments, checked by the method (`check_options`)."""
    task = get_task_class(args.method)
    values = vars(args)
    options = options_from_values(task.options_class, values)
    attack_options = options_from_values(TrainingAttackOptions, values)
    task.check_options(options, attack_options)
    return options, attack_options


def create_run_task(args: argparse.Namespace, model: torch.nn.Module, space: InputSpace, *, num_classes: int,
                    mixup_fn: Optional[Mixup] = None, amp_dtype: Optional[torch.dtype] = None,
                    device: Optional[torch.device] = None, verbose: bool = True) -> AdversarialClassificationTask:
    """The method `args` names, for `model`, built from its options (`task_options`) as the training command builds
    it; ``args.rank`` is the process's (set by the distributed set-up)."""
    options, attack_options = task_options(args)
    context = TrainingContext(space=space, num_classes=num_classes, smoothing=args.smoothing, seed=args.seed,
                              rank=args.rank, amp_dtype=amp_dtype)
    return get_task_class(args.method).from_options(model, options, attack_options, context, mixup_fn=mixup_fn,
                                                    device=device, verbose=verbose)


def _val_attack(args, space: InputSpace, amp_dtype: Optional[torch.dtype]) -> Attack:
    """The PGD attack of the robust validation: ``--val-attack-steps`` steps, in the training attack's norm, with
    its ε, step size and targeting where no ``--val-attack-*`` option sets another."""
    targeted = args.attack_targeted if args.val_attack_targeted is None else args.val_attack_targeted
    return create_attack(
        'pgd', space=space, eps=args.attack_eps if args.val_attack_eps is None else args.val_attack_eps,
        step=args.attack_step if args.val_attack_step is None else args.val_attack_step, steps=args.val_attack_steps,
        norm=args.attack_norm,
        targeted=targeted, random_start=True, best_iterate=True, autocast_dtype=amp_dtype, seed=args.seed + args.rank)


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


def _record_attack(args, args_text: str, task: AdversarialClassificationTask) -> str:
    """The arguments (and their saved text) with the iterations and step rule the training attack runs with where it
    fixes them itself (``--attack fgsm``: one fixed step, whatever ``--attack-steps`` says), so that the run's
    record, and a card published from it, says what was run."""
    attack = task.attack
    ran = dict(attack_steps=getattr(attack, 'steps', None), attack_step_rule=getattr(attack, 'step_rule', None))
    changed = {name: value for name, value in ran.items() if value is not None and value != getattr(args, name)}
    if not changed:
        return args_text
    if args.rank == 0:
        _logger.info(f'--attack {args.attack} runs with ' + ', '.join(
            f'--{name.replace("_", "-")} {value}' for name, value in changed.items()) + '; the run records that.')
    for name, value in changed.items():
        setattr(args, name, value)
    return _with_values(args_text, **changed)


def _check_eval_metric(args, task: AdversarialClassificationTask) -> None:
    """Refuse an ``--eval-metric`` that the method's validation does not report (``--plan`` included)."""
    known_metrics = metric_names(task.validated_branches, ema=bool(args.model_ema))
    if args.eval_metric not in known_metrics:
        raise ValueError(f'--eval-metric {args.eval_metric!r} is not one of {", ".join(known_metrics)} '
                         f'(what --method {args.method} validates).')


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
    return yaml.safe_dump({**yaml.safe_load(args_text), **values}, default_flow_style=False)


def _model_config(model, args) -> dict:
    """`model_config` with the creation arguments that shape the model (``--gp``, ``--model-kwargs``), which a loaded
    checkpoint is rebuilt with."""
    config = model_config(model)
    shaping = architecture_kwargs(args)
    if shaping:
        config['model_args'] = {**config.get('model_args', {}), **shaping}
    return config


def build_training(args: argparse.Namespace, args_text: str) -> TrainingRun:
    """Build the run `args` (parsed from `args_text`) describe, up to the point ``--plan`` measures.

    Sets up the process (distributed device, seed) and resolves arguments on `args` as it goes (device, learning
    rate, image size, eval metric, the model config checkpoints record). The order matters: the arguments are
    checked first; the eval metric is resolved before the model config is recorded; the resumed checkpoint is checked
    and loaded before the EMA is set up, which starts from its EMA or the resumed weights.
    """
    check_args(args)
    task_options(args)  # the method's own checks, before anything is built
    args.device = resolve_device(args.device)
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

    builtin = builtin_dataset(args.dataset)
    dataset_name, root = resolve_dataset(args.dataset, args.data_dir, img_size=args.img_size)
    train_root, val_root, search = _data_roots(dataset_name, root, args)
    check_write_target(planned_run_folder(args), '--output', {
        'the data folder': args.data_dir, 'the training data': root, 'the training split': train_root,
        'the validation split': val_root, 'the class map': args.class_map,
        'the initial checkpoint': args.initial_checkpoint})
    num_classes = args.num_classes or (builtin.num_classes if builtin else None)
    if num_classes is None:
        raise ValueError('--num-classes is required for datasets other than the built-in digits and mnist5k.')
    if builtin and args.img_size is None:
        args.img_size = builtin.img_size
    class_map = folder_class_map(args, train_root, val_root, search, num_classes)

    if args.pretrained and not args.initial_checkpoint:
        check_pretrained_option(args.model, num_classes, args.reset_classifier, '--initial-checkpoint')
    model = create_model_from_name_or_checkpoint(
        args.model, args.initial_checkpoint or None, pretrained=args.pretrained,
        reset_classifier=args.reset_classifier, num_classes=num_classes, **create_model_kwargs(args))
    init_classifier_head(model, args.head_init_scale, args.head_init_bias)
    data_config = resolve_data_config(data_config_args(args), model=model, verbose=args.rank == 0)
    check_input_channels(model, data_config)
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
    task = create_run_task(args, model, space, num_classes=num_classes, mixup_fn=mixup_fn, amp_dtype=amp_dtype,
                           device=device, verbose=args.rank == 0)
    task.to(device)
    args_text = _record_attack(args, args_text, task)
    loss_scaler = _loss_scaler(task, amp_dtype, device)
    if args.eval_metric is None:  # the method's own; resolved before the resume check and saved with the run
        args.eval_metric = eval_metric_for(task)
        args_text = _with_values(args_text, eval_metric=args.eval_metric)
    _check_eval_metric(args, task)
    # checkpoints save the args: evaluation and publishing rebuild the model with its preprocessing, padding and the
    # branch its checkpoints are ranked by (mixture BN), which a loaded checkpoint then runs on
    with route(model, ranked_branch(args.eval_metric)):
        setattr(args, MODEL_CONFIG_ARG, _model_config(model, args))

    optimizer = create_run_optimizer(model, args)
    start = ResumePosition(0, 0)
    if args.resume:
        # the command's option names: the record is read for those (until the build takes typed options)
        from ..commands.train import option_dests
        changes = check_resume_args(args, read_recorded_args(args.resume, option_dests()))
        if changes:
            args_text = changes_note(args.resume, changes) + args_text
        start = resume_position(args)
        resume_task_checkpoint(task, args.resume, optimizer=None if args.no_resume_opt else optimizer,
                               loss_scaler=loss_scaler, log_info=args.rank == 0)
        check_finite_weights(task.get_eval_model().state_dict(), args.resume)  # timm loaded them, unchecked
    start_epoch = start.epoch
    if args.model_ema:  # after resuming: the EMA starts from the checkpoint's EMA, else from the resumed weights
        task.setup_ema(decay=args.model_ema_decay, use_warmup=args.model_ema_warmup, device=device)
        if args.resume:
            load_task_ema_checkpoint(task, args.resume)
            check_finite_weights(task.get_eval_model(ema=True).state_dict(), f'{args.resume} (EMA weights)')

    schedule = epoch_schedule(args, task.passes_per_image)

    batch_size = int(round(args.batch_size * task.batch_scale))
    mixed_rows = task.mixed_rows(batch_size)  # also checks that the method can split such a batch
    if mixup_fn is not None and mixed_rows % 2:
        raise ValueError(f'Mixup/CutMix mix pairs of images: the {mixed_rows} rows mixed per batch must be even '
                         f'(change --batch-size).')
    train_set, val_set = create_split_datasets(args, dataset_name, (train_root, val_root), search, batch_size,
                                               class_map, num_classes)
    common = dict(input_size=data_config['input_size'], mean=data_config['mean'], std=data_config['std'],
                  num_workers=args.workers, distributed=args.distributed, crop_pct=data_config['crop_pct'],
                  device=device, use_prefetcher=False, persistent_workers=False, pin_memory=args.pin_mem)
    # augmentation on the clean images, before any attack
    loader_train = create_loader(train_set, batch_size=batch_size, is_training=True, **train_loader_kwargs(args),
                                 **common)
    updates_per_epoch = GradientAccumulation(len(loader_train), args.grad_accum_steps).updates_per_epoch
    scheduler, epochs = create_run_scheduler(optimizer, args, schedule, updates_per_epoch)
    check_steps(args, len(loader_train), len(train_set), batch_size, start_epoch, epochs,
                completes_record=bool(args.resume) and record_missing(args, start))
    val_batch_size = args.validation_batch_size or args.batch_size
    loader_val = create_loader(val_set, batch_size=val_batch_size, interpolation=data_config['interpolation'],
                               **common)
    loader_robust = loader_val
    if args.num_samples is not None:
        robust_set = copy.copy(val_set)  # the same images, with the evaluation's transform
        robust_set.transform = create_transform(**{k: data_config[k] for k in (
            'input_size', 'interpolation', 'mean', 'std', 'crop_pct', 'crop_mode')})
        shard = fixed_subset(robust_set, args.num_samples, seed=args.seed, rank=args.rank, world_size=args.world_size)
        loader_robust = DataLoader(shard, batch_size=val_batch_size, num_workers=args.workers,
                                   pin_memory=args.pin_mem)
    if scheduler is not None and args.sched_on_updates and (start_epoch or start.updates):
        scheduler.step_update(start_epoch * updates_per_epoch + start.updates)
    elif scheduler is not None and start_epoch:  # (--sched none: no schedule, the lr stays constant)
        scheduler.step(start_epoch)

    if args.torchcompile:
        task.compile(backend=args.torchcompile, mode=args.torchcompile_mode)
    return TrainingRun(
        args=args, args_text=args_text, device=device, amp_dtype=amp_dtype, model=model, task=task,
        optimizer=optimizer, scheduler=scheduler, loss_scaler=loss_scaler, mixup_fn=mixup_fn, space=space,
        loader_train=loader_train, loader_val=loader_val, loader_robust=loader_robust, train_images=len(train_set),
        step_shape=(batch_size, *data_config['input_size']), start_epoch=start_epoch,
        start_updates=start.updates, epochs=epochs,
        running_stats_epochs=schedule.running_stats_epochs)


def plan_training(run: TrainingRun) -> RunBudget:
    """``--plan``: the run's budget with one step and an epoch's validation measured, on the task before it is
    wrapped for distributed training (for ``--plan-world-size`` processes, if given)."""
    args = run.args
    budget = plan_budget(run.task, run.optimizer, _first_batch(run.loader_train, run.device),
                         train_images=run.train_images, epochs=run.epochs,
                         world_size=args.plan_world_size or args.world_size, model_name=args.model,
                         amp_dtype=run.amp_dtype, clip_grad=args.clip_grad, clip_mode=args.clip_mode,
                         channels_last=args.channels_last, loss_scaler=run.loss_scaler)
    val_images = len(run.loader_val.dataset)
    return plan_validation(
        budget, run.model, _val_attack(args, run.space, run.amp_dtype), _first_batch(run.loader_val, run.device),
        _first_batch(run.loader_robust, run.device), batch_size=run.loader_val.batch_size, val_images=val_images,
        robust_images=min(args.num_samples or val_images, val_images), branches=run.task.validated_branches,
        models=2 if run.task.has_ema() else 1, amp_dtype=run.amp_dtype, channels_last=args.channels_last)


def prepare_training(run: TrainingRun) -> TrainingStart:
    """Past the plan's point, for a run that trains: count its budget, wrap its task for distributed training and
    make its validation attack."""
    args, task = run.args, run.task
    budget = count_budget(task, run.step_shape, train_images=run.train_images, epochs=run.epochs,
                          world_size=args.world_size, model_name=args.model, device=run.device)
    if args.distributed:
        task.prepare_distributed(device_ids=[run.device.index] if run.device.type == 'cuda' else None)

    return TrainingStart(budget=budget, val_attack=_val_attack(args, run.space, run.amp_dtype),
                         branches=task.validated_branches)
