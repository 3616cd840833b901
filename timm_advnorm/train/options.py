"""The typed options of a training run, grouped by what reads them, built once from the parsed command line.

Each group is a frozen dataclass whose fields declare the command's options (`task.method_options.option`: the flag's
help, type and other parser arguments, its default the field's): ``--lr-base`` is ``OptimizerOptions.lr_base``. The
training command generates its parser from these declarations and fills every group by option name in one
conversion (`timm_advnorm.commands.train.train_options`, `task.options_from_values`); timm's own helpers that read
options by name (`timm.optim.optimizer_kwargs`, `timm.scheduler.scheduler_kwargs`) take a group as their ``cfg``. A
field that holds an option another group declares (the seed, the number of classes, the attack's norm) is a
`task.shared_option`, without a default. Building a run never changes the options: what it resolves (the device and
process ranks, the learning rate scaled by the batch, the built-in dataset's image size, the method's eval metric)
goes into new objects made with `dataclasses.replace`.
"""
from dataclasses import dataclass
from typing import Any, FrozenSet, Mapping, Optional, Sequence

from timm.utils import ParseKwargs

from ..arg_types import (
    BooleanOptionalAction, finite_float, fraction, non_negative_float, non_negative_int, open_fraction, pixel_budget,
    positive_float, positive_int, positive_pixel_step, probability)
from ..task import TASKS, MethodOptions, TrainingAttackOptions, list_tasks, option, shared_option
from .distribute_bn import DIST_BN_MODES
from .lr_scaling import LR_BASE_SCALES

__all__ = ['ModelOptions', 'DataOptions', 'AugmentOptions', 'OptimizerOptions', 'ScheduleOptions', 'RuntimeOptions',
           'ValidationOptions', 'OutputOptions', 'ResumeOptions', 'TrackingOptions', 'TrainOptions', 'OPTIONS_CLASSES',
           'AGC_CLIP_FACTOR', 'DEFAULT_WORKERS']

#: ``--clip-grad`` under ``--clip-mode agc`` when not given: `timm.utils.adaptive_clip_grad`'s default clip factor
#: (Brock et al., NFNets); without it AGC would silently clip nothing.
AGC_CLIP_FACTOR = 0.01
#: ``--workers`` when neither given nor recorded by a resumed run, lowered to the CPUs this process may use
#: (`usage.default_workers`).
DEFAULT_WORKERS = 2


def _images(text: str) -> str:
    """A preprocessing option's help, of the validation images (the training images are augmented instead)."""
    return text.format(images='validation images')


def _eval_metric_help() -> str:
    defaults = ', '.join(f'{name}: {task.default_eval_metric}' for name, task in TASKS.items())
    return f'Validation metric that ranks checkpoints (default: the method\'s; {defaults}).'


@dataclass(frozen=True)
class ModelOptions:
    """What creates the model and sets it up: architecture, weights, head, batch norm, EMA, memory and compilation."""

    model: str = option('test_mbn_resnet', 'Registered model name, "hf-hub:org/name" or "local-dir:PATH" (default: '
                                           'test_mbn_resnet).', metavar='MODEL')
    pretrained: bool = option(False, 'Start from the model\'s pretrained weights.')
    initial_checkpoint: str = option('', 'Start from these weights (no optimizer state): a checkpoint, .safetensors, '
                                         'export folder, local-dir:PATH or hf-hub:org/name.', metavar='PATH')
    reset_classifier: bool = option(False, 'Allow --num-classes to differ from the pretrained weights\' (new, '
                                           'untrained head); without it a mismatch is an error, never a silently '
                                           'dropped head.')
    num_classes: Optional[int] = option(None, 'Classes (default: from dataset).')
    gp: Optional[str] = option(None, 'Global pool type (avg, max, avgmax, ...; default: the model\'s).', metavar='POOL')
    drop: float = option(0.0, 'Dropout rate.', type=fraction, metavar='PCT')
    drop_path: Optional[float] = option(None, 'Drop-path rate.', type=fraction, metavar='PCT')
    drop_block: Optional[float] = option(None, 'Drop-block rate.', type=fraction, metavar='PCT')
    model_kwargs: Mapping[str, Any] = option({}, 'Extra timm.create_model arguments, e.g. '
                                                         'zero_init_last=False.', metavar='KEY=VALUE')
    head_init_scale: Optional[float] = option(None, 'Scale the classifier head\'s initial weights.', type=finite_float,
                                              metavar='SCALE')
    head_init_bias: Optional[float] = option(None, 'Initial value of the classifier head\'s bias.', type=finite_float,
                                             metavar='BIAS')
    bn_momentum: Optional[float] = option(None, 'Momentum of every batch norm, both mixture-BN branches included '
                                                '(default: the model\'s).', type=probability, metavar='M')
    bn_eps: Optional[float] = option(None, 'Epsilon of every batch norm, both mixture-BN branches included (default: '
                                           'the model\'s).', type=positive_float, metavar='EPS')
    sync_bn: bool = option(False, 'Synchronize BN statistics across processes (mixture BN keeps its routing).')
    dist_bn: str = option('reduce', 'Without --sync-bn, after each epoch of distributed training: average ("reduce") '
                                    'or copy from rank 0 ("broadcast") the BN running statistics of both mixture-BN '
                                    'branches, or leave each process\'s ("") (default: reduce).', choices=DIST_BN_MODES)
    channels_last: bool = option(False, 'Use channels_last memory layout.')
    grad_checkpointing: bool = option(False, 'Enable gradient checkpointing through model blocks/stages')
    torchcompile: Optional[str] = option(None, 'torch.compile the model with this backend (default when given: '
                                               'inductor).', nargs='?', const='inductor')
    torchcompile_mode: Optional[str] = option(None, 'torch.compile mode (default, reduce-overhead, max-autotune; '
                                                    'default: torch\'s).', metavar='MODE')
    model_ema: bool = option(False, 'Keep an exponential moving average of weights.')
    model_ema_decay: float = option(0.9998, 'EMA decay.', type=open_fraction)
    model_ema_warmup: bool = option(False, 'Warm the EMA decay up over the first updates.')


