"""``timm-advnorm-validate`` / ``validate_adv.py`` / ``python -m timm_advnorm.eval``: robust evaluation of timm models
in the style of timm's ``validate.py``.

Evaluates a model (a timm name, ``hf-hub:``/``local-dir:`` name, or a `train_adv.py` checkpoint) against a named
protocol (``xie2020``, ``robustbench``, ``nofrost``, ``galloway``, ``corruptions``, ``imagenet-r``, ``imagenet-a``,
``imagenet-sketch``, ``nofrost-star``; see `timm_advnorm.eval.protocols.protocol`) or an explicit attack list, on a fixed
seeded subset of a dataset, in eval mode with the model's own preprocessing. Out-of-distribution sets are read from
folders of their own (``--imagenet-r-dir``, ``--imagenet-a-dir``, ``--imagenet-sketch-dir``; `timm_advnorm.eval.protocols.ood`),
each a run of its own, all reported in one results file. Mixture-BN models are evaluated per branch and over a γ
sweep of feature and logit interpolation. Sanity checks run with every evaluation, their probes by default within a
quarter of the attacks' cost (``--sanity``). Before it runs, the evaluation prints its plan (passes and share of each
stage, time projected from one batch's measured passes of the model, with a warning naming what shortens it when over
an hour, then from the first batch); ``--plan`` prints it and stops. Attacks report their progress (sub-attack,
target, restart, iteration or query) in the progress bar. Results go to JSON + CSV, plots to PNG;
a state file makes a long evaluation resumable; ``torchrun`` shards it across processes.

The run reads as four steps: parse (this module: the options, with defaults from a ``-c`` YAML file, and as one
``<prog>: error:`` line what argparse cannot see: options that do not go together, counts out of range, a device that
is none, mean or std of the wrong length, a dataset root that is needed but not given, and out-of-distribution folders
that the protocol does not read or lacks), build (`timm_advnorm.eval.run.build`: model, protocol and plan, data runs,
state file), run (`eval.runner`, then the records of every rank gathered) and report (`eval.assemble` builds the
typed `eval.schema.EvalResults`; `eval.report` writes and logs it): `timm_advnorm.eval.validate`.

SIGINT and SIGTERM stop it with one line that says what the ``--resume-state`` file keeps and how to resume.

Bad input (arguments, model, protocol, variants, data, outputs) is found before anything is written: the output
folders are only created when the results are. Results never replace existing files without ``--overwrite``, not even
those of a run that finished meanwhile: its files are then kept under other names, and the run says where and exits
with status 2.

Examples:
    timm-advnorm-validate --checkpoint model_best.pth.tar --data-dir /imagenet --protocol xie2020 \\
        --gammas 0 0.5 1 --results-file results/xie2020.json --plot-dir results/plots
    torchrun --nproc_per_node 8 -m timm_advnorm.eval -c eval.yaml --resume-state results/state.jsonl --amp
"""
import argparse
import logging
import sys
from typing import Collection, Dict, Optional, Sequence

import torch
from timm.utils import ParseKwargs, setup_default_logging

from ..arg_types import non_negative_int, pixel_budget, pixel_step, positive_int, probability
from ..attacks.base import DEFAULT_EPS
from ..attacks.bim import GALLOWAY_EPS
from ..data import builtin_dataset, list_builtin_datasets
from ..data.folders import check_class_map_file
from ..data.names import check_dataset_name
from ..eval.options import (
    LOGGER, SANITY_MODES, AttackOptions, CheckOptions, EvalDataOptions, EvalModelOptions, EvalOptions,
    EvalOutputOptions, EvalRuntimeOptions, PreprocessingOptions, VariantOptions)
