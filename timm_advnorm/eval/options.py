"""What an evaluation is told, as typed, frozen options: built once from the command line and read by the library.

Each field that a command-line option fills declares it (`task.method_options.option`: the flag's help, type and
other parser arguments, its default the field's), as the training options do (`timm_advnorm.train.options`):
``--metric-samples`` is ``CheckOptions.metric_samples``. The command generates its parser from these declarations,
parses and checks its arguments, then fills every group by option name in one conversion
(`timm_advnorm.commands.validate.eval_options`); nothing below it sees the parsed command line. An option whose
default the command resolves (``--device``, ``--workers``, ``--sanity``) is None until then. The options are grouped
by what reads them: the model to build (`EvalModelOptions`), the data
and its subset (`EvalDataOptions`), the preprocessing overrides (`PreprocessingOptions`), how the work runs
(`EvalRuntimeOptions`), the attacks (`AttackOptions`), what the plan runs besides them (`CheckOptions`), the
mixture-BN variants (`VariantOptions`) and the files written (`EvalOutputOptions`). A value resolved while building an
evaluation makes a new options object (`dataclasses.replace`), never changes the one given. (Training's groups of
the same kind are `timm_advnorm.train.options`; the names say which command a group belongs to.)
"""
from dataclasses import dataclass, field
from typing import Any, Dict, Mapping, Optional, Tuple

from timm.utils import ParseKwargs

from ..arg_types import non_negative_int, pixel_step, positive_int, probability
from ..attacks.base import DEFAULT_EPS
from ..attacks.bim import GALLOWAY_EPS
from ..task.method_options import option
from .plan.sanity_budget import MIN_QUERIES, MIN_STEPS
from .plan.stage_plan import SanityBudget
from .plan.variants import DEFAULT_GAMMAS, INTERPOLATIONS
from .protocols.protocol import list_protocols
from .recorded import DataRecord
from .run.subsets import SUBSETS

__all__ = ['LOGGER', 'SANITY_MODES', 'DEFAULT_WORKERS', 'EvalModelOptions', 'EvalDataOptions',
           'PreprocessingOptions', 'EvalRuntimeOptions', 'AttackOptions', 'CheckOptions', 'VariantOptions',
           'EvalOutputOptions', 'EvalOptions', 'OPTIONS_CLASSES']

#: The logger of the evaluation's progress and results (as timm's ``validate.py`` logs under ``validate``).
LOGGER = 'validate_adv'
#: How the sanity probes are sized (`CheckOptions.sanity`): to a budget, the complete battery, or none.
SANITY_MODES = ('budget', 'full', 'off')
#: ``--workers`` when not given, lowered to the CPUs this process may use (`usage.default_workers`).
DEFAULT_WORKERS = 4
#: The complete battery of sanity probes, whose sizes the probe options' help names: its sweep is its ε multiples
#: and the huge budget.
_FULL_PROBES = SanityBudget()


def _gammas_help() -> str:
    return (f'Adversarial-branch weights: 0 clean branch, 1 adversarial branch, in between interpolations (NoFrost '
            f'Fig. 2 sweeps [0, 1]); refused for a model without mixture BN (default: '
            f'{" ".join(f"{g:g}" for g in DEFAULT_GAMMAS)}).')


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

    name: Optional[str] = option(None, 'timm model name, hf-hub:ORG/NAME or local-dir:PATH (default: the checkpoint\'s '
                                       'arch).', flags=('--model', '-m'), dest='model', metavar='NAME')
    checkpoint: str = option('', 'Checkpoint to evaluate. Of a train_adv.py checkpoint, the dataset (with its root, '
                                 'split and class map), preprocessing and inference branch its run recorded are used '
                                 'unless given here; the log says which, and names each option given against the '
                                 'record.', metavar='PATH')
    pretrained: bool = option(False, 'Load the model\'s pretrained weights.')
    use_ema: bool = option(False, 'Evaluate the EMA weights of the checkpoint.')
    branch: Optional[str] = option(None, 'Evaluate one branch of a mixture-BN checkpoint as the plain timm model.',
                                   choices=('clean', 'adv'))
    num_classes: Optional[int] = option(None, 'Number of classes.')
    kwargs: Mapping[str, Any] = option({}, 'Extra model arguments.', dest='model_kwargs')


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

    dataset: str = option('', '"digits", "mnist5k" or "mnist" (built in, no download) or any timm dataset name '
                              '(default: a timm-advnorm-train --checkpoint\'s, else an image folder).')
    data_dir: Optional[str] = option(None, 'Dataset root.')
    split: str = option('validation', 'Split to evaluate; of a folder dataset, a subfolder that must exist (val, '
                                      'valid, validation, eval, evaluation stand for one another; \'\' is the root).',
                        dest='val_split', aliases=('--split',))
    class_map: str = option('', 'Class map file for folder datasets.')
    num_samples: int = option(0, 'Size of the seeded evaluation subset (0: the whole split).', type=non_negative_int)
    subset: Optional[str] = option(None, 'Evaluate a fixed list of images instead of a seeded draw: robustbench = the '
                                         '5000 ImageNet validation images of RobustBench\'s leaderboard, in its order '
                                         '(--num-samples N takes its first N, as RobustBench does).',
                                   choices=lambda: list(SUBSETS))
    skip_bad_images: bool = option(
        False, 'The subset\'s images are decoded before the evaluation; a file that fails (corrupt, truncated, not an '
               'image) is an error naming it, as timm\'s loader would silently evaluate the next image in its place. '
               'With this flag such files are skipped: the subset takes the next readable images of the seeded order, '
               'and the results list the skipped files (skipped_images).')
    #: One option per out-of-distribution set, made from their registry (`commands.validate`), as training's method
    #: groups are from the registered methods.
    ood_folders: Mapping[str, str] = field(default_factory=dict)
    record: DataRecord = field(default_factory=DataRecord)