@dataclass(frozen=True)
class DataOptions:
    """The dataset, its splits and readers, the batches and the preprocessing of the model's input."""

    num_classes: Optional[int] = shared_option('ModelOptions')
    dataset: str = option('digits', '"digits", "mnist5k" or "mnist" (built in, no download) or any timm dataset name '
                                    '/ "" for an image folder.')
    data_dir: Optional[str] = option(None, 'Dataset root (or digits cache).')
    train_split: str = option('train', 'Training split.', metavar='NAME')
    val_split: str = option('validation', 'Validation split.')
    dataset_download: bool = option(False, 'Allow timm to download torch/ and tfds/ datasets that support it.')
    dataset_trust_remote_code: bool = option(False, 'Allow Hugging Face datasets to run their own loading code.')
    class_map: str = option('', 'Class-to-index mapping file of both splits (default: the training split\'s folder '
                                'names, sorted; the validation split must have the same class folders).')
    skip_bad_images: bool = option(
        False, 'Every image of both splits is decoded before the first step; a file that fails (corrupt, truncated, '
               'not an image) is an error naming it, as timm\'s loader would silently load the next image in its '
               'place. With this flag such files are left out, with a warning naming them.')
    input_key: Optional[str] = option(None, 'Image field of hfds/ and wds/ datasets.', metavar='NAME')
    target_key: Optional[str] = option(None, 'Label field of hfds/ and wds/ datasets.', metavar='NAME')
    img_size: Optional[int] = option(None, 'Input image size.')
    input_size: Optional[Sequence[int]] = option(None, 'Input dimensions (e.g. 3 224 224; default: the model\'s).')
    crop_pct: Optional[float] = option(None, _images('Centre-crop fraction of {images} (default: the model\'s).'))
    interpolation: str = option('', _images('Resize interpolation of {images} (default: the model\'s).'))
    mean: Optional[Sequence[float]] = option(None, 'Override dataset mean.')
    std: Optional[Sequence[float]] = option(None, 'Override dataset std.')
    batch_size: int = option(64, 'Training batch size per process (Fast AdvProp: the clean rows; the loader adds the '
                                 'attacked share).')
    validation_batch_size: Optional[int] = option(None, 'Validation batch size (default: batch size).',
                                                  flags=('-vb', '--validation-batch-size'), type=positive_int,
                                                  metavar='N')
    workers: Optional[int] = option(None, f'Data-loading workers (default: {DEFAULT_WORKERS}, at most the CPUs this '
                                          f'process may use).')
    pin_mem: bool = option(False, 'Pin the loaders\' CPU memory (faster copies to GPU).')
    #: What chose ``--dataset`` when it was not given (``'the default of --dataset'``, ``"the resumed run's record"``
    #: with another ``--data-dir``); None when given (command line, ``-c`` file). Only a dataset given is rendered
    #: into ``--data-dir`` (`data.resolve_dataset`).
    dataset_chosen_by: Optional[str] = None


