"""Evaluation protocols: the papers' budgets as data, overrides, reduction, and agreement with the attack registry."""
import math
from dataclasses import replace

import pytest

from timm_advnorm.attacks import InputSpace
from timm_advnorm.attacks.registry import attack_config, attack_threat
from timm_advnorm.commands import validate as validate_adv
from timm_advnorm.commands.validate import eval_options
from timm_advnorm.eval.plan.stage_plan import build_plan
from timm_advnorm.eval.protocols.protocol import (
    PROTOCOLS, AttackSpec, Protocol, create_spec_attack, get_protocol, list_protocols, override_protocol,
    protocol_from_attacks, reduce_protocol, register_protocol, resolve_eps, resolve_protocol, scalar_std,
    unregister_protocol)
from timm_advnorm.eval.run.build import build_protocol


def _cli_protocol(*argv):
    """The protocol `validate_adv.py` builds from these attack options."""
    args = validate_adv.parse_args(['--model', 'test_mbn_resnet', '--dataset', 'digits', *argv])
    return build_protocol(eval_options(args).attacks, InputSpace())


def _resolved(name: str, space: InputSpace = InputSpace()):
    """Protocol `name` with its budgets resolved for a model normalized by `space` (ImageNet's by default)."""
    return resolve_protocol(get_protocol(name), space)


def _built(spec: AttackSpec):
    """The attack a spec configures, as the evaluation builds it."""
    return create_spec_attack(spec, InputSpace(), (3, 32, 32), seed=0)


def test_xie2020_is_targeted_pgd_eps16_step1_over_the_paper_iterations():
    protocol = get_protocol('xie2020')
    assert [spec.config.steps for spec in protocol.attacks] == [10, 20, 100, 500, 2000]
    for spec in protocol.attacks:
        assert spec.attack == 'pgd' and spec.eps == 16 and spec.targeted and spec.success_rate
        assert spec.config.step == 1 and spec.config.step_rule == 'max' and spec.config.random_start


def test_nofrost_uses_eps8_twenty_iterations_and_their_step_rule():
    protocol = get_protocol('nofrost')
    assert {spec.attack for spec in protocol.attacks} == {'pgd', 'apgd-ce', 'apgd-dlr', 'mifgsm', 'cw-linf', 'square'}
    assert all(spec.eps == 8 for spec in protocol.attacks)
    white_box = [spec for spec in protocol.attacks if spec.threat == 'white-box']
    assert all(spec.config.steps == 20 for spec in white_box)
    assert get_protocol('nofrost').attacks[0].config.step == pytest.approx(min(1.25 * 8, 8 + 4) / 20)
    assert protocol.worst_case and protocol.headline == 'worst-case'
    assert set(protocol.metrics) == {'margin', 'thickness', 'smoothness'}


def test_robustbench_is_the_autoattack_standard_cascade_at_eps4():
    protocol = get_protocol('robustbench')
    assert [spec.attack for spec in protocol.attacks] == ['apgd-ce', 'apgd-t', 'fab-t', 'square']
    assert protocol.aggregation == 'cascade' and all(spec.eps == 4 for spec in protocol.attacks)
    assert protocol.attacks[-1].config.n_queries == 5000
    assert all(spec.config.recorded().get('n_target_classes', 9) == 9 for spec in protocol.attacks)


def test_galloway_l2_budget_scales_with_the_input_dimension():
    spec = next(s for s in _resolved('galloway').attacks if s.attack == 'bim-l2')
    unit = scalar_std(InputSpace()) * 255  # ε∞ = 0.03 of the standardized input
    assert resolve_eps(spec, (3, 32, 32)) == pytest.approx(0.03 * unit * math.sqrt(3 * 32 * 32))
    assert resolve_eps(spec, (3, 64, 64)) == pytest.approx(2 * resolve_eps(spec, (3, 32, 32)))


def test_galloway_l2_steps_a_twentieth_of_its_scaled_budget():
    spec = next(s for s in _resolved('galloway').attacks if s.attack == 'bim-l2')
    # a step from the L-inf-sized eps would never leave a sqrt(d)-times larger ball
    assert 'step' not in spec.config.stated
    attack = create_spec_attack(spec, InputSpace(), (3, 32, 32))
    assert attack.step is None and attack.steps == 20  # BIM then steps eps / steps of the resolved budget