from ..eval.plan.sanity_budget import MIN_QUERIES, MIN_STEPS
from ..eval.plan.stage_plan import SanityBudget
from ..eval.plan.variants import DEFAULT_GAMMAS, INTERPOLATIONS
from ..eval.protocols.ood import OOD_DATASETS, OODDataset, get_ood_dataset
from ..eval.protocols.protocol import PROTOCOLS, get_protocol, list_protocols
from ..eval.recorded import DataRecord, recorded_data
from ..eval.run.subsets import SUBSETS
from ..eval.validate import validate
from ..usage import check_device, check_normalization_lengths, default_workers
from .options import (
    AMP, AMP_DTYPE, ATTACK_EPS, ATTACK_NORM, ATTACK_STEP, ATTACK_STEPS, ATTACK_TARGETED, BATCH_SIZE, CHANNELS_LAST,
    CLASS_MAP, CONFIG, DATA_DIR, DATASET, DEVICE, MODEL, MODEL_KWARGS, NO_PROGRESS, NUM_CLASSES, NUM_SAMPLES, PIN_MEM,
    PLAN, PRETRAINED, SEED, SKIP_BAD_IMAGES, VAL_SPLIT, WORKERS, add_preprocessing_args)
from .parser import ArgumentParser, add_hidden_alias, given_options, parse_with_config, run_cli

__all__ = ['get_args_parser', 'parse_args', 'eval_options', 'main', 'run', 'console_main', 'PROG']

PROG = 'timm-advnorm-validate'
_logger = logging.getLogger(LOGGER)
#: ``--workers`` when not given, lowered to the CPUs this process may use (`usage.default_workers`).
DEFAULT_WORKERS = 4
#: The probes' options and the `eval.sanity_budget.SanityBudget` field each sets.
SANITY_OPTIONS = {'sanity_samples': 'samples', 'sanity_steps': 'steps', 'sanity_queries': 'queries'}