@dataclass(frozen=True)
class AugmentOptions:
    """The training loader's augmentation of the clean images, and Mixup/CutMix with label smoothing."""

    worker_seeding: str = option('all', 'Seeding of the data-loading workers (timm\'s; default: all).',
                                 choices=('all', 'part'))
    hflip: float = option(0.5, 'Horizontal flip probability.', type=probability)
    vflip: float = option(0.0, 'Vertical flip probability.', type=probability)
    scale: Sequence[float] = option((0.08, 1.0), 'Random-resized-crop scale range.', type=positive_float, nargs=2,
                                    metavar='PCT')
    ratio: Sequence[float] = option((3. / 4., 4. / 3.), 'Random-resized-crop aspect-ratio range.', type=positive_float,
                                    nargs=2, metavar='RATIO')
    train_crop_mode: Optional[str] = option(None, 'Training crop mode (rrc, rkrc, rkrr; default: random-resized '
                                                  'crop).', metavar='MODE')
    train_interpolation: str = option('random', 'Resize interpolation of training images (default: random).',
                                      metavar='NAME')
    no_aug: bool = option(False, 'No training augmentation (resize and crop only).')
    color_jitter: float = option(0.4, 'Colour-jitter strength (0: none; default: 0.4).', type=non_negative_float,
                                 metavar='PCT')
    color_jitter_prob: Optional[float] = option(None, 'Apply colour jitter with this probability (default: always).',
                                                type=probability, metavar='P')
    grayscale_prob: Optional[float] = option(None, 'Grayscale conversion probability.', type=probability, metavar='P')
    gaussian_blur_prob: Optional[float] = option(None, 'Gaussian blur probability.', type=probability, metavar='P')
    aa: Optional[str] = option(None, 'AutoAugment / RandAugment policy, e.g. rand-m9-mstd0.5 (default: none).',
                               metavar='NAME')
    aug_repeats: float = option(0, 'Repeated-augmentation count (distributed training only; default: 0).',
                                type=non_negative_float, metavar='N')
    reprob: float = option(0.0, 'Random-erasing probability.', type=probability, metavar='PCT')
    remode: str = option('pixel', 'Random-erasing fill (default: pixel).', choices=('const', 'rand', 'pixel'))
    recount: int = option(1, 'Random-erasing count (default: 1).', type=positive_int)
    mixup: float = option(0.0, 'Mixup alpha (0 disables).', type=non_negative_float)
    cutmix: float = option(0.0, 'CutMix alpha (0 disables).', type=non_negative_float)
    mixup_prob: float = option(1.0, 'Probability of mixing a batch.', type=probability)
    mixup_switch_prob: float = option(0.5, 'Probability of CutMix when both on.', type=probability)
    cutmix_minmax: Optional[Sequence[float]] = option(None, 'CutMix box ratio range; overrides --cutmix and enables '
                                                            'CutMix.', type=open_fraction, nargs=2,
                                                      metavar=('MIN', 'MAX'))
    mixup_mode: str = option('batch', 'Mixup/CutMix parameters drawn per batch, pair or element (default: batch).',
                             choices=('batch', 'pair', 'elem'))
    mixup_off_epoch: int = option(0, 'Turn Mixup/CutMix off from this epoch (0: never).', type=non_negative_int,
                                  metavar='N')
    smoothing: float = option(0.0, 'Label smoothing.', type=fraction)


