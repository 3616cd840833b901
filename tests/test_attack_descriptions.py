"""ε on the right scale, and every output names the attack that ran: norm, ε as k/255, the step and how it is taken,
iterations or queries, targeted or not, best or last iterate, reduced or not.

The command line refuses [0, 1]-scale budgets (`test_bad_inputs` holds those cases); here: the Python API warns
unless the caller states the scale, and the console, JSON, CSV, plot titles and model card of an evaluation agree on
one description of each attack, ``--attacks pgd`` with its default arguments included.
"""
import csv
import json
import logging
import warnings

import pytest

from timm_advnorm.attacks import PGD, BudgetScaleWarning, InputSpace, PixelBudget, create_attack
from timm_advnorm.commands import validate as validate_adv
from timm_advnorm.eval.plan.stage_plan import build_plan
from timm_advnorm.eval.plan.stages import EvalContext, build_attack
from timm_advnorm.eval.protocols.describe import describe_attack
from timm_advnorm.eval.protocols.protocol import (
    get_protocol, override_protocol, protocol_from_attacks, resolve_protocol, stepping)
from timm_advnorm.eval.schema import AttackResult, EvalResults, SanityProbe
from timm_advnorm.hub.card import CardFacts, render_model_card
from timm_advnorm.hub.publish import DEFAULT_CARD_TEMPLATE
from timm_advnorm.hub.results import parse_eval_results

pytestmark = pytest.mark.usefixtures('one_thread')


# --- the Python API warns on a [0, 1]-scale budget -----------------------------------------------------------------

def test_an_attack_built_with_a_budget_below_one_warns_at_the_callers_line():
    with pytest.warns(BudgetScaleWarning, match=r'eps=0\.0313725 is read on the 0-255 scale.*Did you mean eps=8 '
                                                r'\(= 8/255\)\? Pass eps=PixelBudget') as caught:
        create_attack('pgd', space=InputSpace(), eps=8 / 255)
    assert caught[0].filename == __file__  # the user's call, not a line inside the package
    with pytest.warns(BudgetScaleWarning, match=r'Did you mean eps=7\.65'):
        PGD(InputSpace(), eps=0.03)
    with pytest.warns(BudgetScaleWarning, match='eps=0.5'):
        protocol_from_attacks(['pgd'], eps=0.5)
    with pytest.warns(BudgetScaleWarning, match='eps=0.031'):
        override_protocol(get_protocol('nofrost'), eps=0.031)


def test_a_stated_scale_zero_and_the_built_in_budgets_do_not_warn():
    with warnings.catch_warnings():
        warnings.simplefilter('error')
        attack = create_attack('pgd', space=InputSpace(), eps=PixelBudget(0.5), steps=2)
        assert attack.eps == 0.5 and type(attack.eps) is float
        create_attack('pgd', space=InputSpace(), eps=0.0)
        create_attack('bim-linf', space=InputSpace())  # Galloway's ε∞ = 0.03 on [0, 1]: 7.65 here
        protocol_from_attacks(['pgd'], eps=PixelBudget(0.5))
        # the sanity sweep's half of ε = 1 is 0.5 on purpose: the evaluation builds it without a warning
        plan = build_plan(protocol_from_attacks(['pgd'], eps=1.0), sanity_samples=4)
        sweep = [stage for stage in plan.stages if getattr(stage, 'spec', None) and stage.spec.eps == 0.5]
        assert sweep
        ctx = EvalContext(space=InputSpace(), input_size=(3, 8, 8))
        assert build_attack(sweep[0].spec, ctx, seed=0).eps == 0.5


# --- every attack records its step and how it is taken --------------------------------------------------------------

@pytest.mark.parametrize('name, kwargs, step, rule', [
    ('pgd', {}, 1.6, 'sign step, max(1/255, ε/N)'),  # --attacks pgd: ε 16, 10 iterations, step 1 under the max rule
    ('pgd', dict(step=2.0, step_rule='fixed', norm='l2'), 2.0, 'L2 step'),
    ('fgsm', {}, 20.0, 'sign step'),  # Wong et al.'s 1.25 ε
    ('bim-l2', dict(steps=20), None, 'L2 step, ε/N'),  # ε/20 of the L2 budget, checked below
    ('mifgsm', dict(steps=10), 1.6, 'momentum sign step, ε/N'),
    ('apgd-ce', {}, None, 'adaptive step (from 2ε, halved at checkpoints)'),
    ('square', {}, None, 'random ±ε squares (no gradient)'),
])
def test_attacks_say_how_they_step(name, kwargs, step, rule):
    attack = create_attack(name, space=InputSpace(), eps=16.0, **kwargs)
    assert attack.step_description == rule
    assert attack.step_size == (16.0 / 20 if name == 'bim-l2' else step)
    assert attack.best_iterate is (name != 'pgd' or kwargs.get('best_iterate', True))