def get_args_parser(prog: str = PROG) -> ArgumentParser:
    """The command-line parser (importable, so tests and wrappers can drive the script)."""
    parser = ArgumentParser(prog=prog, description='Robust evaluation of timm models (timm-advnorm).')
    CONFIG.add(parser,
               help='YAML file of argument defaults (keys: long option names with underscores); '
                    'command-line values win.')

    group = parser.add_argument_group('Dataset')
    group.add_argument('data', nargs='?', metavar='DIR', help='Dataset root (same as --data-dir).')
    DATA_DIR.add(group, help='Dataset root.')
    DATASET.add(group, default='',
                help='"digits", "mnist5k" or "mnist" (built in, no download) or any timm dataset name (default: '
                     'a timm-advnorm-train --checkpoint\'s, else an image folder).')
    VAL_SPLIT.add(group,
                  help='Split to evaluate; of a folder dataset, a subfolder that must exist (val, valid, '
                       'validation, eval, evaluation stand for one another; \'\' is the root).')
    add_hidden_alias(parser, group, '--split', 'val_split')
    CLASS_MAP.add(group, help='Class map file for folder datasets.')
    NUM_SAMPLES.add(group, type=non_negative_int, default=0,
                    help='Size of the seeded evaluation subset (0: the whole split).')
    group.add_argument('--subset', default=None, choices=list(SUBSETS),
                       help='Evaluate a fixed list of images instead of a seeded draw: robustbench = the 5000 ImageNet '
                            'validation images of RobustBench\'s leaderboard, in its order (--num-samples N takes its '
                            'first N, as RobustBench does).')
    SEED.add(group, help='Seed of the subset, targets and attacks.')
    for dataset in OOD_DATASETS.values():
        readers = ', '.join(name for name, protocol in PROTOCOLS.items() if dataset.name in protocol.datasets)
        group.add_argument(dataset.option, default=None, metavar='DIR',
                           help=f'{dataset.title}: a folder of {dataset.num_classes} class folders named by wnid, as '
                                f'released (read by --protocol {readers}).')
    SKIP_BAD_IMAGES.add(group,
                        help='The subset\'s images are decoded before the evaluation; a file that fails (corrupt, '
                             'truncated, not an image) is an error naming it, as timm\'s loader would silently '
                             'evaluate the next image in its place. With this flag such files are skipped: the subset takes the '
                             'next readable images of the seeded order, and the results list the skipped files '
                             '(skipped_images).')

    group = parser.add_argument_group('Model')
    MODEL.add(group, '-m', default=None, metavar='NAME',
              help='timm model name, hf-hub:ORG/NAME or local-dir:PATH (default: the checkpoint\'s arch).')
    PRETRAINED.add(group, help='Load the model\'s pretrained weights.')
    group.add_argument('--checkpoint', default='', metavar='PATH',
                       help='Checkpoint to evaluate. Of a train_adv.py checkpoint, the dataset (with its root, split '
                            'and class map), preprocessing and inference branch its run recorded are used unless '
                            'given here; the log says which, and names each option given against the record.')
    group.add_argument('--use-ema', action='store_true', help='Evaluate the EMA weights of the checkpoint.')
    group.add_argument('--branch', default=None, choices=('clean', 'adv'),
                       help='Evaluate one branch of a mixture-BN checkpoint as the plain timm model.')
    NUM_CLASSES.add(group, help='Number of classes.')
    add_preprocessing_args(group, images='evaluated images')
    MODEL_KWARGS.add(group, help='Extra model arguments.')

    group = parser.add_argument_group('Runtime')
    BATCH_SIZE.add(group, default=128, help='Batch size per process.')
    WORKERS.add(group, default=None,
                help=f'Data loading workers (default: {DEFAULT_WORKERS}, at most the CPUs this process may use).')
    PIN_MEM.add(group, help='Pin CPU memory in the loader.')
    DEVICE.add(group, default=None, help='Device (default: cuda if available, else cpu).')
    CHANNELS_LAST.add(group, help='Channels-last memory format.')
    AMP.add(group, help='Forwards under autocast (--amp-dtype).')
    AMP_DTYPE.add(group, help='Autocast dtype (float16 input gradients may underflow).')
    group.add_argument('--verify-amp', type=non_negative_int, default=0, metavar='N',
                       help='With --amp: re-run the clean pass and first white-box attack in fp32 on N samples '
                            'and report the difference.')
    group.add_argument('--amp-tolerance', type=probability, default=0.02, metavar='FRAC',
                       help='Largest accuracy difference of --verify-amp that passes, as a fraction in [0, 1].')
    group.add_argument('--no-fold-bn', action='store_true', help='Do not fold BN into convolutions when attacking.')
    group.add_argument('--separate-budgets', action='store_true',
                       help='Run PGD attacks that differ only in iterations each from its own random start, instead '
                            'of reading the shorter ones off one run of the longest.')
    NO_PROGRESS.add(group, help='No progress bar (the evaluation\'s, in passes, which shows where the running attack '
                                'is: sub-attack, target, restart, iteration or query).')
    PLAN.add(group,
             help='Do not evaluate: build the evaluation, time the model\'s forward+backward passes on one batch '
                  'on this device and print the plan (each stage\'s forward/backward passes and share of the '
                  'cost, the sanity probes\' cost against the attacks\', the time projected from the measured '
                  'passes); no attack runs. Every evaluation prints the plan before it runs, its time projected '
                  'from the measured passes (with a warning when over an hour), and records it in the results (plan).')

    group = parser.add_argument_group('Attacks')
    group.add_argument('--protocol', default=None, choices=list_protocols(),
                       help='Named protocol (default: xie2020 unless --attacks is given).')
    group.add_argument('--attacks', nargs='+', default=None, metavar='NAME',
                       help='Registered attack names to run instead of a protocol.')
    ATTACK_EPS.add(group, default=None, metavar='EPS',
                   help=f'Budget on the 0-255 scale: 8 means 8/255 (default: the protocol\'s; {DEFAULT_EPS:g} with '
                        f'--attacks, but bim-linf and bim-l2 at the galloway protocol\'s {GALLOWAY_EPS:g} of the '
                        'standardized input, resolved from the model\'s std). A value in (0, 1) is refused as one of '
                        'the [0, 1] scale.')
    ATTACK_STEP.add(group, type=pixel_step, default=None, metavar='STEP',
                    help='Step size on the 0-255 scale (default: the protocol\'s or the attack\'s). A value in '
                         '(0, 0.1) is refused as one of the [0, 1] scale.')
    ATTACK_STEPS.add(group, type=int, nargs='+', default=None, metavar='N',
                     help='Iterations (default: the protocol\'s or the attack\'s); with --attacks, several counts '
                          'make a sweep (one run per attack when they share a step: see --separate-budgets).')
    ATTACK_NORM.add(group, default=None, help='Threat-model norm (default: the protocol\'s or the attack\'s).')
    ATTACK_TARGETED.add(group, action='store_true',
                        help='With --attacks: targeted, the target uniform among the other classes.')
    for alias, dest, options in (('--eps', 'attack_eps', dict(type=pixel_budget)),
                                 ('--step', 'attack_step', dict(type=pixel_step)),
                                 ('--steps', 'attack_steps', dict(type=int, nargs='+')),
                                 ('--norm', 'attack_norm', dict(choices=('linf', 'l2'))),
                                 ('--targeted', 'attack_targeted', dict(action='store_true'))):
        add_hidden_alias(parser, group, alias, dest, **options)
    group.add_argument('--cascade', action='store_true',
                       help='With --attacks: each attack only sees the samples the previous ones did not break.')
    group.add_argument('--attack-kwargs', nargs='*', default={}, action=ParseKwargs,
                       help='With --attacks: extra constructor arguments of every attack (key=value), such as '
                            'step_rule=fixed; not those an option sets (eps, step, steps, norm, targeted: give '
                            '--attack-eps, ...; seed, fold_bn, autocast_dtype, space).')
    group.add_argument('--reduced', action='store_true',
                       help='Smoke-test budgets: the cube root of every iteration and query budget (2000 -> 13); '
                            'results name the budgets that ran and say "reduced".')
    group.add_argument('--max-steps', type=int, default=None, help='Cap on every attack\'s iterations.')
    group.add_argument('--max-queries', type=int, default=None, help='Cap on every black-box attack\'s queries.')

    group = parser.add_argument_group('Mixture BN')
    group.add_argument('--gammas', type=float, nargs='+', default=None, metavar='G',
                       help=f'Adversarial-branch weights: 0 clean branch, 1 adversarial branch, in between '
                            f'interpolations (NoFrost Fig. 2 sweeps [0, 1]); refused for a model without mixture BN '
                            f'(default: {" ".join(f"{g:g}" for g in DEFAULT_GAMMAS)}).')
    group.add_argument('--interpolations', nargs='+', default=None, choices=INTERPOLATIONS,
                       help=f'Interpolations evaluated at interior gammas; refused without one (default: '
                            f'{" ".join(INTERPOLATIONS)}).')
    group.add_argument('--bn-layer', default=None, metavar='NAME', help='Layer of the BN statistics plot.')

    group = parser.add_argument_group('Metrics and sanity checks')
    full = SanityBudget()  # the complete battery: its sweep is its ε multiples and the huge budget
    group.add_argument('--metrics', nargs='*', default=None, metavar='NAME',
                       help='Robustness metrics: margin thickness smoothness (default: the protocol\'s).')
    group.add_argument('--metric-samples', type=positive_int, default=None, metavar='N',
                       help='Compute thickness and smoothness on the first N samples only (default: every sample).')
    group.add_argument('--sanity', default=None, choices=SANITY_MODES,
                       help='Sanity probes: budget (default) = at most a quarter of the requested attacks\' cost '
                            '(forward/backward passes): fewer samples first, then fewer queries, iterations and ε '
                            'points, and a probe that cannot run meaningfully within it is skipped and reported as not '
                            f'run; full = the complete battery ({full.samples} samples, PGD-{full.steps} over '
                            f'{len(full.eps_factors) + 1} ε, PGD-{4 * full.steps}, Square-{full.queries}); '
                            'off = none.')
    group.add_argument('--sanity-samples', type=non_negative_int, default=None, metavar='N',
                       help=f'Samples of the sanity probes (default {full.samples}, fewer under the budget); a value '
                            'given replaces the budgeted one; 0 is --sanity off.')
    group.add_argument('--sanity-steps', type=positive_int, default=None, metavar='N',
                       help=f'PGD iterations of the probes\' ε-sweep, 4x as many for the iteration check (default '
                            f'{full.steps}, as few as {MIN_STEPS} under the budget); a value given replaces the '
                            'budgeted one.')
    group.add_argument('--sanity-queries', type=positive_int, default=None, metavar='N',
                       help=f'Square queries of the black-box probe (default NoFrost\'s {full.queries}, as few as '
                            f'{MIN_QUERIES} under the budget); a value given replaces the budgeted one.')
    group.add_argument('--strict-sanity', action='store_true', help='Exit with status 1 when a sanity check fails.')

    group = parser.add_argument_group('Output')
    group.add_argument('--results-file', default='', metavar='PATH',
                       help='Results: JSON at PATH with suffix .json, CSV with suffix .csv.')
    group.add_argument('--plot-dir', default='', metavar='DIR', help='Write PNG plots here.')
    group.add_argument('--plot-note', default='', metavar='TEXT',
                       help='A line atop every plot\'s title, saying what the run was for (e.g. "smoke run: the '
                            'numbers mean nothing").')
    group.add_argument('--resume-state', default='', metavar='PATH',
                       help='Append finished work here and resume from it (one file per rank under torchrun).')
    group.add_argument('--overwrite', action='store_true',
                       help='Replace existing results and plots. Without it an existing file is an error before the '
                            'evaluation, and one that another run writes meanwhile is kept: this run\'s files then go '
                            'to names tagged kept-<tag>, and it exits with status 2 saying where.')
    return parser