@dataclass(frozen=True)
class PreprocessingOptions:
    """The preprocessing the command line overrides (None or '': the model's own), in timm's argument names."""

    img_size: Optional[int] = option(None, 'Input image size.')
    input_size: Optional[Tuple[int, int, int]] = option(None, 'Input dimensions (e.g. 3 224 224; default: the '
                                                              'model\'s).')
    interpolation: str = option('', 'Resize interpolation of evaluated images (default: the model\'s).')
    crop_pct: Optional[float] = option(None, 'Centre-crop fraction of evaluated images (default: the model\'s).')
    mean: Optional[Tuple[float, ...]] = option(None, 'Override dataset mean.')
    std: Optional[Tuple[float, ...]] = option(None, 'Override dataset std.')

    def as_args(self) -> Dict[str, Any]:
        """The overrides as the argument dict `timm.data.resolve_data_config` and
        `data.preprocessing.explicit_preprocessing` read (sequences as lists, as the command line gives them)."""
        return {key: list(value) if isinstance(value, tuple) else value for key, value in vars(self).items()}


@dataclass(frozen=True)
class EvalRuntimeOptions:
    """How the evaluation runs.

    Attributes:
        device: The device (``cuda``, ``cpu``, ...; None until the command resolves it).
        seed: Seed of the subset, the targets and the attacks.
        batch_size: Batch size per process.
        workers: Data loading workers (None until the command resolves it).
        pin_memory: Pin CPU memory in the loader.
        channels_last: Channels-last memory format.
        amp: Forwards under autocast, in `amp_dtype` (`autocast`).
        amp_dtype: The autocast dtype's name (`usage.AMP_DTYPES`).
        fold_bn: Fold BN into convolutions when attacking.
        progress: Show progress bars (where the environment shows them at all).
    """

    device: Optional[str] = option(None, 'Device (default: cuda if available, else cpu).')
    seed: int = option(42, 'Seed of the subset, targets and attacks.')
    batch_size: int = option(128, 'Batch size per process.')
    workers: Optional[int] = option(None, f'Data loading workers (default: {DEFAULT_WORKERS}, at most the CPUs this '
                                          f'process may use).')
    pin_memory: bool = option(False, 'Pin CPU memory in the loader.', dest='pin_mem')
    channels_last: bool = option(False, 'Channels-last memory format.')
    amp: bool = option(False, 'Forwards under autocast (--amp-dtype).')
    amp_dtype: str = option('bfloat16', 'Autocast dtype (float16 input gradients may underflow).')
    fold_bn: bool = option(True, 'Do not fold BN into convolutions when attacking.', dest='no_fold_bn',
                           off_switch=True)
    progress: bool = option(True, 'No progress bar (the evaluation\'s, in passes, which shows where the running attack '
                                  'is: sub-attack, target, restart, iteration or query).', dest='no_progress',
                            off_switch=True)

    @property
    def autocast(self) -> Optional[str]:
        """The autocast dtype's name of forwards under autocast; None: full precision."""
        return self.amp_dtype if self.amp else None


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

    protocol: Optional[str] = option(None, 'Named protocol (default: xie2020 unless --attacks is given).',
                                     choices=list_protocols)
    attacks: Tuple[str, ...] = option((), 'Registered attack names to run instead of a protocol.', nargs='+',
                                      metavar='NAME')
    eps: Optional[float] = option(None, f'Budget on the 0-255 scale: 8 means 8/255 (default: the protocol\'s; '
                                        f'{DEFAULT_EPS:g} with --attacks, but bim-linf and bim-l2 at the galloway '
                                        f'protocol\'s {GALLOWAY_EPS:g} of the standardized input, resolved from the '
                                        f'model\'s std). A value in (0, 1) is refused as one of the [0, 1] scale.',
                                  dest='attack_eps', aliases=('--eps',), metavar='EPS')
    step: Optional[float] = option(None, 'Step size on the 0-255 scale (default: the protocol\'s or the attack\'s). A '
                                         'value in (0, 0.1) is refused as one of the [0, 1] scale.',
                                   dest='attack_step', aliases=('--step',), type=pixel_step, metavar='STEP')
    steps: Tuple[int, ...] = option((), 'Iterations (default: the protocol\'s or the attack\'s); with --attacks, '
                                        'several counts make a sweep (one run per attack when they share a step: see '
                                        '--separate-budgets).', dest='attack_steps', aliases=('--steps',), type=int,
                                    nargs='+', metavar='N')
    norm: Optional[str] = option(None, 'Threat-model norm (default: the protocol\'s or the attack\'s).',
                                 dest='attack_norm', aliases=('--norm',))
    targeted: bool = option(False, 'With --attacks: targeted, the target uniform among the other classes.',
                            dest='attack_targeted', aliases=('--targeted',))
    cascade: bool = option(False, 'With --attacks: each attack only sees the samples the previous ones did not break.')
    kwargs: Mapping[str, Any] = option({}, 'With --attacks: extra constructor arguments of every attack (key=value), '
                                           'such as step_rule=fixed; not those an option sets (eps, step, steps, norm, '
                                           'targeted: give --attack-eps, ...; seed, fold_bn, autocast_dtype, space).',
                                       dest='attack_kwargs', nargs='*', action=ParseKwargs)
    reduced: bool = option(False, 'Smoke-test budgets: the cube root of every iteration and query budget (2000 -> '
                                  '13); results name the budgets that ran and say "reduced".')
    max_steps: Optional[int] = option(None, 'Cap on every attack\'s iterations.', type=int)
    max_queries: Optional[int] = option(None, 'Cap on every black-box attack\'s queries.', type=int)
    share_budgets: bool = option(True, 'Run PGD attacks that differ only in iterations each from its own random start, '
                                       'instead of reading the shorter ones off one run of the longest.',
                                 dest='separate_budgets', off_switch=True)