def test_override_changes_only_the_knobs_an_attack_has():
    protocol = override_protocol(_resolved('galloway'), eps=4.0, steps=5)
    noise, bim_linf, bim_l2 = protocol.attacks
    assert noise.eps == 0.0 and 'steps' not in noise.config.stated
    assert bim_linf.eps == 4.0 and bim_linf.config.steps == 5
    assert bim_linf.config.step == pytest.approx(4.0 / 5)  # the step rule follows the new budget
    # the given ε is on the 0-255 scale: no longer a multiple of the model's std (BIM-L2 keeps its √d)
    assert (bim_linf.eps_rule, bim_linf.input_std, bim_l2.eps_rule, bim_l2.input_std) == ('fixed', None,
                                                                                          'sqrt_dim', None)


def test_explicit_step_disables_the_step_rule():
    spec = override_protocol(get_protocol('nofrost'), eps=16.0, step=2.0).attacks[0]
    assert spec.config.step == 2.0 and spec.step_rule is None


def test_reduce_caps_budgets_keeps_labels_and_marks_the_protocol():
    full = get_protocol('xie2020')
    reduced = reduce_protocol(full, max_steps=3)
    assert reduced.reduced and not full.reduced
    assert [s.label for s in reduced.attacks] == [s.label for s in full.attacks]
    assert all(s.config.steps == 3 for s in reduced.attacks)
    square = reduce_protocol(get_protocol('robustbench'), max_queries=7).attacks[-1]
    assert square.config.n_queries == 7


def test_a_root_reduction_keeps_a_sweep_ordered_and_distinct():
    reduced = reduce_protocol(get_protocol('xie2020'), root=3)
    assert [s.config.steps for s in reduced.attacks] == [2, 3, 5, 8, 13]


def test_protocol_from_attacks_reports_the_worst_case_of_several():
    protocol = protocol_from_attacks(['pgd', 'square'], eps=8.0, attack_kwargs=dict(steps=5))
    assert protocol.worst_case and protocol.headline == 'worst-case'
    assert protocol.attacks[1].threat == 'black-box'


def test_several_iteration_counts_make_a_sweep_of_every_attack():
    protocol = protocol_from_attacks(['pgd', 'mifgsm'], eps=8.0, attack_kwargs=dict(step=1.0), steps=[20, 100])
    assert [s.label for s in protocol.attacks] == ['pgd-20', 'pgd-100', 'mifgsm-20', 'mifgsm-100']
    assert [s.config.steps for s in protocol.attacks] == [20, 100, 20, 100]
    assert all(s.config.step == 1.0 for s in protocol.attacks)
    single = protocol_from_attacks(['pgd'], steps=[7])
    assert [s.label for s in single.attacks] == ['pgd'] and single.attacks[0].config.steps == 7
    with pytest.raises(ValueError, match='must differ'):
        protocol_from_attacks(['pgd'], steps=[5, 5])


@pytest.mark.parametrize('bad', [dict(threat='grey-box'), dict(eps_rule='cubic'), dict(eps=-1.0),
                                 dict(eps=float('nan')), dict(eps=float('inf')),
                                 dict(config=attack_config('pgd', step=float('nan'))),
                                 dict(eps_standardized=0.1, input_std=0.3),  # a resolved std of a fixed budget
                                 dict(eps_rule='std', input_std=0.3), dict(eps_rule='std', eps_standardized=0.1),
                                 dict(eps_rule='std', eps_standardized=0.1, input_std=0.0)])
def test_invalid_specs_are_rejected(bad):
    with pytest.raises(ValueError):
        AttackSpec(**dict(dict(label='a', config=attack_config('pgd'), eps=1.0), **bad))


def test_a_spec_holds_a_registered_attack_configuration_not_a_name_and_kwargs():
    with pytest.raises(TypeError, match=r"^a: config must be the configuration of a registered attack .*got 'pgd'"):
        AttackSpec('a', 'pgd', 8.0)
    spec = AttackSpec('a', attack_config('pgd', steps=5), 8.0)
    assert spec.attack == 'pgd' and spec.steps == 5 and spec.to_dict()['kwargs'] == dict(steps=5)


def test_unknown_protocol_is_a_clear_error():
    with pytest.raises(ValueError, match=r"^Unknown protocol 'madry'; available: xie2020, robustbench, nofrost, "):
        get_protocol('madry')


@pytest.fixture
def fgsm_protocol():
    """A protocol of a plug-in's own, registered for one test (and removed after it)."""
    protocol = register_protocol(Protocol('fgsm-4', 'FGSM at Linf eps=4.', 'A plug-in',
                                          (AttackSpec('fgsm', attack_config('fgsm'), 4.0),), headline='fgsm'))
    yield protocol
    unregister_protocol('fgsm-4')