def test_bim_l2_and_the_sanity_probes_record_their_step():
    galloway = {spec.label: spec for spec in resolve_protocol(get_protocol('galloway'), InputSpace()).attacks}
    eps = 0.03 * 0.226 * 255  # ε∞: 0.03 of the standardized input, ImageNet's std (0.229, 0.224, 0.225 average 0.226)
    l2 = stepping(galloway['bim-l2'], (3, 32, 32))  # ε2 = ε∞·√3072 ≈ 95.8, stepped by ε2/20
    assert l2.step == pytest.approx(eps * 3072 ** 0.5 / 20) and l2.rule == 'L2 step, ε/N' and l2.iterate == 'best'
    assert stepping(galloway['bim-linf'], (3, 32, 32)) == (pytest.approx(eps / 20), 'sign step, ε/N', 'best')
    assert stepping(galloway['gaussian-noise'], (3, 32, 32)) == (None, None, None)
    nofrost_pgd = stepping(get_protocol('nofrost').attacks[0], (3, 32, 32))
    assert nofrost_pgd == (0.5, 'sign step, min(1.25ε, ε+4)/N', 'best')  # min(10, 12) / 20

    probe = build_plan(get_protocol('nofrost'), sanity_samples=8, sanity_steps=10).sanity.probe(8)
    assert probe.step == pytest.approx(2.5 * 8 / 10) and probe.step_rule == 'sign step, 2.5ε/N'
    assert probe.describe() == ('PGD-10 L∞, ε = 8/255, α = 2/255 (sign step, 2.5ε/N), from the clean input, '
                                'untargeted, best iterate')
    assert SanityProbe.from_dict(probe.to_dict()) == probe


def test_the_description_names_everything_that_ran():
    assert describe_attack(attack='pgd', label='pgd-20', norm='linf', eps=8.0, step=2.0, step_rule='sign step',
                           iterations=20, targeted=False, iterate='best', reduced=True) == \
        'PGD-20 L∞, ε = 8/255, α = 2/255 (sign step), untargeted, best iterate, reduced'
    assert describe_attack(attack='pgd', label='bim-linf', norm='linf', eps=25.5, step=0.255, step_rule='sign step',
                           iterations=100, targeted=False, iterate='best', random_start=False) == \
        'PGD-100 L∞, ε = 25.5/255, α = 0.255/255 (sign step), from the clean input, untargeted, best iterate'
    assert describe_attack(attack='square', label='square', norm='linf', eps=4.0, step=None,
                           step_rule='random ±ε squares (no gradient)', queries=400, targeted=False,
                           iterate='best') == \
        'Square L∞, 400 queries, ε = 4/255, random ±ε squares (no gradient), untargeted, best iterate'
    assert describe_attack(attack='bim-l2', label='bim-l2', norm='l2', eps=424.0, step=21.2, step_rule='L2 step, ε/N',
                           iterations=20, targeted=False, iterate='best', eps_note='ε∞·√d') == \
        'BIM-L2, 20 iterations, ε = 424/255 (ε∞·√d), α = 21.2/255 (L2 step, ε/N), untargeted, best iterate'


def test_results_written_before_steps_were_recorded_still_read_and_say_so():
    old = dict(label='pgd', protocol_label='pgd', attack='pgd', threat='white-box', norm='linf', eps=8.0, eps_scale='0-255',
               eps_rule='fixed', steps=10, queries=None, targeted=False, kwargs=dict(steps=10), samples=4, attacked=4,
               accuracy=50.0)
    entry = AttackResult.from_dict(old)
    assert entry.step is None and entry.step_rule is None and entry.iterate is None
    assert entry.to_dict() == old  # nothing invented on the way back out
    assert entry.describe() == 'PGD-10 L∞, ε = 8/255, step not recorded, untargeted'
    probe = SanityProbe.from_dict(dict(samples=8, attack='pgd', norm='linf', steps=10, eps=8.0, sweep_eps=[8.0]))
    assert probe.step is None and 'step not recorded' in probe.describe()


# --- end to end: --attacks pgd with its default step, in every output -----------------------------------------------