@dataclass(frozen=True)
class CheckOptions:
    """What the evaluation runs besides the attacks: sanity probes, robustness metrics and the AMP check.

    Attributes:
        sanity: The probes' mode: ``budget``, ``full`` or ``off`` (None until the command resolves it).
        sanity_samples: The probes' samples given (None: the budget's), kept as they are by the budget
            (`sanity_pinned`), as are `sanity_steps` and `sanity_queries`.
        metrics: Robustness metrics (None: the protocol's).
        metric_samples: Compute the metrics on the first N samples only (None: every sample).
        amp_samples: Samples re-run in fp32 to check an AMP evaluation (0: no check).
        amp_tolerance: Largest accuracy difference of that check that passes.
        strict_sanity: A failed sanity check makes the command's exit status 1.
    """

    sanity: Optional[str] = option(
        None, 'Sanity probes: budget (default) = at most a quarter of the requested attacks\' cost (forward/backward '
              'passes): fewer samples first, then fewer queries, iterations and ε points, and a probe that cannot run '
              f'meaningfully within it is skipped and reported as not run; full = the complete battery '
              f'({_FULL_PROBES.samples} samples, PGD-{_FULL_PROBES.steps} over {len(_FULL_PROBES.eps_factors) + 1} ε, '
              f'PGD-{4 * _FULL_PROBES.steps}, Square-{_FULL_PROBES.queries}); off = none.', choices=SANITY_MODES)
    sanity_samples: Optional[int] = option(
        None, f'Samples of the sanity probes (default {_FULL_PROBES.samples}, fewer under the budget); a value given '
              'replaces the budgeted one; 0 is --sanity off.', type=non_negative_int, metavar='N')
    sanity_steps: Optional[int] = option(
        None, f'PGD iterations of the probes\' ε-sweep, 4x as many for the iteration check (default '
              f'{_FULL_PROBES.steps}, as few as {MIN_STEPS} under the budget); a value given replaces the budgeted '
              'one.', type=positive_int, metavar='N')
    sanity_queries: Optional[int] = option(
        None, f'Square queries of the black-box probe (default NoFrost\'s {_FULL_PROBES.queries}, as few as '
              f'{MIN_QUERIES} under the budget); a value given replaces the budgeted one.', type=positive_int,
        metavar='N')
    metrics: Optional[Tuple[str, ...]] = option(None, 'Robustness metrics: margin thickness smoothness (default: the '
                                                      'protocol\'s).', nargs='*', metavar='NAME')
    metric_samples: Optional[int] = option(None, 'Compute thickness and smoothness on the first N samples only '
                                                 '(default: every sample).', type=positive_int, metavar='N')
    amp_samples: int = option(0, 'With --amp: re-run the clean pass and first white-box attack in fp32 on N samples '
                                 'and report the difference.', dest='verify_amp', type=non_negative_int, metavar='N')
    amp_tolerance: float = option(0.02, 'Largest accuracy difference of --verify-amp that passes, as a fraction in '
                                        '[0, 1].', type=probability, metavar='FRAC')
    strict_sanity: bool = option(False, 'Exit with status 1 when a sanity check fails.')

    @property
    def sanity_pinned(self) -> Dict[str, int]:
        """The probe budget's values given, by `plan.SanityBudget` field (``samples``, ``steps``, ``queries``): the
        budget keeps them as they are."""
        given = dict(samples=self.sanity_samples, steps=self.sanity_steps, queries=self.sanity_queries)
        return {name: value for name, value in given.items() if value is not None}


