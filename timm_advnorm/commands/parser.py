"""What every command of the package shares: one parser class, YAML configs, hidden aliases, one-line errors.

Every command (``timm-advnorm-train``, ``-validate``, ``-publish``, ``-convert`` and the top-level scripts) reports
bad input the same way: ``<prog>: error: <one line>`` on stderr and exit status 2, never a traceback (the traceback
is logged at debug level for whoever needs it), never the usage block (a misused option says ``(see --help)``).
``--help`` shows every option's default. A ``-c`` YAML config is held to the options' types, counts and choices,
as the command line is.
"""
import argparse
import functools
import json
import logging
import sys
from pathlib import Path
from typing import Any, Callable, Dict, List, Mapping, NoReturn, Optional, Sequence, Set, Tuple, Union

from ..messages import read_utf8
from ..signals import Interrupted, signals_as_interrupts
from ..strict_yaml import YAMLFileError, load_yaml
from ..usage import USER_ERRORS, one_line

__all__ = ['ArgumentParser', 'add_hidden_alias', 'given_options', 'parse_mapping', 'parse_with_config', 'run_cli']

_logger = logging.getLogger(__name__)


class _DefaultsHelpFormatter(argparse.HelpFormatter):
    """Appends ``(default: X)`` to an option's help unless the help already speaks of its default or there is none
    worth showing (an off switch, an unset value)."""

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ''
        default = action.default
        if ('default' in text.lower() or default in (None, False, '', argparse.SUPPRESS)
                or not action.option_strings or isinstance(action, argparse._HelpAction)):
            return text
        shown = ' '.join(str(v) for v in default) if isinstance(default, (list, tuple)) else '%(default)s'
        return f'{text} (default: {shown})'


class ArgumentParser(argparse.ArgumentParser):
    """timm-style parser of the package's commands: one-line usage errors with exit status 2, defaults in ``--help``.

    Error lines start with the command's name (``timm-advnorm-convert: error:``), also for a sub-command's parser,
    which is created with this class and told the command (`add_subparsers`). Hidden aliases (`add_hidden_alias`)
    are accepted on the command line and as keys of a ``-c`` YAML config. Each argument added, to the parser or to one
    of its groups, is kept: an option in `option_actions` by its option strings, and every argument (positionals
    too) in `dest_actions` by its destination.

    Args:
        command: Name that starts error lines (default: `prog`; a sub-command's parser gets its parent's).
    """

    def __init__(self, *args: Any, command: Optional[str] = None, **kwargs: Any):
        kwargs.setdefault('formatter_class', _DefaultsHelpFormatter)
        #: Each option's action (what ``add_argument`` returned) by its option strings, ``--help`` included.
        self.option_actions: Dict[str, argparse.Action] = {}
        #: Each argument's action by its destination: the first one added (an option before its hidden aliases,
        #: which share its destination), positionals and ``--help`` included.
        self.dest_actions: Dict[str, argparse.Action] = {}
        super().__init__(*args, **kwargs)
        self.command = command or self.prog
        self.config_aliases: Dict[str, str] = {}

    def _kept(self, action: argparse.Action) -> argparse.Action:
        self.option_actions.update((option, action) for option in action.option_strings)
        self.dest_actions.setdefault(action.dest, action)
        return action

    def add_argument(self, *args: Any, **kwargs: Any) -> argparse.Action:
        """argparse's ``add_argument``, the option kept in `option_actions`."""
        return self._kept(super().add_argument(*args, **kwargs))

    def add_argument_group(self, *args: Any, **kwargs: Any) -> Any:
        """argparse's ``add_argument_group``, whose options are kept in `option_actions` too."""
        group = super().add_argument_group(*args, **kwargs)
        add_to_group = group.add_argument
        group.add_argument = lambda *a, **k: self._kept(add_to_group(*a, **k))
        return group

    def add_subparsers(self, **kwargs: Any) -> argparse._SubParsersAction:
        """Sub-command parsers of this class, whose errors start with this command's name; the action that holds
        them is kept in `dest_actions` by its destination (``format``), its ``choices`` the sub-commands' parsers."""
        kwargs.setdefault('parser_class', functools.partial(type(self), command=self.command))
        return self._kept(super().add_subparsers(**kwargs))

    def error(self, message: str) -> NoReturn:
        """A usage error: one line and where to read more, instead of argparse's usage block, which buries it."""
        hint = '--help' if self.prog == self.command else f'{self.prog} --help'
        self.fail(f'{message} (see {hint})')

    def fail(self, message: str) -> NoReturn:
        """Exit with status 2 after ``<command>: error: <message>`` on stderr."""
        self.exit(2, f'{self.command}: error: {message}\n')


