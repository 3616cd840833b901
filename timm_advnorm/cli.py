"""Shared command-line behaviour: YAML config defaults, and bad input ending in one clear line, never a traceback."""
import argparse
import logging
import sys
from pathlib import Path
from typing import Callable, List, Optional, Union

import yaml

__all__ = ['USER_ERRORS', 'run_cli', 'set_yaml_defaults']

_logger = logging.getLogger(__name__)

# Errors that mean "the input is wrong" (unknown model, missing file, bad value, malformed config).
USER_ERRORS = (ValueError, OSError, RuntimeError, KeyError, yaml.YAMLError)


def run_cli(main: Callable[[Optional[List[str]]], int], prog: str, argv: Optional[List[str]] = None) -> int:
    """Run `main(argv)`; report a user error as ``<prog>: error: <message>`` on stderr and return exit status 2.

    The full traceback is still logged at debug level for whoever needs it.
    """
    try:
        return main(argv) or 0
    except USER_ERRORS as e:
        _logger.debug('%s failed', prog, exc_info=True)
        message = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        print(f'{prog}: error: {message}', file=sys.stderr)
        return 2


def set_yaml_defaults(parser: argparse.ArgumentParser, path: Union[str, Path]) -> None:
    """Make the values of the YAML file at `path` the defaults of `parser`, so command-line values still win.

    Keys are the options' destinations (long option names with underscores). A key no option has is rejected
    rather than ignored: a misspelled key would otherwise silently leave the default in place.

    Raises:
        SystemExit: Through ``parser.error``: `path` is not a file, or it holds unknown keys.
    """
    path = Path(path)
    if not path.is_file():
        parser.error(f'config file {path} not found')
    config = yaml.safe_load(path.read_text()) or {}
    known = {action.dest for action in parser._actions}
    unknown = sorted(set(config) - known)
    if unknown:
        parser.error(f'unknown key(s) in {path}: {", ".join(unknown)}')
    parser.set_defaults(**config)
