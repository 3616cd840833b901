"""``timm-advnorm-train`` / ``train_adv.py`` / ``python -m timm_advnorm.train``: adversarial training of timm models,
every method of the papers on timm's data, optimizers and `timm.task`.

Single process:  timm-advnorm-train -c digits_demo_mbn   (or python train_adv.py, python -m timm_advnorm.train)
Many processes:  torchrun --nproc_per_node=8 -m timm_advnorm.train -c xie2020_mbn_resnet152 --data-dir /imagenet

Each epoch validates clean and robust (PGD) top-1 — on the branches the method trains — and appends them, with
the method's cost in forward+backward passes per image, to ``summary.csv`` in the run folder, after the epoch's
checkpoints, which carry the row: a run killed in between is completed by its resume (`epoch_record`). A resume
from an earlier checkpoint than the run's latest needs ``--resume-from-earlier``; one run folder trains in one
process at a time (`run_lock`). SIGINT and SIGTERM stop the run with one line naming the checkpoint to resume from.

Every argument is checked before the run folder is made. A non-finite loss or gradient stops the run (or, with
``--skip-nonfinite N``, skips up to N such steps) and no checkpoint ever holds non-finite weights: ``last`` and
``model_best`` stay the last good ones, to resume from.

The run reads as three steps: parse (this module), build (`timm_advnorm.train.build`: device, model, method,
optimizer, resumed state, EMA, data and schedule, its input checked by `train.checks`; ``--plan`` measures one step of
the built run and stops there) and run (`build.prepare_training` counts the budget, wraps the task for distributed
training and makes the validation attack; `train.runner` opens the run folder, `run_folder`, and runs the epoch loop).

The arguments: timm-style groups, an "Adversarial training" group of what every method shares (the method, its attack
and the per-epoch robust validation), and one group per registered method ("Method mbn") holding the options that
method declares (`AdversarialClassificationTask.add_args`). Each option is declared once, on the field of the typed
options it fills (`train.options`, `TrainingAttackOptions`; `declarations`), and the parser is generated from these
declarations. Config flows one way: a YAML file (``-c``) sets the parser's defaults, the command line overrides them
(with ``--resume``, both override the arguments the checkpoint records: `train.recorded`), and `train_options` converts
the namespace once into the typed, frozen options the build reads (`train.options.TrainOptions`, with the method's own
options checked by the method) and the record the run writes (its values by option name); nothing below this module
sees the namespace. The parser is importable so tests can drive it. Every registered method's options are on the parser
whichever ``--method`` runs, so a config or command line that names another method's option is accepted, as it always
was (a recipe is a base other methods run from: the demo trains its baseline with ``-c digits_demo_mbn --method
vanilla``); one given on the command line that the method does not use (another method's, or a training-attack option
of a method that runs no attack) is named in a warning, as it is ignored.
"""
import argparse
import dataclasses
import logging
import sys
from typing import AbstractSet, Any, Dict, FrozenSet, List, Mapping, Optional, Tuple

import yaml
from timm.utils import setup_default_logging

from ..data import rendered_kept_on_success
from ..recipes import describe_recipe, list_recipes, resolve_config
from ..task import (
    TASKS, MethodOptions, TrainingAttackOptions, declared_options, get_task_class, options_from_values, unused_options)
from ..task.method_options import declared_fields, long_flag, option_dest, option_flags, parser_arguments
from ..train.build import build_training, plan_text, plan_training, prepare_training
from ..train.options import (
    AGC_CLIP_FACTOR, DEFAULT_WORKERS, OPTIONS_CLASSES, DataOptions, ResumeOptions, TrainOptions, ValidationOptions)
from ..train.recorded import apply_recorded_args, read_recorded_args
from ..train.runner import run_training
from ..usage import default_workers
from .options import CONFIG, Declaration, declarations_of
from .parser import ArgumentParser, given_options, parse_mapping, parse_with_config, run_cli

