"""What users read is what was run: attack names, budgets, units, noise, sanity messages, warnings and plots."""
import csv
import io
import math

import pytest
import torch

from timm_advnorm.attacks import InputSpace
from timm_advnorm.attacks.noise import noise_settings
from timm_advnorm.attacks.registry import attack_config
from timm_advnorm.eval.plan.stage_plan import build_plan
from timm_advnorm.eval.plan.stages import BudgetStage
from timm_advnorm.eval.plan.variants import Variant
from timm_advnorm.eval.protocols.protocol import (
    AttackSpec, Protocol, get_protocol, override_protocol, reduce_protocol, resolve_protocol)
from timm_advnorm.eval.results.files import CSV_FIELDS, csv_rows, write_csv
from timm_advnorm.eval.results.intervals import wilson_interval
from timm_advnorm.eval.results.plots import figure_accuracy_vs_eps, figure_accuracy_vs_iterations, figure_tradeoff
from timm_advnorm.eval.results.sanity import run_sanity_checks
from timm_advnorm.eval.results.summary import results_warnings, summarize_variant
from timm_advnorm.eval.run.records import ResultTable, make_record
from timm_advnorm.eval.schema import AmpCheck, EvalResults, VariantResult

INPUT_SIZE = (3, 32, 32)
N = 64


def _table(plan, correct=None, n=N):
    """Per-sample results of every stage of `plan` for variant ``model``: all clean samples correct, each attack
    stage correct on the first half unless `correct` gives its correctness (by stage name)."""
    positions = torch.arange(n)
    records = [make_record('model', 'clean', 0, dict(position=positions, correct=torch.ones(n, dtype=torch.bool)))]
    for stage in plan.stages:
        if getattr(stage, 'spec', None) is None or stage.name == 'clean':
            continue
        ok = (correct or {}).get(stage.name, positions < n // 2)
        rows = positions < (stage.limit or n)
        size = torch.full((int(rows.sum()),), 1.0)
        records.append(make_record('model', stage.name, 0, dict(
            position=positions[rows], attacked=torch.ones(int(rows.sum()), dtype=torch.bool), correct=ok[rows],
            pred=positions[rows], success=~ok[rows], linf=size, l2=size)))
    return ResultTable(records)


def _summary(protocol, correct=None, **plan_kwargs):
    plan = build_plan(protocol, sanity_samples=0, **plan_kwargs)
    return summarize_variant(_table(plan, correct), Variant('model'), plan, INPUT_SIZE).to_dict()


def _results(protocol, variants):
    return EvalResults.from_dict(dict(model='m', protocol=protocol.to_dict(), variants=variants))


# --- attack names are the budgets that ran -------------------------------------------------------------------------

def test_a_reduced_protocol_reports_the_budget_that_ran_and_keeps_the_protocols_name():
    protocol = reduce_protocol(get_protocol('xie2020'), root=3)
    attacks = _summary(protocol)['attacks']
    assert [a['label'] for a in attacks] == ['pgd-t-2', 'pgd-t-3', 'pgd-t-5', 'pgd-t-8', 'pgd-t-13']
    assert [a['protocol_label'] for a in attacks] == [s.label for s in get_protocol('xie2020').attacks]
    assert [a['steps'] for a in attacks] == [2, 3, 5, 8, 13]
    summary = _summary(protocol, correct={'pgd-t-2000': torch.arange(N) < 5})
    assert summary['robust'] == pytest.approx(100 * 5 / N)  # the headline is still found by the protocol's label
    assert summary['robust_label'] == 'pgd-t-13'


def test_labels_without_a_budget_get_the_one_that_ran_and_unchanged_budgets_keep_their_label():
    capped = reduce_protocol(get_protocol('nofrost'), max_steps=3, max_queries=50)
    assert [s.run_label for s in capped.attacks] == [
        'pgd-3', 'apgd-ce-3', 'apgd-dlr-3', 'mifgsm-3', 'cw-linf-3', 'square-50']
    assert [s.run_label for s in get_protocol('nofrost').attacks] == [s.label for s in get_protocol('nofrost').attacks]
    assert reduce_protocol(get_protocol('nofrost'), max_steps=20).attacks[0].run_label == 'pgd'  # 20 ran: as named
    overridden = override_protocol(get_protocol('xie2020'), steps=50).attacks[-1]
    assert overridden.label == 'pgd-t-2000' and overridden.run_label == 'pgd-t-50'
    twice = reduce_protocol(reduce_protocol(get_protocol('xie2020'), root=3), max_steps=4).attacks[-1]
    assert twice.label_budget == 2000 and twice.run_label == 'pgd-t-4'


def test_the_protocol_description_records_what_ran_only_when_it_differs():
    full = get_protocol('xie2020').to_dict()['attacks'][-1]
    assert 'run_label' not in full and 'label_budget' not in full  # state files of unchanged protocols still resume
    reduced = reduce_protocol(get_protocol('xie2020'), root=3).to_dict()['attacks'][-1]
    assert reduced['run_label'] == 'pgd-t-13' and reduced['label_budget'] == 2000


def test_square_reports_queries_not_iterations():
    square = _summary(get_protocol('robustbench'))['attacks'][-1]
    assert square['queries'] == 5000 and square['steps'] is None


# --- units: eps on its scale, noise by its sigma ----------------------------------------------------------------

def _csv(results):
    rows = csv_rows(results)
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=CSV_FIELDS, extrasaction='ignore')
    writer.writeheader()
    writer.writerows(rows)
    return {row['attack']: row for row in csv.DictReader(io.StringIO(buffer.getvalue()))}


