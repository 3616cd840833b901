"""SIGINT and SIGTERM as one exception, so that a command stops on either as it would on Ctrl-C in Python: its
``finally`` and ``except BaseException`` clean-ups run (a training run folder holding no checkpoint is removed, an
evaluation's state file keeps what was done), and `timm_advnorm.commands.parser.run_cli` reports one line and exits
with status 128 + the signal's number (130, 143), as shells expect of a process a signal ended.

Without this, SIGTERM (what schedulers and ``kill`` send) ends the process at once, before any clean-up, and SIGINT
ends it with a KeyboardInterrupt traceback of a hundred lines.

A terminal sends Ctrl-C to the whole process group, data-loading workers included: a worker, forked with the
handlers in place, leaves the signal to the process that forked it, which shuts it down. An exception raised at an
arbitrary point can land inside a library that cannot take it (a DataLoader starting its workers leaves a
half-built iterator, whose clean-up then fails; an exception raised inside a ``__del__`` is printed and dropped, and
the command would run on): a training loop therefore holds the signal until its next batch
(`interrupts_between_steps`, `check_interrupted`).
"""
import contextlib
import os
import signal
import threading
from typing import Iterator, Optional

__all__ = ['Interrupted', 'check_interrupted', 'interrupts_between_steps', 'signals_as_interrupts']

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


def _ignore_signals() -> None:
    """Ignore further signals while the clean-ups the first one set off run."""
    for number in _SIGNALS:
        signal.signal(number, signal.SIG_IGN)


class _Handler:
    """The handler `signals_as_interrupts` installs, and whether a block holds the signal (`interrupts_between_steps`).

    Attributes:
        owner: The process that installed it; a process forked from it (a data-loading worker) ignores the signal.
        holding: Whether a signal is held until `check_interrupted` rather than raised where it lands.
        pending: The held signal's number; None while none is held.
    """

    def __init__(self):
        self.owner = os.getpid()
        self.holding = False
        self.pending: Optional[int] = None

    def __call__(self, signum: int, frame) -> None:
        if os.getpid() != self.owner:
            return
        if self.holding and self.pending is None:
            self.pending = signum
            return
        _ignore_signals()  # a signal raised at once, or a second one while the first is held
        raise Interrupted(signum)

    def raise_pending(self) -> None:
        """Raise `Interrupted` for the held signal, if any (once)."""
        signum, self.pending = self.pending, None
        if signum is not None:
            _ignore_signals()
            raise Interrupted(signum)


_handler: Optional[_Handler] = None


@contextlib.contextmanager
def signals_as_interrupts() -> Iterator[None]:
    """Within the block, SIGINT and SIGTERM raise `Interrupted` in the main thread; the handlers in place before are
    restored on exit.

    Only the first signal raises: later ones are ignored while the clean-ups that the first set off run, so that
    pressing Ctrl-C twice cannot cut them short. Outside the main thread (where Python cannot install handlers) the
    block runs with the handlers as they are.
    """
    global _handler
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    outer, _handler = _handler, _Handler()
    previous = {number: signal.signal(number, _handler) for number in _SIGNALS}
    try:
        yield
    finally:
        for number, handler in previous.items():
            signal.signal(number, handler)
        _handler = outer


@contextlib.contextmanager
def interrupts_between_steps() -> Iterator[None]:
    """Within the block, the first SIGINT or SIGTERM is held until the next `check_interrupted` (which a loop calls
    between its steps) or the end of the block, where it raises `Interrupted`; a second signal raises at once, for a
    loop stuck in a step. Without `signals_as_interrupts` around it, the block runs with the signals as they are."""
    handler = _handler
    if handler is None or handler.holding:
        yield
        return
    handler.holding = True
    try:
        yield
    finally:
        handler.holding = False
    handler.raise_pending()


def check_interrupted() -> None:
    """Raise `Interrupted` for a signal held by `interrupts_between_steps`; a loop's point where stopping is clean."""
    if _handler is not None:
        _handler.raise_pending()