@dataclass(frozen=True)
class OptimizerOptions:
    """The optimizer, its learning rate (``lr`` is None until resolved from the base rate and the global batch),
    gradient clipping and accumulation; named as `timm.optim.optimizer_kwargs` reads them."""

    grad_accum_steps: int = option(1, 'Batches whose gradients make one optimizer update; the attack runs on each '
                                      '(default: 1).', type=positive_int, metavar='N')
    opt: str = option('sgd', 'timm optimizer name.', metavar='OPTIMIZER')
    opt_eps: Optional[float] = option(None, 'Optimizer epsilon (default: the optimizer\'s).', type=positive_float,
                                      metavar='EPSILON')
    opt_betas: Optional[Sequence[float]] = option(None, 'Optimizer betas (default: the optimizer\'s).', type=fraction,
                                                  nargs='+', metavar='BETA')
    opt_kwargs: Mapping[str, Any] = option({}, 'Extra optimizer arguments, e.g. nesterov=False.', nargs='*',
                                           action=ParseKwargs, metavar='KEY=VALUE')
    lr: Optional[float] = option(None, 'Learning rate as given (default: --lr-base scaled by the global batch).',
                                 type=positive_float, metavar='LR')
    lr_base: float = option(0.1, 'Learning rate at --lr-base-size images per update, scaled to the global batch '
                                 '(--batch-size x processes x --grad-accum-steps) when --lr is not given (default: '
                                 '0.1).', type=positive_float, metavar='LR')
    lr_base_size: int = option(256, 'Global batch of --lr-base (default: 256).', type=positive_int, metavar='N')
    lr_base_scale: str = option('', 'Scaling of --lr-base: linear or sqrt (default: sqrt for Adam- and LAMB-type '
                                    'optimizers, else linear).', choices=LR_BASE_SCALES, metavar='SCALE')
    momentum: float = option(0.9, 'Optimizer momentum.', type=fraction, metavar='M')
    weight_decay: float = option(1e-4, 'Weight decay.', type=non_negative_float)
    wd_all_params: bool = option(False, 'Decay every parameter, biases and normalization weights included (timm skips '
                                        '1-D parameters; Fast AdvProp\'s released code decays all).')
    layer_decay: Optional[float] = option(None, 'Layer-wise learning-rate decay (default: none).', type=positive_float,
                                          metavar='RATE')
    layer_decay_min_scale: Optional[float] = option(0, 'Smallest layer-wise learning-rate scale (default: 0).',
                                                    type=non_negative_float, metavar='SCALE')
    layer_decay_no_opt_scale: Optional[float] = option(None, 'Layers whose layer-wise scale falls below this are not '
                                                             'optimized (default: none).', type=non_negative_float,
                                                       metavar='SCALE')
    clip_grad: Optional[float] = option(None, f'Gradient clipping value (default: no clipping; {AGC_CLIP_FACTOR} with '
                                              f'--clip-mode agc, the clip factor of timm\'s and the NFNet paper\'s '
                                              f'AGC).', type=positive_float, metavar='NORM')
    clip_mode: str = option('norm', 'Gradient clipping mode; agc = adaptive gradient clipping (Brock et al., NFNets; '
                                    'NoFrost\'s released training clips nothing).', choices=('norm', 'value', 'agc'))
    skip_nonfinite: int = option(0, 'Skip up to N training steps whose loss or gradient is not finite (no optimizer '
                                    'step, BN statistics and EMA untouched, each one logged), then stop. 0: stop at '
                                    'the first. Checkpoints never hold non-finite weights either way. (default: 0)',
                                 type=non_negative_int, metavar='N')


@dataclass(frozen=True)
class ScheduleOptions:
    """The epochs and the learning-rate schedule, named as `timm.scheduler.scheduler_kwargs` reads them (``seed``
    seeds the lr noise), with ``--same-budget`` and the running-statistics epochs."""

    seed: int = shared_option('RuntimeOptions')
    sched: str = option('cosine', 'timm scheduler name.', metavar='SCHEDULER')
    sched_on_updates: bool = option(False, 'Step the schedule on every optimizer update instead of every epoch.')
    lr_noise: Optional[Sequence[float]] = option(None, 'Learning-rate noise on/off epoch fractions.',
                                                 type=non_negative_float, nargs='+', metavar='PCT')
    lr_noise_pct: float = option(0.67, 'Learning-rate noise limit (default: 0.67).', type=non_negative_float,
                                 metavar='PERCENT')
    lr_noise_std: float = option(1.0, 'Learning-rate noise standard deviation (default: 1.0).',
                                 type=non_negative_float, metavar='STDDEV')
    lr_cycle_mul: float = option(1.0, 'Cycle length multiplier of cyclic schedules (default: 1.0).',
                                 type=positive_float, metavar='MULT')
    lr_cycle_decay: float = option(0.5, 'Learning-rate decay per cycle (default: 0.5).', type=positive_float,
                                   metavar='MULT')
    lr_cycle_limit: int = option(1, 'Cycles of cyclic schedules (default: 1).', type=positive_int, metavar='N')
    lr_k_decay: float = option(1.0, 'k-decay of cosine and poly schedules (default: 1.0).', type=positive_float)
    epochs: int = option(10, 'Epochs to train.', type=positive_int, metavar='N')
    decay_milestones: Sequence[int] = option((35, 70, 95), 'Epochs at which multistep schedules decay (Xie & Yuille: '
                                                           '35 70 95 of 110).', type=non_negative_int, nargs='+',
                                             metavar='EPOCH')
    decay_epochs: float = option(90, 'Epochs between decays of the step schedule (default: 90).', type=positive_float,
                                 metavar='N')
    decay_rate: float = option(0.1, 'Step decay factor.', type=positive_float, metavar='RATE')
    warmup_epochs: int = option(0, 'Linear warm-up epochs.', type=non_negative_int, metavar='N')
    warmup_prefix: bool = option(False, 'Warm up before the schedule instead of over its first epochs.')
    cooldown_epochs: int = option(0, 'Epochs at --min-lr after a cyclic schedule ends, added to --epochs (default: '
                                     '0).', type=non_negative_int, metavar='N')
    patience_epochs: int = option(10, 'Patience of the plateau schedule (default: 10).', type=non_negative_int,
                                  metavar='N')
    warmup_lr: float = option(1e-5, 'Warm-up start learning rate.', type=non_negative_float, metavar='LR')
    min_lr: float = option(0.0, 'Floor of cyclic schedules.', type=non_negative_float, metavar='LR')
    same_budget: bool = option(False, 'Divide --epochs, --decay-milestones, --decay-epochs and --running-stats-epochs '
                                      'by the method\'s passes per image (equal-budget runs; warm-up and cool-down '
                                      'epochs are kept).')
    running_stats_epochs: int = option(0, 'Train with BN running statistics in the last N epochs (Xie & Yuille '
                                          '§4.3).', type=non_negative_int, metavar='N')


