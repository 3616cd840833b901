"""Budgets in units of the standardized input (Galloway et al.'s): resolved once from the evaluated model's std, and
named with the 0-255 ε they gave wherever a result says what ran."""
import math

import pytest
import timm

import timm_advnorm  # noqa: F401  (registers the models)
from timm_advnorm.attacks import InputSpace, create_attack
from timm_advnorm.commands import validate as validate_adv
from timm_advnorm.commands.validate import eval_options
from timm_advnorm.eval.options import AttackOptions
from timm_advnorm.eval.plan.stage_plan import build_plan
from timm_advnorm.eval.plan.stages import EvalContext, build_attack
from timm_advnorm.eval.protocols.protocol import (
    PROTOCOLS, STANDARDIZED_RULES, get_protocol, override_protocol, protocol_from_attacks, resolve_eps,
    resolve_protocol, scalar_std, stepping, with_paper_budgets)
from timm_advnorm.eval.run.build import build_protocol
from timm_advnorm.eval.schema import AttackResult
from timm_advnorm.models.galloway_mlp import MNIST_MEAN, MNIST_STD

INPUT_SIZE = (3, 32, 32)


def _space(std: float) -> InputSpace:
    return InputSpace(mean=(0.5,) * 3, std=(std,) * 3)


def _galloway(space: InputSpace):
    """The ``galloway`` protocol's attacks by label, resolved for a model normalized by `space`."""
    return {spec.label: spec for spec in resolve_protocol(get_protocol('galloway'), space).attacks}


@pytest.mark.parametrize('std', [0.2, 0.5])
def test_galloway_budgets_are_003_times_the_models_std(std):
    specs = _galloway(_space(std))
    bim_linf, bim_l2 = specs['bim-linf'], specs['bim-l2']
    eps = 0.03 * std * 255
    assert resolve_eps(bim_linf, INPUT_SIZE) == pytest.approx(eps)
    assert bim_linf.config.step == pytest.approx(eps / 20)  # ε/N of the resolved ε
    assert resolve_eps(bim_l2, INPUT_SIZE) == pytest.approx(eps * math.sqrt(3 * 32 * 32))  # ε2 = ε∞·√d
    assert stepping(bim_l2, INPUT_SIZE).step == pytest.approx(eps * math.sqrt(3 * 32 * 32) / 20)
    for spec in (bim_linf, bim_l2):
        assert (spec.eps_standardized, spec.input_std) == (0.03, std)
    assert specs['gaussian-noise'] == get_protocol('galloway').attacks[0]  # noise is on the normalized input already


@pytest.mark.parametrize('std', [0.3081, 1.0])
def test_bim_from_the_attack_list_runs_the_galloway_protocols_budget(std):
    """``--attacks bim-linf bim-l2 pgd`` without ``--attack-eps``: BIM at the galloway protocol's ε (0.03 of the
    standardized input, 7.65 for inputs of std 1 as the Python default), PGD at the list's 16; a given ε is kept."""
    galloway = _galloway(_space(std))
    options = AttackOptions(attacks=('bim-linf', 'bim-l2', 'pgd'))
    specs = {spec.label: spec for spec in build_protocol(options, _space(std)).attacks}
    for label in ('bim-linf', 'bim-l2'):
        assert (specs[label].eps, specs[label].eps_rule, specs[label].eps_standardized) == (
            galloway[label].eps, galloway[label].eps_rule, 0.03)
        assert resolve_eps(specs[label], INPUT_SIZE) == pytest.approx(resolve_eps(galloway[label], INPUT_SIZE))
    assert specs['pgd'].eps == 16.0
    assert std != 1.0 or specs['bim-linf'].eps == pytest.approx(create_attack('bim-linf', space=_space(1.0)).eps)
    given = AttackOptions(attacks=('bim-linf',), eps=8.0)
    assert [(spec.eps, spec.eps_rule) for spec in build_protocol(given, _space(std)).attacks] == [(8.0, 'fixed')]


def test_channels_of_different_stds_take_their_mean_and_a_shared_std_is_exact():
    assert scalar_std(InputSpace()) == pytest.approx(0.226)  # ImageNet's 0.229, 0.224, 0.225
    assert _galloway(InputSpace())['bim-linf'].eps == pytest.approx(0.03 * 0.226 * 255)  # 1.73/255
    assert scalar_std(InputSpace(MNIST_MEAN, MNIST_STD)) == 0.3081


def test_galloway_mnist_reads_the_papers_budgets_on_the_signed_unit_scale_whatever_the_model():
    """ε = 0.1 and 0.05, step 1e-3, FGSM ε = 0.05 and 0.1 on the [-1, 1] input scale: half the pixel range, on the
    0-255 scale before any model is seen (12.75/255 for ε = 0.1)."""
    unit = 127.5
    protocol = get_protocol('galloway-mnist')
    assert resolve_protocol(protocol, InputSpace.from_model(timm.create_model('galloway_mlp'))) is protocol
    specs = {spec.label: spec for spec in protocol.attacks}
    assert [(specs[label].eps, specs[label].config.step) for label in ('bim-linf', 'bim-linf-0.05')] == [
        (0.1 * unit, 1e-3 * unit), (0.05 * unit, 1e-3 * unit)]
    assert [(specs[label].eps, specs[label].config.step) for label in ('fgsm-0.05', 'fgsm-0.1')] == [
        (0.05 * unit, 0.05 * unit), (0.1 * unit, 0.1 * unit)]
    assert all(specs[label].eps_rule == 'fixed' and specs[label].input_std is None for label in specs)
    plan = build_plan(protocol, sanity_samples=8, sanity_steps=10)
    assert plan.sanity.eps == 0.1 * unit  # the sanity sweep centers on the headline budget
    ctx = EvalContext(InputSpace(MNIST_MEAN, MNIST_STD), (3, 28, 28))
    assert build_attack(specs['bim-linf'], ctx, seed=0).eps == 0.1 * unit


