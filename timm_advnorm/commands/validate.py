"""``timm-advnorm-validate`` / ``validate_adv.py`` / ``python -m timm_advnorm.eval``: robust evaluation of timm models
in the style of timm's ``validate.py``.

Evaluates a model (a timm name, ``hf-hub:``/``local-dir:`` name, or a `train_adv.py` checkpoint) against a named
protocol (``xie2020``, ``robustbench``, ``nofrost``, ``galloway``, ``corruptions``, ``imagenet-r``, ``imagenet-a``,
``imagenet-sketch``, ``nofrost-star``; see `timm_advnorm.eval.protocols.protocol`) or an explicit attack list, on a
fixed seeded subset of a dataset, in eval mode with the model's own preprocessing. Out-of-distribution sets are read
from folders of their own (``--imagenet-r-dir``, ``--imagenet-a-dir``, ``--imagenet-sketch-dir``;
`timm_advnorm.eval.protocols.ood`), each a run of its own, all reported in one results file. Mixture-BN models are
evaluated per branch and over a γ sweep of feature and logit interpolation. Sanity checks run with every evaluation,
their probes by default within a quarter of the attacks' cost (``--sanity``). Before it runs, the evaluation prints its
plan (passes and share of each stage, time projected from one batch's measured passes of the model, with a warning
naming what shortens it when over an hour, then from the first batch); ``--plan`` prints it and stops. Attacks report
their progress (sub-attack, target, restart, iteration or query) in the progress bar. Results go to JSON + CSV, plots to
PNG; a state file makes a long evaluation resumable; ``torchrun`` shards it across processes.

The run reads as four steps: parse (this module: the options, each declared on the field of the typed options it
fills, `eval.options`, the parser generated from these declarations, with defaults from a ``-c`` YAML file, and as one
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
import dataclasses
import logging
import sys
from typing import AbstractSet, Any, Collection, Dict, Mapping, Optional, Sequence

import torch
from timm.utils import setup_default_logging

from ..data import builtin_dataset, list_builtin_datasets
from ..data.folders import check_class_map_file
from ..data.names import check_dataset_name
from ..eval.options import DEFAULT_WORKERS, LOGGER, OPTIONS_CLASSES, EvalDataOptions, EvalOptions
from ..eval.protocols.ood import OOD_DATASETS, OODDataset, get_ood_dataset
from ..eval.protocols.protocol import PROTOCOLS, get_protocol
from ..eval.recorded import DataRecord, recorded_data
from ..eval.validate import validate
from ..task.method_options import declared_fields, option_dest, options_from_values
from ..usage import check_device, check_normalization_lengths, default_workers
from .options import Declaration, declarations_of
from .parser import ArgumentParser, given_options, parse_mapping, parse_with_config, run_cli

__all__ = ['get_args_parser', 'declarations', 'option_arguments', 'parse_args', 'options_of', 'eval_options', 'main',
           'run', 'console_main', 'PROG']

PROG = 'timm-advnorm-validate'
_logger = logging.getLogger(LOGGER)

#: The ``--help`` groups in order, each with its options by name in the order shown (None: the parser's own). Only
#: the order is here: each option is declared on the field it fills (`eval.options`), but for two named here:
#: ``data``, the positional dataset root of timm's ``validate.py`` (``--data-dir`` by another name), and
#: ``ood_folders``, which stands for the options of the out-of-distribution sets, one per set of their registry
#: (`_add_ood_options`).
_HELP_GROUPS = (
    (None, ('config',)),
    ('Dataset', ('data', 'data_dir', 'dataset', 'val_split', 'class_map', 'num_samples', 'subset', 'seed',
                 'ood_folders', 'skip_bad_images')),
    ('Model', ('model', 'pretrained', 'checkpoint', 'use_ema', 'branch', 'num_classes', 'img_size', 'input_size',
               'crop_pct', 'interpolation', 'mean', 'std', 'model_kwargs')),
    ('Runtime', ('batch_size', 'workers', 'pin_mem', 'device', 'channels_last', 'amp', 'amp_dtype', 'verify_amp',
                 'amp_tolerance', 'no_fold_bn', 'separate_budgets', 'no_progress', 'plan')),
    ('Attacks', ('protocol', 'attacks', 'attack_eps', 'attack_step', 'attack_steps', 'attack_norm', 'attack_targeted',
                 'cascade', 'attack_kwargs', 'reduced', 'max_steps', 'max_queries')),
    ('Mixture BN', ('gammas', 'interpolations', 'bn_layer')),
    ('Metrics and sanity checks', ('metrics', 'metric_samples', 'sanity', 'sanity_samples', 'sanity_steps',
                                   'sanity_queries', 'strict_sanity')),
    ('Output', ('results_file', 'plot_dir', 'plot_note', 'resume_state', 'overwrite')),
)
#: The names of `_HELP_GROUPS` that are no field's option.
_DATA_ROOT, _OOD_FOLDERS = 'data', 'ood_folders'


def declarations() -> Dict[str, Declaration]:
    """The command's options by destination, from the fields of the evaluation's options classes that declare them
    (`eval.options.OPTIONS_CLASSES`; `options.declarations_of`), but the out-of-distribution sets' folders.

    Raises:
        ValueError: Two fields declare one option, or a field declares a shared option unlike `options.py`.
    """
    return declarations_of(OPTIONS_CLASSES)


def _ood_option(dataset: OODDataset) -> Declaration:
    """The option of the folder of the out-of-distribution set `dataset`, named by it (``--imagenet-r-dir``)."""
    readers = ', '.join(name for name, protocol in PROTOCOLS.items() if dataset.name in protocol.datasets)
    help_text = (f'{dataset.title}: a folder of {dataset.num_classes} class folders named by wnid, as released (read '
                 f'by --protocol {readers}).')
    return Declaration(ood_dest(dataset), (dataset.option,), dict(default=None, metavar='DIR', help=help_text))


def _add_ood_options(parser: ArgumentParser, container: Any) -> None:
    """The options of the out-of-distribution sets' folders, one per set of their registry (`ood.OOD_DATASETS`)."""
    for dataset in OOD_DATASETS.values():
        _ood_option(dataset).add(parser, container)