@dataclass(frozen=True)
class RuntimeOptions:
    """Where and how the run computes: the device, mixed precision, the seed and the processes (``rank``,
    ``world_size``, ``local_rank`` and ``distributed`` are set once the distributed device is set up)."""

    seed: int = option(42, 'Random seed.')
    device: Optional[str] = option(None, 'Device (default: cuda if available, else cpu).')
    amp: bool = option(False, 'Autocast (--amp-dtype) for training and attacks.')
    amp_dtype: str = option('bfloat16', 'Autocast dtype with --amp. float16 trains with a loss scaler and scales the '
                                        'attacks\' losses (their input gradients would underflow); timm\'s default '
                                        'is float16, ours bfloat16, which needs neither.')
    rank: int = 0
    world_size: int = 1
    local_rank: int = 0
    distributed: bool = False


@dataclass(frozen=True)
class ValidationOptions:
    """Each epoch's validation: the robust validation's PGD attack (the training attack's ε, step, norm and
    targeting where no ``--val-attack-*`` option sets its own: None until the options are made), its images, and
    the metric that ranks checkpoints (None until resolved from the method)."""

    attack_norm: str = shared_option('TrainingAttackOptions')
    attack_steps: int = option(10, 'PGD iterations of the per-epoch robust eval.', dest='val_attack_steps',
                               type=positive_int)
    attack_eps: Optional[float] = option(None, 'Robust-eval budget (default: attack-eps).', dest='val_attack_eps',
                                         type=pixel_budget)
    attack_step: Optional[float] = option(None, 'Robust-eval step (default: attack-step).', dest='val_attack_step',
                                          type=positive_pixel_step)
    attack_targeted: Optional[bool] = option(None, 'Targeted robust eval (default: as training).',
                                             dest='val_attack_targeted', action=BooleanOptionalAction)
    num_samples: Optional[int] = option(None, 'Robust-evaluate a fixed seeded subset of N validation images '
                                              '(default: all).', type=positive_int, aliases=('--val-samples',))
    eval_metric: Optional[str] = option(None, _eval_metric_help, metavar='METRIC')


@dataclass(frozen=True)
class OutputOptions:
    """The run folder and what is written and logged into it: checkpoints kept, recovery checkpoints, the log."""

    output: str = option('output/train', 'Output root folder.', metavar='DIR')
    experiment: str = option('', 'Run folder name under --output.', metavar='NAME')
    checkpoint_hist: int = option(3, 'Checkpoints kept.', type=positive_int, metavar='N')
    recovery_interval: int = option(0, 'Write a recovery checkpoint every N optimizer updates (0: never).',
                                    type=non_negative_int, metavar='N')
    log_interval: int = option(50, 'Batches between log lines.', type=non_negative_int, metavar='N')
    no_progress: bool = option(False, 'No progress bars over the training batches and the validations (shown only on '
                                      'a terminal, not under CI).')


