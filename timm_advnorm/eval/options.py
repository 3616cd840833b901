"""What an evaluation is told, as typed, frozen options: built once from the command line and read by the library.

The command parses and checks its arguments, then converts them into one `EvalOptions`; nothing below it sees the
parsed command line. The options are grouped by what reads them: the model to build (`EvalModelOptions`), the data
and its subset (`EvalDataOptions`), the preprocessing overrides (`PreprocessingOptions`), how the work runs
(`EvalRuntimeOptions`), the attacks (`AttackOptions`), what the plan runs besides them (`CheckOptions`), the
mixture-BN variants (`VariantOptions`) and the files written (`EvalOutputOptions`). A value resolved while building an
evaluation makes a new options object (`dataclasses.replace`), never changes the one given. (Training's groups of
the same kind are `timm_advnorm.train.options`; the names say which command a group belongs to.)
"""
from dataclasses import dataclass, field
from typing import Any, Dict, Mapping, Optional, Tuple

from .recorded import DataRecord

__all__ = ['LOGGER', 'SANITY_MODES', 'EvalModelOptions', 'EvalDataOptions', 'PreprocessingOptions',
           'EvalRuntimeOptions', 'AttackOptions', 'CheckOptions', 'VariantOptions', 'EvalOutputOptions', 'EvalOptions']

#: The logger of the evaluation's progress and results (as timm's ``validate.py`` logs under ``validate``).
LOGGER = 'validate_adv'
#: How the sanity probes are sized (`CheckOptions.sanity`): to a budget, the complete battery, or none.
SANITY_MODES = ('budget', 'full', 'off')


@dataclass(frozen=True)
class EvalModelOptions:
    """The model to evaluate.

    Attributes:
        name: A timm model name, ``hf-hub:ORG/NAME`` or ``local-dir:PATH`` (None: the checkpoint's architecture).
        checkpoint: The checkpoint to evaluate ('' for none).
        pretrained: Load the model's pretrained weights.
        use_ema: Evaluate the checkpoint's EMA weights.
        branch: Evaluate one branch of a mixture-BN checkpoint as the plain timm model (``clean``, ``adv``).
        num_classes: The classes asked for (None: the checkpoint's, the built-in dataset's or the model's default).
        kwargs: Further model arguments.
    """

    name: Optional[str] = None
    checkpoint: str = ''
    pretrained: bool = False
    use_ema: bool = False
    branch: Optional[str] = None
    num_classes: Optional[int] = None
    kwargs: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class EvalDataOptions:
    """The evaluation data and the subset of it evaluated.

    Attributes:
        dataset: ``digits``, ``mnist5k``, ``mnist``, a timm dataset name, or '' for an image folder.
        data_dir: The dataset root (None: not given).
        split: The split evaluated.
        class_map: The class map file of a folder dataset ('' for none).
        num_samples: Size of the seeded subset (0: the whole split).
        subset: A named fixed list of images (`subsets.SUBSETS`) instead of a seeded draw.
        skip_bad_images: Skip unreadable images for the next readable ones instead of failing.
        ood_folders: The folder of each out-of-distribution set given, by set name (`ood.OOD_DATASETS`).
        record: What a training checkpoint's record set of these options, and what was given against it.
    """

    dataset: str = ''
    data_dir: Optional[str] = None
    split: str = 'validation'
    class_map: str = ''
    num_samples: int = 0
    subset: Optional[str] = None
    skip_bad_images: bool = False
    ood_folders: Mapping[str, str] = field(default_factory=dict)
    record: DataRecord = field(default_factory=DataRecord)


@dataclass(frozen=True)
class PreprocessingOptions:
    """The preprocessing the command line overrides (None or '': the model's own), in timm's argument names."""

    img_size: Optional[int] = None
    input_size: Optional[Tuple[int, int, int]] = None
    interpolation: str = ''
    crop_pct: Optional[float] = None
    mean: Optional[Tuple[float, ...]] = None
    std: Optional[Tuple[float, ...]] = None

    def as_args(self) -> Dict[str, Any]:
        """The overrides as the argument dict `timm.data.resolve_data_config` and
        `data.preprocessing.explicit_preprocessing` read (sequences as lists, as the command line gives them)."""
        return {key: list(value) if isinstance(value, tuple) else value for key, value in vars(self).items()}


@dataclass(frozen=True)
class EvalRuntimeOptions:
    """How the evaluation runs.

    Attributes:
        device: The device (``cuda``, ``cpu``, ...).
        seed: Seed of the subset, the targets and the attacks.
        batch_size: Batch size per process.
        workers: Data loading workers.
        pin_memory: Pin CPU memory in the loader.
        channels_last: Channels-last memory format.
        amp: The autocast dtype's name (`usage.AMP_DTYPES`) of forwards under autocast; None: full precision.
        fold_bn: Fold BN into convolutions when attacking.
        progress: Show progress bars (where the environment shows them at all).
    """

    device: str = 'cpu'
    seed: int = 42
    batch_size: int = 128
    workers: int = 4
    pin_memory: bool = False
    channels_last: bool = False
    amp: Optional[str] = None
    fold_bn: bool = True
    progress: bool = True


