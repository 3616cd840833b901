"""Adversarial training methods on timm's `timm.task` API: one module per method, one factory for scripts."""
from typing import Dict, Type

from .adversarial import AdversarialClassificationTask
from .alp import AlpTask, logit_pairing_loss
from .fast_advprop import FastAdvPropTask, parameter_groups, shuffle_across_ranks
from .madry import MadryTask
from .mbn import MbnTask
from .mixed import MixedTask
from .nofrost import NofrostTask
from .vanilla import VanillaTask
from .running_stats import running_stats_active, use_running_statistics

__all__ = ['AdversarialClassificationTask', 'AlpTask', 'FastAdvPropTask', 'MadryTask', 'MbnTask', 'MixedTask',
           'NofrostTask', 'TASKS', 'VanillaTask', 'create_task', 'logit_pairing_loss', 'parameter_groups',
           'running_stats_active', 'shuffle_across_ranks', 'use_running_statistics']

TASKS: Dict[str, Type[AdversarialClassificationTask]] = {
    task.method: task for task in (VanillaTask, MadryTask, MixedTask, AlpTask, MbnTask, FastAdvPropTask, NofrostTask)}


def create_task(method: str, *args, **kwargs) -> AdversarialClassificationTask:
    """Build the task of `method` (``vanilla``, ``madry``, ``mixed``, ``alp``, ``mbn``, ``fast_advprop``,
    ``nofrost``)."""
    if method not in TASKS:
        raise ValueError(f'Unknown method {method!r}; choose from {", ".join(TASKS)}.')
    return TASKS[method](*args, **kwargs)
