"""Each attack's options, declared once as dataclass fields: the constructor, the attributes, the repr, the arguments
the registry reports and the keywords its functional core receives all come from them."""
import dataclasses
import inspect
from typing import Optional

import pytest
import torch

from timm_advnorm.attacks import InputSpace, PixelBudget, create_attack, list_attacks
from timm_advnorm.attacks.base import BOUND_OPTIONS, DEFAULT_EPS, Attack, attack_dataclass
from timm_advnorm.attacks.eval_attack import EvalAttack
from timm_advnorm.attacks.noise import GaussianNoise
from timm_advnorm.attacks.pgd import PGD, PGDOptions, pgd_budgets
from timm_advnorm.attacks.registry import _ATTACKS, attack_arguments, register_attack

SPACE = InputSpace()
EMPTY = inspect.Parameter.empty
COMMON = "bn_stats=running, autocast_dtype=None, seed=None, fold_bn=True"


@pytest.mark.parametrize('name, kwargs, text', [
    ('pgd', {}, 'PGD(norm=linf, steps=10, step=1 (taken 1.6), targeted=False, random_start=True, clean_start_prob=0, '
                f'clean_start_mode=per_sample, best_iterate=True, eps=16, {COMMON})'),
    ('fgsm', dict(eps=8, step=3, norm='l2', targeted=True, clean_start_prob=0.5, best_iterate=False),
     'FGSM(norm=l2, steps=1, step=3 (taken 3), targeted=True, random_start=True, clean_start_prob=0.5, '
     f'clean_start_mode=per_sample, best_iterate=False, eps=8, {COMMON})'),
    ('apgd-ce', {}, f'APGDCE(steps=100, n_restarts=1, rho=0.75, eps=4, {COMMON})'),
    ('apgd-t', dict(n_target_classes=3, rho=1), f'APGDT(steps=100, n_target_classes=3, n_restarts=1, rho=1, eps=4, '
                                                f'{COMMON})'),
    ('fab-t', {}, 'FABT(steps=100, n_target_classes=9, n_restarts=1, alpha_max=0.1, eta=1.05, beta=0.9, eps=4, '
                  f'{COMMON})'),
    ('square', {}, f'Square(n_queries=5000, p_init=0.8, n_restarts=1, rescale_schedule=False, eps=4, {COMMON})'),
    ('autoattack', dict(attacks=['apgd-ce', 'apgd-dlr']),
     f"AutoAttack(attacks=('apgd-ce', 'apgd-dlr'), steps=100, n_target_classes=9, n_queries=5000, eps=4, {COMMON})"),
    ('mifgsm', dict(step=1), f'MIFGSM(steps=10, step=1.0, decay=1, eps=8, {COMMON})'),
    ('cw-linf', {}, f'CWLinf(steps=30, step=None, confidence=50, random_start=True, eps=8, {COMMON})'),
    ('bim-l2', {}, f'BIML2(norm=l2, steps=20, step=None, eps=2968.04, {COMMON})'),
    ('gaussian-noise', dict(std=2, units='pixels', size=4, seed=2),
     'GaussianNoise(std=2, units=pixels, clip=True, size=4, grey=False, seed=2)'),
])
def test_repr_names_the_attack_and_its_options(name, kwargs, text):
    assert repr(create_attack(name, space=SPACE, **kwargs)) == text


def test_arguments_are_the_options_the_constructor_takes():
    assert attack_arguments('apgd-ce') == dict(space=EMPTY, eps=4.0, steps=100, n_restarts=1, rho=0.75,
                                               autocast_dtype=None, seed=None, bn_stats='running', fold_bn=True)
    fgsm = attack_arguments('fgsm')  # one step by definition: no steps, no step rule
    assert 'steps' not in fgsm and 'step_rule' not in fgsm and fgsm['step'] is None and fgsm['best_iterate'] is True
    assert attack_arguments('gaussian-noise')['fold_bn'] is False and attack_arguments('bim-linf')['eps'] is None
    for name in list_attacks():
        parameters = inspect.signature(_ATTACKS.get(name)).parameters.values()
        assert list(parameters)[0].name == 'space'
        assert all(p.kind is inspect.Parameter.KEYWORD_ONLY for p in list(parameters)[1:]), name


