"""What a training method declares about itself: its options (a frozen dataclass the training command declares and
builds from the parsed arguments), those a run of it uses for its model card, and its papers."""
import dataclasses
from dataclasses import dataclass
from typing import Any, Dict

import pytest
import timm

import timm_advnorm  # noqa: F401  (registers the methods)
from timm_advnorm.attacks import PGD, InputSpace
from timm_advnorm.task import (
    METHOD_PAPERS, TASKS, MethodOptions, MixedTask, TrainingAttackOptions, TrainingContext, VanillaTask,
    declared_options, get_task_class, list_tasks, option, options_from_values, register_task, shared_option,
    unregister_task, unused_options, used_options)
from timm_advnorm.task.adversarial import TRAINING_ATTACK_OPTIONS
from timm_advnorm.task.method_options import is_shared
from timm_advnorm.task.mixed import MixedOptions
from timm_advnorm.task.nofrost_star import NofrostStarOptions
from timm_advnorm.task.options import method_options
from timm_advnorm.commands.train import get_args_parser, parse_args, train_options

METHOD_OWN = {'alpha', 'clean_ratio', 'pairing_weight', 'adv_weight', 'p_adv', 'noise_weight', 'shuffle_bn',
              'rescale_grads'}


def _args(*argv: str) -> Dict[str, Any]:
    """The parsed arguments of the training command, by name (as a run records them)."""
    return vars(parse_args(list(argv))[0])


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
    recorded = set(_args())
    assert method_options() <= recorded
    for task in TASKS.values():
        assert declared_options(task) <= recorded


def test_an_option_of_another_method_is_declared_by_that_method_with_the_same_type_and_default():
    """mbn reads mixed's --alpha and alp's --pairing-weight, Fast AdvProp nofrost's --adv-weight: each declares them
    itself, as its owner does."""
    shared = {(task.method, field.name): field for task in TASKS.values()
              for field in dataclasses.fields(task.options_class) if is_shared(field)}
    assert {('alp', 'alpha'), ('mbn', 'alpha'), ('mbn', 'pairing_weight'), ('fast_advprop', 'adv_weight')} <= set(shared)
    for (method, name), field in shared.items():
        owner = {f.name: f for f in dataclasses.fields(get_task_class(field.metadata['shared_from']).options_class)}
        assert not is_shared(owner[name]) and (owner[name].type, owner[name].default) == (field.type, field.default)


@dataclass(frozen=True)
class _Reads(TrainingAttackOptions):
    """Training-attack options that record which of them are read."""

    def __getattribute__(self, name):
        if name in TRAINING_ATTACK_OPTIONS:
            _READ.add(name)
        return object.__getattribute__(self, name)


_READ = set()


def test_training_attack_options_are_what_the_training_attack_is_made_from():
    _READ.clear()
    options = options_from_values(_Reads, _args('--method', 'madry'))
    _READ.clear()
    attack = options.create_attack(InputSpace(), seed=0)
    assert _READ == set(TRAINING_ATTACK_OPTIONS) == {field.name for field in dataclasses.fields(TrainingAttackOptions)}
    assert isinstance(attack, PGD) and not attack.best_iterate


def test_the_typed_defaults_are_the_training_command_s():
    args = _args()
    assert options_from_values(TrainingAttackOptions, args) == TrainingAttackOptions()
    for task in TASKS.values():
        assert options_from_values(task.options_class, args) == task.options_class(), task.method


def test_options_are_built_from_values_by_name():
    options = options_from_values(NofrostStarOptions, {'star_views': ['clean', 'adv'], 'tda_blur_prob': 0.3,
                                                       'model': 'resnet50'})
    assert options.star_views == ('clean', 'adv') and options.tda_blur_prob == 0.3  # lists as tuples; others ignored
    assert options.star_augment == 'both'  # a value missing (an older record) keeps its default
    with pytest.raises(dataclasses.FrozenInstanceError):
        options.star_augment = 'either'


def test_the_command_checks_the_method_s_options_from_its_arguments():
    args, _ = parse_args(['--method', 'mixed', '--alpha', '0.3', '--attack-steps', '2'])
    run = train_options(args)
    options, attack_options = run.method_options, run.attack
    assert options == MixedOptions(alpha=0.3) and attack_options == TrainingAttackOptions(attack_steps=2)
    with pytest.raises(ValueError, match='--attack fgsm does not apply'):
        train_options(parse_args(['--method', 'fast_advprop', '--attack', 'fgsm'])[0])


def test_a_task_is_built_from_typed_options_without_the_command():
    model = timm.create_model('test_mbn_resnet', num_classes=10)
    task = MixedTask.from_options(model, MixedOptions(alpha=0.25, clean_ratio=0.5),
                                  TrainingAttackOptions(attack_steps=2, attack_eps=4.0),
                                  TrainingContext(space=InputSpace(), num_classes=10, smoothing=0.1, seed=3, rank=1),
                                  verbose=False)
    assert (task.alpha, task.clean_ratio, task.attack.steps, task.attack.eps) == (0.25, 0.5, 2, 4.0)
    assert task.passes_per_image == pytest.approx(3.5)


@pytest.fixture
def registered():
    """Register a test's throw-away methods; remove them after it."""
    names = []

    def register(name, cls):
        register_task(name)(cls)
        names.append(name)
    yield register
    for name in names:
        unregister_task(name)


def _group(title: str):
    """The option strings of the training command's argument group `title`."""
    group, = [g for g in get_args_parser()._action_groups if g.title == title]
    return [s for action in group._group_actions for s in action.option_strings]


def test_a_shared_option_must_agree_with_its_owner_s_type_and_default(registered):
    @dataclass(frozen=True)
    class Agreeing(MethodOptions):
        alpha: float = shared_option('mixed', 0.5)

    @dataclass(frozen=True)
    class Disagreeing(MethodOptions):
        alpha: float = shared_option('mixed', 0.4)
    registered('agreeing', type('Agreeing', (VanillaTask,), {'options_class': Agreeing}))
    assert declared_options(TASKS['agreeing']) == {'alpha'}
    assert _group('Method agreeing') == [] and _group('Method mixed') == ['--alpha', '--clean-ratio']
    with pytest.raises(ValueError, match='Method disagreeing declares --alpha unlike method mixed'):
        register_task('disagreeing')(type('Disagreeing', (VanillaTask,), {'options_class': Disagreeing}))
    assert 'disagreeing' not in TASKS


@pytest.mark.parametrize('options_class, message', [
    (dict, 'is not a frozen MethodOptions dataclass'),
    (dataclass(frozen=True)(type('Unrelated', (), {'__annotations__': {'x': int}, 'x': option(1, help='x')})),
     'is not a frozen MethodOptions dataclass'),
    (dataclass(frozen=True)(type('Helpless', (MethodOptions,), {'__annotations__': {'x': int}, 'x': 1})),
     "option 'x' has no default or no help"),
])
def test_registration_refuses_options_that_are_not_a_frozen_dataclass_of_declared_fields(options_class, message):
    with pytest.raises(TypeError, match=message):
        register_task('ill_declared')(type('IllDeclared', (VanillaTask,), {'options_class': options_class}))
    assert 'ill_declared' not in TASKS


def test_every_built_in_method_names_its_papers():
    built_in = {name for name in list_tasks() if TASKS[name].__module__.startswith('timm_advnorm.task.')}
    assert set(METHOD_PAPERS) == built_in
    assert all(paper.url.startswith('https://arxiv.org/abs/') for papers in METHOD_PAPERS.values() for paper in papers)
