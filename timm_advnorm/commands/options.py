"""The options several commands take, each defined once: its flags and what every command gives it alike (type,
count, metavar, choices); a command adds it with what is its own (default, help, and for a few options the type or
count that really differ, such as the single training ``--attack-steps`` against the evaluation's sweep).

Groups as the commands' ``--help`` shows them: the model and its preprocessing, the data, the attack budget and the
runtime (device, AMP, seed, workers). The training and evaluation commands declare their options on the fields of
their typed options (`train.options`, `eval.options`, ...; `option_fields.option`): `declarations_of` reads them,
each field's shared settings found by its flag (`shared_option_for`), into the `Declaration` the parser adds.
"""
import argparse
import dataclasses
from dataclasses import dataclass, field
from typing import Any, Dict, Iterable, Mapping, Optional, Tuple

from timm.utils import ParseKwargs

from ..arg_types import finite_float, non_negative_int, pixel_budget, positive_float, positive_int, seed_int
from ..option_fields import (
    declared_fields, hidden_aliases, is_own, long_flag, option_dest, option_flags, parser_arguments)
from ..usage import AMP_DTYPES
from .parser import ArgumentParser, add_hidden_alias

__all__ = [
    'Declaration', 'SharedOption', 'declarations_of', 'shared_option_for', 'IMG_SIZE', 'INPUT_SIZE', 'CROP_PCT',
    'INTERPOLATION', 'MEAN', 'STD', 'CONFIG', 'MODEL', 'PRETRAINED', 'NUM_CLASSES', 'MODEL_KWARGS',
    'DATASET', 'DATA_DIR', 'VAL_SPLIT', 'CLASS_MAP', 'SKIP_BAD_IMAGES', 'NUM_SAMPLES', 'ATTACK_EPS', 'ATTACK_STEP',
    'ATTACK_STEPS', 'ATTACK_NORM', 'ATTACK_TARGETED', 'BATCH_SIZE', 'WORKERS', 'PIN_MEM', 'DEVICE', 'CHANNELS_LAST',
    'AMP', 'AMP_DTYPE', 'SEED', 'NO_PROGRESS', 'PLAN']


@dataclass(frozen=True)
class SharedOption:
    """An option of several commands: its flags and the settings every command gives it.

    Args:
        flags: The option strings (``-b``, ``--batch-size``).
        settings: ``add_argument`` keywords alike in every command; a command cannot give them again (Python refuses
            a keyword given twice), so what is shared stays shared.
    """

    flags: Tuple[str, ...]
    settings: Mapping[str, Any] = field(default_factory=dict)

    def add(self, container: Any, *aliases: str, **own: Any) -> argparse.Action:
        """Add the option to a parser or argument group, with more option strings (`aliases`, e.g. ``-m``) and the
        command's own ``add_argument`` keywords (its default, help, ...)."""
        return container.add_argument(*self.flags, *aliases, **self.settings, **own)


# The preprocessing overrides of timm's scripts (default: the model's), checked as numbers of their range: a zero
# std or a negative size is a usage error, not a failure deep in a data-loading worker.
IMG_SIZE = SharedOption(('--img-size',), dict(type=positive_int, default=None, metavar='N'))
INPUT_SIZE = SharedOption(('--input-size',), dict(type=positive_int, nargs=3, default=None, metavar=('C', 'H', 'W')))
CROP_PCT = SharedOption(('--crop-pct',), dict(type=positive_float, default=None, metavar='PCT'))
INTERPOLATION = SharedOption(('--interpolation',), dict(default='', type=str, metavar='NAME'))
MEAN = SharedOption(('--mean',), dict(type=finite_float, nargs='+', default=None, metavar='MEAN'))
STD = SharedOption(('--std',), dict(type=positive_float, nargs='+', default=None, metavar='STD'))


#: ``-c``: the YAML file of defaults (`parser.parse_with_config`).
CONFIG = SharedOption(('-c', '--config'), dict(default='', type=str, metavar='FILE'))

# The model.
MODEL = SharedOption(('--model',), dict(type=str))
PRETRAINED = SharedOption(('--pretrained',), dict(action='store_true'))
NUM_CLASSES = SharedOption(('--num-classes',), dict(type=positive_int, default=None, metavar='N'))
MODEL_KWARGS = SharedOption(('--model-kwargs',), dict(nargs='*', default={}, action=ParseKwargs))

# The data.
DATASET = SharedOption(('--dataset',), dict(type=str, metavar='NAME'))
DATA_DIR = SharedOption(('--data-dir',), dict(default=None, type=str, metavar='DIR'))
VAL_SPLIT = SharedOption(('--val-split',), dict(default='validation', type=str, metavar='NAME'))
CLASS_MAP = SharedOption(('--class-map',), dict(default='', type=str, metavar='FILENAME'))
SKIP_BAD_IMAGES = SharedOption(('--skip-bad-images',), dict(action='store_true'))
#: The seeded subset of images measured: its type says whether 0 (all images) is a value.
NUM_SAMPLES = SharedOption(('--num-samples',), dict(metavar='N'))

