"""The options several commands take, each defined once: its flags and what every command gives it alike (type,
count, metavar, choices); a command adds it with what is its own (default, help, and for a few options the type or
count that really differ, such as the single training ``--attack-steps`` against the evaluation's sweep).

Groups as the commands' ``--help`` shows them: the model and its preprocessing, the data, the attack budget and the
runtime (device, AMP, seed, workers). A command whose options are declared on options dataclasses (the training
command: `train.options`) finds each field's shared settings by its flag (`shared_option_for`).
"""
import argparse
from dataclasses import dataclass, field
from typing import Any, Mapping, Optional, Tuple

from timm.utils import ParseKwargs

from ..arg_types import finite_float, non_negative_int, pixel_budget, positive_float, positive_int, seed_int
from ..usage import AMP_DTYPES

__all__ = [
    'SharedOption', 'add_preprocessing_args', 'shared_option_for', 'IMG_SIZE', 'INPUT_SIZE', 'CROP_PCT',
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


def add_preprocessing_args(group: Any, images: str) -> None:
    """The preprocessing overrides of timm's scripts (``--img-size``, ``--input-size``, ``--crop-pct``,
    ``--interpolation``, ``--mean``, ``--std``; default: the model's).

    Args:
        group: The parser or argument group to add them to.
        images: What the crop and interpolation apply to, for the help (``validation images``).
    """
    IMG_SIZE.add(group, help='Input image size.')
    INPUT_SIZE.add(group, help='Input dimensions (e.g. 3 224 224; default: the model\'s).')
    CROP_PCT.add(group, help=f'Centre-crop fraction of {images} (default: the model\'s).')
    INTERPOLATION.add(group, help=f'Resize interpolation of {images} (default: the model\'s).')
    MEAN.add(group, help='Override dataset mean.')
    STD.add(group, help='Override dataset std.')


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
