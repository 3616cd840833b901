"""Evaluation protocols: the papers' budgets as data, overrides, reduction, and agreement with the attack registry."""
import math

import pytest

from timm_advnorm.attacks import InputSpace, create_attack
from timm_advnorm.eval.protocols import (
    PROTOCOLS, AttackSpec, get_protocol, override_protocol, protocol_from_attacks, reduce_protocol, resolve_eps)


def test_xie2020_is_targeted_pgd_eps16_step1_over_the_paper_iterations():
    protocol = get_protocol('xie2020')
    assert [spec.kwargs['steps'] for spec in protocol.attacks] == [10, 20, 100, 500, 2000]
    for spec in protocol.attacks:
        assert spec.attack == 'pgd' and spec.eps == 16 and spec.targeted and spec.success_rate
        assert spec.kwargs['step'] == 1 and spec.kwargs['step_rule'] == 'max' and spec.kwargs['random_start']


def test_nofrost_uses_eps8_twenty_iterations_and_their_step_rule():
    protocol = get_protocol('nofrost')
    assert {spec.attack for spec in protocol.attacks} == {'pgd', 'apgd-ce', 'apgd-dlr', 'mifgsm', 'cw-linf', 'square'}
    assert all(spec.eps == 8 for spec in protocol.attacks)
    white_box = [spec for spec in protocol.attacks if spec.threat == 'white-box']
    assert all(spec.kwargs['steps'] == 20 for spec in white_box)
    assert get_protocol('nofrost').attacks[0].kwargs['step'] == pytest.approx(min(1.25 * 8, 8 + 4) / 20)
    assert protocol.worst_case and protocol.headline == 'worst-case'
    assert set(protocol.metrics) == {'margin', 'thickness', 'smoothness'}


def test_robustbench_is_the_autoattack_standard_cascade_at_eps4():
    protocol = get_protocol('robustbench')
    assert [spec.attack for spec in protocol.attacks] == ['apgd-ce', 'apgd-t', 'fab-t', 'square']
    assert protocol.aggregation == 'cascade' and all(spec.eps == 4 for spec in protocol.attacks)
    assert protocol.attacks[-1].kwargs['n_queries'] == 5000
    assert all(spec.kwargs.get('n_target_classes', 9) == 9 for spec in protocol.attacks)


def test_galloway_l2_budget_scales_with_the_input_dimension():
    spec = next(s for s in get_protocol('galloway').attacks if s.attack == 'bim-l2')
    assert resolve_eps(spec, (3, 32, 32)) == pytest.approx(0.03 * 255 * math.sqrt(3 * 32 * 32))
    assert resolve_eps(spec, (3, 64, 64)) == pytest.approx(2 * resolve_eps(spec, (3, 32, 32)))


def test_galloway_l2_steps_a_twentieth_of_its_scaled_budget():
    spec = next(s for s in get_protocol('galloway').attacks if s.attack == 'bim-l2')
    assert 'step' not in spec.kwargs  # a step from the L-inf-sized eps would never leave a sqrt(d)-times larger ball
    attack = create_attack(spec.attack, space=InputSpace(), eps=resolve_eps(spec, (3, 32, 32)), **spec.kwargs)
    assert attack.step is None and attack.steps == 20  # BIM then steps eps / steps of the resolved budget


def test_override_changes_only_the_knobs_an_attack_has():
    protocol = override_protocol(get_protocol('galloway'), eps=4.0, steps=5)
    noise, bim_linf, _ = protocol.attacks
    assert noise.eps == 0.0 and 'steps' not in noise.kwargs
    assert bim_linf.eps == 4.0 and bim_linf.kwargs['steps'] == 5
    assert bim_linf.kwargs['step'] == pytest.approx(4.0 / 5)  # the step rule follows the new budget


def test_explicit_step_disables_the_step_rule():
    spec = override_protocol(get_protocol('nofrost'), eps=16.0, step=2.0).attacks[0]
    assert spec.kwargs['step'] == 2.0 and spec.step_rule is None


def test_reduce_caps_budgets_keeps_labels_and_marks_the_protocol():
    full = get_protocol('xie2020')
    reduced = reduce_protocol(full, max_steps=3, max_queries=7)
    assert reduced.reduced and not full.reduced
    assert [s.label for s in reduced.attacks] == [s.label for s in full.attacks]
    assert all(s.kwargs['steps'] == 3 for s in reduced.attacks)
    square = reduce_protocol(get_protocol('robustbench'), max_queries=7).attacks[-1]
    assert square.kwargs['n_queries'] == 7


def test_a_root_reduction_keeps_a_sweep_ordered_and_distinct():
    reduced = reduce_protocol(get_protocol('xie2020'), root=3)
    assert [s.kwargs['steps'] for s in reduced.attacks] == [2, 3, 5, 8, 13]


def test_protocol_from_attacks_reports_the_worst_case_of_several():
    protocol = protocol_from_attacks(['pgd', 'square'], eps=8.0, attack_kwargs=dict(steps=5))
    assert protocol.worst_case and protocol.headline == 'worst-case'
    assert protocol.attacks[1].threat == 'black-box'


def test_several_iteration_counts_make_a_sweep_of_every_attack():
    protocol = protocol_from_attacks(['pgd', 'mifgsm'], eps=8.0, attack_kwargs=dict(step=1.0), steps=[20, 100])
    assert [s.label for s in protocol.attacks] == ['pgd-20', 'pgd-100', 'mifgsm-20', 'mifgsm-100']
    assert [s.kwargs['steps'] for s in protocol.attacks] == [20, 100, 20, 100]
    assert all(s.kwargs['step'] == 1.0 for s in protocol.attacks)
    single = protocol_from_attacks(['pgd'], steps=[7])
    assert [s.label for s in single.attacks] == ['pgd'] and single.attacks[0].kwargs['steps'] == 7
    with pytest.raises(ValueError, match='must differ'):
        protocol_from_attacks(['pgd'], steps=[5, 5])


@pytest.mark.parametrize('bad', [dict(threat='grey-box'), dict(eps_rule='cubic'), dict(eps=-1.0)])
def test_invalid_specs_are_rejected(bad):
    with pytest.raises(ValueError):
        AttackSpec(**dict(dict(label='a', attack='pgd', eps=1.0), **bad))


def test_unknown_protocol_is_a_clear_error():
    with pytest.raises(ValueError, match='available'):
        get_protocol('madry')


@pytest.mark.parametrize('name', sorted(PROTOCOLS))
def test_every_protocol_attack_builds_from_the_registry(name):
    """The protocol data use each attack's real argument names (a typo would only surface at evaluation time)."""
    space = InputSpace()
    for spec in get_protocol(name).attacks:
        attack = create_attack(spec.attack, space=space, eps=resolve_eps(spec, (3, 32, 32)), seed=0, **spec.kwargs)
        assert callable(attack)