__all__ = ['get_args_parser', 'parse_args', 'parse_invocation', 'Declaration', 'declarations', 'option_arguments',
           'option_dests', 'options_of', 'train_options', 'main', 'run', 'console_main', 'AGC_CLIP_FACTOR',
           'DEFAULT_WORKERS']

_logger = logging.getLogger('train_adv')
#: Training-attack options whose value is the robust validation's default (``--val-attack-eps``, ...) when not given.
_VALIDATION_DEFAULTS = ('attack_eps', 'attack_step', 'attack_targeted')

#: The ``--help`` groups in order, each with its options by name in the order shown (the method groups after
#: "Adversarial training"). Only the order is here: each option is declared on the field it fills (`train.options`,
#: `TrainingAttackOptions`), and the groups mix fields of several options classes, as timm's ``train.py`` does.
_HELP_GROUPS = (
    ('Model parameters', (
        'model', 'pretrained', 'initial_checkpoint', 'reset_classifier', 'resume', 'resume_from_earlier',
        'resume_with_changes', 'no_resume_opt', 'num_classes', 'gp', 'img_size', 'input_size', 'crop_pct',
        'interpolation', 'mean', 'std', 'drop', 'drop_path', 'drop_block', 'model_kwargs', 'head_init_scale',
        'head_init_bias', 'bn_momentum', 'bn_eps', 'sync_bn', 'dist_bn', 'channels_last', 'grad_checkpointing',
        'torchcompile', 'torchcompile_mode')),
    ('Dataset parameters', (
        'dataset', 'data_dir', 'train_split', 'val_split', 'dataset_download', 'class_map', 'skip_bad_images',
        'input_key', 'target_key', 'dataset_trust_remote_code', 'batch_size', 'validation_batch_size',
        'grad_accum_steps', 'workers', 'pin_mem', 'worker_seeding', 'hflip', 'vflip', 'scale', 'ratio',
        'train_crop_mode', 'train_interpolation', 'no_aug', 'color_jitter', 'color_jitter_prob', 'grayscale_prob',
        'gaussian_blur_prob', 'aa', 'aug_repeats', 'reprob', 'remode', 'recount', 'mixup', 'cutmix', 'mixup_prob',
        'mixup_switch_prob', 'cutmix_minmax', 'mixup_mode', 'mixup_off_epoch', 'smoothing')),
    ('Optimizer and schedule', (
        'opt', 'opt_eps', 'opt_betas', 'opt_kwargs', 'lr', 'lr_base', 'lr_base_size', 'lr_base_scale', 'momentum',
        'weight_decay', 'wd_all_params', 'layer_decay', 'layer_decay_min_scale', 'layer_decay_no_opt_scale',
        'clip_grad', 'clip_mode', 'skip_nonfinite', 'sched', 'sched_on_updates', 'lr_noise', 'lr_noise_pct',
        'lr_noise_std', 'lr_cycle_mul', 'lr_cycle_decay', 'lr_cycle_limit', 'lr_k_decay', 'epochs',
        'decay_milestones', 'decay_epochs', 'decay_rate', 'warmup_epochs', 'warmup_prefix', 'cooldown_epochs',
        'patience_epochs', 'warmup_lr', 'min_lr')),
    ('Adversarial training', (
        'method', 'attack', 'attack_eps', 'attack_step', 'attack_steps', 'attack_norm', 'attack_targeted',
        'attack_clean_start_prob', 'attack_clean_start_mode', 'attack_step_rule', 'attack_bn_stats', 'same_budget',
        'running_stats_epochs', 'val_attack_steps', 'val_attack_eps', 'val_attack_step', 'val_attack_targeted',
        'num_samples')),
    ('Miscellaneous', (
        'seed', 'device', 'amp', 'amp_dtype', 'model_ema', 'model_ema_decay', 'model_ema_warmup', 'output',
        'experiment', 'eval_metric', 'checkpoint_hist', 'recovery_interval', 'log_interval', 'no_progress',
        'log_wandb', 'wandb_project', 'wandb_tags', 'wandb_resume_id', 'plan', 'plan_world_size')),
)
#: The help group the method groups follow.
_BEFORE_METHODS = 'Adversarial training'