def add_hidden_alias(parser: ArgumentParser, container: Any, alias: str, dest: str, **kwargs: Any) -> None:
    """Accept `alias` (an older spelling, e.g. ``--val-samples``) for the option stored in `dest`, without listing
    it in ``--help``; a YAML config may use the alias's key too.

    Args:
        parser: The parser (it records the YAML key alias).
        container: The parser or argument group the option belongs to.
        alias: The old option string.
        dest: Destination of the option it stands for.
        **kwargs: The option's ``type``/``nargs``/``action``, as on the option itself.
    """
    container.add_argument(alias, dest=dest, default=argparse.SUPPRESS, help=argparse.SUPPRESS, **kwargs)
    parser.config_aliases[alias.lstrip('-').replace('-', '_')] = dest


class _ConfigValueError(ValueError):
    """A config value the option's action would not take, and what it takes instead (raised inside this module)."""


def _shown(value: Any) -> str:
    """A config value as written in YAML's JSON subset: ``2.5``, ``"yes"``, ``[0.1, 0.2]``, ``null``."""
    return json.dumps(value, default=str)


def _type_name(action: argparse.Action) -> str:
    """The option's type as argparse names it in messages (``int``, ``float``; ``str`` when it has none)."""
    return getattr(action.type, '__name__', None) or 'str'


def _convert_one(action: argparse.Action, value: Any) -> Any:
    """One config value through the action's ``type`` and ``choices``, as the command line's text would go.

    The value goes as text, so that ``2.5`` is not an int (``int(2.5)`` would truncate it) and ``true`` is not a
    number; PyYAML's strings for floats without a dot (``1e-4``) convert as on the command line.
    """
    if value is None or isinstance(value, (bool, list, dict)):
        raise _ConfigValueError(f'expected a single {_type_name(action)} value, got {_shown(value)}')
    try:
        converted = (action.type or str)(value if isinstance(value, str) else str(value))
    except argparse.ArgumentTypeError as e:
        raise _ConfigValueError(f'invalid value {_shown(value)}: {e}') from None
    except (TypeError, ValueError):
        raise _ConfigValueError(f'invalid {_type_name(action)} value: {_shown(value)}') from None
    if action.choices is not None and converted not in action.choices:
        raise _ConfigValueError(f'invalid choice: {_shown(value)} (choose from {", ".join(map(str, action.choices))})')
    return converted


def _convert_store(action: argparse.Action, value: Any) -> Any:
    """A config value for a value-taking option: one value or a list, as its ``nargs`` says.

    A single value for an option taking one or more (``gammas: 0.5``) is a one-element list, as ``--gammas 0.5``.
    """
    if value is None and action.default is None:  # an unset option, as a saved args.yaml writes it
        return None
    nargs = action.nargs
    if nargs in (None, '?'):
        return _convert_one(action, value)
    items = value if isinstance(value, list) else [value]
    if not isinstance(value, list) and isinstance(nargs, int) and nargs > 1:
        raise _ConfigValueError(f'expected a list of {nargs} {_type_name(action)} values, got {_shown(value)}')
    if isinstance(nargs, int) and len(items) != nargs:
        raise _ConfigValueError(f'expected {nargs} {_type_name(action)} values, got {len(items)}: {_shown(value)}')
    if nargs == '+' and not items:
        raise _ConfigValueError(f'expected one or more {_type_name(action)} values, got an empty list')
    return [_convert_one(action, item) for item in items]


