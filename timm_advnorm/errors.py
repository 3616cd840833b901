"""How a command reports bad input: ``<prog>: error: <one line>`` on stderr and exit status 2, never a traceback (it
is logged at debug level for whoever needs it). Below every package that reports errors so, the loaders included,
and imports none of them: the parsers (`timm_advnorm.cli`) build on it, not the other way round.
"""
import logging
import sys
from typing import Callable, List, Optional

import yaml

from .signals import Interrupted, signals_as_interrupts

__all__ = ['USER_ERRORS', 'one_line', 'run_cli']

_logger = logging.getLogger(__name__)

# Errors that mean "the input is wrong" (unknown model, missing or damaged file, bad value, malformed config). Other
# exceptions are defects and keep their traceback; code that knows a library's RuntimeError means bad input (timm's
# "Unknown model") re-raises it as a ValueError.
USER_ERRORS = (ValueError, OSError, yaml.YAMLError)


def one_line(error: BaseException, limit: int = 600) -> str:
    """An exception as one line of at most `limit` characters (YAML and some library errors span several)."""
    text = ' '.join(str(error).split()) or type(error).__name__
    return text if len(text) <= limit else text[:limit - 3] + '...'


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