def test_csv_eps_carries_its_scale_and_rule_and_noise_rows_their_sigma(tmp_path):
    protocol = resolve_protocol(get_protocol('galloway'), InputSpace())  # ImageNet's std: 0.226 on average
    summary = _summary(protocol)
    noise, linf, l2 = summary['attacks']
    assert 'norm' not in noise and 'eps' not in noise
    assert (noise['noise'], noise['sigma'], noise['sigma_scale']) == ('gaussian', 0.5, 'normalized input')
    eps = 0.03 * 0.226 * 255  # ε∞ = 0.03 of the standardized input
    assert linf['eps_scale'] == '0-255' and linf['eps_rule'] == 'std' and linf['eps'] == pytest.approx(eps)
    assert (linf['eps_standardized'], linf['input_std']) == (0.03, pytest.approx(0.226))
    assert l2['norm'] == 'l2' and l2['eps_rule'] == 'std_sqrt_dim'
    assert l2['eps'] == pytest.approx(eps * math.sqrt(3 * 32 * 32))  # Galloway's rule applied
    rows = _csv(_results(protocol, [dict(summary, name='model')]))
    assert 'eps' not in CSV_FIELDS and {'eps_255', 'eps_rule', 'sigma', 'sigma_scale', 'noise'} <= set(CSV_FIELDS)
    assert float(rows['bim-linf']['eps_255']) == pytest.approx(eps)
    assert (rows['bim-linf']['eps_rule'], rows['bim-l2']['eps_rule']) == ('std', 'std_sqrt_dim')
    assert rows['bim-linf']['description'] == (
        "BIM-L∞, 20 iterations, ε = 1.729/255, α = 0.08645/255 (sign step, ε/N), ε = 0.03 of the standardized input "
        "(the model's std 0.226), untargeted, best iterate")
    assert ("ε = 95.83/255 (ε∞·√d), α = 4.791/255 (L2 step, ε/N), ε∞ = 0.03 of the standardized input (the model's "
            "std 0.226)") in rows['bim-l2']['description']
    # --eps is on the 0-255 scale: the rules then say so (fixed, and √d alone)
    overridden = _summary(override_protocol(protocol, eps=7.65))['attacks']
    assert [a.get('eps_rule') for a in overridden] == [None, 'fixed', 'sqrt_dim'] and 'input_std' not in overridden[1]
    assert overridden[2]['eps'] == pytest.approx(7.65 * math.sqrt(3 * 32 * 32))
    assert rows['gaussian-noise']['norm'] == '' and rows['gaussian-noise']['eps_255'] == ''
    assert (rows['gaussian-noise']['sigma'], rows['gaussian-noise']['sigma_scale']) == ('0.5', 'normalized input')
    write_csv(tmp_path / 'r.csv', csv_rows(_results(protocol, [dict(summary, name='model')])))
    assert (tmp_path / 'r.csv').read_text().splitlines()[0] == ','.join(CSV_FIELDS)
    assert noise_settings(dict(std=8, units='pixels'))['sigma_scale'] == '0-255'