# Attack arguments that an option of their own or the evaluation itself sets: given again in --attack-kwargs, the
# attack got them twice (Python's "multiple values for keyword argument 'eps'") or one of the two silently won.
_OWNED_ATTACK_KWARGS = {
    'eps': '--attack-eps (0-255 scale)', 'step': '--attack-step (0-255 scale)', 'steps': '--attack-steps',
    'norm': '--attack-norm', 'targeted': '--attack-targeted', 'seed': '--seed', 'fold_bn': '--no-fold-bn',
    'autocast_dtype': '--amp and --amp-dtype', 'space': "the model's normalization (--mean, --std)",
}


def parse_args(argv: Optional[Sequence[str]] = None, prog: str = PROG) -> argparse.Namespace:
    """Parse `argv`, with defaults from the ``-c`` YAML file if given (command-line values win).

    With a ``train_adv.py`` ``--checkpoint``, the data options it records are the defaults of those neither gives
    (`take_recorded_data`; not for a protocol that runs on an out-of-distribution set); what was taken and
    what was given against the record is kept as ``args.data_record``.
    """
    parser = get_args_parser(prog)
    args, config = parse_with_config(parser, argv)
    if not args.model and not args.checkpoint:
        parser.error('give --model, --checkpoint, or both')
    if args.attacks and args.protocol:
        parser.error('give either --protocol or --attacks, not both')
    args.data_record = (take_recorded_data(args, given_options(parser, argv, config))
                        if args.checkpoint and not _runs_on_ood(args) else DataRecord())
    if (args.attack_kwargs or args.attack_targeted or args.cascade) and not args.attacks:
        parser.error('--attack-kwargs, --attack-targeted and --cascade need --attacks')
    for key, value in (args.attack_kwargs or {}).items():
        if key in _OWNED_ATTACK_KWARGS:
            parser.error(f'--attack-kwargs {key}={value}: {key} is set by {_OWNED_ATTACK_KWARGS[key]}, not by '
                         f'--attack-kwargs')
    if isinstance(args.attack_steps, int):  # a single count from a YAML config
        args.attack_steps = [args.attack_steps]
    if args.attack_steps and (len(set(args.attack_steps)) != len(args.attack_steps) or min(args.attack_steps) < 1):
        # 0 iterations attack nothing: the clean accuracy would be reported as robust accuracy
        parser.error(f'--attack-steps takes distinct counts >= 1 (0 iterations attack nothing), '
                     f'got {args.attack_steps}')
    if args.attack_steps and len(args.attack_steps) > 1 and not args.attacks:
        parser.error('several --attack-steps make a sweep of --attacks; a --protocol takes one count')
    if args.verify_amp and not args.amp:
        parser.error('--verify-amp checks an --amp evaluation; add --amp')
    args.device = args.device or ('cuda' if torch.cuda.is_available() else 'cpu')
    args.workers, note = default_workers(args.workers, DEFAULT_WORKERS)
    if note:
        _logger.info(note)
    _resolve_sanity(parser, args)
    _check_ood_args(parser, args)
    _check_setup_args(parser, args)
    return args