def declarations() -> Dict[str, Declaration]:
    """The training command's options but the methods' own, by destination, from the fields of the options classes
    that declare them (`train.options.OPTIONS_CLASSES`; `options.declarations_of`).

    Raises:
        ValueError: Two fields declare one option, or a field declares a shared option unlike `options.py`.
    """
    return declarations_of(OPTIONS_CLASSES)


class _MethodGroup:
    """The argument group a method's `add_args` fills ("Method mbn").

    A subclass that does not override `add_args` inherits its parent method's, and so declares the same options
    again: an option declared exactly as before is skipped (it stays in the group of the method that declared it
    first), one declared differently is an error naming both methods.

    Args:
        parser: The command's parser.
        method: The method's name.
        declared: Shared by the groups of one parser: each option string's declaring method and arguments.
    """

    def __init__(self, parser: argparse.ArgumentParser, method: str, declared: Dict[str, Tuple[str, tuple, dict]]):
        self._group = parser.add_argument_group(f'Method {method}')
        self._method = method
        self._declared = declared

    def add_argument(self, *flags: str, **kwargs: Any) -> Optional[argparse.Action]:
        """`argparse`'s ``add_argument``; returns None for an option already declared the same way."""
        first = self._declared.get(flags[0])
        if first is not None:
            owner, owner_flags, owner_kwargs = first
            if (owner_flags, owner_kwargs) != (flags, kwargs):
                raise ValueError(f'Method {self._method} declares {flags[0]} unlike method {owner}.')
            return None
        self._declared.update((flag, (self._method, flags, kwargs)) for flag in flags)
        return self._group.add_argument(*flags, **kwargs)


def _method_groups(parser: argparse.ArgumentParser) -> None:
    """One group per registered method, in registration order (a parent method before the methods deriving from it),
    each holding the options the method declares."""
    declared: Dict[str, Tuple[str, tuple, dict]] = {}
    for name, task in TASKS.items():
        task.add_args(_MethodGroup(parser, name, declared))


class _ListRecipes(argparse.Action):
    """``--list-recipes``: print the packaged recipes (name and what each trains) and exit."""

    def __init__(self, option_strings, dest, **kwargs):
        super().__init__(option_strings, dest, nargs=0, default=argparse.SUPPRESS, **kwargs)

    def __call__(self, parser, namespace, values, option_string=None):
        width = max(len(name) for name in list_recipes())
        lines = [f'{name:<{width}}  {describe_recipe(name)}' for name in list_recipes()]
        sys.stdout.write('Packaged recipes (train with -c NAME):\n' + '\n'.join(lines) + '\n')
        parser.exit(0)


def get_args_parser(prog: str = 'timm-advnorm-train') -> ArgumentParser:
    """The command-line parser (importable, so tests and wrappers can drive it)."""
    parser = ArgumentParser(prog=prog, description='Adversarial training of timm models (timm-advnorm).')
    CONFIG.add(parser,
               help='YAML file of argument defaults (keys as the long options, with underscores), or the '
                    'name of a packaged recipe (see --list-recipes); command-line values win.')
    parser.add_argument('--list-recipes', action=_ListRecipes, help='List the packaged recipes and exit.')
    declared = declarations()
    for title, names in _HELP_GROUPS:
        group = parser.add_argument_group(title)
        for name in names:
            declared[name].add(parser, group)
        if title == _BEFORE_METHODS:
            _method_groups(parser)
    return parser