def test_corruptions_are_named_by_severity_not_by_a_budget():
    entry = _summary(get_protocol('corruptions'))['attacks'][0]
    assert 'eps' not in entry and (entry['noise'], entry['corruption'], entry['severity']) == (
        'imagenet-c', 'gaussian_noise', 1)


# --- sanity checks: noise is told, one run is exact ---------------------------------------------------------------

def _sweep(share_budgets: bool):
    """PGD-5 and PGD-10 at the same step (one run when budgets are shared): one sample becomes correct with more
    iterations, one becomes wrong."""
    specs = tuple(AttackSpec(f'pgd-{n}', attack_config('pgd', steps=n, step=1.0, step_rule='fixed'), 8.0)
                  for n in (5, 10))
    plan = build_plan(Protocol('test', 'test', 'test', specs), sanity_samples=0, share_budgets=share_budgets)
    positions = torch.arange(N)
    fewer = positions < 20
    more = (positions < 19) | (positions == 40)
    table = _table(plan, {'pgd-5': fewer, 'pgd-10': more})
    return plan, {c.name: c for c in run_sanity_checks(table, 'model', plan, 10, INPUT_SIZE)}


def test_a_tolerated_rise_says_how_many_samples_moved_each_way():
    plan, checks = _sweep(share_budgets=False)
    check = checks['more_iterations_do_not_help']
    assert check.status == 'pass'
    assert '1 sample became correct, 1 became wrong of 64; within noise' in check.message
    assert check.details['comparisons'][0]['up'] == 1 and not check.details['comparisons'][0]['exact']


def test_budgets_read_off_one_run_must_never_rise():
    plan, checks = _sweep(share_budgets=True)
    assert isinstance(plan.stage('pgd-5'), BudgetStage)
    check = checks['more_iterations_do_not_help']
    assert check.status == 'fail'  # one sample of 64 is noise for two runs, impossible for one
    assert '1 sample became correct' in check.message and 'one run' in check.message


# --- reduced probes ------------------------------------------------------------------------------------------------

def test_reduced_evaluations_shrink_the_sanity_probes_but_keep_every_check():
    full = build_plan(get_protocol('xie2020'))
    reduced = build_plan(reduce_protocol(get_protocol('xie2020'), root=3), reduced_sanity=True)
    assert full.sanity.samples == 64 and not full.sanity.reduced
    probe = reduced.sanity
    assert probe.reduced and probe.samples == 16 and probe.steps < full.sanity.steps and probe.queries < 400
    assert 2 <= len(probe.sweep) < len(full.sanity.sweep) and probe.sweep[-1][0] == 128
    fewer, more = probe.more_iterations
    assert fewer != more and probe.blackbox is not None
    assert all(stage.limit == 16 for stage in reduced.stages if stage.name.startswith('sanity/'))
    small = build_plan(get_protocol('xie2020'), sanity_samples=8, sanity_steps=2, reduced_sanity=True).sanity
    assert (small.samples, small.steps) == (8, 2)  # budgets already smaller stay


# --- warnings ------------------------------------------------------------------------------------------------------

def _check(name, status='fail', message='m', **details):
    return dict(name=name, status=status, message=message, details=details)


def test_chance_level_outputs_are_the_first_warning_phrased_for_a_user():
    chance = _check('outputs_not_random', accuracy=0.103, chance=0.1, threshold=0.13, samples=64, num_classes=10)
    variants = [dict(name='adv', sanity=dict(checks=[_check('outputs_not_random', 'pass'),
                                                     _check('blackbox_not_stronger', message='square beats pgd')])),
                dict(name='clean', sanity=dict(checks=[chance, _check('accuracy_falls_to_zero')]))]
    variants = [VariantResult.from_dict(variant) for variant in variants]
    lines = results_warnings(variants)
    assert len(lines) == 3
    assert lines[0].startswith('clean accuracy 10.3% of variant clean is at chance (10 classes')
    assert 'wrong checkpoint, preprocessing or labels?' in lines[0] and 'meaningless' in lines[0]
    assert 'variant adv' in lines[1] and 'square beats pgd' in lines[1] and 'upper bounds' in lines[1]
    amp = AmpCheck.from_dict(dict(passed=False, tolerance=2.0, samples=8))
    assert 'differs from fp32' in results_warnings(variants, amp='bfloat16', amp_check=amp)[-1]
    assert results_warnings([VariantResult.from_dict(
        dict(name='x', sanity=dict(checks=[_check('outputs_not_random', 'pass')])))]) == []


