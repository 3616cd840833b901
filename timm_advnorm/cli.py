"""Shared command-line behaviour: bad input ends in one clear line and a non-zero exit, never a traceback."""
import logging
import sys
from typing import Callable, List, Optional

import yaml

__all__ = ['USER_ERRORS', 'run_cli']

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
