"""Which command-line options a run of a training method uses, from what the methods declare: their own options
(`AdversarialClassificationTask.add_args`), those they read from another method's group (`borrowed_options`) and the
shared training-attack options they take (`attack_options`).

Every registered method's options are on the training command whichever method runs, so a run's recorded arguments
hold them all; a model card's recipe keeps only those of the run's method (`unused_options`).
"""
import argparse
from typing import Any, FrozenSet, List, Type

from .adversarial import TRAINING_ATTACK_OPTIONS, AdversarialClassificationTask
from .registry import TASKS, get_task_class

__all__ = ['declared_options', 'method_options', 'used_options', 'unused_options']


class _DestinationRecorder:
    """An `ArgumentGroup` that records the destination of each option declared in it, as argparse names it."""

    def __init__(self):
        self.destinations: List[str] = []

    def add_argument(self, *flags: str, **kwargs: Any) -> None:
        long_flag = next((flag for flag in flags if flag.startswith('--')), flags[0])
        self.destinations.append(kwargs.get('dest') or long_flag.lstrip('-').replace('-', '_'))


def declared_options(task: Type[AdversarialClassificationTask]) -> FrozenSet[str]:
    """The destinations of the options `task.add_args` declares."""
    recorder = _DestinationRecorder()
    task.add_args(recorder)
    return frozenset(recorder.destinations)


def method_options() -> FrozenSet[str]:
    """Every option that belongs to a method rather than to the command: those the registered methods declare, and
    the training attack's."""
    return frozenset(TRAINING_ATTACK_OPTIONS).union(*(declared_options(task) for task in TASKS.values()))


def used_options(args: argparse.Namespace) -> FrozenSet[str]:
    """The method options a run with `args` uses: its method's own, borrowed and training-attack options.

    Raises:
        ValueError: ``args.method`` is not a registered method.
    """
    task = get_task_class(args.method)
    return declared_options(task) | frozenset(task.borrowed_options) | frozenset(task.attack_options(args))


def unused_options(args: argparse.Namespace) -> FrozenSet[str]:
    """The method options a run with `args` does not use: other methods' own, and the training attack's where its
    method runs no attack or its own.

    Raises:
        ValueError: ``args.method`` is not a registered method.
    """
    return method_options() - used_options(args)
