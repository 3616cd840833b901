"""The typed options of a training run, grouped by what reads them, built once from the parsed command line.

Each group is a frozen dataclass whose field names are the command's option names (``--lr-base`` is
``OptimizerOptions.lr_base``), so that one conversion (`timm_advnorm.commands.train.train_options`) fills them all
and timm's own helpers that read options by name (`timm.optim.optimizer_kwargs`, `timm.scheduler.scheduler_kwargs`)
take a group as their ``cfg``. Building a run never changes them: what it resolves (the device and process ranks, the
learning rate scaled by the batch, the built-in dataset's image size, the method's eval metric) goes into new
objects made with `dataclasses.replace`.
"""
from dataclasses import dataclass, fields
from typing import Any, FrozenSet, Mapping, Optional, Sequence, Type, TypeVar

from ..task import MethodOptions, TrainingAttackOptions

__all__ = ['ModelOptions', 'DataOptions', 'AugmentOptions', 'OptimizerOptions', 'ScheduleOptions', 'RuntimeOptions',
           'ValidationOptions', 'OutputOptions', 'ResumeOptions', 'TrackingOptions', 'TrainOptions', 'options_from']

Options = TypeVar('Options')


def options_from(cls: Type[Options], values: Mapping[str, Any], **overrides: Any) -> Options:
    """An options object of `cls` with each field taken from `values` by name, then `overrides`."""
    taken = {f.name: values[f.name] for f in fields(cls) if f.name in values}
    return cls(**{**taken, **overrides})


@dataclass(frozen=True)
class ModelOptions:
    """What creates the model and sets it up: architecture, weights, head, batch norm, EMA, memory and compilation."""

    model: str
    pretrained: bool
    initial_checkpoint: str
    reset_classifier: bool
    num_classes: Optional[int]
    gp: Optional[str]
    drop: float
    drop_path: Optional[float]
    drop_block: Optional[float]
    model_kwargs: Mapping[str, Any]
    head_init_scale: Optional[float]
    head_init_bias: Optional[float]
    bn_momentum: Optional[float]
    bn_eps: Optional[float]
    sync_bn: bool
    dist_bn: str
    channels_last: bool
    grad_checkpointing: bool
    torchcompile: Optional[str]
    torchcompile_mode: Optional[str]
    model_ema: bool
    model_ema_decay: float
    model_ema_warmup: bool


@dataclass(frozen=True)
class DataOptions:
    """The dataset, its splits and readers, the batches and the preprocessing of the model's input."""

    dataset: str
    data_dir: Optional[str]
    train_split: str
    val_split: str
    dataset_download: bool
    dataset_trust_remote_code: bool
    class_map: str
    skip_bad_images: bool
    input_key: Optional[str]
    target_key: Optional[str]
    num_classes: Optional[int]
    img_size: Optional[int]
    input_size: Optional[Sequence[int]]
    crop_pct: Optional[float]
    interpolation: str
    mean: Optional[Sequence[float]]
    std: Optional[Sequence[float]]
    batch_size: int
    validation_batch_size: Optional[int]
    workers: int
    pin_mem: bool
    #: What chose ``--dataset`` when it was not given (``'the default of --dataset'``, ``"the resumed run's record"``
    #: with another ``--data-dir``); None when given (command line, ``-c`` file). Only a dataset given is rendered
    #: into ``--data-dir`` (`data.resolve_dataset`).
    dataset_chosen_by: Optional[str] = None


@dataclass(frozen=True)
class AugmentOptions:
    """The training loader's augmentation of the clean images, and Mixup/CutMix with label smoothing."""

    no_aug: bool
    scale: Sequence[float]
    ratio: Sequence[float]
    hflip: float
    vflip: float
    train_crop_mode: Optional[str]
    train_interpolation: str
    color_jitter: float
    color_jitter_prob: Optional[float]
    grayscale_prob: Optional[float]
    gaussian_blur_prob: Optional[float]
    aa: Optional[str]
    aug_repeats: float
    reprob: float
    remode: str
    recount: int
    worker_seeding: str
    mixup: float
    cutmix: float
    cutmix_minmax: Optional[Sequence[float]]
    mixup_prob: float
    mixup_switch_prob: float
    mixup_mode: str
    mixup_off_epoch: int
    smoothing: float