def test_pgd_with_default_arguments_names_its_step_in_every_output(digits_dir, tmp_path, caplog):
    pytest.importorskip('matplotlib')
    results_file, plots = tmp_path / 'results.json', tmp_path / 'plots'
    argv = ['--model', 'test_mbn_resnet', '--dataset', 'digits', '--data-dir', digits_dir, '--num-samples', 8,
            '--seed', 0, '-b', 8, '-j', 0, '--sanity-samples', 4, '--sanity-steps', 2, '--sanity-queries', 5,
            '--no-progress', '--gammas', 1, '--attacks', 'pgd', '--attack-eps', 8, '--attack-steps', 2, 4,
            '--results-file', results_file, '--plot-dir', plots]
    with caplog.at_level(logging.INFO, logger='validate_adv'):
        assert validate_adv.run('validate_adv.py', [str(a) for a in argv]) == 0
    # PGD's default step 1 under its max(step, ε/N) rule: 4/255 at 2 iterations, 2/255 at 4
    expected = {'pgd-2': 'PGD-2 L∞, ε = 8/255, α = 4/255 (sign step, max(1/255, ε/N)), untargeted, best iterate',
                'pgd-4': 'PGD-4 L∞, ε = 8/255, α = 2/255 (sign step, max(1/255, ε/N)), untargeted, best iterate'}

    data = json.loads(results_file.read_text())
    attacks = data['variants'][0]['attacks']
    assert [(a['label'], a['step'], a['step_rule'], a['iterate']) for a in attacks] == [
        ('pgd-2', 4.0, 'sign step, max(1/255, ε/N)', 'best'), ('pgd-4', 2.0, 'sign step, max(1/255, ε/N)', 'best')]
    assert data['variants'][0]['sanity_probe']['step_rule'] == 'sign step, 2.5ε/N'
    results = EvalResults.from_dict(data)
    assert {a.label: a.describe() for a in results.variants[0].attacks} == expected

    with open(results_file.with_suffix('.csv'), newline='') as f:
        rows = {row['attack']: row for row in csv.DictReader(f)}
    for label, text in expected.items():
        row = rows[label]
        assert (row['norm'], row['eps_255'], row['step_rule'], row['targeted'], row['iterate'], row['reduced']) == (
            'linf', '8.0', 'sign step, max(1/255, ε/N)', 'False', 'best', 'False')
        assert row['description'] == text
    assert (rows['pgd-2']['step_255'], rows['pgd-4']['step_255']) == ('4.0', '2.0')

    for label, text in expected.items():
        assert f'{label}: {text}' in caplog.messages
    assert any(m.startswith('sanity ε-sweep: PGD-2 L∞, ε = 8/255, α = 10/255 (sign step, 2.5ε/N)')
               for m in caplog.messages)

    from timm_advnorm.eval.results.plots import figure_accuracy_vs_iterations
    title = figure_accuracy_vs_iterations(results)._suptitle.get_text().replace('\n', ' ')
    assert 'α = 2-4/255 (sign step, max(1/255, ε/N))' in title and 'L∞\N{NO-BREAK SPACE}ε=8/255' in title
    assert 'untargeted' in title and 'best iterate' in title

    facts = CardFacts(title='m', load_name='hf-hub:org/m', architecture='test_mbn_resnet',
                      source_architecture='test_mbn_resnet', needs_plugin=True, mixture_bn=False, num_classes=10,
                      data_config={}, results=parse_eval_results(data))
    card = render_model_card(DEFAULT_CARD_TEMPLATE.read_text(), facts)
    for label, text in expected.items():
        assert f'| {label} | white-box, L∞ ε = 8/255, untargeted | {text} |' in card
    # a protocol whose headline is one attack names it on the robust-accuracy line too
    data['protocol']['headline'] = 'pgd-4'
    card = render_model_card(DEFAULT_CARD_TEMPLATE.read_text(), CardFacts(**dict(
        vars(facts), results=parse_eval_results(data))))
    assert f'(the protocol\'s headline: {expected["pgd-4"]})' in card
    # a model-index metric name gives each attack once, by its description (not ε and targets twice)
    from timm_advnorm.hub.card import _metric_name
    hub_results = parse_eval_results(data)
    entry = next(e for e in hub_results.entries if e.name == 'pgd-4')
    assert _metric_name(hub_results, entry) == f'custom: pgd-4 (white-box; {expected["pgd-4"]}) [{entry.variant}]'