def _convert_config_value(action: argparse.Action, value: Any) -> Any:
    """`value` as the option's action would store it from the command line.

    Raises:
        _ConfigValueError: What the option takes instead.
    """
    if isinstance(action, (argparse._StoreTrueAction, argparse._StoreFalseAction, argparse.BooleanOptionalAction)):
        if isinstance(value, bool) or (value is None and action.default is None):
            return value
        raise _ConfigValueError(f'expected true or false, got {_shown(value)}')
    if isinstance(action, argparse._StoreAction):
        return _convert_store(action, value)
    if action.nargs == 0:  # --help, --list-recipes: things to do, not values
        raise _ConfigValueError(f'{"/".join(action.option_strings)} is an action, not a setting a config can hold')
    if isinstance(action.default, Mapping) and not isinstance(value, Mapping):  # key=value options (--model-kwargs)
        raise _ConfigValueError(f'expected a mapping of names to values, got {_shown(value)}')
    return value


def _read_config(parser: ArgumentParser, path: Union[str, Path], text: str) -> Dict[str, Any]:
    """The YAML mapping in `text` (the file at `path`), keys translated from hidden aliases, each value converted
    and checked as the option's action would on the command line; usage errors for a file that is not strict YAML (a
    key given twice, a recursive anchor: `strict_yaml`), not a mapping, holds keys no option has (a misspelled key
    would silently keep a default), or a value the option would not take (naming the key, the value and what it
    takes)."""
    try:
        raw = load_yaml(text, f'config file {path}')
    except YAMLFileError as e:
        parser.fail(str(e))
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        parser.fail(f'config file {path} must map argument names to values, got a {type(raw).__name__}')
    return _converted(parser, raw, f'config file {path}', f'in {path}')


def _converted(parser: ArgumentParser, raw: Mapping[Any, Any], source: str, where: str) -> Dict[str, Any]:
    """`raw` (option names or hidden aliases to values, from `source`) by destination, each value converted and
    checked as the option's action would on the command line; a usage error for a key no option has or a value the
    option would not take."""
    actions = parser.dest_actions
    unknown = sorted(str(key) for key in raw if parser.config_aliases.get(key, key) not in actions)
    if unknown:
        parser.fail(f'unknown key(s) {where}: {", ".join(unknown)}')
    config = {}
    for key, value in raw.items():
        dest = parser.config_aliases.get(key, key)
        try:
            config[dest] = _convert_config_value(actions[dest], value)
        except _ConfigValueError as e:
            parser.fail(f'{source}, key {key}: {e}')
    return config


def _read_config_file(parser: ArgumentParser, name: str, resolve: Optional[Callable[[str], Path]]) -> Dict[str, Any]:
    """The values of the ``-c`` config `name` (a file, or what `resolve` turns it into), converted (`_read_config`);
    a usage error for one that names no file or cannot be read."""
    try:
        path = resolve(name) if resolve else Path(name)
    except ValueError as e:
        parser.fail(one_line(e))
    if not path.is_file():
        parser.fail(f'config file {name} not found')
    try:
        text = read_utf8(path, f'config file {path}')
    except OSError as e:
        parser.fail(f'cannot read config file {path}: {e.strerror or one_line(e)}')
    except ValueError as e:
        parser.fail(str(e))
    return _read_config(parser, path, text)