def get_args_parser(prog: str = PROG) -> ArgumentParser:
    """The command-line parser (importable, so tests and wrappers can drive the script), generated from the options'
    declarations (`declarations`)."""
    parser = ArgumentParser(prog=prog, description='Robust evaluation of timm models (timm-advnorm).')
    declared = declarations()
    for title, names in _HELP_GROUPS:
        group = parser if title is None else parser.add_argument_group(title)
        for name in names:
            if name == _DATA_ROOT:
                group.add_argument('data', nargs='?', metavar='DIR', help='Dataset root (same as --data-dir).')
            elif name == _OOD_FOLDERS:
                _add_ood_options(parser, group)
            else:
                declared[name].add(parser, group)
    return parser


def option_arguments() -> Dict[str, Mapping[str, Any]]:
    """The ``add_argument`` keywords of every option of the command by long flag (and hidden alias): what a study
    writes a cell's options with (`study_cells`)."""
    options = [*declarations().values(), *map(_ood_option, OOD_DATASETS.values())]
    return {flag: option.arguments for option in options for flag in (option.flag, *option.aliases)}


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
    return _checked(parser, args, given_options(parser, argv, config))


def options_of(values: Mapping[str, Any]) -> EvalOptions:
    """The typed options of the evaluation whose options `values` gives by name (a study cell's, `study_cells`),
    built from them as the command builds its command line's (`parser.parse_mapping`; its checkpoint need not exist
    yet), not through arguments: the same options as parsing what `values` is written as
    (`study_cells.validate_argv`)."""
    parser = get_args_parser()
    args, config, given = parse_mapping(parser, values)
    return eval_options(_checked(parser, args, given | set(config)))


def _checked(parser: ArgumentParser, args: argparse.Namespace, given: AbstractSet[str]) -> argparse.Namespace:
    """`parse_args` past the parse: `args` checked (a usage error for what argparse cannot see) and resolved (the
    checkpoint's recorded data, the device, the workers, the sanity probes); `given`: the options the invocation
    sets (`parser.given_options`)."""
    if not args.model and not args.checkpoint:
        parser.error('give --model, --checkpoint, or both')
    if args.attacks and args.protocol:
        parser.error('give either --protocol or --attacks, not both')
    args.data_record = (take_recorded_data(args, given)
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


def ood_dest(dataset: OODDataset) -> str:
    """The destination of the option of `dataset`'s folder (``imagenet_r_dir``)."""
    return dataset.option[2:].replace('-', '_')


def ood_folder(args: argparse.Namespace, dataset: OODDataset) -> Optional[str]:
    """The folder `dataset`'s option names (None when not given)."""
    return getattr(args, ood_dest(dataset))


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
    """The typed options of the evaluation `args` (as `parse_args` returns them) describe, each group filled by option
    name (`task.options_from_values`): all the library reads. What no field's option fills is set here: the
    data root (``--data-dir``, else the positional one), the out-of-distribution sets' folders given, and what the
    checkpoint's record set (``args.data_record``)."""
    values = vars(args)
    groups = {field.name: options_from_values(field.type, values) for field in dataclasses.fields(EvalOptions)
              if field.type in OPTIONS_CLASSES}
    folders = {dataset.name: ood_folder(args, dataset) for dataset in OOD_DATASETS.values()}
    groups['data'] = options_from_values(
        EvalDataOptions, values, data_dir=args.data_dir or args.data, record=args.data_record,
        ood_folders={name: folder for name, folder in folders.items() if folder is not None})
    own = {field.name: values[option_dest(field)] for field in declared_fields(EvalOptions)}  # --plan
    return EvalOptions(**groups, **own)


def main(argv: Optional[Sequence[str]] = None, prog: str = PROG) -> int:
    """Evaluate as `argv` says; returns the exit status (1: a sanity check failed under ``--strict-sanity``; a check
    that did not run is no failure).

    Bad input raises (see `run`).
    """
    if not logging.root.handlers:  # a host application (or pytest) may have configured logging already
        setup_default_logging()
    options = eval_options(parse_args(argv, prog=prog))
    results = validate(options)
    if results is not None and options.checks.strict_sanity and results.sanity_status == 'failed':
        return 1
    return 0


def run(prog: str = PROG, argv: Optional[Sequence[str]] = None) -> int:
    """Command-line entry: `main`, with bad input reported as one line and exit status 2."""
    return run_cli(lambda a: main(a, prog=prog), prog, argv)


def console_main() -> None:
    """The ``timm-advnorm-validate`` console command."""
    sys.exit(run('timm-advnorm-validate'))
