"""The training and evaluation commands as a study drives them (`CELL_COMMANDS`): a cell's options (by name, as in
a ``-c`` YAML file) built into each command's typed options, as the command builds its own (`train.options_of`,
`validate.options_of`: the planned budget and the projected time read them), and written as each command's arguments,
as its option declarations say, for what runs the command (child processes, torchrun, submitit, a rerun by hand); and
each command's `main` for the cells run in this process. The study package (`timm_advnorm.study`) is given these, so
that it parses nothing itself.
"""
import argparse
from typing import Any, List, Mapping, Optional

from ..study.options import CellCommands
from . import train, validate

__all__ = ['CELL_COMMANDS', 'options_to_argv']


#: How an option takes its value on the command line (`options_to_argv`): an on/off pair (``--x``/``--no-x``), a
#: switch that turns it on (``--x``), or the values after its flag (None).
ON_OFF, SWITCH = 'on/off', 'switch'


def switch_kind(action: Any) -> Optional[str]:
    """`ON_OFF`, `SWITCH` or None (a value-taking option), from an option's ``add_argument`` ``action`` keyword."""
    if action is argparse.BooleanOptionalAction:
        return ON_OFF
    if action == 'store_true':
        return SWITCH
    return None


def options_to_argv(options: Mapping[str, Any], kinds: Mapping[str, Optional[str]], prog: str) -> List[str]:
    """`options` (long option names with underscores, as in a ``-c`` YAML file) as command-line arguments of the
    command `prog`, whose options `kinds` gives (each long flag's `switch_kind`).

    Raises:
        ValueError: An option the command does not have.
    """
    argv: List[str] = []
    for key, value in options.items():
        flag = '--' + key.replace('_', '-')
        if flag not in kinds:
            raise ValueError(f'{prog} has no option {flag} (study option {key!r}).')
        if value is None:
            continue
        if kinds[flag] == ON_OFF:
            argv.append(flag if value else '--no-' + flag[2:])
        elif kinds[flag] == SWITCH:
            if value:
                argv.append(flag)
        elif isinstance(value, Mapping):
            argv += [flag, *(f'{k}={v}' for k, v in value.items())]
        elif isinstance(value, (list, tuple)):
            argv += [flag, *(str(v) for v in value)]
        else:
            argv += [flag, str(value)]
    return argv


def train_argv(options: Mapping[str, Any]) -> List[str]:
    """A cell's training options as ``timm-advnorm-train`` arguments, as its option declarations take them; its
    ``config``, the ``-c`` recipe the others override, first."""
    kinds = {flag: switch_kind(arguments.get('action')) for flag, arguments in train.option_arguments().items()}
    recipe = ['-c', options['config']] if options.get('config') else []
    return recipe + options_to_argv({k: v for k, v in options.items() if k != 'config'}, kinds, 'timm-advnorm-train')


def validate_argv(options: Mapping[str, Any]) -> List[str]:
    """A cell's evaluation options as ``timm-advnorm-validate`` arguments, as its option declarations take them."""
    kinds = {flag: switch_kind(arguments.get('action')) for flag, arguments in validate.option_arguments().items()}
    return options_to_argv(options, kinds, validate.PROG)


#: The commands every study's cells run.
CELL_COMMANDS = CellCommands(train_argv=train_argv, validate_argv=validate_argv, train_options=train.options_of,
                             validate_options=validate.options_of, train_main=train.main,
                             validate_main=validate.main)