# The attack budget, on the 0-255 scale. Training attacks with one step count and a targeted default; evaluation
# takes its protocol's budget unless given, and a sweep of step counts.
ATTACK_EPS = SharedOption(('--attack-eps',), dict(type=pixel_budget))
ATTACK_STEP = SharedOption(('--attack-step',))
ATTACK_STEPS = SharedOption(('--attack-steps',))
ATTACK_NORM = SharedOption(('--attack-norm',), dict(choices=('linf', 'l2')))
ATTACK_TARGETED = SharedOption(('--attack-targeted',))

# The runtime.
BATCH_SIZE = SharedOption(('-b', '--batch-size'), dict(type=positive_int, metavar='N'))
WORKERS = SharedOption(('-j', '--workers'), dict(type=non_negative_int, metavar='N'))
PIN_MEM = SharedOption(('--pin-mem',), dict(action='store_true'))
#: ``--device``: a name `usage.check_device` checks before anything is built.
DEVICE = SharedOption(('--device',), dict(type=str))
CHANNELS_LAST = SharedOption(('--channels-last',), dict(action='store_true'))
AMP = SharedOption(('--amp',), dict(action='store_true'))
AMP_DTYPE = SharedOption(('--amp-dtype',), dict(default='bfloat16', choices=list(AMP_DTYPES)))
SEED = SharedOption(('--seed',), dict(type=seed_int, default=42, metavar='S'))
NO_PROGRESS = SharedOption(('--no-progress',), dict(action='store_true'))
#: ``--plan``: build the run, measure its first step or batch on this device, print the budget and stop.
PLAN = SharedOption(('--plan',), dict(action='store_true'))


_SHARED_OPTIONS = {option.flags[-1]: option for option in (
    IMG_SIZE, INPUT_SIZE, CROP_PCT, INTERPOLATION, MEAN, STD, CONFIG, MODEL, PRETRAINED, NUM_CLASSES, MODEL_KWARGS,
    DATASET, DATA_DIR, VAL_SPLIT, CLASS_MAP, SKIP_BAD_IMAGES, NUM_SAMPLES, ATTACK_EPS, ATTACK_STEP, ATTACK_STEPS,
    ATTACK_NORM, ATTACK_TARGETED, BATCH_SIZE, WORKERS, PIN_MEM, DEVICE, CHANNELS_LAST, AMP, AMP_DTYPE, SEED,
    NO_PROGRESS, PLAN)}


def shared_option_for(flag: str) -> Optional[SharedOption]:
    """The shared option whose long flag is `flag` (``--batch-size``), or None."""
    return _SHARED_OPTIONS.get(flag)


@dataclass(frozen=True)
class Declaration:
    """An option as the parser takes it, from the field that declares it (`declarations_of`).

    Attributes:
        dest: Its name: on the command line, in a ``-c`` file and in the run's record.
        flags: Its option strings, as ``--help`` shows them.
        arguments: Its ``add_argument`` keywords.
        aliases: Older spellings, accepted but not shown (`parser.add_hidden_alias`).
    """

    dest: str
    flags: Tuple[str, ...]
    arguments: Mapping[str, Any]
    aliases: Tuple[str, ...] = ()

    @property
    def flag(self) -> str:
        """Its long flag (``--batch-size``): what a study's option of that name is written as."""
        return long_flag(self.flags)

    def add(self, parser: ArgumentParser, container: Any) -> None:
        """Add the option to `container`, `parser` or one of its groups."""
        container.add_argument(*self.flags, **self.arguments)
        alias_arguments = {key: self.arguments[key] for key in ('type', 'nargs', 'action', 'choices')
                           if key in self.arguments}
        for alias in self.aliases:
            add_hidden_alias(parser, container, alias, self.dest, **alias_arguments)


def _declaration(field: dataclasses.Field) -> Declaration:
    """The option `field` declares, with the settings every command gives it where it is shared: the field may state
    them too, alike (a difference is an error: the commands would disagree), and add option strings of its own
    (``-m`` beside ``--model``); a field that declares its command's own option of the same flag (`option_fields.option`
    ``own``) takes none of them."""
    flags, arguments = option_flags(field), parser_arguments(field)
    shared = None if is_own(field) else shared_option_for(long_flag(flags))
    if shared is not None:
        unlike = sorted(key for key in shared.settings.keys() & arguments.keys()
                        if shared.settings[key] != arguments[key])
        if not set(shared.flags) <= set(flags) and field.metadata.get('flags'):
            unlike.append('flags')
        if unlike:
            raise ValueError(f'{field.name} declares {long_flag(flags)} unlike the shared option: {", ".join(unlike)}')
        flags, arguments = (flags if field.metadata.get('flags') else shared.flags), {**shared.settings, **arguments}
    return Declaration(option_dest(field), flags, arguments, hidden_aliases(field))


def declarations_of(options_classes: Iterable[Any]) -> Dict[str, Declaration]:
    """A command's options declared on the fields of `options_classes`, by destination.

    Raises:
        ValueError: Two fields declare one option, or a field declares a shared option unlike this module.
    """
    declared: Dict[str, Declaration] = {}
    for options_class in options_classes:
        for declared_field in declared_fields(options_class):
            dest = option_dest(declared_field)
            if dest in declared:
                raise ValueError(f'{options_class.__name__}.{declared_field.name} declares --{dest.replace("_", "-")} '
                                 f'again.')
            declared[dest] = _declaration(declared_field)
    return declared
