"""What the package's commands and the code below them share about usage: which errors mean bad input and how
they read as one line, the option values checked before anything is built (the device, the normalization lengths,
pretrained weights), the autocast dtypes by name, whether progress bars are shown, and the CPUs this process may use
(which bound the default data-loading workers).

The commands (`timm_advnorm.commands`) report these errors as ``<prog>: error: <one line>``; the code they call raises
them, so it lives here, below the commands, and imports nothing above it.
"""
import os
import sys
from typing import Optional, Sequence, Tuple

import torch
import yaml
from timm.utils.distributed import is_distributed_env

__all__ = ['AMP_DTYPES', 'USER_ERRORS', 'available_cpus', 'check_device', 'check_normalization_lengths',
           'check_pretrained_option', 'default_workers', 'one_line', 'show_progress']

# Errors that mean "the input is wrong" (unknown model, missing or damaged file, bad value, malformed config). Other
# exceptions are defects and keep their traceback; code that knows a library's RuntimeError means bad input (timm's
# "Unknown model") re-raises it as a ValueError.
USER_ERRORS = (ValueError, OSError, yaml.YAMLError)

# ``--amp-dtype`` of every command: autocast dtypes by name.
AMP_DTYPES = {'bfloat16': torch.bfloat16, 'float16': torch.float16}


def show_progress() -> bool:
    """Progress bars only for a person watching: stderr is a terminal and no CI is detected."""
    return sys.stderr.isatty() and not os.environ.get('CI')


def available_cpus() -> int:
    """CPUs this process may run on: its CPU affinity where the system reports one (Linux; a container or ``taskset``
    may allow fewer than the machine has), else the machine's count."""
    if hasattr(os, 'sched_getaffinity'):
        return max(len(os.sched_getaffinity(0)), 1)
    return os.cpu_count() or 1


def default_workers(given: Optional[int], default: int) -> Tuple[int, Optional[str]]:
    """Data-loading workers of a command's ``--workers``: the value given, kept whatever it is; else `default`, lowered
    to the CPUs this process may use (`available_cpus`: more workers than CPUs only compete with the process that
    attacks and trains), with a one-line note saying so (None when nothing was lowered)."""
    if given is not None:
        return given, None
    cpus = available_cpus()
    if default <= cpus:
        return default, None
    return cpus, (f'--workers {cpus}: the default {default} data-loading workers lowered to the {cpus} CPU(s) this '
                  f'process may use (give --workers N to choose)')


def one_line(error: BaseException, limit: int = 600) -> str:
    """An exception as one line of at most `limit` characters (YAML and some library errors span several)."""
    text = ' '.join(str(error).split()) or type(error).__name__
    return text if len(text) <= limit else text[:limit - 3] + '...'


def _device_available(kind: str) -> bool:
    """Whether this machine has a device of type `kind` (``mps``, ``xpu``, ...) that torch can use."""
    if kind == 'mps':
        return torch.backends.mps.is_available()
    is_available = getattr(getattr(torch, kind, None), 'is_available', None)
    return bool(callable(is_available) and is_available())


def check_device(name: str) -> torch.device:
    """The device ``--device`` `name` selects, checked before anything is built: torch parses ``mps`` or ``meta`` on
    any machine and fails only when the first tensor moves there, deep in the set-up.

    Raises:
        ValueError: `name` is no device, is ``meta`` (tensors without values: nothing can be trained or evaluated on
            them), is of a type this machine lacks, or is a CUDA index past the last device (outside torchrun,
            which replaces the index by the process's local rank).
    """
    try:
        device = torch.device(name)
    except (RuntimeError, TypeError) as e:
        raise ValueError(f'--device {name}: not a device ({one_line(e)})') from e
    if device.type == 'meta':
        raise ValueError(f'--device {name}: meta tensors hold no values, so nothing can be computed on them; use '
                         f'--device cpu or cuda')
    if device.type == 'cuda' and not torch.cuda.is_available():
        raise ValueError(f'--device {name}: no CUDA device is available here (torch.cuda.is_available() is False); '
                         f'use --device cpu')
    if device.type not in ('cpu', 'cuda') and not _device_available(device.type):
        raise ValueError(f'--device {name}: no {device.type} device is available here; use --device cpu')
    if device.type == 'cuda' and device.index is not None and not is_distributed_env() \
            and device.index >= torch.cuda.device_count():
        raise ValueError(f'--device {name}: there are {torch.cuda.device_count()} CUDA device(s), numbered from 0')
    return device


def check_normalization_lengths(mean: Optional[Sequence[float]], std: Optional[Sequence[float]],
                                input_size: Optional[Sequence[int]]) -> None:
    """``--mean`` and ``--std`` hold one value, or one per input channel (``--input-size``'s first, else 3, as timm's
    `resolve_data_config` counts them): timm would only assert when it builds the loaders.

    Raises:
        ValueError: A list of another length.
    """
    channels = input_size[0] if input_size else 3
    for name, values in (('mean', mean), ('std', std)):
        if values is not None and len(values) not in (1, channels):
            raise ValueError(f'--{name} takes 1 value or one per input channel ({channels}), got {len(values)}')


def check_pretrained_option(model_name: str, num_classes: Optional[int], reset_classifier: Optional[bool],
                            weights_option: str) -> None:
    """``--pretrained`` in the command's own terms, checked before anything is built: a name timm has no weights for
    (said first, as the cause), or weights whose class count differs from the run's.

    Args:
        model_name: The ``--model`` value.
        num_classes: The classes the run asks for (``--num-classes`` or the data set's), None if unknown.
        reset_classifier: The ``--reset-classifier`` value; None where the command has no such option.
        weights_option: The option that gives weights instead (``--initial-checkpoint``, ``--checkpoint``).

    Raises:
        ValueError: A one-line message naming the options to change.
    """
    from .weights.loading import has_pretrained_weights, pretrained_num_classes

    if not has_pretrained_weights(model_name):
        raise ValueError(f'--pretrained: {model_name} has no pretrained weights (timm registers none for it); drop '
                         f'--pretrained, or give the weights with {weights_option}')
    available = pretrained_num_classes(model_name)
    if available is None or num_classes is None or available == num_classes or reset_classifier:
        return
    hint = (f'add --reset-classifier to train a new {num_classes}-class head' if reset_classifier is not None
            else f'pass --num-classes {available}')
    raise ValueError(f'--pretrained: the weights of {model_name} have {available} classes but the run has '
                     f'{num_classes} (--num-classes or the data set); {hint}')