def test_numbers_are_stored_as_declared():
    attack = create_attack('apgd-t', space=SPACE, eps=PixelBudget(2.0), steps=10.0, rho=1, n_target_classes=3.0)
    assert (type(attack.eps), type(attack.steps), type(attack.rho), type(attack.n_target_classes)) == \
        (float, int, float, int)
    assert create_attack('mifgsm', space=SPACE).step is None and create_attack('mifgsm', space=SPACE, step=2).step == 2.0
    assert isinstance(create_attack('mifgsm', space=SPACE, step=2).step, float)
    assert create_attack('gaussian-noise', space=SPACE).size is None


def test_options_are_checked_as_given_before_they_are_stored():
    with pytest.raises(ValueError, match=r'std must be >= 0, got -1\.$'):
        create_attack('gaussian-noise', space=SPACE, std=-1)
    with pytest.raises(ValueError, match=r'MI-FGSM needs steps >= 1 and step, decay >= 0, got 0, None, 1\.$'):
        create_attack('mifgsm', space=SPACE, steps=0, decay=1)
    with pytest.raises(TypeError, match='momentum'):  # APGD's class keeps the reference momentum
        create_attack('apgd-ce', space=SPACE, momentum=0.9)


def test_the_core_gets_the_options_and_class_settings_of_the_same_names():
    dlr = create_attack('apgd-dlr', space=SPACE, steps=7, seed=0)
    kwargs = dlr.core_kwargs()
    assert kwargs['loss'] == 'dlr' and kwargs['steps'] == 7 and kwargs['generator'] is dlr.generator
    assert 'momentum' not in kwargs and 'seed' not in kwargs and 'targets' not in kwargs
    targets = torch.tensor([1, 2])
    assert create_attack('fab-t', space=SPACE).core_kwargs(targets)['targets'] is targets
    assert create_attack('bim-l2', space=SPACE).core_kwargs()['norm'] == 'l2'


def test_an_attack_class_without_a_core_must_implement_perturb():
    @attack_dataclass
    class NoCore(Attack):
        pass

    with pytest.raises(NotImplementedError, match='NoCore has no core'):
        NoCore(SPACE)(torch.nn.Flatten(), torch.zeros(1, 3, 2, 2), torch.zeros(1).long())


def _shift(model, x, y, *, space: InputSpace, eps: float, shift: float = 0.0, scale: Optional[float] = None):
    return x + shift * eps / 255 if scale is None else x * scale


def test_a_new_attack_is_its_options_and_a_core():
    @attack_dataclass
    class Shift(EvalAttack):
        eps: float = 4.0
        shift: float = 1.0

        core = staticmethod(_shift)

    register_attack('test-shift')(Shift)
    try:
        assert attack_arguments('test-shift') == dict(space=EMPTY, eps=4.0, bn_stats='running', autocast_dtype=None,
                                                      seed=None, fold_bn=True, shift=1.0)
        attack = create_attack('test-shift', space=SPACE, shift=2, fold_bn=False)
        assert repr(attack) == 'Shift(shift=2, eps=4, bn_stats=running, autocast_dtype=None, seed=None, fold_bn=False)'
        x = torch.zeros(1, 3, 2, 2)
        assert torch.equal(attack(torch.nn.Flatten(), x, torch.zeros(1).long()), x + 8 / 255)
    finally:
        _ATTACKS.unregister('test-shift')
    assert 'test-shift' not in list_attacks()


