"""The body of ``timm-advnorm-validate`` / ``validate_adv.py``: robust evaluation of timm models in the style of
timm's ``validate.py``.

Evaluates a model (a timm name, ``hf-hub:``/``local-dir:`` name, or a `train_adv.py` checkpoint) against a named
protocol (``xie2020``, ``robustbench``, ``nofrost``, ``galloway``, ``corruptions``, ``imagenet-r``, ``imagenet-a``,
``imagenet-sketch``, ``nofrost-star``; see `timm_advnorm.eval.protocols`) or an explicit attack list, on a fixed
seeded subset of a dataset, in eval mode with the model's own preprocessing. Out-of-distribution sets are read from
folders of their own (``--imagenet-r-dir``, ``--imagenet-a-dir``, ``--imagenet-sketch-dir``; `timm_advnorm.eval.ood`),
each a run of its own, all reported in one results file. Mixture-BN models are evaluated per branch and over a γ
sweep of feature and logit interpolation. Sanity checks run with every evaluation. Results go to JSON + CSV, plots to
PNG; a state file makes a long evaluation resumable; ``torchrun`` shards it across processes.

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
import hashlib
import importlib
import json
import logging
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Tuple

import torch
from torch.utils.data import DataLoader, Dataset, IterableDataset

from timm.data import ImageDataset, create_dataset, create_transform, resolve_data_config
from timm.utils import ParseKwargs, setup_default_logging

from .. import models  # noqa: F401  (registers the plugin's models)
from ..attacks import InputSpace
from ..cli import ArgumentParser, add_hidden_alias, check_pretrained_option, one_line, parse_with_config, run_cli
from ..data import DIGITS_NUM_CLASSES, is_folder_dataset, resolve_dataset, split_folder
from ..data.preprocessing import explicit_preprocessing
from .bn_stats import collect_bn_stats, summarize_bn_stats
from .data import IndexedSubset, readable_subset, seeded_subset, shard_range
from .distributed import (
    DistributedInfo, cleanup_distributed, gather_records, init_distributed, primary_first)
from .evaluator import RobustEvaluator, show_progress
from .ood import IMAGENET_CLASSES, OOD_DATASETS, OODDataset, create_ood_dataset, get_ood_dataset
from .plan import EvalPlan, build_plan, ood_stage
from .plots import PLOT_NAMES, write_plots
from .protocols import (
    PROTOCOLS, Protocol, get_protocol, list_protocols, override_protocol, protocol_from_attacks, reduce_protocol)
from .records import ResultTable
from .results import OutputFiles, check_writable, csv_rows, csv_text, json_text
from .sanity import run_sanity_checks, summarize_checks
from .stages import EvalContext, Stage
from .state import EvalState, check_state_path
from .subsets import SUBSETS, named_subset_order, robustbench_model_info
from .summary import amp_report, attack_title, results_warnings, summarize_variant
from .variants import INTERPOLATIONS, Variant, model_variants
from ..hub import create_model_from_name_or_checkpoint, split_source
from ..layers import get_inference_branch

_logger = logging.getLogger('validate_adv')

PROG = 'validate_adv.py'
#: ``--reduced`` (smoke tests) takes this root of every iteration and query budget; marked in the results.
REDUCED_ROOT = 3
AMP_DTYPES = {'bfloat16': torch.bfloat16, 'float16': torch.float16}
#: Unreadable files named in an error or warning line (all of them go into the results).
_LISTED_FILES = 3


def get_args_parser(prog: str = PROG) -> ArgumentParser:
    """The command-line parser (importable, so tests and wrappers can drive the script)."""
    parser = ArgumentParser(prog=prog, description='Robust evaluation of timm models (timm-advnorm).')
    parser.add_argument('-c', '--config', default='', metavar='FILE',
                        help='YAML file of argument defaults (keys: long option names with underscores); '
                             'command-line values win.')

    group = parser.add_argument_group('Dataset')
    group.add_argument('data', nargs='?', metavar='DIR', help='Dataset root (same as --data-dir).')
    group.add_argument('--data-dir', metavar='DIR', help='Dataset root.')
    group.add_argument('--dataset', default='', metavar='NAME',
                       help='"digits" (built in, no download) or any timm dataset name (default: image folder).')
    group.add_argument('--val-split', default='validation', metavar='NAME',
                       help='Split to evaluate; of a folder dataset, a subfolder that must exist (val, valid, '
                            'validation, eval, evaluation stand for one another; \'\' is the root).')
    add_hidden_alias(parser, group, '--split', 'val_split')
    group.add_argument('--class-map', default='', metavar='FILENAME', help='Class map file for folder datasets.')
    group.add_argument('--num-samples', type=int, default=0, metavar='N',
                       help='Size of the seeded evaluation subset (0: the whole split).')
    group.add_argument('--subset', default=None, choices=list(SUBSETS),
                       help='Evaluate a fixed list of images instead of a seeded draw: robustbench = the 5000 ImageNet '
                            'validation images of RobustBench\'s leaderboard, in its order (--num-samples N takes its '
                            'first N, as RobustBench does).')
    group.add_argument('--seed', type=int, default=42, metavar='S', help='Seed of the subset, targets and attacks.')
    for dataset in OOD_DATASETS.values():
        readers = ', '.join(name for name, protocol in PROTOCOLS.items() if dataset.name in protocol.datasets)
        group.add_argument(dataset.option, default=None, metavar='DIR',
                           help=f'{dataset.title}: a folder of {dataset.num_classes} class folders named by wnid, as '
                                f'released (read by --protocol {readers}).')
    group.add_argument('--skip-bad-images', action='store_true',
                       help='The subset\'s images are decoded before the evaluation; a file that fails (corrupt, '
                            'truncated, not an image) is an error naming it, as timm\'s loader would silently evaluate '
                            'the next image in its place. With this flag such files are skipped: the subset takes the '
                            'next readable images of the seeded order, and the results list the skipped files '
                            '(skipped_images).')

    group = parser.add_argument_group('Model')
    group.add_argument('--model', '-m', default=None, metavar='NAME',
                       help='timm model name, hf-hub:ORG/NAME or local-dir:PATH (default: the checkpoint\'s arch).')
    group.add_argument('--pretrained', action='store_true', help='Load the model\'s pretrained weights.')
    group.add_argument('--checkpoint', default='', metavar='PATH', help='Checkpoint to evaluate.')
    group.add_argument('--use-ema', action='store_true', help='Evaluate the EMA weights of the checkpoint.')
    group.add_argument('--branch', default=None, choices=('clean', 'adv'),
                       help='Evaluate one branch of a mixture-BN checkpoint as the plain timm model.')
    group.add_argument('--num-classes', type=int, default=None, metavar='N', help='Number of classes.')
    group.add_argument('--img-size', type=int, default=None, metavar='N', help='Input image size.')
    group.add_argument('--input-size', type=int, nargs=3, default=None, metavar='N', help='Input C H W.')
    group.add_argument('--crop-pct', type=float, default=None, metavar='PCT', help='Center crop fraction.')
    group.add_argument('--mean', type=float, nargs='+', default=None, metavar='MEAN', help='Override the mean.')
    group.add_argument('--std', type=float, nargs='+', default=None, metavar='STD', help='Override the std.')
    group.add_argument('--interpolation', default='', metavar='NAME', help='Resize interpolation.')
    group.add_argument('--model-kwargs', nargs='*', default={}, action=ParseKwargs, help='Extra model arguments.')

    group = parser.add_argument_group('Runtime')
    group.add_argument('-b', '--batch-size', type=int, default=128, metavar='N', help='Batch size per process.')
    group.add_argument('-j', '--workers', type=int, default=4, metavar='N', help='Data loading workers.')
    group.add_argument('--pin-mem', action='store_true', help='Pin CPU memory in the loader.')
    group.add_argument('--device', default=None, help='Device (default: cuda if available, else cpu).')
    group.add_argument('--channels-last', action='store_true', help='Channels-last memory format.')
    group.add_argument('--amp', action='store_true', help='Forwards under autocast (--amp-dtype).')
    group.add_argument('--amp-dtype', default='bfloat16', choices=list(AMP_DTYPES),
                       help='Autocast dtype (float16 input gradients may underflow).')
    group.add_argument('--verify-amp', type=int, default=0, metavar='N',
                       help='With --amp: re-run the clean pass and first white-box attack in fp32 on N samples '
                            'and report the difference.')
    group.add_argument('--amp-tolerance', type=float, default=0.02, metavar='FRAC',
                       help='Largest accuracy difference of --verify-amp that passes.')
    group.add_argument('--no-fold-bn', action='store_true', help='Do not fold BN into convolutions when attacking.')
    group.add_argument('--separate-budgets', action='store_true',
                       help='Run PGD attacks that differ only in iterations each from its own random start, instead '
                            'of reading the shorter ones off one run of the longest.')
    group.add_argument('--no-progress', action='store_true', help='No progress bars (batches, long attacks).')

    group = parser.add_argument_group('Attacks')
    group.add_argument('--protocol', default=None, choices=list_protocols(),
                       help='Named protocol (default: xie2020 unless --attacks is given).')
    group.add_argument('--attacks', nargs='+', default=None, metavar='NAME',
                       help='Registered attack names to run instead of a protocol.')
    group.add_argument('--attack-eps', type=float, default=None, metavar='EPS',
                       help='Budget on the 0-255 scale (default: the protocol\'s; 16 with --attacks).')
    group.add_argument('--attack-step', type=float, default=None, metavar='STEP',
                       help='Step size on the 0-255 scale (default: the protocol\'s or the attack\'s).')
    group.add_argument('--attack-steps', type=int, nargs='+', default=None, metavar='N',
                       help='Iterations (default: the protocol\'s or the attack\'s); with --attacks, several counts '
                            'make a sweep (one run per attack when they share a step: see --separate-budgets).')
    group.add_argument('--attack-norm', default=None, choices=('linf', 'l2'),
                       help='Threat-model norm (default: the protocol\'s or the attack\'s).')
    group.add_argument('--attack-targeted', action='store_true',
                       help='With --attacks: targeted, the target uniform among the other classes.')
    for alias, dest, options in (('--eps', 'attack_eps', dict(type=float)), ('--step', 'attack_step', dict(type=float)),
                                 ('--steps', 'attack_steps', dict(type=int, nargs='+')),
                                 ('--norm', 'attack_norm', dict(choices=('linf', 'l2'))),
                                 ('--targeted', 'attack_targeted', dict(action='store_true'))):
        add_hidden_alias(parser, group, alias, dest, **options)
    group.add_argument('--cascade', action='store_true',
                       help='With --attacks: each attack only sees the samples the previous ones did not break.')
    group.add_argument('--attack-kwargs', nargs='*', default={}, action=ParseKwargs,
                       help='With --attacks: extra constructor arguments of every attack (key=value).')
    group.add_argument('--reduced', action='store_true',
                       help='Smoke-test budgets: the cube root of every iteration and query budget (2000 -> 13); '
                            'results name the budgets that ran and say "reduced".')
    group.add_argument('--max-steps', type=int, default=None, help='Cap on every attack\'s iterations.')
    group.add_argument('--max-queries', type=int, default=None, help='Cap on every black-box attack\'s queries.')

    group = parser.add_argument_group('Mixture BN')
    group.add_argument('--gammas', type=float, nargs='+', default=[0.0, 1.0], metavar='G',
                       help='Adversarial-branch weights: 0 clean branch, 1 adversarial branch, in between '
                            'interpolations (NoFrost Fig. 2 sweeps [0, 1]).')
    group.add_argument('--interpolations', nargs='+', default=list(INTERPOLATIONS), choices=INTERPOLATIONS,
                       help='Interpolations evaluated at interior gammas.')
    group.add_argument('--bn-layer', default=None, metavar='NAME', help='Layer of the BN statistics plot.')

    group = parser.add_argument_group('Metrics and sanity checks')
    group.add_argument('--metrics', nargs='*', default=None, metavar='NAME',
                       help='Robustness metrics: margin thickness smoothness (default: the protocol\'s).')
    group.add_argument('--metric-samples', type=int, default=None, metavar='N',
                       help='Compute thickness and smoothness on the first N samples only.')
    group.add_argument('--sanity-samples', type=int, default=64, metavar='N',
                       help='Samples of the sanity probes (0 disables them).')
    group.add_argument('--sanity-steps', type=int, default=10, metavar='N', help='PGD iterations of the probes.')
    group.add_argument('--sanity-queries', type=int, default=400, metavar='N',
                       help='Square queries of the black-box probe (NoFrost\'s budget).')
    group.add_argument('--strict-sanity', action='store_true', help='Exit with status 1 when a sanity check fails.')

    group = parser.add_argument_group('Output')
    group.add_argument('--results-file', default='', metavar='PATH',
                       help='Results: JSON at PATH with suffix .json, CSV with suffix .csv.')
    group.add_argument('--plot-dir', default='', metavar='DIR', help='Write PNG plots here.')
    group.add_argument('--resume-state', default='', metavar='PATH',
                       help='Append finished work here and resume from it (one file per rank under torchrun).')
    group.add_argument('--overwrite', action='store_true',
                       help='Replace existing results and plots. Without it an existing file is an error before the '
                            'evaluation, and one that another run writes meanwhile is kept: this run\'s files then go '
                            'to names tagged kept-<tag>, and it exits with status 2 saying where.')
    return parser


def parse_args(argv: Optional[Sequence[str]] = None, prog: str = PROG) -> argparse.Namespace:
    """Parse `argv`, with defaults from the ``-c`` YAML file if given (command-line values win)."""
    parser = get_args_parser(prog)
    args, _ = parse_with_config(parser, argv)
    if not args.model and not args.checkpoint:
        parser.error('give --model, --checkpoint, or both')
    if args.attacks and args.protocol:
        parser.error('give either --protocol or --attacks, not both')
    if (args.attack_kwargs or args.attack_targeted or args.cascade) and not args.attacks:
        parser.error('--attack-kwargs, --attack-targeted and --cascade need --attacks')
    if isinstance(args.attack_steps, int):  # a single count from a YAML config
        args.attack_steps = [args.attack_steps]
    if args.attack_steps and (len(set(args.attack_steps)) != len(args.attack_steps) or min(args.attack_steps) < 0):
        parser.error(f'--attack-steps takes distinct counts >= 0, got {args.attack_steps}')
    if args.attack_steps and len(args.attack_steps) > 1 and not args.attacks:
        parser.error('several --attack-steps make a sweep of --attacks; a --protocol takes one count')
    if args.verify_amp and not args.amp:
        parser.error('--verify-amp checks an --amp evaluation; add --amp')
    if args.num_samples < 0 or args.sanity_samples < 0 or args.verify_amp < 0:
        parser.error('--num-samples, --sanity-samples and --verify-amp must be >= 0')
    if args.batch_size < 1 or args.sanity_steps < 1 or args.sanity_queries < 1:
        parser.error('--batch-size, --sanity-steps and --sanity-queries must be >= 1')
    if args.metric_samples is not None and args.metric_samples < 1:
        parser.error('--metric-samples must be >= 1 (leave it out for every sample)')
    if not 0 <= args.amp_tolerance <= 1:
        parser.error(f'--amp-tolerance is an accuracy difference as a fraction, in [0, 1]; got {args.amp_tolerance}')
    args.device = args.device or ('cuda' if torch.cuda.is_available() else 'cpu')
    _check_ood_args(parser, args)
    _check_setup_args(parser, args)
    return args


def _ood_folder(args: argparse.Namespace, dataset: OODDataset) -> Optional[str]:
    """The folder `dataset`'s option names (None when not given)."""
    return getattr(args, dataset.option[2:].replace('-', '_'))


