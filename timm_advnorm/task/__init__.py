"""Adversarial training methods on timm's `timm.task` API: one module per method, each registered by name.

Importing this package registers the built-in methods (`register_task`), in the order of the papers; `create_task`
builds one by name, and the training command builds the chosen one from its options (`from_options`: the method's
own, `options_class`, and the training attack's, `TrainingAttackOptions`).
"""
from .adversarial import AdversarialClassificationTask, ArgumentGroup, TrainingContext
from .method_options import MethodOptions, option, options_from_values, shared_option
from .training_attack import TRAINING_ATTACK_OPTIONS, TrainingAttackOptions
from .registry import TASKS, get_task_class, list_tasks, register_task, unregister_task
from .vanilla import VanillaTask
from .madry import MadryTask
from .mixed import MixedTask
from .alp import AlpTask, logit_pairing_loss
from .mbn import MbnTask
from .fast_advprop import FastAdvPropTask, parameter_groups, shuffle_across_ranks
from .nofrost import NofrostTask
from .nofrost_star import NofrostStarTask
from .running_stats import running_stats_active, use_running_statistics
from .options import declared_options, unused_options, used_options
from .papers import METHOD_PAPERS, Paper, method_papers

__all__ = ['AdversarialClassificationTask', 'AlpTask', 'ArgumentGroup', 'FastAdvPropTask', 'METHOD_PAPERS', 'MadryTask',
           'MbnTask', 'MethodOptions', 'MixedTask', 'NofrostTask', 'Paper', 'TASKS', 'TRAINING_ATTACK_OPTIONS',
           'TrainingAttackOptions', 'TrainingContext', 'VanillaTask', 'create_task', 'declared_options',
           'get_task_class', 'list_tasks', 'logit_pairing_loss', 'method_papers', 'option', 'options_from_values',
           'parameter_groups', 'register_task', 'running_stats_active', 'shared_option', 'shuffle_across_ranks',
           'unregister_task', 'unused_options', 'use_running_statistics', 'used_options']


def create_task(method: str, *args, **kwargs) -> AdversarialClassificationTask:
    """Build the task of the registered method `method` (`list_tasks`) with its constructor's arguments."""
    return get_task_class(method)(*args, **kwargs)