# --- plots say what they show --------------------------------------------------------------------------------------

def _text(fig):
    """Every title of the figure, its axes' labels, tick labels and legends, as one string."""
    parts = [fig._suptitle.get_text() if fig._suptitle else '']
    for ax in fig.axes:
        parts += [ax.get_title(), ax.get_xlabel(), ax.get_ylabel()]
        parts += [t.get_text() for t in ax.get_xticklabels() + ax.get_yticklabels()]
        if ax.get_legend():
            parts += [t.get_text() for t in ax.get_legend().get_texts()]
    return '\n'.join(parts)


def test_the_iteration_plot_puts_accuracy_and_success_rate_on_axes_of_their_own():
    pytest.importorskip('matplotlib')
    protocol = reduce_protocol(get_protocol('xie2020'), root=3)
    variant = dict(_summary(protocol), name='adv')
    fig = figure_accuracy_vs_iterations(_results(protocol, [variant]))
    accuracy, success = fig.axes
    assert 'accuracy' in accuracy.get_ylabel() and 'success' in success.get_ylabel()
    assert len(accuracy.get_lines()) == len(success.get_lines()) == 1
    title = fig._suptitle.get_text().replace('\n', ' ')
    assert 'pgd-t-13' in title and '2-13 iterations' in title and 'ε=16/255' in title
    assert '(reduced)' in title and '64 samples' in title and 'variant adv' in title and 'pgd-t-2000' not in title
    # xie2020's recorded step and rule: max(1/255, ε/N) is 8/255 at 2 iterations, 16/13 at 13
    assert 'targeted, 2-13 iterations, α = 1.231-8/255 (sign step, max(1/255, ε/N))' in title
    assert 'best iterate' in title


def test_the_eps_plot_is_the_sanity_probe_from_eps_zero_in_k_over_255():
    pytest.importorskip('matplotlib')
    plan = build_plan(get_protocol('xie2020'), sanity_samples=16)
    table = _table(plan)
    variant = dict(summarize_variant(table, Variant('model'), plan, INPUT_SIZE).to_dict(), name='adv')
    assert variant['eps_sweep'][0] == dict(eps=0.0, accuracy=100.0)  # the clean accuracy of the probe's samples
    assert variant['sanity_probe']['samples'] == 16
    fig = figure_accuracy_vs_eps(_results(get_protocol('xie2020'), [variant]))
    (ax,) = fig.axes
    assert ax.get_xscale() in ('symlog', 'linear')
    ticks = [t.get_text() for t in ax.get_xticklabels()]
    assert ticks[0] == '0' and all(t.endswith('/255') for t in ticks[1:]) and '128/255' in ticks
    title = fig._suptitle.get_text().replace('\n', ' ')
    assert 'sanity probe' in title and '16 samples' in title and 'PGD-10' in title and 'variant adv' in title
    assert 'step 2.5ε/N' in title and '95 % Wilson' in title
    assert ax.get_xlabel() and ax.get_ylabel()
    low, high = ax.get_ylim()
    assert low <= wilson_interval(100.0, 16)[0]  # the band of the ε = 0 point (16 of 16 correct) is in view


def test_the_tradeoff_plot_names_the_robust_attack_with_its_budget():
    pytest.importorskip('matplotlib')
    protocol = reduce_protocol(get_protocol('xie2020'), root=3)
    summary = _summary(protocol)
    variants = [dict(summary, name=name, kind=kind, gamma=gamma)
                for name, kind, gamma in (('clean', 'clean', 0.0), ('mix@0.5', 'mix', 0.5), ('adv', 'adv', 1.0))]
    title = figure_tradeoff(_results(protocol, variants))._suptitle.get_text().replace('\n', ' ')
    assert 'pgd-t-13 (PGD-13 L∞, ε = 16/255, α = 1.231/255 (sign step, max(1/255, ε/N)), targeted, best iterate)' in title
    assert '(reduced)' in title and '64 samples' in title and 'variants clean, mix@0.5, adv' in title


# --- plots show the data's resolution ------------------------------------------------------------------------------