def _runs_on_ood(args: argparse.Namespace) -> bool:
    """Whether the protocol runs on an out-of-distribution set instead of the evaluation data (``--data-dir``)."""
    return bool(args.protocol) and get_protocol(args.protocol).dataset is not None


def _check_ood_args(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """Every out-of-distribution set the protocol reads has its folder, no other set's folder is given (it would not
    be read), and a protocol that runs on such a set is given none of the options of the evaluation data."""
    reads = get_protocol(args.protocol).datasets if args.protocol else ()
    for dataset in OOD_DATASETS.values():
        given = _ood_folder(args, dataset) is not None
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
    """Whether `dataset` needs ``--data-dir``: all but the built-in digits (rendered into the user cache) and
    Hugging Face ``hfds/`` datasets (read through the Hugging Face cache)."""
    return dataset != 'digits' and not dataset.lower().startswith('hfds/')


def _check_setup_args(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """Usage errors argparse cannot see, caught before anything is loaded: the device, the normalization
    lengths (timm would only assert), the crop fraction and a dataset root that is needed but not given."""
    try:
        torch.device(args.device)
    except (RuntimeError, TypeError):
        parser.error(f'--device {args.device!r} is not a device (cpu, cuda, cuda:N, ...)')
    channels = args.input_size[0] if args.input_size else 3  # as timm's resolve_data_config counts them
    for name in ('mean', 'std'):
        values = getattr(args, name)
        if isinstance(values, (int, float)):  # a single value from a YAML config
            values = [values]
            setattr(args, name, values)
        if values is not None and len(values) not in (1, channels):
            parser.error(f'--{name} takes 1 value or one per input channel ({channels}), got {len(values)}')
    if args.crop_pct is not None and args.crop_pct <= 0:  # timm would silently take its default for 0
        parser.error(f'--crop-pct must be > 0, got {args.crop_pct}')
    if not (args.data_dir or args.data) and _needs_data_dir(args.dataset) and not _runs_on_ood(args):
        parser.error(f'dataset {args.dataset or "folder"!r} needs --data-dir')


def create_eval_model(args: argparse.Namespace) -> Tuple[torch.nn.Module, str]:
    """The model to evaluate and its architecture name.

    Built by `timm_advnorm.hub.create_model_from_name_or_checkpoint`, as in ``train_adv.py``: a registry,
    ``hf-hub:`` or ``local-dir:`` name (whose weights are always loaded), or a checkpoint naming its architecture;
    the checkpoint's class count is used and any conflicting ``--num-classes`` is an error (timm would silently
    drop the head).
    """
    kwargs = dict(args.model_kwargs)
    num_classes = args.num_classes
    if num_classes is None and args.dataset == 'digits' and not args.checkpoint:
        num_classes = DIGITS_NUM_CLASSES
    if num_classes is not None:
        kwargs['num_classes'] = num_classes
    # an hf-hub: or local-dir: name *is* a set of weights: evaluating its random initialization makes no sense
    from_hub = bool(args.model) and split_source(args.model)[0] != 'path' and not args.checkpoint
    if args.pretrained and not args.checkpoint:
        check_pretrained_option(args.model, num_classes, None, '--checkpoint')
    model = create_model_from_name_or_checkpoint(
        args.model, args.checkpoint or None, pretrained=args.pretrained or from_hub, ema=args.use_ema,
        branch=args.branch, **kwargs)
    name = (getattr(model, 'pretrained_cfg', None) or {}).get('architecture') or args.model
    return model, name


def _preprocessing_provenance(args: argparse.Namespace) -> Dict[str, Any]:
    """Where the evaluated preprocessing came from: the checkpoint's record (what it was trained with), an export's
    config, or the registry's defaults; and which values the command line overrode."""
    if args.checkpoint:
        source = 'the checkpoint'
    elif args.model and split_source(args.model)[0] != 'path':
        source = f'the config of {args.model}'
    else:
        source = 'the model registry'
    overridden = [f'--{key.replace("_", "-")}' for key in explicit_preprocessing(vars(args))]
    return dict(source=source, overridden=overridden)


def _shown(data_config: Dict[str, Any]) -> str:
    """The preprocessing in one line, for the log."""
    keys = ('input_size', 'interpolation', 'crop_pct', 'mean', 'std')
    return ', '.join(f'{key} {tuple(data_config[key]) if isinstance(data_config[key], list) else data_config[key]}'
                     for key in keys if key in data_config)


def _results_paths(results_file: str):
    """JSON, CSV and BN-statistics paths of ``--results-file`` (all None without one)."""
    if not results_file:
        return None, None, None
    path = Path(results_file)
    return path.with_suffix('.json'), path.with_suffix('.csv'), path.with_suffix('.bn_stats.json')


def _weights_digest(model: torch.nn.Module) -> str:
    """SHA-256 of the model's state dict (names, dtypes, shapes and bytes): the identity of the weights evaluated.

    Hashing the loaded weights rather than the checkpoint file covers every source with one rule: a file overwritten
    in place, an export folder, an ``hf-hub:`` name whose revision moved, ``--use-ema``, ``--branch``, a seeded
    random initialization. A file's size and mtime would be cheaper but say nothing about hub or pretrained weights;
    the hash costs one pass over the weights in memory (about a second per GB), nothing next to an evaluation long
    enough to need ``--resume-state``, and is only computed with it.
    """
    digest = hashlib.sha256()
    for name, tensor in model.state_dict().items():
        tensor = tensor.detach().cpu().contiguous()
        digest.update(f'{name}:{tensor.dtype}:{tuple(tensor.shape)};'.encode())
        digest.update(tensor.reshape(-1).view(torch.uint8).numpy())
    return digest.hexdigest()


def _digest(indices: Sequence[int]) -> str:
    """SHA-256 of a subset's dataset indices: the subset's identity in a fingerprint."""
    return hashlib.sha256(json.dumps(indices).encode()).hexdigest()


def _fingerprint(args: argparse.Namespace, model_name: str, weights: str, protocol: Protocol,
                 variants: Sequence[Variant], plan: EvalPlan, runs: Sequence['DataRun'], data_config: Dict[str, Any],
                 dist_info: DistributedInfo) -> Dict[str, Any]:
    """What makes two evaluations the same one: `EvalState` refuses to resume a state file written by another.

    The model (name, source, digest of its weights, construction arguments), the data (dataset, resolved root,
    split, class map, seeded subset, preprocessing; each out-of-distribution set's folder and subset), the attacks,
    and how the work is cut (batch size, ranks). An evaluation without out-of-distribution sets has the fingerprint
    it had before they existed, so that its state file still resumes.
    """
    data_dir = args.data_dir or args.data
    ood = {run.name: dict(folder=str(Path(_ood_folder(args, get_ood_dataset(run.name))).resolve()),
                          subset=_digest(run.indices)) for run in runs if run.name}
    return dict(model=model_name, source=args.model or '', weights=weights,
                checkpoint=str(Path(args.checkpoint).resolve()) if args.checkpoint else '',
                pretrained=args.pretrained, use_ema=args.use_ema, branch=args.branch,
                model_kwargs=dict(args.model_kwargs), num_classes=args.num_classes,
                dataset=args.dataset, data_dir=str(Path(data_dir).resolve()) if data_dir else '', split=args.val_split,
                class_map=args.class_map, protocol=protocol.to_dict(),
                variants=[v.name for v in variants], subset=_digest(runs[0].indices), seed=args.seed,
                stages=[[s.name, s.limit, getattr(s, 'source', None)] for s in plan.stages],
                batch_size=args.batch_size, amp=args.amp_dtype if args.amp else None,
                data_config={k: list(v) if isinstance(v, tuple) else v for k, v in data_config.items()},
                rank=dist_info.rank, world_size=dist_info.world_size, **(dict(ood=ood) if ood else {}))


def _summarize(table: ResultTable, variant, plan, num_classes: int, input_size) -> Dict[str, Any]:
    """A variant's reported numbers with its sanity checks."""
    summary = summarize_variant(table, variant, plan, input_size)
    checks = run_sanity_checks(table, variant.name, plan, num_classes, input_size)
    summary['sanity'] = dict(summarize_checks(checks), checks=[c.to_dict() for c in checks])
    return summary


def _log_summary(results: Dict[str, Any]) -> None:
    """The warnings that void numbers first, then each variant's numbers, named by what ran."""
    for line in results['warnings']:
        _logger.warning(line)
    for variant in results['variants']:
        first = next(iter(variant['scores']))  # 'clean', or the out-of-distribution set the protocol runs on
        parts = [f"{first} {variant['clean']:.2f}"]
        parts += [f"{attack_title(a)} {a['accuracy']:.2f}" + (f" (success {a['success_rate']:.2f})"
                                                            if a.get('success_rate') is not None else '')
                  for a in variant['attacks']]
        if variant['worst_case'] is not None:
            parts.append(f"worst case {variant['worst_case']:.2f}")
        if variant['corruption_errors'] is not None:
            parts.append(f"mCE {variant['corruption_errors']['mce']:.2f} (normalized by AlexNet's ImageNet-C errors)")
        parts += [f'{key} {variant["scores"][key]:.2f}' for key in variant['scores']
                  if key == 'imagenet-c' or key in variant['ood']]
        _logger.info('%s: %s', variant['name'], ', '.join(parts))


def build_protocol(args: argparse.Namespace) -> Protocol:
    """The named protocol or the ``--attacks`` list, with the command line's overrides and reduction applied."""
    if args.attacks:
        attack_kwargs = dict(args.attack_kwargs)
        for key in ('step', 'norm'):
            if getattr(args, f'attack_{key}') is not None:
                attack_kwargs[key] = getattr(args, f'attack_{key}')
        if args.attack_targeted:
            attack_kwargs['targeted'] = True
        eps = 16.0 if args.attack_eps is None else args.attack_eps
        protocol = protocol_from_attacks(args.attacks, eps, attack_kwargs,
                                         'cascade' if args.cascade else 'independent', steps=args.attack_steps or ())
    else:
        protocol = override_protocol(get_protocol(args.protocol or 'xie2020'), args.attack_eps, args.attack_step,
                                     args.attack_steps[0] if args.attack_steps else None, args.attack_norm)
    if args.reduced or args.max_steps is not None or args.max_queries is not None:
        protocol = reduce_protocol(protocol, args.max_steps, args.max_queries,
                                   root=REDUCED_ROOT if args.reduced else None)
    return protocol


def create_eval_dataset(args: argparse.Namespace, data_config: Dict[str, Any], dist_info: DistributedInfo):
    """The evaluation split with the model's eval transform (which normalizes: the only normalization).

    Raises:
        FileNotFoundError: The dataset root does not exist.
        ValueError: The split folder is missing, or timm cannot load the dataset (its assertion or error, on one line).
    """
    with primary_first(dist_info):  # the built-in digits are rendered on first use: once, by rank 0
        dataset_name, root = resolve_dataset(args.dataset, args.data_dir or args.data,
                                             img_size=data_config['input_size'][-1])
    if root is not None and not Path(root).exists():
        raise FileNotFoundError(f'dataset root {root} not found')
    search_split = True
    if root is not None and is_folder_dataset(dataset_name) and Path(root).is_dir():
        root, search_split = str(split_folder(Path(root), args.val_split)), False
    try:
        dataset = create_dataset(dataset_name, root=root, split=args.val_split, search_split=search_split,
                                 class_map=args.class_map, is_training=False, batch_size=args.batch_size)
    except (AssertionError, RuntimeError, OSError) as e:  # unknown name, no images, class map missing, ...
        raise ValueError(f'cannot load dataset {args.dataset or "folder"!r} from {root}: {one_line(e)}') from e
    if isinstance(dataset, IterableDataset):
        raise ValueError(f'dataset {args.dataset!r} is iterable; robust evaluation needs a map-style dataset')
    if isinstance(dataset, ImageDataset):  # a file that turns unreadable after `select_subset` checked it: fail,
        dataset._max_retries = 1  # never evaluate the next image in its place (timm's ImageDataset tries 10)
    dataset.transform = create_transform(**data_config, is_training=False)
    return dataset


def select_subset(args: argparse.Namespace, dataset: Dataset, subset: Optional[str]
                  ) -> Tuple[List[int], List[Dict[str, str]]]:
    """The seeded subset to evaluate (or the named `subset`'s images), its images decoded first (`readable_subset`):
    unreadable files are an error naming them, or with ``--skip-bad-images`` skipped for the next readable images of
    the seeded order.

    Every rank draws and checks the same subset itself (no rank waits on another, so an error ends them all alike).

    Returns:
        The dataset indices, and the skipped files as ``{file, error}`` entries (file names relative to the root).

    Raises:
        ValueError: Unreadable images without ``--skip-bad-images``, or no readable image at all.
    """
    order = (named_subset_order(dataset, subset, args.num_samples) if subset
             else seeded_subset(len(dataset), 0, args.seed))
    indices, unreadable = readable_subset(dataset, order, args.num_samples, args.skip_bad_images, args.workers)
    named = [f'{name} ({error})' for name, error in unreadable.values()]
    listed = ', '.join(named[:_LISTED_FILES]) + (f' and {len(named) - _LISTED_FILES} more'
                                                  if len(named) > _LISTED_FILES else '')
    where = getattr(getattr(dataset, 'reader', None), 'root', None) or 'the dataset'
    if unreadable and not args.skip_bad_images:
        raise ValueError(f'{len(unreadable)} of the {len(indices)} images to evaluate in {where} cannot be read: '
                         f'{listed}; repair or remove them, or pass --skip-bad-images to evaluate without them')
    if not indices:
        raise ValueError(f'none of the images in {where} can be read: {listed}')
    if unreadable:
        _logger.warning('Skipped %d unreadable images in %s: %s.', len(unreadable), where, listed)
    return indices, [dict(file=name, error=error) for name, error in unreadable.values()]


@dataclass(frozen=True)
class DataRun:
    """One data set of an evaluation and the work run on it.

    Attributes:
        name: The out-of-distribution set (`ood.OOD_DATASETS`); ``None``: the evaluation data.
        dataset: Its images, with the model's eval transform.
        indices: The dataset index of every subset position.
        skipped: Unreadable files skipped, as ``{file, error}`` entries.
        stages: The work per batch.
        classes: The model's class index of each label when the set has 200 of ImageNet's classes (`ClassSubset`).
    """

    name: Optional[str]
    dataset: Dataset
    indices: List[int]
    skipped: List[Dict[str, str]]
    stages: Tuple[Stage, ...]
    classes: Optional[List[int]] = None

    @property
    def num_classes(self) -> Optional[int]:
        """Classes scored, when a subset of the model's (`classes`)."""
        return None if self.classes is None else len(self.classes)


def _ood_run(args: argparse.Namespace, dataset: OODDataset, stages: Sequence[Stage], transform) -> DataRun:
    """`stages` on the seeded subset of `dataset`'s folder, scored on its classes."""
    images = create_ood_dataset(dataset, Path(_ood_folder(args, dataset)), transform)
    return DataRun(dataset.name, images, *select_subset(args, images, None), tuple(stages), dataset.logit_indices())


def create_runs(args: argparse.Namespace, protocol: Protocol, plan: EvalPlan, data_config: Dict[str, Any],
                dist_info: DistributedInfo) -> List[DataRun]:
    """The data sets of an evaluation, each subset drawn and decoded before anything is evaluated: first the plan's
    stages on the evaluation data (or on the out-of-distribution set the protocol runs on), then a clean pass over
    each further out-of-distribution set of the protocol (`Protocol.ood`).

    Raises:
        FileNotFoundError: A data folder is missing.
        ValueError: A folder that is not its data set, or images that cannot be read (see `select_subset`).
    """
    transform = create_transform(**data_config, is_training=False)
    if protocol.dataset:
        main = _ood_run(args, get_ood_dataset(protocol.dataset), plan.stages, transform)
    else:
        dataset = create_eval_dataset(args, data_config, dist_info)
        main = DataRun(None, dataset, *select_subset(args, dataset, args.subset), plan.stages)
    return [main] + [_ood_run(args, get_ood_dataset(name), (ood_stage(name),), transform) for name in protocol.ood]


def _check_imagenet_model(protocol: Protocol, model: torch.nn.Module) -> None:
    """The out-of-distribution sets score ImageNet classifiers: a model with another number of classes is refused."""
    if protocol.datasets and model.num_classes != IMAGENET_CLASSES:
        titles = ' and '.join(get_ood_dataset(name).title for name in protocol.datasets)
        raise ValueError(f'protocol {protocol.name} scores ImageNet classifiers on {titles}: the model has '
                         f'{model.num_classes} classes, not ImageNet\'s {IMAGENET_CLASSES}')


def _check_bn_layer(args: argparse.Namespace, bn_stats: Dict[str, Any]) -> None:
    """``--bn-layer`` must name a mixture-BN layer of the model: found now, not when the plots are drawn after the
    evaluation."""
    if args.bn_layer is not None and args.bn_layer not in bn_stats:
        examples = f'; e.g. {", ".join(list(bn_stats)[:3])}' if bn_stats else ' (it has none)'
        raise ValueError(f'--bn-layer {args.bn_layer}: the model has no mixture-BN layer of that name{examples}')


def _state_path(args: argparse.Namespace, dist_info: DistributedInfo) -> str:
    """This process's ``--resume-state`` file (one per rank under torchrun)."""
    return args.resume_state + (f'.rank{dist_info.rank}' if dist_info.distributed else '')


def _open_state(path: str, fingerprint: Dict[str, Any]) -> EvalState:
    """The state file at `path`, created or resumed; a file that cannot be read or written is a usage error."""
    try:
        return EvalState(path, fingerprint)
    except OSError as e:
        raise ValueError(f'cannot use the state file {path}: {e.strerror or e}') from e


def _check_matplotlib() -> None:
    """``--plot-dir`` needs matplotlib, an optional dependency: say so before the evaluation, not after it."""
    try:
        importlib.import_module('matplotlib')
    except ImportError:
        raise ValueError('--plot-dir needs matplotlib: pip install "timm-advnorm[plots]" (or pip install matplotlib)'
                         ) from None


def _check_outputs(args: argparse.Namespace, dist_info: DistributedInfo) -> None:
    """Probe every output now, so that an output that cannot be written (or a missing matplotlib) ends the run
    before the evaluation and not after it, losing its results. Creates nothing: a run refused later, for its model
    or data, leaves no folder behind.

    Raises:
        FileExistsError: An output exists and ``--overwrite`` is not given.
        ValueError: An output cannot be written, or ``--plot-dir`` is given without matplotlib.
    """
    if args.resume_state:
        check_state_path(_state_path(args, dist_info))
    if not dist_info.is_primary:
        return
    outputs = [path for path in _results_paths(args.results_file) if path is not None]
    if args.plot_dir:
        _check_matplotlib()
        outputs += [Path(args.plot_dir) / name for name in PLOT_NAMES]
    for path in outputs:
        check_writable(path, args.overwrite)


def _write_outputs(args: argparse.Namespace, results: Dict[str, Any], bn_stats: Optional[Dict[str, Any]],
                   paths: Tuple[Optional[Path], Optional[Path], Optional[Path]]) -> OutputFiles:
    """CSV, BN statistics and plots, then the JSON, which names the files as written; a failing plot still leaves
    the JSON and the CSV (the JSON is written on the way out), so it never costs the results.

    Every file is published by one `OutputFiles` (returned): none replaces another run's without ``--overwrite``,
    and from the first clash on, this run's files are kept under tagged names.
    """
    outputs = OutputFiles(args.overwrite)
    json_path, csv_path, bn_path = paths
    if json_path is not None:
        csv_written = outputs.publish(csv_path, lambda tmp: tmp.write_text(csv_text(csv_rows(results))))
        if bn_stats:
            bn_written = outputs.publish(bn_path, lambda tmp: tmp.write_text(json_text(bn_stats)))
            results['bn_stats']['file'] = bn_written.name
    try:
        if args.plot_dir:
            results['plots'] = write_plots(results, args.plot_dir, bn_stats, args.bn_layer, outputs)
    finally:
        if json_path is not None:
            json_written = outputs.publish(json_path, lambda tmp: tmp.write_text(json_text(results)))
            _logger.info('Wrote %s and %s', json_written, csv_written)
    return outputs


def validate(args: argparse.Namespace) -> Optional[Dict[str, Any]]:
    """Run the evaluation `args` describe; returns the results dict on rank 0 (None on other ranks)."""
    started = time.perf_counter()
    dist_info = init_distributed(args.device)
    _check_outputs(args, dist_info)

    torch.manual_seed(args.seed)  # a randomly initialized model (no checkpoint) is then reproducible too
    model, model_name = create_eval_model(args)
    weights = _weights_digest(model) if args.resume_state else ''
    data_config = resolve_data_config(vars(args), model=model, use_test_size=True)
    preprocessing = _preprocessing_provenance(args)
    _logger.info('Preprocessing %s, from %s%s.', _shown(data_config), preprocessing['source'],
                 f" with {', '.join(preprocessing['overridden'])} from the command line"
                 if preprocessing['overridden'] else '')
    input_size = tuple(data_config['input_size'])
    protocol = build_protocol(args)
    variants = model_variants(model, args.gammas, args.interpolations)
    plan = build_plan(protocol, sanity_samples=args.sanity_samples, sanity_steps=args.sanity_steps,
                      sanity_queries=args.sanity_queries, metrics=args.metrics, metric_samples=args.metric_samples,
                      amp_samples=args.verify_amp, share_budgets=not args.separate_budgets, reduced_sanity=args.reduced)
    progress = show_progress() and not args.no_progress
    ctx = EvalContext(space=InputSpace.from_data_config(data_config), input_size=input_size,
                      autocast_dtype=AMP_DTYPES[args.amp_dtype] if args.amp else None, fold_bn=not args.no_fold_bn,
                      progress=progress)
    plan.check_attacks(ctx)
    bn_stats = collect_bn_stats(model)
    _check_bn_layer(args, bn_stats)
    _check_imagenet_model(protocol, model)

    runs = create_runs(args, protocol, plan, data_config, dist_info)
    main = runs[0]
    model.to(dist_info.device)
    if args.channels_last:
        model.to(memory_format=torch.channels_last)
    num_classes = main.num_classes or model.num_classes
    state = None
    if args.resume_state:
        state = _open_state(_state_path(args, dist_info), _fingerprint(
            args, model_name, weights, protocol, variants, plan, runs, data_config, dist_info))
    _logger.info('Evaluating %s (%s%s): protocol %s, variants %s.', model_name, args.checkpoint or 'no checkpoint',
                 f', loaded on its {get_inference_branch(model)} branch' if get_inference_branch(model) else '',
                 protocol.name, ', '.join(v.name for v in variants))
    eval_started = time.perf_counter()
    records, computed = [], 0
    for run in runs:
        start, stop = shard_range(len(run.indices), dist_info.rank, dist_info.world_size, args.batch_size)
        loader = DataLoader(IndexedSubset(run.dataset, run.indices, range(start, stop)), batch_size=args.batch_size,
                            shuffle=False, num_workers=args.workers, pin_memory=args.pin_mem)
        _logger.info('%s: %d samples (%d on this rank)%s.', get_ood_dataset(run.name).title if run.name else
                     'Evaluation data', len(run.indices), stop - start,
                     f', scored on its {run.num_classes} classes' if run.classes else '')
        evaluator = RobustEvaluator(model, variants, run.stages, ctx, run.num_classes or model.num_classes,
                                    len(run.indices), args.seed, dist_info.device, state=state,
                                    channels_last=args.channels_last, progress=progress, classes=run.classes)
        records += evaluator.run(loader)
        computed += evaluator.computed
    eval_seconds = time.perf_counter() - eval_started
    records = gather_records(records, dist_info)
    cleanup_distributed(dist_info)
    if not dist_info.is_primary:
        return None

    table = ResultTable(records)
    summaries = [_summarize(table, variant, plan, num_classes, input_size) for variant in variants]
    # the headline is the model as loaded: a mixture-BN model on the branch it runs on (recorded by its checkpoint)
    inference_branch = get_inference_branch(model)
    primary = next((s for s in summaries if s['kind'] in (inference_branch, 'model')), summaries[0])
    results = dict(
        model=model_name, checkpoint=args.checkpoint, dataset=protocol.dataset or args.dataset or 'folder',
        split=None if protocol.dataset else args.val_split, num_samples=len(main.indices), subset=args.subset,
        skipped_images=main.skipped, seed=args.seed,
        ood_data={run.name: dict(get_ood_dataset(run.name).to_dict(), num_samples=len(run.indices),
                                 skipped_images=run.skipped) for run in runs if run.name},
        img_size=data_config['input_size'][-1],
        data_config={k: list(v) if isinstance(v, tuple) else v for k, v in data_config.items()},
        preprocessing=preprocessing, protocol=protocol.to_dict(), amp=args.amp_dtype if args.amp else None,
        world_size=dist_info.world_size,
        inference_branch=inference_branch, primary_variant=primary['name'], top1=primary['clean'],
        robust_top1=primary['robust'],
        sanity_passed=all(s['sanity']['passed'] for s in summaries),
        masked_gradients_suspected=any(s['sanity']['masked_gradients_suspected'] for s in summaries),
        amp_check=amp_report(table, primary['name'], plan, args.amp_tolerance) if args.verify_amp else None,
        variants=summaries,
        bn_stats=dict(layers=summarize_bn_stats(bn_stats)) if bn_stats else None,
        eval_seconds=round(eval_seconds, 3), units_computed=computed,
        images_per_second=round(sum(len(run.indices) for run in runs) * len(variants) / max(eval_seconds, 1e-9), 3),
        total_seconds=round(time.perf_counter() - started, 3),
    )
    results['robustbench_model_info'] = robustbench_model_info(results, model.pretrained_cfg or {})
    results = dict(warnings=results_warnings(results), **results)
    outputs = _write_outputs(args, results, bn_stats, _results_paths(args.results_file))
    _log_summary(results)
    outputs.check_nothing_kept()
    return results


def main(argv: Optional[Sequence[str]] = None, prog: str = PROG) -> int:
    """Evaluate as `argv` says; returns the exit status (1: a sanity check failed under ``--strict-sanity``).

    Bad input raises (see `run`).
    """
    args = parse_args(argv, prog=prog)
    if not logging.root.handlers:  # a host application (or pytest) may have configured logging already
        setup_default_logging()
    results = validate(args)
    if results is not None and args.strict_sanity and not results['sanity_passed']:
        return 1
    return 0


def run(prog: str = PROG, argv: Optional[Sequence[str]] = None) -> int:
    """Command-line entry: `main`, with bad input reported as one line and exit status 2."""
    return run_cli(lambda a: main(a, prog=prog), prog, argv)


def console_main() -> None:
    """The ``timm-advnorm-validate`` console command."""
    sys.exit(run('timm-advnorm-validate'))