@dataclass(frozen=True)
class OptimizerOptions:
    """The optimizer, its learning rate (``lr`` is None until resolved from the base rate and the global batch),
    gradient clipping and accumulation; named as `timm.optim.optimizer_kwargs` reads them."""

    opt: str
    opt_eps: Optional[float]
    opt_betas: Optional[Sequence[float]]
    opt_kwargs: Mapping[str, Any]
    lr: Optional[float]
    lr_base: float
    lr_base_size: int
    lr_base_scale: str
    momentum: float
    weight_decay: float
    wd_all_params: bool
    layer_decay: Optional[float]
    layer_decay_min_scale: Optional[float]
    layer_decay_no_opt_scale: Optional[float]
    clip_grad: Optional[float]
    clip_mode: str
    skip_nonfinite: int
    grad_accum_steps: int


@dataclass(frozen=True)
class ScheduleOptions:
    """The epochs and the learning-rate schedule, named as `timm.scheduler.scheduler_kwargs` reads them (``seed``
    seeds the lr noise), with ``--same-budget`` and the running-statistics epochs."""

    sched: str
    sched_on_updates: bool
    lr_noise: Optional[Sequence[float]]
    lr_noise_pct: float
    lr_noise_std: float
    lr_cycle_mul: float
    lr_cycle_decay: float
    lr_cycle_limit: int
    lr_k_decay: float
    epochs: int
    decay_milestones: Sequence[int]
    decay_epochs: float
    decay_rate: float
    warmup_epochs: int
    warmup_prefix: bool
    cooldown_epochs: int
    patience_epochs: int
    warmup_lr: float
    min_lr: float
    same_budget: bool
    running_stats_epochs: int
    seed: int


@dataclass(frozen=True)
class RuntimeOptions:
    """Where and how the run computes: the device, mixed precision, the seed and the processes (``rank``,
    ``world_size``, ``local_rank`` and ``distributed`` are set once the distributed device is set up)."""

    device: Optional[str]
    amp: bool
    amp_dtype: str
    seed: int
    rank: int = 0
    world_size: int = 1
    local_rank: int = 0
    distributed: bool = False


@dataclass(frozen=True)
class ValidationOptions:
    """Each epoch's validation: the robust validation's PGD attack (the training attack's ε, step, norm and
    targeting where no ``--val-attack-*`` option sets its own), its images, and the metric that ranks checkpoints
    (None until resolved from the method)."""

    attack_eps: float
    attack_step: float
    attack_steps: int
    attack_norm: str
    attack_targeted: bool
    num_samples: Optional[int]
    eval_metric: Optional[str]


@dataclass(frozen=True)
class OutputOptions:
    """The run folder and what is written and logged into it: checkpoints kept, recovery checkpoints, the log."""

    output: str
    experiment: str
    checkpoint_hist: int
    recovery_interval: int
    log_interval: int
    no_progress: bool


@dataclass(frozen=True)
class ResumeOptions:
    """Resuming a run from one of its checkpoints (``resume`` empty: a new run)."""

    resume: str
    resume_from_earlier: bool
    resume_with_changes: bool
    no_resume_opt: bool
    #: The command's option names: what a checkpoint's record is read for.
    option_names: FrozenSet[str] = frozenset()


@dataclass(frozen=True)
class TrackingOptions:
    """Experiment tracking with Weights & Biases."""

    log_wandb: bool
    wandb_project: Optional[str]
    wandb_tags: Sequence[str]
    wandb_resume_id: str


@dataclass(frozen=True)
class TrainOptions:
    """Every option of a training run, by group, with the method that trains it.

    Attributes:
        method_options: The method's own options (its `options_class`), checked by the method.
        attack: The training attack's options (`TrainingAttackOptions`).
        recorded: The run's arguments as parsed (the command's namespace): the data its checkpoints and Weights &
            Biases config record, with what the build resolves set on a copy (`recorded.recorded_with`); never read
            as configuration.
        plan: Only measure the run's budget (``--plan``), projected to `plan_world_size` processes when given.
    """

    method: str
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
    recorded: Any
    plan: bool = False
    plan_world_size: Optional[int] = None

    @property
    def run_name(self) -> str:
        """The name of a new run's folder under ``--output``: ``--experiment``, else ``<model>-<method>``."""
        return self.output.experiment or f'{self.model.model.replace("/", "_")}-{self.method}'