@dataclass(frozen=True)
class AttackOptions:
    """The attacks: a named protocol, or an attack list, with the overrides and reductions of their budgets.

    Attributes:
        protocol: The named protocol (None: ``xie2020`` unless `attacks` are given).
        attacks: Registered attack names run instead of a protocol.
        eps: Budget on the 0-255 scale (None: the protocol's; `attacks.base.DEFAULT_EPS` for an attack list).
        step: Step size on the 0-255 scale (None: the protocol's or the attack's).
        steps: Iterations; several make a sweep of an attack list (empty: the protocol's or the attack's).
        norm: Threat-model norm (None: the protocol's or the attack's).
        targeted: Targeted attacks (attack lists only).
        cascade: Each attack only sees the samples the previous ones did not break (attack lists only).
        kwargs: Extra constructor arguments of every attack of a list.
        reduced: Smoke-test budgets: the cube root of every iteration and query budget.
        max_steps: Cap on every attack's iterations.
        max_queries: Cap on every black-box attack's queries.
        share_budgets: Read PGD attacks that differ only in iterations off one run of the longest.
    """

    protocol: Optional[str] = None
    attacks: Tuple[str, ...] = ()
    eps: Optional[float] = None
    step: Optional[float] = None
    steps: Tuple[int, ...] = ()
    norm: Optional[str] = None
    targeted: bool = False
    cascade: bool = False
    kwargs: Mapping[str, Any] = field(default_factory=dict)
    reduced: bool = False
    max_steps: Optional[int] = None
    max_queries: Optional[int] = None
    share_budgets: bool = True


@dataclass(frozen=True)
class CheckOptions:
    """What the evaluation runs besides the attacks: sanity probes, robustness metrics and the AMP check.

    Attributes:
        sanity: The probes' mode: ``budget``, ``full`` or ``off``.
        sanity_pinned: The probe budget's values given (`plan.SanityBudget` fields: ``samples``, ``steps``,
            ``queries``), kept as they are by the budget.
        metrics: Robustness metrics (None: the protocol's).
        metric_samples: Compute the metrics on the first N samples only (None: every sample).
        amp_samples: Samples re-run in fp32 to check an AMP evaluation (0: no check).
        amp_tolerance: Largest accuracy difference of that check that passes.
    """

    sanity: str = 'budget'
    sanity_pinned: Mapping[str, int] = field(default_factory=dict)
    metrics: Optional[Tuple[str, ...]] = None
    metric_samples: Optional[int] = None
    amp_samples: int = 0
    amp_tolerance: float = 0.02


@dataclass(frozen=True)
class VariantOptions:
    """The variants of a mixture-BN model: adversarial-branch weights, and interpolations at the interior ones; None
    where not given (the defaults, `variants.DEFAULT_GAMMAS` and every interpolation): given to a model without
    mixture BN, which has one variant, they are refused (`variants.model_variants`)."""

    gammas: Optional[Tuple[float, ...]] = None
    interpolations: Optional[Tuple[str, ...]] = None


@dataclass(frozen=True)
class EvalOutputOptions:
    """The files an evaluation writes, and the files it must not write over.

    Attributes:
        results_file: Results path: JSON with suffix .json, CSV with suffix .csv ('' for none).
        plot_dir: Folder of the PNG plots ('' for none).
        plot_note: A line atop every plot's title, saying what the run was for ('' for none).
        bn_layer: Layer of the BN statistics plot (None: the plot's choice).
        resume_state: State file that makes the evaluation resumable ('' for none).
        overwrite: Replace existing results and plots.
        config_file: The configuration file the options came from ('' for none): an input, never an output.
    """

    results_file: str = ''
    plot_dir: str = ''
    plot_note: str = ''
    bn_layer: Optional[str] = None
    resume_state: str = ''
    overwrite: bool = False
    config_file: str = ''


@dataclass(frozen=True)
class EvalOptions:
    """Everything an evaluation is told.

    Attributes:
        plan_only: Build the evaluation, run its first batch and report the plan; evaluate nothing else.
    """

    model: EvalModelOptions
    data: EvalDataOptions
    preprocessing: PreprocessingOptions = field(default_factory=PreprocessingOptions)
    runtime: EvalRuntimeOptions = field(default_factory=EvalRuntimeOptions)
    attacks: AttackOptions = field(default_factory=AttackOptions)
    checks: CheckOptions = field(default_factory=CheckOptions)
    variants: VariantOptions = field(default_factory=VariantOptions)
    outputs: EvalOutputOptions = field(default_factory=EvalOutputOptions)
    plan_only: bool = False
