"""Progress bars for a person watching a terminal, and console output that does not tear them.

A tqdm bar redraws its line in place: a log line or a warning written to the terminal while the bar is open lands in
the middle of that line, and the next redraw leaves a half-line behind. While a bar of `progress_bar` is shown,
`bar_safe_output` routes both around it: log records through `tqdm.write`, warnings with the bars cleared first and
redrawn after.
"""
import contextlib
import sys
import warnings
from typing import Any, Iterator, Optional, TextIO

from tqdm import tqdm
from tqdm.contrib.logging import logging_redirect_tqdm

__all__ = ['bar_safe_output', 'progress_bar']


@contextlib.contextmanager
def bar_safe_output() -> Iterator[None]:
    """Within the block, the root logger's console handlers write through `tqdm.write` (with their formatter and
    filters; other handlers, such as log files, are left as they are), and warnings are shown between the open bars'
    redraws; both are restored on exit."""
    show_warning = warnings.showwarning

    def show_between_bars(message: Any, category: type, filename: str, lineno: int, file: Optional[TextIO] = None,
                          line: Optional[str] = None) -> None:
        with tqdm.external_write_mode(file=file or sys.stderr):
            show_warning(message, category, filename, lineno, file, line)

    warnings.showwarning = show_between_bars
    try:
        with logging_redirect_tqdm():
            yield
    finally:
        warnings.showwarning = show_warning


@contextlib.contextmanager
def progress_bar(iterable: Any = None, *, show: bool, **kwargs: Any) -> Iterator[tqdm]:
    """A tqdm bar over `iterable` (or a `total`, advanced with ``update``), disabled unless `show`
    (`timm_advnorm.usage.show_progress`), with console output routed around it while it is shown (`bar_safe_output`).

    The bar is closed when the block ends, also by an exception, so that what a stopped command says next (its one
    line) starts on a line of its own.

    Args:
        iterable: What the bar iterates over, if anything.
        show: Whether to show it.
        **kwargs: tqdm's options (``total``, ``desc``, ``unit``, ``leave``...).
    """
    with tqdm(iterable, disable=not show, dynamic_ncols=True, **kwargs) as bar:
        with bar_safe_output() if show else contextlib.nullcontext():
            yield bar