def test_the_wilson_interval_has_its_textbook_values_and_narrows_with_the_sample_count():
    assert wilson_interval(50.0, 10) == pytest.approx((23.66, 76.34), abs=0.01)  # Wilson (1927), p = 0.5, n = 10
    low, high = wilson_interval(0.0, 20)
    assert low == 0.0 and high > 10.0  # no robust accuracy measured on 20 images is not a sure 0 %
    widths = [high - low for low, high in (wilson_interval(84.0, n) for n in (50, 200, 800))]
    assert widths == sorted(widths, reverse=True) and widths[1] == pytest.approx(widths[0] / 2, rel=0.1)
    with pytest.raises(ValueError, match='at least one sample'):
        wilson_interval(50.0, 0)


def _pgd(label, steps, accuracy, samples=200, **kwargs):
    return dict(label=label, attack='pgd', threat='white-box', norm='linf', eps=8.0, steps=steps, targeted=False,
                kwargs=dict(steps=steps, **kwargs), samples=samples, attacked=samples, accuracy=accuracy)


def test_a_one_image_difference_is_drawn_inside_its_interval_not_as_a_crossing():
    """The issue's probe: PGD-10 and PGD-20 on 200 images, one image (0.5 points) apart, zoomed to 82-85.5 %."""
    pytest.importorskip('matplotlib')
    variants = [dict(name=name, samples=200, attacks=[_pgd('pgd-10', 10, first), _pgd('pgd-20', 20, second)])
                for name, first, second in (('clean', 83.5, 84.0), ('adv', 84.0, 83.5))]
    results = EvalResults.from_dict(dict(model='m', dataset='digits', split='validation',
                                         protocol=dict(name='custom', headline='last'), variants=variants))
    fig = figure_accuracy_vs_iterations(results)
    (ax,) = fig.axes
    low, high = ax.get_ylim()
    interval_low, interval_high = wilson_interval(83.5, 200)
    assert low <= interval_low and high >= wilson_interval(84.0, 200)[1]  # every band in view
    assert high - low >= interval_high - interval_low >= 20 * 0.5  # the span of 20 images at least
    title = fig._suptitle.get_text().replace('\n', ' ')
    assert 'digits (validation), 200 samples' in title and 'one image = 0.5 points' in title
    assert 'untargeted' in title and 'step not recorded' in title  # an older file that records no step: said so


def test_the_step_is_named_as_recorded():
    from timm_advnorm.eval.results.plots import step_text
    from timm_advnorm.eval.schema import AttackResult

    def step(attack='pgd', steps=20, **kwargs):
        return step_text(AttackResult.from_dict(dict(label='a', attack=attack, steps=steps, kwargs=kwargs,
                                                     accuracy=0.0)))
    # results written before steps were recorded: what their arguments say
    assert step(step=2.0, step_rule='fixed') == 'step 2/255'
    assert step(step=1.0, step_rule='max') == 'step max(1/255, ε/N)'
    assert step('bim-linf', step=0.3825) == 'step 0.383/255'  # BIM has no step rule
    assert step(step=4.0) == 'step 4/255 (rule not recorded)'  # PGD's default rule may have taken max(4, ε/N)
    assert step() == 'step not recorded'
    assert step('apgd-ce') is None and step('square', steps=None) is None  # adaptive step; queries
    # results that record it: the step taken and how, as every output names it
    recorded = AttackResult.from_dict(dict(label='a', attack='pgd', steps=10, step=1.6,
                                           step_rule='sign step, max(1/255, ε/N)', accuracy=0.0))
    assert step_text(recorded) == 'α = 1.6/255 (sign step, max(1/255, ε/N))'
    adaptive = AttackResult.from_dict(dict(label='a', attack='apgd-ce', steps=10, accuracy=0.0,
                                           step_rule='adaptive step (from 2ε, halved at checkpoints)'))
    assert step_text(adaptive) == 'adaptive step (from 2ε, halved at checkpoints)'


def test_a_suite_whose_steps_differ_names_each_attacks_step():
    from timm_advnorm.eval.results.plots import suite_text
    from timm_advnorm.eval.schema import AttackResult
    galloway = resolve_protocol(get_protocol('galloway'), InputSpace())  # ε∞ = 0.03 × 0.226 × 255 = 1.729
    attacks = [AttackResult.from_dict(a) for a in _summary(galloway)['attacks']]
    text = suite_text(attacks)
    assert text.startswith('gaussian-noise, bim-linf, bim-l2 (untargeted, 20 iterations, ')
    # ε∞/20, and BIM-L2's ε2/20 (ε2 = ε∞·√d = 95.8, d = 3·32·32 here), each with how it is taken
    assert 'α = 0.08645/255 (sign step, ε/N) (bim-linf), α = 4.791/255 (L2 step, ε/N) (bim-l2)' in text


