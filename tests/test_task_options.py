"""What a training method declares about itself for its model card: the options a run of it uses, and its papers."""
import argparse

import pytest

import timm_advnorm  # noqa: F401  (registers the methods)
from timm_advnorm.task import (
    METHOD_PAPERS, TASKS, AdversarialClassificationTask, declared_options, list_tasks, unused_options, used_options)
from timm_advnorm.task.adversarial import TRAINING_ATTACK_OPTIONS
from timm_advnorm.task.options import method_options
from timm_advnorm.commands.train import parse_args

METHOD_OWN = {'alpha', 'clean_ratio', 'pairing_weight', 'adv_weight', 'p_adv', 'noise_weight', 'shuffle_bn',
              'rescale_grads'}


def _args(*argv: str) -> argparse.Namespace:
    return parse_args(list(argv))[0]


@pytest.mark.parametrize('method, own', [
    ('vanilla', set()), ('madry', set()), ('mixed', {'alpha', 'clean_ratio'}), ('alp', {'alpha', 'pairing_weight'}),
    ('mbn', {'alpha', 'pairing_weight'}), ('nofrost', {'adv_weight'}),
    ('fast_advprop', {'p_adv', 'noise_weight', 'adv_weight', 'shuffle_bn', 'rescale_grads'}),
])
def test_a_run_uses_its_method_s_options_and_no_other_s(method, own):
    used = used_options(_args('--method', method))
    assert used & METHOD_OWN == own
    assert not used & unused_options(_args('--method', method))


def test_the_training_attack_options_follow_the_attack_the_method_runs():
    assert not used_options(_args('--method', 'vanilla')) & set(TRAINING_ATTACK_OPTIONS)
    assert set(TRAINING_ATTACK_OPTIONS) <= used_options(_args('--method', 'madry'))
    fast = used_options(_args('--method', 'fast_advprop')) & set(TRAINING_ATTACK_OPTIONS)
    assert fast == {'attack', 'attack_eps', 'attack_step', 'attack_steps', 'attack_norm', 'attack_clean_start_mode'}
    views = ['--method', 'nofrost_star', '--star-views', 'clean', 'tda']
    assert not used_options(_args(*views)) & set(TRAINING_ATTACK_OPTIONS)
    assert set(TRAINING_ATTACK_OPTIONS) <= used_options(_args(*views, 'adv'))


def test_declared_options_are_the_training_command_s_destinations():
    """Every option a method declares or borrows is one the training command records, by the same name."""
    recorded = set(vars(_args()))
    assert method_options() <= recorded
    for task in TASKS.values():
        assert declared_options(task) <= recorded and set(task.borrowed_options) <= method_options()


class _Reads(argparse.Namespace):
    """A namespace that records which attributes are read."""

    def __getattribute__(self, name):
        if not name.startswith('_'):
            object.__getattribute__(self, '_read').add(name)
        return object.__getattribute__(self, name)


def test_training_attack_options_are_what_attack_from_args_reads():
    args = _Reads(**vars(_args('--method', 'madry', '--device', 'cpu')), rank=0, _read=set())
    from timm_advnorm.attacks.space import InputSpace
    AdversarialClassificationTask.attack_from_args(args, InputSpace())
    assert object.__getattribute__(args, '_read') - {'seed', 'rank'} == set(TRAINING_ATTACK_OPTIONS)


def test_every_built_in_method_names_its_papers():
    built_in = {name for name in list_tasks() if TASKS[name].__module__.startswith('timm_advnorm.task.')}
    assert set(METHOD_PAPERS) == built_in
    assert all(paper.url.startswith('https://arxiv.org/abs/') for papers in METHOD_PAPERS.values() for paper in papers)