def test_pgd_runs_carry_their_shared_keywords_as_one_object():
    options = PGDOptions(space=SPACE, eps=8.0, step=2.0)
    assert (options.norm, options.targeted, options.random_start, options.loss_fn) == ('linf', False, True, None)
    with pytest.raises(ValueError, match='budgets must name at least one iteration count'):
        options.check([])
    with pytest.raises(ValueError, match=r'eps, step and steps must be >= 0, got eps=8\.0, step=2\.0, steps=\[-1\]'):
        options.check([-1])
    with pytest.raises(ValueError, match='A targeted attack needs targets'):
        PGDOptions(space=SPACE, eps=8.0, step=2.0, targeted=True).check([1])
    with pytest.raises(TypeError, match="unexpected keyword argument 'stepz'"):
        pgd_budgets(torch.nn.Flatten(), torch.zeros(1, 3, 2, 2), torch.zeros(1).long(), budgets=[1], space=SPACE,
                    eps=8.0, step=2.0, stepz=3)


def test_a_config_is_the_attack_without_its_space_and_budget():
    """``Cls.Config``: frozen, the attack's options with its defaults (written once), changed by `replace`, stating
    in order what results record, and built into the attack once the model's space and the budget are known."""
    for name in list_attacks():
        cls = _ATTACKS.get(name)
        options = {key: value for key, value in attack_arguments(name).items() if key not in BOUND_OPTIONS}
        assert cls.Config().options() == options and cls.name == name
    config = PGD.Config.of(steps=3, step_rule='fixed')
    with pytest.raises(dataclasses.FrozenInstanceError):
        config.steps = 4
    assert dataclasses.replace(config, steps=5).recorded() == dict(steps=5, step_rule='fixed')
    assert list(config.stating(step=2.0, steps=4).recorded().items()) == [('steps', 4), ('step_rule', 'fixed'),
                                                                          ('step', 2.0)]
    attack = config.build(SPACE, PixelBudget(0.5), seed=1)
    assert (type(attack), attack.steps, attack.step_rule, attack.eps, attack.seed) == (PGD, 3, 'fixed', 0.5, 1)
    with pytest.raises(TypeError):
        PGD.Config.of(space=SPACE)  # bound when it runs, not configured
    assert [_ATTACKS.get(name).title for name in ('pgd', 'cw-linf', 'corruption')] == ['PGD', 'CW-L∞', None]
    assert [_ATTACKS.get(name).forwards_per_step for name in ('pgd', 'fab-t')] == [1, 2]


def test_what_evaluation_reads_of_an_attack_is_its_classs():
    """Threat, last-iterate scoring and what results state about noise: attributes of the attack's class, no table
    of names elsewhere."""
    names = ('pgd', 'fgsm', 'bim-linf', 'square', 'gaussian-noise', 'corruption')
    assert [_ATTACKS.get(name).threat for name in names] == ['white-box'] * 3 + ['black-box', 'noise', 'noise']
    assert [name for name in list_attacks() if _ATTACKS.get(name).scores_last_iterate] == ['fgsm', 'pgd']
    assert _ATTACKS.get('gaussian-noise').noise_fields(GaussianNoise.Config.of(std=2.0).options()) == dict(
        noise='gaussian', sigma=2.0, sigma_scale='normalized input', clipped=True)
    assert _ATTACKS.get('corruption').noise_fields(dict(corruption='fog', severity=5)) == dict(
        noise='imagenet-c', corruption='fog', severity=5)
    assert Attack.noise_fields({}) == dict(noise=None) and _ATTACKS.get('pgd').noise_fields({}) == dict(noise='pgd')
    assert attack_arguments('pgd')['eps'] == Attack.eps == DEFAULT_EPS


def test_a_functional_cores_defaults_are_its_attack_classs():
    """The functions (`cw`, `apgd`, ...) restate their class's defaults for callers who use them directly: the two
    must not drift apart."""
    checked = 0
    for name in list_attacks():
        cls = _ATTACKS.get(name)
        core = getattr(cls, 'core', None)
        if core is None:
            continue
        parameters = inspect.signature(core).parameters
        for option in dataclasses.fields(cls):
            parameter = parameters.get(option.name)
            if parameter is None or parameter.default is EMPTY or option.default is dataclasses.MISSING:
                continue
            assert parameter.default == option.default, f'{name}: {option.name}'
            checked += 1
    assert checked >= 40