def _tradeoff_variants(*extra):
    ends = [dict(name='clean', kind='clean', gamma=0.0, clean=97.8, robust=75.2),
            dict(name='adv', kind='adv', gamma=1.0, clean=97.2, robust=83.3)]
    variants = [dict(v, samples=359) for v in ends + list(extra)]
    protocol = dict(get_protocol('xie2020').to_dict(), headline='worst-case')
    return EvalResults.from_dict(dict(model='m', protocol=protocol, variants=variants))


def test_the_gamma_plot_needs_a_gamma_between_the_branches_and_labels_each_once():
    pytest.importorskip('matplotlib')
    assert figure_tradeoff(_tradeoff_variants()) is None  # two branches are two points, not a trade-off
    mix = dict(name='mix@0.5', kind='mix', gamma=0.5, clean=97.8, robust=80.8)
    logits = dict(name='logits@0.5', kind='logits', gamma=0.5, clean=97.8, robust=80.5)
    fig = figure_tradeoff(_tradeoff_variants(mix, logits))
    (ax,) = fig.axes
    labels = [t.get_text() for t in ax.texts]
    assert sorted(labels) == ['γ=0 (clean BN)', 'γ=0.5', 'γ=0.5', 'γ=1 (adv BN)']  # each branch once, not per curve
    low, high = ax.get_xlim()
    assert low <= wilson_interval(97.2, 359)[0] and high >= wilson_interval(97.8, 359)[1]
    low, high = ax.get_ylim()
    assert low <= wilson_interval(75.2, 359)[0] and high >= wilson_interval(83.3, 359)[1]
    assert 'one image = 0.28 points' in fig._suptitle.get_text()


def test_attack_title_adds_the_budget_a_label_does_not_carry():
    from timm_advnorm.eval.results.summary import attack_title
    assert attack_title('pgd', steps=20) == 'pgd (20 iterations)'
    assert attack_title('pgd-t-13', steps=13) == 'pgd-t-13'
    assert attack_title('square', steps=None, queries=400) == 'square (400 queries)'
    assert attack_title('gaussian-noise') == 'gaussian-noise'


def _boxes(fig, artists):
    renderer = fig.canvas.get_renderer()
    return [artist.get_window_extent(renderer) for artist in artists]


def test_the_gamma_plot_s_title_fits_its_figure_and_labels_of_points_that_meet_do_not_overlap():
    """A smoke run's plot (issue #38): every variant scored alike, so every γ label sat on one point, and a title of
    wide characters ran over both edges; the note the demo gives (``--plot-note``) comes first."""
    pytest.importorskip('matplotlib')
    same = dict(clean=40.6, robust=15.6, samples=32)
    variants = [dict(same, name=name, kind=kind, gamma=gamma) for name, kind, gamma in (
        ('clean', 'clean', 0.0), ('mix@0.5', 'mix', 0.5), ('logits@0.5', 'logits', 0.5), ('adv', 'adv', 1.0))]
    attack = dict(_pgd('pgd', 2, 15.6, samples=32), step=8.0, step_rule='sign step, max(2/255, ε/N)', iterate='best')
    results = EvalResults.from_dict(dict(model='test_mbn_resnet', dataset='digits', split='validation',
                                         protocol=dict(name='custom', headline='last'),
                                         variants=[dict(v, attacks=[attack]) for v in variants]))
    note = 'SMOKE RUN (--SMOKE): ONE EPOCH, TINY ATTACKS; THESE NUMBERS MEAN NOTHING ABOUT ROBUSTNESS AT ALL'  # wide
    fig = figure_tradeoff(results, note=note)
    assert fig.get_layout_engine() is not None
    title = fig._suptitle.get_text()
    assert title.replace('\n', ' ').startswith(note) and 'digits (validation), 32 samples' in title
    (box,) = _boxes(fig, [fig._suptitle])
    assert 0 <= box.x0 and box.x1 <= fig.bbox.width
    labels = _boxes(fig, fig.axes[0].texts)
    assert len(labels) == 4
    assert not any(a.overlaps(b) for i, a in enumerate(labels) for b in labels[i + 1:])