@dataclass(frozen=True)
class VariantOptions:
    """The variants of a mixture-BN model: adversarial-branch weights, and interpolations at the interior ones; None
    where not given (the defaults, `variants.DEFAULT_GAMMAS` and every interpolation): given to a model without
    mixture BN, which has one variant, they are refused (`variants.model_variants`)."""

    gammas: Optional[Tuple[float, ...]] = option(None, _gammas_help, type=float, nargs='+', metavar='G')
    interpolations: Optional[Tuple[str, ...]] = option(None, f'Interpolations evaluated at interior gammas; refused '
                                                             f'without one (default: {" ".join(INTERPOLATIONS)}).',
                                                       nargs='+', choices=INTERPOLATIONS)


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

    results_file: str = option('', 'Results: JSON at PATH with suffix .json, CSV with suffix .csv.', metavar='PATH')
    plot_dir: str = option('', 'Write PNG plots here.', metavar='DIR')
    plot_note: str = option('', 'A line atop every plot\'s title, saying what the run was for (e.g. "smoke run: the '
                                'numbers mean nothing").', metavar='TEXT')
    bn_layer: Optional[str] = option(None, 'Layer of the BN statistics plot.', metavar='NAME')
    resume_state: str = option('', 'Append finished work here and resume from it (one file per rank under torchrun).',
                               metavar='PATH')
    overwrite: bool = option(False, 'Replace existing results and plots. Without it an existing file is an error '
                                    'before the evaluation, and one that another run writes meanwhile is kept: this '
                                    'run\'s files then go to names tagged kept-<tag>, and it exits with status 2 '
                                    'saying where.')
    config_file: str = option('', 'YAML file of argument defaults (keys: long option names with underscores); '
                                  'command-line values win.', dest='config')


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
    plan_only: bool = option(
        False, 'Do not evaluate: build the evaluation, time the model\'s forward+backward passes and an attack '
               'update on one batch on this device and print the plan (each stage\'s forward/backward passes and '
               'share of the cost, the sanity probes\' cost against the attacks\', the time projected from the '
               'measured passes); no attack runs. Every evaluation prints the plan before it runs, its time '
               'projected from the measured passes (with a warning when over an hour), and records it in the results '
               '(plan).', dest='plan')


#: The options classes whose fields declare the evaluation command's options.
OPTIONS_CLASSES = (EvalModelOptions, EvalDataOptions, PreprocessingOptions, EvalRuntimeOptions, AttackOptions,
                   CheckOptions, VariantOptions, EvalOutputOptions, EvalOptions)