@pytest.mark.parametrize('name', sorted(PROTOCOLS))
def test_a_protocol_without_standardized_budgets_is_unchanged(name):
    protocol = get_protocol(name)
    if any(spec.eps_rule in STANDARDIZED_RULES for spec in protocol.attacks):
        assert name == 'galloway'
        return
    assert resolve_protocol(protocol, _space(0.3)) is protocol
    assert all('input_std' not in spec for spec in protocol.to_dict()['attacks'])


def test_an_unresolved_budget_is_refused_where_it_would_be_read():
    """Read on the 0-255 scale, ε = 0.03 of the standardized input would be next to no attack."""
    galloway = get_protocol('galloway')
    message = "bim-linf, bim-l2 state a budget in units of the standardized input, not resolved from the model's"
    with pytest.raises(ValueError, match=f"^Protocol 'galloway': {message}"):
        build_plan(galloway, sanity_samples=0)
    with pytest.raises(ValueError, match="^Protocol 'galloway': bim-linf, "):
        override_protocol(get_protocol('galloway'), eps=8.0)
    with pytest.raises(ValueError, match='^Attack: bim-linf states a budget in units of the standardized input'):
        build_attack(galloway.attacks[1], EvalContext(InputSpace(), INPUT_SIZE), seed=0)


def _cli_protocol(space, *argv):
    """The protocol `validate_adv.py` builds from these attack options, for a model normalized by `space`."""
    args = validate_adv.parse_args(['--model', 'test_mbn_resnet', '--dataset', 'digits', *argv])
    return build_protocol(eval_options(args).attacks, space)


def test_the_command_resolves_before_its_overrides_which_stay_on_the_0_255_scale():
    mnist = InputSpace(MNIST_MEAN, MNIST_STD)
    assert _cli_protocol(mnist, '--protocol', 'galloway').attacks[1].eps == pytest.approx(0.03 * 0.3081 * 255)
    bim = _cli_protocol(mnist, '--protocol', 'galloway', '--eps', '8').attacks[1]
    assert (bim.eps, bim.eps_rule, bim.input_std) == (8.0, 'fixed', None)
    step = _cli_protocol(mnist, '--protocol', 'galloway', '--step', '0.5').attacks[1]
    assert (step.eps, step.eps_rule, step.config.step) == (pytest.approx(0.03 * 0.3081 * 255), 'std', 0.5)
    mnist_bim = _cli_protocol(mnist, '--protocol', 'galloway-mnist', '--eps', '8').attacks[1]
    assert (mnist_bim.eps, mnist_bim.config.step) == (8.0, 0.1275)  # the paper's step: not overridden


def test_results_name_the_rule_the_std_and_the_0_255_budget():
    entry = dict(label='bim-linf', attack='pgd', threat='white-box', norm='linf', eps=7.85655, eps_scale='0-255',
                 eps_rule='std', eps_standardized=0.1, input_std=0.3081, step=0.0785655, step_rule='sign step',
                 iterate='best', steps=100, queries=None, targeted=False, kwargs=dict(random_start=False),
                 samples=4, attacked=4, accuracy=50.0)
    result = AttackResult.from_dict(entry)
    assert result.to_dict() == dict(entry, protocol_label=None)
    assert result.describe() == ("PGD-100 L∞, ε = 7.857/255, α = 0.07857/255 (sign step), ε = 0.1 of the standardized "
                                 "input (the model's std 0.3081), from the clean input, untargeted, best iterate")
    l2 = AttackResult.from_dict(dict(entry, attack='bim-l2', norm='l2', eps_rule='std_sqrt_dim', eps=95.83))
    assert "ε = 95.83/255 (ε∞·√d), α = 0.07857/255 (sign step), ε∞ = 0.1 of the standardized input (the model's std " \
           "0.3081), " in l2.describe()
    unrecorded = {key: value for key, value in entry.items() if key not in ('eps_standardized', 'input_std')}
    assert '(sign step), ε in units of the standardized input, ' in AttackResult.from_dict(unrecorded).describe()


@pytest.mark.parametrize('attacks, said', [
    (('bim-linf',), "Attacks bim-linf. bim-linf: eps=0.03 of the standardized input (Galloway et al.'s, as in "
                    "galloway)."),
    (('pgd', 'bim-linf'), "Attacks pgd, bim-linf. pgd at eps=16. bim-linf: eps=0.03 of the standardized input "
                          "(Galloway et al.'s, as in galloway)."),
])
def test_an_attack_list_says_the_budget_each_attack_runs_at(attacks, said):
    protocol = with_paper_budgets(protocol_from_attacks(attacks, eps=16.0))
    assert protocol.description == said