def test_a_plug_in_protocol_is_offered_by_the_command(fgsm_protocol):
    assert list_protocols()[-1] == 'fgsm-4' and PROTOCOLS['fgsm-4'] is get_protocol('fgsm-4') is fgsm_protocol
    assert _cli_protocol('--protocol', 'fgsm-4') == fgsm_protocol
    with pytest.raises(ValueError, match="^Protocol 'xie2020' is registered twice"):
        register_protocol(replace(fgsm_protocol, name='xie2020'))
    assert get_protocol('xie2020').attacks[0].attack == 'pgd'  # the first one kept
    with pytest.raises(TypeError):
        PROTOCOLS['other'] = fgsm_protocol  # a read-only view of the registry


def test_an_unregistered_protocol_leaves_the_command(fgsm_protocol, capsys):
    assert unregister_protocol('fgsm-4') is fgsm_protocol and 'fgsm-4' not in list_protocols()
    with pytest.raises(SystemExit):
        _cli_protocol('--protocol', 'fgsm-4')
    assert "invalid choice: 'fgsm-4'" in capsys.readouterr().err
    register_protocol(fgsm_protocol)  # for the fixture to remove


@pytest.mark.parametrize('name', sorted(PROTOCOLS))
def test_every_protocol_attack_builds_from_the_registry(name):
    """The protocol data use each attack's real argument names (a typo would only surface at evaluation time)."""
    space = InputSpace()
    for spec in _resolved(name, space).attacks:
        attack = create_spec_attack(spec, space, (3, 32, 32), seed=0)
        assert callable(attack)


def test_attacks_at_their_default_budget_record_it_and_caps_apply_to_it():
    """`--attacks pgd apgd-ce square --max-queries 50` used to run Square with 5000 queries and record none."""
    protocol = protocol_from_attacks(['pgd', 'apgd-ce', 'square'])
    for spec in protocol.attacks:  # the recorded budget is the one the built attack runs with
        attack = _built(spec)
        assert spec.steps == getattr(attack, 'n_queries' if spec.attack == 'square' else 'steps')
    assert [s.steps for s in protocol.attacks] == [10, 100, 5000]
    capped = reduce_protocol(protocol, max_steps=3, max_queries=50)
    assert [s.steps for s in capped.attacks] == [3, 3, 50] and capped.reduced
    assert [s.steps for s in reduce_protocol(protocol, root=3).attacks] == [2, 5, 17]
    cli = _cli_protocol('--attacks', 'pgd', 'apgd-ce', 'square', '--max-queries', '50')
    assert [s.to_dict()['kwargs'] for s in cli.attacks] == [dict(steps=10), dict(steps=100), dict(n_queries=50)]
    assert [s.steps for s in _cli_protocol('--attacks', 'pgd', 'square', '--reduced').attacks] == [2, 17]


@pytest.mark.parametrize('protocol, cap', [
    (protocol_from_attacks(['pgd', 'apgd-ce']), dict(max_queries=50)),
    (get_protocol('xie2020'), dict(max_queries=7)),
    (protocol_from_attacks(['square']), dict(max_steps=3)),
    (get_protocol('corruptions'), dict(max_steps=3)),
])
def test_a_cap_no_attack_has_a_budget_for_is_an_error(protocol, cap):
    with pytest.raises(ValueError, match=f'{next(iter(cap))}=.* would cap no attack'):
        reduce_protocol(protocol, **cap)


@pytest.mark.parametrize('name, override, option', [
    ('xie2020', dict(norm='l2'), 'norm'),
    ('nofrost', dict(norm='l2'), 'norm'),
    ('robustbench', dict(step=2.0), 'step'),
    ('corruptions', dict(steps=5), 'steps'),
    ('corruptions', dict(eps=8.0), 'eps'),
])
def test_an_override_that_changes_no_attack_is_an_error(name, override, option):
    """`--protocol xie2020 --norm l2` used to run the L-inf protocol without a word."""
    with pytest.raises(ValueError, match=f'^{option}=.* would change no attack of protocol {name!r}'):
        override_protocol(get_protocol(name), **override)


def test_the_cli_names_an_override_no_attack_takes():
    with pytest.raises(ValueError, match="norm='l2' would change no attack of protocol 'xie2020'"):
        _cli_protocol('--protocol', 'xie2020', '--norm', 'l2')
    with pytest.raises(ValueError, match="step=2.0 rejected: none of the attacks square takes 'step'"):
        _cli_protocol('--attacks', 'square', '--step', '2')
    with pytest.raises(ValueError, match=r"steps=\[5\] rejected: none of the attacks square, fgsm takes 'steps'"):
        _cli_protocol('--attacks', 'square', 'fgsm', '--steps', '5')