def _resolve_sanity(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """``--sanity`` as given, else ``off`` for ``--sanity-samples 0`` and ``budget`` otherwise. The other probe
    options are unused when the probes are off (a config file may set them for other runs)."""
    if args.sanity_samples == 0:
        if args.sanity not in (None, 'off'):
            parser.error(f'--sanity-samples 0 turns the sanity probes off: it contradicts --sanity {args.sanity}')
        args.sanity = 'off'
    elif args.sanity is None:
        args.sanity = 'budget'


def _runs_on_ood(args: argparse.Namespace) -> bool:
    """Whether the protocol runs on an out-of-distribution set instead of the evaluation data (``--data-dir``)."""
    return bool(args.protocol) and get_protocol(args.protocol).dataset is not None


def _check_ood_args(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """Every out-of-distribution set the protocol reads has its folder, no other set's folder is given (it would not
    be read), and a protocol that runs on such a set is given none of the options of the evaluation data."""
    reads = get_protocol(args.protocol).datasets if args.protocol else ()
    for dataset in OOD_DATASETS.values():
        given = ood_folder(args, dataset) is not None
        if dataset.name in reads and not given:
            parser.error(f'protocol {args.protocol} evaluates {dataset.title}: give its folder (one folder per class, '
                         f'named by wnid) with {dataset.option}')
        if given and dataset.name not in reads:
            readers = ', '.join(name for name, protocol in PROTOCOLS.items() if dataset.name in protocol.datasets)
            parser.error(f'{dataset.option} is read by --protocol {readers}, not by '
                         f'{"protocol " + args.protocol if args.protocol else "an attack list"}')
    if _runs_on_ood(args):
        unused = [option for option, value in (('--data-dir', args.data_dir or args.data), ('--dataset', args.dataset),
                                               ('--class-map', args.class_map), ('--subset', args.subset)) if value]
        if unused:
            folder = get_ood_dataset(get_protocol(args.protocol).dataset).option
            parser.error(f'protocol {args.protocol} reads its images from {folder}: {", ".join(unused)} would not '
                         f'be used')


def _needs_data_dir(dataset: str) -> bool:
    """Whether `dataset` needs ``--data-dir``: all but the built-in digits, mnist5k and mnist (rendered into the user
    cache) and Hugging Face ``hfds/`` datasets (read through the Hugging Face cache)."""
    return builtin_dataset(dataset) is None and not dataset.lower().startswith('hfds/')


def _check_setup_args(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """Usage errors argparse cannot see, caught before anything is loaded: the device, the normalization
    lengths (timm would only assert), the dataset name, the class map file and a dataset root that is needed but not
    given."""
    for name in ('mean', 'std'):
        if isinstance(getattr(args, name), (int, float)):  # a single value from a YAML config
            setattr(args, name, [getattr(args, name)])
    try:
        check_device(args.device)
        check_dataset_name(args.dataset, list_builtin_datasets())
        check_class_map_file(args.class_map)
        check_normalization_lengths(args.mean, args.std, args.input_size)
    except ValueError as e:
        parser.error(str(e))
    if not (args.data_dir or args.data) and _needs_data_dir(args.dataset) and not _runs_on_ood(args):
        parser.error(f'dataset {args.dataset or "folder"!r} needs --data-dir')


def sanity_values(args: argparse.Namespace) -> Dict[str, int]:
    """The probe options given on the command line, by `SanityBudget` field: the budget keeps them."""
    return {field: getattr(args, name) for name, field in SANITY_OPTIONS.items() if getattr(args, name) is not None}


def ood_folder(args: argparse.Namespace, dataset: OODDataset) -> Optional[str]:
    """The folder `dataset`'s option names (None when not given)."""
    return getattr(args, dataset.option[2:].replace('-', '_'))


def take_recorded_data(parsed: argparse.Namespace, given: Collection[str]) -> DataRecord:
    """The parser's step of `recorded_data`: set on the parsed command line `parsed` the data options of its
    ``--checkpoint``'s record that the invocation does not give (`given`, as `parser.given_options`; a positional data
    root counts as ``--data-dir``), so that its usage checks see them.

    Raises:
        ValueError: A damaged checkpoint file.
    """
    record = recorded_data(parsed.checkpoint, vars(parsed), set(given) | ({'data_dir'} if parsed.data else set()))
    for dest, value in record.taken.items():
        setattr(parsed, dest, value)
    return record


def eval_options(args: argparse.Namespace) -> EvalOptions:
    """The typed options of the evaluation `args` (as `parse_args` returns them) describe: all the library reads."""
    folders = {dataset.name: ood_folder(args, dataset) for dataset in OOD_DATASETS.values()}
    return EvalOptions(
        model=EvalModelOptions(name=args.model, checkpoint=args.checkpoint, pretrained=args.pretrained,
                           use_ema=args.use_ema, branch=args.branch, num_classes=args.num_classes,
                           kwargs=dict(args.model_kwargs)),
        data=EvalDataOptions(dataset=args.dataset, data_dir=args.data_dir or args.data, split=args.val_split,
                         class_map=args.class_map, num_samples=args.num_samples, subset=args.subset,
                         skip_bad_images=args.skip_bad_images,
                         ood_folders={name: folder for name, folder in folders.items() if folder is not None},
                         record=args.data_record),
        preprocessing=PreprocessingOptions(
            img_size=args.img_size, input_size=None if args.input_size is None else tuple(args.input_size),
            interpolation=args.interpolation, crop_pct=args.crop_pct,
            mean=None if args.mean is None else tuple(args.mean), std=None if args.std is None else tuple(args.std)),
        runtime=EvalRuntimeOptions(device=args.device, seed=args.seed, batch_size=args.batch_size, workers=args.workers,
                               pin_memory=args.pin_mem, channels_last=args.channels_last,
                               amp=args.amp_dtype if args.amp else None, fold_bn=not args.no_fold_bn,
                               progress=not args.no_progress),
        attacks=AttackOptions(protocol=args.protocol, attacks=tuple(args.attacks or ()), eps=args.attack_eps,
                              step=args.attack_step, steps=tuple(args.attack_steps or ()), norm=args.attack_norm,
                              targeted=args.attack_targeted, cascade=args.cascade, kwargs=dict(args.attack_kwargs),
                              reduced=args.reduced, max_steps=args.max_steps, max_queries=args.max_queries,
                              share_budgets=not args.separate_budgets),
        checks=CheckOptions(sanity=args.sanity, sanity_pinned=sanity_values(args),
                            metrics=None if args.metrics is None else tuple(args.metrics),
                            metric_samples=args.metric_samples, amp_samples=args.verify_amp,
                            amp_tolerance=args.amp_tolerance),
        variants=VariantOptions(gammas=None if args.gammas is None else tuple(args.gammas),
                                interpolations=None if args.interpolations is None else tuple(args.interpolations)),
        outputs=EvalOutputOptions(results_file=args.results_file, plot_dir=args.plot_dir, plot_note=args.plot_note,
                                  bn_layer=args.bn_layer, resume_state=args.resume_state, overwrite=args.overwrite,
                                  config_file=args.config),
        plan_only=args.plan)


def main(argv: Optional[Sequence[str]] = None, prog: str = PROG) -> int:
    """Evaluate as `argv` says; returns the exit status (1: a sanity check failed under ``--strict-sanity``; a check
    that did not run is no failure).

    Bad input raises (see `run`).
    """
    if not logging.root.handlers:  # a host application (or pytest) may have configured logging already
        setup_default_logging()
    args = parse_args(argv, prog=prog)
    results = validate(eval_options(args))
    if results is not None and args.strict_sanity and results.sanity_status == 'failed':
        return 1
    return 0


def run(prog: str = PROG, argv: Optional[Sequence[str]] = None) -> int:
    """Command-line entry: `main`, with bad input reported as one line and exit status 2."""
    return run_cli(lambda a: main(a, prog=prog), prog, argv)


def console_main() -> None:
    """The ``timm-advnorm-validate`` console command."""
    sys.exit(run('timm-advnorm-validate'))
