"""What every command of the package shares: one parser class, YAML configs, hidden aliases, one-line errors.

Every command (``timm-advnorm-train``, ``-validate``, ``-publish``, ``-convert`` and the top-level scripts) reports
bad input the same way: ``<prog>: error: <one line>`` on stderr and exit status 2, never a traceback (the traceback
is logged at debug level for whoever needs it). ``--help`` shows every option's default.
"""
import argparse
import logging
import sys
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple, Union

import yaml

__all__ = ['USER_ERRORS', 'ArgumentParser', 'add_hidden_alias', 'check_pretrained_option', 'one_line',
           'parse_with_config', 'run_cli']

_logger = logging.getLogger(__name__)

# Errors that mean "the input is wrong" (unknown model, missing or damaged file, bad value, malformed config). Other
# exceptions are defects and keep their traceback; code that knows a library's RuntimeError means bad input (timm's
# "Unknown model") re-raises it as a ValueError.
USER_ERRORS = (ValueError, OSError, yaml.YAMLError)


def one_line(error: BaseException, limit: int = 600) -> str:
    """An exception as one line of at most `limit` characters (YAML and some library errors span several)."""
    text = ' '.join(str(error).split()) or type(error).__name__
    return text if len(text) <= limit else text[:limit - 3] + '...'


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

    Hidden aliases (`add_hidden_alias`) are accepted on the command line and as keys of a ``-c`` YAML config.
    """

    def __init__(self, *args: Any, **kwargs: Any):
        kwargs.setdefault('formatter_class', _DefaultsHelpFormatter)
        super().__init__(*args, **kwargs)
        self.config_aliases: Dict[str, str] = {}

    def error(self, message: str):
        self.exit(2, f'{self.prog}: error: {message}\n')


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


def _read_config(parser: ArgumentParser, path: Union[str, Path], text: str) -> Dict[str, Any]:
    """The YAML mapping in `text` (the file at `path`), keys translated from hidden aliases; usage errors for a file
    that is not YAML, not a mapping, or holds keys no option has (a misspelled key would silently keep a default)."""
    try:
        config = yaml.safe_load(text)
    except yaml.YAMLError as e:
        mark = getattr(e, 'problem_mark', None)
        where = f' (line {mark.line + 1}, column {mark.column + 1})' if mark is not None else ''
        parser.error(f'config file {path} is not valid YAML: {getattr(e, "problem", None) or one_line(e)}{where}')
    if config is None:
        return {}
    if not isinstance(config, dict):
        parser.error(f'config file {path} must map argument names to values, got a {type(config).__name__}')
    config = {parser.config_aliases.get(key, key): value for key, value in config.items()}
    known = {action.dest for action in parser._actions}
    unknown = sorted(str(key) for key in set(config) - known)
    if unknown:
        parser.error(f'unknown key(s) in {path}: {", ".join(unknown)}')
    return config


def parse_with_config(
        parser: ArgumentParser,
        argv: Optional[Sequence[str]] = None,
        resolve: Optional[Callable[[str], Path]] = None,
) -> Tuple[argparse.Namespace, Dict[str, Any]]:
    """Parse `argv` with the ``-c/--config`` YAML file's values as defaults (the command line wins).

    The parser must have a ``-c/--config`` option. Keys are the options' destinations (long names with underscores).

    Args:
        parser: The command's parser.
        argv: Arguments (default: ``sys.argv[1:]``).
        resolve: Turns the ``-c`` value into a file (e.g. a packaged recipe name), raising ValueError when it names
            none; default: the value as a path.

    Returns:
        The namespace and the config's values (empty without ``-c``).
    """
    pre = argparse.ArgumentParser(add_help=False)
    pre.add_argument('-c', '--config', default='')
    config_args, _ = pre.parse_known_args(argv)
    config: Dict[str, Any] = {}
    if config_args.config:
        try:
            path = resolve(config_args.config) if resolve else Path(config_args.config)
        except ValueError as e:
            parser.error(one_line(e))
        if not path.is_file():
            parser.error(f'config file {config_args.config} not found')
        try:
            text = path.read_text()
        except (OSError, UnicodeDecodeError) as e:
            parser.error(f'cannot read config file {path}: {getattr(e, "strerror", None) or one_line(e)}')
        config = _read_config(parser, path, text)
        parser.set_defaults(**config)
    return parser.parse_args(argv), config


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
    from .hub.loading import has_pretrained_weights, pretrained_num_classes

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


def run_cli(main: Callable[[Optional[List[str]]], Optional[int]], prog: str, argv: Optional[List[str]] = None) -> int:
    """Run ``main(argv)``; report a user error as ``<prog>: error: <message>`` on stderr and return exit status 2.

    Usage errors found by the parser already exit with status 2 through `ArgumentParser.error`.
    """
    try:
        return main(argv) or 0
    except USER_ERRORS as e:
        _logger.debug('%s failed', prog, exc_info=True)
        print(f'{prog}: error: {one_line(e)}', file=sys.stderr)
        return 2