def option_arguments() -> Dict[str, Mapping[str, Any]]:
    """The ``add_argument`` keywords of every option of the command, the methods' own included, by long flag (and
    hidden alias): what a study writes a cell's options with (`study_cells`)."""
    arguments = {flag: declaration.arguments for declaration in declarations().values()
                 for flag in (declaration.flag, *declaration.aliases)}
    for task in TASKS.values():
        arguments.update((long_flag(option_flags(field)), parser_arguments(field))
                         for field in declared_fields(task.options_class))
    return arguments


def option_dests() -> FrozenSet[str]:
    """The destinations of the command's options: what a checkpoint's record is read for (`recorded`)."""
    return frozenset(declarations()).union(*(declared_options(task) for task in TASKS.values())) | {'config'}


def parse_args(argv: Optional[List[str]] = None, prog: str = 'timm-advnorm-train') -> Tuple[argparse.Namespace, str]:
    """Parse `argv` with YAML defaults from ``-c``; returns the namespace and its YAML text (saved with the run).

    With ``--resume``, the arguments the checkpoint records are the defaults of whatever `argv` and its ``-c`` file
    do not give (`recorded.apply_recorded_args`); the build checks the changes (`recorded.check_resume_args`).
    """
    args, args_text, _ = parse_invocation(argv, prog)
    return args, args_text


def parse_invocation(argv: Optional[List[str]], prog: str) -> Tuple[argparse.Namespace, str, Optional[str]]:
    """`parse_args`, and what chose the dataset when ``--dataset`` was not given (here or by ``-c``): its default,
    or the resumed run's record with another ``--data-dir`` than the run's. None when given, or resumed on the run's
    own data: only then is a built-in dataset rendered into ``--data-dir``."""
    parser = get_args_parser(prog)
    args, config = parse_with_config(parser, argv, resolve=resolve_config)
    return _resolved(args, given_options(parser, argv, config), given_options(parser, argv, {}))


def options_of(values: Mapping[str, Any]) -> TrainOptions:
    """The typed options of the run whose options `values` gives by name (a ``-c`` recipe under ``config``; a study
    cell's, `study_cells`), built from them as the command builds its command line's (`parser.parse_mapping`), not
    through arguments: the same options as parsing what `values` is written as (`study_cells.train_argv`)."""
    args, config, given = parse_mapping(get_args_parser(), values, resolve=resolve_config)
    return train_options(_resolved(args, given | set(config), given)[0])


def _resolved(args: argparse.Namespace, given: AbstractSet[str],
              given_here: AbstractSet[str]) -> Tuple[argparse.Namespace, str, Optional[str]]:
    """`parse_invocation` past the parse: `args` with what the parser leaves unresolved resolved (the resumed run's
    record, AGC's clip factor, the workers), the options given here (`given_here`, not by the ``-c`` file) that the
    method does not use named in a warning; `given`: the options given here or by the ``-c`` file."""
    recorded = read_recorded_args(args.resume, option_dests()) if args.resume else None
    if recorded is not None:
        apply_recorded_args(vars(args), recorded, given)
    if args.clip_mode == 'agc' and args.clip_grad is None:
        args.clip_grad = AGC_CLIP_FACTOR
    args.workers, note = default_workers(args.workers, DEFAULT_WORKERS)
    if note:
        _logger.info(note)
    _warn_unused_options(args, given_here)
    if 'dataset' in given or ('dataset' in (recorded or {}) and 'data_dir' not in given):
        chosen_by = None  # given, or resumed on the data of the run, where it was rendered already
    else:
        chosen_by = "the resumed run's record" if 'dataset' in (recorded or {}) else 'the default of --dataset'
    return args, yaml.safe_dump(vars(args), default_flow_style=False), chosen_by