def test_an_override_applies_wherever_some_attack_has_the_knob():
    nofrost = override_protocol(get_protocol('nofrost'), steps=5)  # Square has queries, not iterations
    assert [s.config.recorded().get('steps') for s in nofrost.attacks] == [5, 5, 5, 5, 5, None]
    assert nofrost.attacks[-1].config.n_queries == 400
    robustbench = override_protocol(get_protocol('robustbench'), eps=8.0, steps=5)
    assert all(s.eps == 8.0 for s in robustbench.attacks) and robustbench.attacks[-1].config.recorded() == dict(
        get_protocol('robustbench').attacks[-1].config.recorded())


@pytest.mark.parametrize('value', ['nan', 'inf', '-inf'])
@pytest.mark.parametrize('argv', [['--protocol', 'xie2020'], ['--attacks', 'pgd']])
@pytest.mark.parametrize('option', ['--eps', '--step'])
def test_a_non_finite_eps_or_step_is_an_error(argv, option, value, capsys):
    """`--eps nan` passed `eps < 0` and gave a meaningless number with exit 0: the parser refuses it."""
    with pytest.raises(SystemExit) as refused:
        _cli_protocol(*argv, f'{option}={value}')
    assert refused.value.code == 2
    assert f'argument {option}: must be a number >= 0, got {value}' in capsys.readouterr().err


def test_non_finite_budgets_are_rejected_by_the_protocol_functions():
    with pytest.raises(ValueError, match='eps must be a finite number'):
        protocol_from_attacks(['pgd'], eps=float('nan'))
    with pytest.raises(ValueError, match='eps must be a finite number'):
        override_protocol(get_protocol('galloway'), eps=float('nan'))
    with pytest.raises(ValueError, match='step must be a finite number'):
        override_protocol(get_protocol('xie2020'), step=float('nan'))


@pytest.mark.parametrize('name', sorted(PROTOCOLS))
def test_protocol_threats_are_the_attacks_own(name):
    assert all(spec.threat == attack_threat(spec.attack) for spec in get_protocol(name).attacks)


def test_a_spec_takes_its_attacks_threat_unless_it_states_another():
    specs = [AttackSpec(name, attack_config(name), 4.0) for name in ('pgd', 'square', 'gaussian-noise')]
    assert [spec.threat for spec in specs] == ['white-box', 'black-box', 'noise']
    assert AttackSpec('pgd', attack_config('pgd'), 4.0, threat='noise').threat == 'noise'
    assert replace(specs[1], eps=8.0).threat == 'black-box'


def test_an_attack_list_takes_each_attacks_threat_and_noise_runs_as_in_galloway():
    """`--attacks gaussian-noise` was white-box at eps 16: noise on correct samples only, a false budget failure."""
    listed = protocol_from_attacks(['gaussian-noise', 'corruption', 'square', 'pgd'], eps=8.0)
    assert [(s.threat, s.eps) for s in listed.attacks] == [('noise', 0.0), ('noise', 0.0), ('black-box', 8.0),
                                                           ('white-box', 8.0)]
    noise = protocol_from_attacks(['gaussian-noise'])
    galloway = get_protocol('galloway').attacks[0]
    spec = noise.attacks[0]
    assert (spec.label, spec.attack, spec.eps, spec.threat, spec.eps_rule, spec.success_rate) == (
        galloway.label, galloway.attack, galloway.eps, galloway.threat, galloway.eps_rule, galloway.success_rate)
    assert _built(spec).std == _built(galloway).std
    stages = [build_plan(p, sanity_samples=0).stage('gaussian-noise') for p in (noise, _resolved('galloway'))]
    assert [(stage.attack_all, stage.after, stage.limit) for stage in stages] == [(True, 'clean', None)] * 2


def test_the_readme_attack_list_gives_each_attack_the_options_it_takes():
    """README: `--attacks pgd apgd-ce square --eps 8 --steps N --step S --norm l2 --targeted` used to be rejected."""
    protocol = _cli_protocol('--attacks', 'pgd', 'apgd-ce', 'square', '--eps', '8', '--steps', '20', '--step', '2',
                             '--norm', 'l2', '--targeted')
    pgd, apgd, square = protocol.attacks
    assert pgd.config.recorded() == dict(steps=20, step=2.0, norm='l2', targeted=True) and pgd.success_rate
    assert apgd.config.recorded() == dict(steps=20) and not apgd.targeted and not apgd.success_rate
    assert square.config.recorded() == dict(n_queries=5000) and not square.success_rate
    for spec in protocol.attacks:
        assert callable(_built(spec))
    sweep = protocol_from_attacks(['pgd', 'square'], eps=8.0, attack_kwargs=dict(step=1.0), steps=[20, 100])
    assert [(s.label, s.steps) for s in sweep.attacks] == [('pgd-20', 20), ('pgd-100', 100), ('square', 5000)]
    assert 'step' not in sweep.attacks[-1].config.stated
