"""Which of the training command's options a run of a training method uses, from what the methods declare: their
own options (`AdversarialClassificationTask.options_class`, those shared with another method included) and the
shared training-attack options they take (`AdversarialClassificationTask.used_attack_options`).

Every registered method's options are on the training command whichever method runs, so a run's recorded arguments
hold them all; a model card's recipe keeps only those of the run's method (`unused_options`).
"""
import dataclasses
from typing import Any, FrozenSet, Mapping, Type

from .adversarial import AdversarialClassificationTask
from .method_options import options_from_values
from .registry import TASKS, get_task_class
from .training_attack import TRAINING_ATTACK_OPTIONS

__all__ = ['declared_options', 'method_options', 'used_options', 'unused_options']


def declared_options(task: Type[AdversarialClassificationTask]) -> FrozenSet[str]:
    """The options `task` declares (the fields of its `options_class`), by name."""
    return frozenset(field.name for field in dataclasses.fields(task.options_class))


def method_options() -> FrozenSet[str]:
    """Every option that belongs to a method rather than to the command: those the registered methods declare, and
    the training attack's."""
    return frozenset(TRAINING_ATTACK_OPTIONS).union(*(declared_options(task) for task in TASKS.values()))


def used_options(run: Mapping[str, Any]) -> FrozenSet[str]:
    """The method options a run uses, from its arguments by name (``method`` and its method's options): its
    method's own and the training-attack options it takes.

    Raises:
        ValueError: ``run['method']`` is not a registered method.
    """
    task = get_task_class(run['method'])
    options = options_from_values(task.options_class, run)
    return declared_options(task) | frozenset(task.used_attack_options(options))


def unused_options(run: Mapping[str, Any]) -> FrozenSet[str]:
    """The method options a run with arguments `run` does not use: other methods' own, and the training attack's
    where its method runs no attack or its own.

    Raises:
        ValueError: ``run['method']`` is not a registered method.
    """
    return method_options() - used_options(run)