def _warn_unused_options(args: argparse.Namespace, given: AbstractSet[str]) -> None:
    """Name the options given on the command line (`given`) that ``--method`` does not use (`task.unused_options`):
    another method's own, or the training attack's where the method runs none. They are accepted (see the module's
    docstring) and ignored; a warning keeps that from passing without a word."""
    if args.method not in TASKS:  # refused later, with the registered methods named
        return
    # the training attack's budget is the per-epoch robust validation's default, which every method runs
    validation = {name for name in _VALIDATION_DEFAULTS if getattr(args, f'val_{name}') is None}
    unused = sorted(given & unused_options(vars(args)) - validation)
    if unused:
        owners = {name: [method for method, task in TASKS.items() if name in declared_options(task)]
                  for name in unused}
        flags = ', '.join('--' + name.replace('_', '-') + (f' (method {"/".join(owners[name])})' if owners[name] else
                                                            ' (training attack)') for name in unused)
        _logger.warning(f'{flags}: not used by --method {args.method}, so ignored')


def _method_options(values: Mapping[str, Any]) -> Tuple[MethodOptions, TrainingAttackOptions]:
    """The options of the method `values` names (its `options_class`) and of the training attack, checked by the
    method (`check_options`)."""
    task = get_task_class(values['method'])
    options = options_from_values(task.options_class, values)
    attack = options_from_values(TrainingAttackOptions, values)
    task.check_options(options, attack)
    return options, attack


def train_options(args: argparse.Namespace, dataset_chosen_by: Optional[str] = None) -> TrainOptions:
    """The typed options of the run `args` (as `parse_args` returns them) describe, each filled by option name
    (`task.options_from_values`); the values themselves are kept in them as the record the run writes
    (`TrainOptions.recorded`), unchanged. `dataset_chosen_by`: what chose the dataset, when ``--dataset`` was not
    given (`DataOptions.dataset_chosen_by`)."""
    record = dict(vars(args))
    method_options, attack = _method_options(record)
    validation = options_from_values(ValidationOptions, record)
    # the robust validation's budget, step and targeting are the training attack's where not given
    validation = dataclasses.replace(validation, **{name: getattr(attack, name) for name in _VALIDATION_DEFAULTS
                                                    if getattr(validation, name) is None})
    groups = {field.name: options_from_values(field.type, record) for field in dataclasses.fields(TrainOptions)
              if field.type in OPTIONS_CLASSES}
    groups.update(
        attack=attack, validation=validation, method_options=method_options,
        data=options_from_values(DataOptions, record, dataset_chosen_by=dataset_chosen_by),
        # the record is read for the command's options only when resuming
        resume=options_from_values(ResumeOptions, record,
                                   option_names=option_dests() if record['resume'] else frozenset()))
    own = {field.name: record[option_dest(field)] for field in declared_fields(TrainOptions)}  # --method, --plan
    return TrainOptions(**groups, **own, recorded=record)


def main(argv: Optional[List[str]] = None, prog: str = 'timm-advnorm-train') -> int:
    """Train as `argv` says; returns the exit status. Bad input raises (see `run`)."""
    if not logging.root.handlers:  # a host application (or pytest) may have configured logging already
        setup_default_logging()
    args, args_text, dataset_chosen_by = parse_invocation(argv, prog)
    options = train_options(args, dataset_chosen_by)
    with rendered_kept_on_success(options.data.data_dir):  # a refusal after the rendering leaves no copy behind
        training = build_training(options, args_text)
    if args.plan:  # one measured step, on the task before it is wrapped for distributed training
        budget = plan_training(training)
        if training.options.runtime.rank == 0:
            print(plan_text(training, budget))
        return 0
    return run_training(training, prepare_training(training))


def run(prog: str = 'timm-advnorm-train', argv: Optional[List[str]] = None) -> int:
    """Command-line entry: `main`, with bad input reported as one line and exit status 2."""
    return run_cli(lambda a: main(a, prog=prog), prog, argv)


def console_main() -> None:
    """The ``timm-advnorm-train`` console command."""
    sys.exit(run('timm-advnorm-train'))