def parse_with_config(
        parser: ArgumentParser,
        argv: Optional[Sequence[str]] = None,
        resolve: Optional[Callable[[str], Path]] = None,
) -> Tuple[argparse.Namespace, Dict[str, Any]]:
    """Parse `argv` with the ``-c/--config`` YAML file's values as defaults (the command line wins).

    The parser must have a ``-c/--config`` option. Keys are the options' destinations (long names with underscores)
    or hidden aliases; each value goes through its option's type, count and choices, as on the command line, before
    it becomes a default, so that ``epochs: 2.5`` is the same usage error as ``--epochs 2.5``.

    Args:
        parser: The command's parser.
        argv: Arguments (default: ``sys.argv[1:]``).
        resolve: Turns the ``-c`` value into a file (e.g. a packaged recipe name), raising ValueError when it names
            none; default: the value as a path.

    Returns:
        The namespace and the config's values, converted (empty without ``-c``).
    """
    pre = ArgumentParser(prog=parser.prog, command=parser.command, add_help=False)
    pre.add_argument('-c', '--config', default='')
    config_args, _ = pre.parse_known_args(argv)
    config = _read_config_file(parser, config_args.config, resolve) if config_args.config else {}
    parser.set_defaults(**config)
    return parser.parse_args(argv), config


def parse_mapping(
        parser: ArgumentParser,
        values: Mapping[str, Any],
        resolve: Optional[Callable[[str], Path]] = None,
) -> Tuple[argparse.Namespace, Dict[str, Any], Set[str]]:
    """The namespace of the invocation whose options `values` gives by name (long option names with underscores or
    hidden aliases, as in a ``-c`` YAML file; its ``config``, the ``-c`` file), without a command line: what the
    arguments `values` stands for (a study cell's, `study_cells`) would parse into.

    The layers are `parse_with_config`'s: the options' declared defaults, the ``-c`` file's values, then `values`,
    each converted and checked as its option's action would the command line's text. As on that command line, a
    None leaves the option at its default, and so does False for a switch that is only ever turned on (neither is
    written as an argument).

    Returns:
        The namespace, the ``-c`` file's values (as `parse_with_config`) and the destinations `values` gives (as
        `given_options` finds them on a command line).
    """
    written = {key: value for key, value in values.items() if value is not None and not (
        value is False and isinstance(parser.dest_actions.get(parser.config_aliases.get(key, key)),
                                      argparse._StoreTrueAction))}
    config = _read_config_file(parser, written['config'], resolve) if written.get('config') else {}
    parser.set_defaults(**config)
    own = _converted(parser, written, 'options by name', 'among the options by name')
    parser.set_defaults(**own)
    # no arguments: every value is a default now, which argparse resolves as it does (a text one through its type)
    return parser.parse_args([]), config, set(own)


def given_options(parser: ArgumentParser, argv: Optional[Sequence[str]], config: Mapping[str, Any]) -> Set[str]:
    """The destinations of the options this invocation sets: given on the command line `argv` or by its ``-c`` file
    (`config`, as `parse_with_config` returns it), not left at their defaults.

    `argv` is parsed again into a namespace that already holds every destination (argparse then sets no default),
    so an option given with its default value counts as given.
    """
    unset = object()
    namespace = argparse.Namespace(**{dest: unset for dest in parser.dest_actions if dest != argparse.SUPPRESS})
    parser.parse_args(argv, namespace=namespace)
    return {dest for dest, value in vars(namespace).items() if value is not unset} | set(config)


def run_cli(main: Callable[[Optional[List[str]]], Optional[int]], prog: str, argv: Optional[List[str]] = None) -> int:
    """Run ``main(argv)``; report a user error as ``<prog>: error: <message>`` on stderr and return exit status 2.

    Usage errors found by the parser already exit with status 2 through `ArgumentParser.error`. SIGINT and SIGTERM
    stop the command with ``<prog>: interrupted (SIGINT) <where it stood and how to go on>`` on stderr and exit
    status 128 + the signal's number (`timm_advnorm.signals`).
    """
    with signals_as_interrupts():
        try:
            return main(argv) or 0
        except USER_ERRORS as e:
            _logger.debug('%s failed', prog, exc_info=True)
            print(f'{prog}: error: {one_line(e)}', file=sys.stderr)
            return 2
        except Interrupted as e:
            _logger.debug('%s interrupted', prog, exc_info=True)
            print(f'{prog}: {one_line(e)}', file=sys.stderr)
            return e.exit_status
