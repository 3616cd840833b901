"""The training and evaluation commands as a study drives them (`CELL_COMMANDS`): a cell's options written as each
command's arguments by that command's own parser, its training arguments parsed into typed options for the planned
budget, and each command's `main` for the cells run in this process. The study package (`timm_advnorm.study`) is
given these, so that it parses nothing itself.
"""
import argparse
from typing import Any, Dict, List, Mapping, Sequence

from ..eval.options import EvalOptions
from ..study.options import CellCommands
from ..train.options import TrainOptions
from . import train, validate

__all__ = ['CELL_COMMANDS', 'options_to_argv']


def _option_actions(parser: argparse.ArgumentParser) -> Dict[str, argparse.Action]:
    return {option: action for action in parser._actions for option in action.option_strings}


def options_to_argv(options: Mapping[str, Any], parser: argparse.ArgumentParser) -> List[str]:
    """`options` (long option names with underscores, as in a ``-c`` YAML file) as command-line arguments of
    `parser`'s command.

    Raises:
        ValueError: An option the command does not have, or a switch set false that cannot be switched off.
    """
    actions = _option_actions(parser)
    argv: List[str] = []
    for key, value in options.items():
        flag = '--' + key.replace('_', '-')
        action = actions.get(flag)
        if action is None:
            raise ValueError(f'{parser.prog} has no option {flag} (study option {key!r}).')
        if value is None:
            continue
        if isinstance(action, argparse.BooleanOptionalAction):
            argv.append(flag if value else '--no-' + flag[2:])
        elif isinstance(action, argparse._StoreTrueAction):
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
    """A cell's training options as ``timm-advnorm-train`` arguments."""
    return options_to_argv(options, train.get_args_parser())


def validate_argv(options: Mapping[str, Any]) -> List[str]:
    """A cell's evaluation options as ``timm-advnorm-validate`` arguments."""
    return options_to_argv(options, validate.get_args_parser())


def train_options_of(argv: Sequence[str]) -> TrainOptions:
    """The typed options of the ``timm-advnorm-train`` run `argv` describes, checked by its method."""
    args, _ = train.parse_args(list(argv))
    return train.train_options(args)


def validate_options_of(argv: Sequence[str]) -> EvalOptions:
    """The typed options of the ``timm-advnorm-validate`` evaluation `argv` describes (its checkpoint need not exist
    yet)."""
    return validate.eval_options(validate.parse_args(list(argv)))


#: The commands every study's cells run.
CELL_COMMANDS = CellCommands(train_argv=train_argv, validate_argv=validate_argv, train_options=train_options_of,
                             validate_options=validate_options_of, train_main=train.main,
                             validate_main=validate.main)
