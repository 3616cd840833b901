"""SIGINT and SIGTERM as one exception, so that a command stops on either as it would on Ctrl-C in Python: its
``finally`` and ``except BaseException`` clean-ups run (a training run folder holding no checkpoint is removed, an
evaluation's state file keeps what was done), and `timm_advnorm.cli.run_cli` reports one line and exits with status
128 + the signal's number (130, 143), as shells expect of a process a signal ended.

Without this, SIGTERM (what schedulers and ``kill`` send) ends the process at once, before any clean-up, and SIGINT
ends it with a KeyboardInterrupt traceback of a hundred lines.
"""
import contextlib
import signal
import threading
from typing import Iterator

__all__ = ['Interrupted', 'signals_as_interrupts']

_SIGNALS = (signal.SIGINT, signal.SIGTERM)


class Interrupted(KeyboardInterrupt):
    """A command stopped by SIGINT or SIGTERM.

    A KeyboardInterrupt, so that code written for Ctrl-C handles SIGTERM alike.

    Args:
        signum: The signal's number.
        detail: Where the command stood and how to go on (``in epoch 3; resume with --resume ...``).
    """

    def __init__(self, signum: int, detail: str = ''):
        super().__init__(signum, detail)
        self.signum = signum
        self.detail = detail

    @property
    def exit_status(self) -> int:
        """The status a shell gives a process that the signal ended: 128 + its number."""
        return 128 + self.signum

    def with_detail(self, detail: str) -> 'Interrupted':
        """The same interruption, said with `detail`."""
        return Interrupted(self.signum, detail)

    def __str__(self) -> str:
        name = signal.Signals(self.signum).name
        return f'interrupted ({name})' + (f' {self.detail}' if self.detail else '')


@contextlib.contextmanager
def signals_as_interrupts() -> Iterator[None]:
    """Within the block, SIGINT and SIGTERM raise `Interrupted` in the main thread; the handlers in place before are
    restored on exit.

    Only the first signal raises: later ones are ignored while the clean-ups that the first set off run, so that
    pressing Ctrl-C twice cannot cut them short. Outside the main thread (where Python cannot install handlers) the
    block runs with the handlers as they are.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def interrupt(signum: int, frame) -> None:
        for number in _SIGNALS:
            signal.signal(number, signal.SIG_IGN)
        raise Interrupted(signum)

    previous = {number: signal.signal(number, interrupt) for number in _SIGNALS}
    try:
        yield
    finally:
        for number, handler in previous.items():
            signal.signal(number, handler)
