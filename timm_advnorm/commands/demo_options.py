"""What ``timm-advnorm-demo`` is told, as typed, frozen options: each field declares its command-line option
(`option_fields.option`), from which `timm_advnorm.commands.demo` generates its parser and which it fills by option
name, as the other commands do. The demo's steps are the training and evaluation commands themselves, run from
here, so its options live beside it."""
from dataclasses import dataclass
from typing import Optional

from ..option_fields import option

__all__ = ['DemoOptions']


@dataclass(frozen=True)
class DemoOptions:
    """A run of the demo.

    Attributes:
        output: The new folder for the runs, results and ``report.md`` (None: ``output/demo-<time>``).
        data_dir: Where the digits are rendered (None: the user cache).
        smoke: Every step with tiny budgets: a check that the demo runs, whose numbers mean nothing.
    """

    output: Optional[str] = option(
        None, 'New folder for the runs, results and report.md (default: output/demo-<time>).', metavar='DIR')
    data_dir: Optional[str] = option(None, 'Where the digits are rendered (default: the user cache).', metavar='DIR')
    smoke: bool = option(
        False, 'Every step with tiny budgets, a check that the demo runs (about 1.5-2.5 min measured on a 2-core CPU): '
               'the numbers mean nothing, and its report and plots say so.')