@dataclass(frozen=True)
class ResumeOptions:
    """Resuming a run from one of its checkpoints (``resume`` empty: a new run)."""

    resume: str = option('', 'Resume model, optimizer and epoch from a timm-advnorm-train checkpoint, with the '
                             'arguments it records as the defaults: options given here (or by -c) win, but changing '
                             'one that shapes what is trained or measured (method options, attack, data, '
                             'preprocessing, augmentation, optimizer, schedule, --epochs, validation, seed) needs '
                             '--resume-with-changes; --model, --method, --dataset, --num-classes and --model-ema never '
                             'change. Free to change: --workers, --pin-mem, --validation-batch-size, '
                             '--dataset-download, --dataset-trust-remote-code, --channels-last, --grad-checkpointing, '
                             '--torchcompile(-mode), --output, --experiment, --checkpoint-hist, --recovery-interval, '
                             '--log-interval, --no-progress, --log-wandb, --wandb-project, --wandb-tags; --device is '
                             'chosen anew.', metavar='PATH')
    resume_from_earlier: bool = option(False, 'Allow --resume from a checkpoint earlier than its run\'s latest '
                                              '(model_best, an older checkpoint-N): the run is rewound to it, its '
                                              'later rows and checkpoints replaced.')
    resume_with_changes: bool = option(False, 'Let --resume change the recorded recipe: the changes are logged and '
                                              'written at the top of the resumed run\'s args-resumed-epochN.yaml.')
    no_resume_opt: bool = option(False, 'Do not restore the optimizer when resuming.')
    #: The command's option names: what a checkpoint's record is read for.
    option_names: FrozenSet[str] = frozenset()


@dataclass(frozen=True)
class TrackingOptions:
    """Experiment tracking with Weights & Biases."""

    log_wandb: bool = option(False, 'Log each epoch\'s summary.csv row and the run\'s budget to Weights & Biases '
                                    '(pip install "timm-advnorm[wandb]"; WANDB_MODE=offline logs without a network).')
    wandb_project: Optional[str] = option(None, 'Weights & Biases project (default: wandb\'s).', metavar='NAME')
    wandb_tags: Sequence[str] = option((), 'Weights & Biases tags.', nargs='*', metavar='TAG')
    wandb_resume_id: str = option('', 'Continue this Weights & Biases run (with --resume).', metavar='ID')


@dataclass(frozen=True)
class TrainOptions:
    """Every option of a training run, by group, with the method that trains it.

    Attributes:
        method_options: The method's own options (its `options_class`), checked by the method.
        attack: The training attack's options (`TrainingAttackOptions`).
        recorded: The run's arguments as parsed, by option name (the values `options_from_values` filled the options
            from): the data its ``args.yaml``, checkpoints and Weights & Biases config record, with what the build
            resolves set on a copy (`recorded.recorded_with`); never read as configuration.
        plan: Only measure the run's budget (``--plan``), projected to `plan_world_size` processes when given.
    """

    model: ModelOptions
    data: DataOptions
    augment: AugmentOptions
    optimizer: OptimizerOptions
    schedule: ScheduleOptions
    runtime: RuntimeOptions
    validation: ValidationOptions
    output: OutputOptions
    resume: ResumeOptions
    tracking: TrackingOptions
    method_options: MethodOptions
    attack: TrainingAttackOptions
    recorded: Mapping[str, Any]
    method: str = option('mbn', 'Training method (default: mbn); its own options are in its "Method" group below.',
                         choices=list_tasks)
    plan: bool = option(False, 'Do not train: build the run, measure one training step on this device and print the '
                               'run\'s budget (passes, FLOPs, peak memory, projected time).')
    plan_world_size: Optional[int] = option(None, 'With --plan: project the run to N processes, each on a device like '
                                                  'this one (default: the processes of this launch).',
                                            flags=('--world-size',), type=positive_int, metavar='N')

    @property
    def run_name(self) -> str:
        """The name of a new run's folder under ``--output``: ``--experiment``, else ``<model>-<method>``."""
        return self.output.experiment or f'{self.model.model.replace("/", "_")}-{self.method}'


#: The options classes whose fields declare the training command's options (but the methods' own).
OPTIONS_CLASSES = (ModelOptions, DataOptions, AugmentOptions, OptimizerOptions, ScheduleOptions, RuntimeOptions,
                   ValidationOptions, OutputOptions, ResumeOptions, TrackingOptions, TrainingAttackOptions,
                   TrainOptions)
