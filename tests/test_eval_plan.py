"""The evaluation states its plan and cost before it runs, sizes its sanity probes to a budget, and "passed" only ever
means that every sanity check ran and passed."""
import json
import logging
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace

import pytest
import timm
import torch

from timm_advnorm.attacks.registry import attack_config
from timm_advnorm.commands import validate as validate_adv
from timm_advnorm.durations import duration_text
from timm_advnorm.eval.plan import cost as cost_module
from timm_advnorm.eval.plan.cost import Passes, count_cost, stage_passes, time_input_step
from timm_advnorm.eval.plan.metrics import THICKNESS_POINTS, thickness_attack
from timm_advnorm.eval.plan.sanity_budget import MIN_SAMPLES, SANITY_SHARE, fit_sanity
from timm_advnorm.eval.plan.stage_plan import SANITY_PROBES, build_plan
from timm_advnorm.eval.plan.stages import AttackStage, BudgetStage, CleanStage, GradientProbe, ThicknessStage
from timm_advnorm.eval.protocols.protocol import AttackSpec, get_protocol, protocol_from_attacks, reduce_protocol
from timm_advnorm.eval.run import runner
from timm_advnorm.eval.schema import EvalResults, combined_sanity_status, sanity_status
from timm_advnorm.hub import CardFacts, parse_eval_results, render_model_card
from timm_advnorm.hub.publish import DEFAULT_CARD_TEMPLATE

pytestmark = pytest.mark.usefixtures('one_thread')

#: The issue's evaluation: PGD-10 and PGD-20 (one run) and FGSM at ε = 8.
ISSUE_ATTACKS = protocol_from_attacks(['pgd', 'fgsm'], 8.0, {}, 'independent', steps=[10, 20])


def _cost(plan, num_samples, variants=1):
    return count_cost([(plan.stages, range(num_samples))], variants)


# --- passes per stage --------------------------------------------------------------------------------------------

@pytest.mark.parametrize('spec, passes', [
    (AttackSpec('pgd', attack_config('pgd', steps=20), 8.0), Passes(21, 20)),  # 20 iterations, then scored
    (AttackSpec('fgsm', attack_config('fgsm'), 8.0), Passes(2, 1)),
    (AttackSpec('square', attack_config('square', n_queries=400), 8.0, threat='black-box'), Passes(401, 0)),
    (AttackSpec('apgd-t', attack_config('apgd-t', steps=100), 4.0), Passes(901, 900)),  # 9 target classes
    # FAB's step: linearization and a check
    (AttackSpec('fab-t', attack_config('fab-t', steps=10), 4.0), Passes(181, 90)),
    (AttackSpec('autoattack', attack_config('autoattack', steps=10, n_queries=50), 4.0),
     Passes(5 + 10 + 90 + 180 + 50 + 1, 10 + 90 + 90)),  # a check before and after each component; scored
    (AttackSpec('noise', attack_config('gaussian-noise', std=0.5), 0.0, threat='noise'), Passes(1, 0)),
])
def test_an_attack_costs_its_iterations_queries_and_score(spec, passes):
    assert stage_passes(AttackStage(spec)) == passes


def test_other_stages_cost_what_they_run():
    pgd = AttackSpec('pgd-20', attack_config('pgd', steps=20), 8.0)
    assert stage_passes(CleanStage()) == Passes(1, 0)
    assert stage_passes(GradientProbe()) == Passes(1, 1)
    assert stage_passes(BudgetStage(replace(pgd, label='pgd-10'), 'pgd-20', 10, 20)) == Passes()  # read off
    assert stage_passes(AttackStage(pgd, shorter_budgets=[10])) == Passes(22, 20)  # scored at both budgets
    assert stage_passes(ThicknessStage(thickness_attack())) == Passes(20 + THICKNESS_POINTS, 20)  # x*, then the segment


def test_the_plan_lists_every_stage_with_its_share_and_the_sanity_cost_against_the_attacks():
    cost = _cost(build_plan(ISSUE_ATTACKS), 200, variants=3)
    shares = [stage['share'] for stage in cost.to_dict()['stages']]
    assert sum(shares) == pytest.approx(1.0, abs=1e-4)
    assert cost.passes('attack') == 3 * 200 * (42 + 3)  # PGD-20 scored at 10 and 20, FGSM
    assert cost.sanity_share > 4  # the complete battery: four times the attacks the user asked for
    text = cost.format('Plan')
    assert 'pgd-10 (read off pgd-20)' in text and 'sanity/square-400-eps8' in text
    assert f"sanity probes: {cost.passes('sanity'):,.0f} passes, {100 * cost.sanity_share:.0f} % of the requested " \
           f"attacks' {cost.passes('attack'):,.0f} (--sanity full)" in text


def test_the_plan_projects_its_time_from_measured_passes():
    cost = _cost(build_plan(ISSUE_ATTACKS), 200).with_pass_time(0.002, 256, 'cpu')
    assert cost.pass_projected_seconds == pytest.approx(0.002 * cost.total)
    text = cost.format('Plan')
    assert (f'  projected time: {duration_text(0.002 * cost.total)} for the whole evaluation, a projection from 256 '
            f'measured forward+backward passes of the model on cpu (2 ms per pass x {cost.total:,.0f} passes)') in text
    plan = cost.to_dict()
    assert plan['pass_seconds'] == 0.002 and plan['timed_passes'] == 256 and plan['timed_on'] == 'cpu'
    assert 'projected time' not in _cost(build_plan(ISSUE_ATTACKS), 200).format('Plan')  # nothing measured yet


def test_the_plan_adds_an_attack_update_to_each_backward_pass():
    cost = _cost(build_plan(ISSUE_ATTACKS), 200).with_pass_time(0.002, 256, 'cpu', step_seconds=0.001)
    assert cost.input_steps == sum(stage.passes.backward for stage in cost.stages) > 0
    assert cost.pass_projected_seconds == pytest.approx(0.002 * cost.total + 0.001 * cost.input_steps)
    assert f'and attack updates of the input (1 ms per image x {cost.input_steps:,.0f})' in cost.format('Plan')
    assert cost.to_dict()['step_seconds'] == 0.001
    assert time_input_step(torch.zeros(4, 3, 8, 8), repeat=2) > 0


def _setup(samples, variants):
    return SimpleNamespace(runs=[SimpleNamespace(indices=range(samples))], variants=[None] * variants)


def _options(reduced=False):
    return SimpleNamespace(attacks=SimpleNamespace(reduced=reduced))


def test_over_an_hour_the_plan_warns_in_one_line_with_what_shortens_it():
    cost = _cost(build_plan(ISSUE_ATTACKS), 400)
    hours = lambda h: cost.with_pass_time(h * 3600 / cost.total, 256, 'cpu')  # noqa: E731
    assert runner._over_an_hour(_options(), _setup(400, 2), hours(1.0)) is None
    warning = runner._over_an_hour(_options(), _setup(400, 2), hours(2.5))
    assert warning == ('The evaluation is projected to take 2.5 h on this device (cpu), over an hour; shorter: '
                       '--num-samples 160 (about an hour, the same attacks on fewer samples), fewer --gammas (each of '
                       'the 2 variants is attacked in full), --reduced (smoke-test budgets: the cube root of every '
                       'iteration and query count), --max-steps N / --max-queries N (caps on every attack).')
    assert '\n' not in warning
    reduced = runner._over_an_hour(_options(reduced=True), _setup(400, 1), hours(2.5))
    assert '--reduced' not in reduced and '--gammas' not in reduced and '--num-samples 160' in reduced


# --- the sanity budget -------------------------------------------------------------------------------------------

@pytest.mark.parametrize('protocol, num_samples', [
    (ISSUE_ATTACKS, 200), (ISSUE_ATTACKS, 40), (reduce_protocol(get_protocol('xie2020'), root=3), 8),
    (get_protocol('nofrost'), 100), (protocol_from_attacks(['fgsm'], 8.0, {}, 'independent'), 50),
    (get_protocol('corruptions'), 16)])
def test_by_default_the_probes_cost_at_most_a_quarter_of_the_attacks(protocol, num_samples):
    cost = _cost(fit_sanity(build_plan(protocol), num_samples), num_samples)
    assert cost.passes('sanity') <= SANITY_SHARE * cost.passes('attack')


def test_the_budget_takes_samples_first_and_keeps_every_probe_while_it_can():
    protocol = protocol_from_attacks(['pgd'], 8.0, {}, 'independent', steps=[100])
    fitted = fit_sanity(build_plan(protocol), 500).sanity
    assert MIN_SAMPLES <= fitted.samples < 64 and fitted.probes == SANITY_PROBES and not fitted.not_run
    assert (fitted.steps, fitted.queries, len(fitted.sweep)) == (10, 400, 5)  # the complete probes, on fewer samples


def test_a_large_evaluation_keeps_the_complete_battery():
    full = build_plan(get_protocol('nofrost'))
    fitted = fit_sanity(full, 10_000)
    assert [(s.name, s.limit) for s in fitted.stages] == [(s.name, s.limit) for s in full.stages]
    assert fitted.sanity.mode == 'budget' and not fitted.sanity.not_run


def test_probes_that_do_not_fit_are_left_out_from_the_last_and_recorded():
    fitted = fit_sanity(build_plan(ISSUE_ATTACKS), 200).sanity
    assert fitted.samples == MIN_SAMPLES and fitted.blackbox is None and fitted.not_run == ('blackbox',)
    assert fitted.more_iterations is not None  # PGD-4N still compares with the sweep's PGD-N at ε
    tiny = fit_sanity(build_plan(protocol_from_attacks(['fgsm'], 8.0, {}, 'independent')), 50).sanity
    assert tiny.not_run and tiny.probes == SANITY_PROBES[:len(SANITY_PROBES) - len(tiny.not_run)]
    nothing = fit_sanity(build_plan(get_protocol('imagenet-r')), 50)  # no attack: nothing to spend on probes
    assert nothing.sanity.probes == () and not [s for s in nothing.stages if s.name.startswith('sanity/')]


def test_values_the_user_gives_are_kept_and_the_rest_sized_around_them():
    full = build_plan(ISSUE_ATTACKS, sanity_samples=32)
    fitted = fit_sanity(full, 200, pinned={'samples'}).sanity
    assert fitted.samples == 32 and fitted.steps < 10


# --- the verdict -------------------------------------------------------------------------------------------------

def test_passed_means_every_check_ran_and_passed():
    assert sanity_status(['pass', 'pass'], probes_ran=True) == 'passed'
    assert sanity_status(['pass', 'skip'], probes_ran=True) == 'partial'
    assert sanity_status(['pass', 'skip'], probes_ran=False) == 'not run'
    assert sanity_status(['pass', 'fail', 'skip'], probes_ran=False) == 'failed'
    assert combined_sanity_status(['passed', 'partial']) == 'partial'
    assert combined_sanity_status(['not run', 'not run']) == 'not run'
    assert combined_sanity_status(['passed', 'failed', 'not run']) == 'failed'


def _old_results(probe):
    """A results file from before the verdict: ``sanity_passed: true`` whatever ran."""
    checks = [dict(name='outputs_not_random', status='pass', message=''),
              dict(name='gradients_not_masked', status='skip', message='no gradient probe')]
    variant = dict(name='model', clean=90.0, attacks=[], worst_case=None, robust=None, sanity_probe=probe,
                   sanity=dict(passed=True, failed=[], checks=checks))
    return dict(model='m', protocol=dict(name='custom'), sanity_passed=True, variants=[variant])


def test_older_results_read_their_verdict_off_their_checks():
    without_probes = EvalResults.from_dict(_old_results(None))
    assert (without_probes.sanity_status, without_probes.sanity_passed) == ('not run', None)
    assert without_probes.variants[0].sanity.passed is None
    probe = dict(samples=64, attack='pgd', norm='linf', random_start=False, steps=10, more_steps=40, eps=8.0,
                 sweep_eps=[8.0, 128.0], blackbox_queries=400, reduced=False)
    assert EvalResults.from_dict(_old_results(probe)).sanity_status == 'partial'
    card = _card(_old_results(None))
    assert '- **Sanity checks:** not run: 1 of 2 checks ran' in card and 'Sanity checks:** passed' not in card


def _card(results: dict) -> str:
    facts = CardFacts(title='m', load_name='hf-hub:org/m', architecture='test_resnet',
                      source_architecture='test_resnet', needs_plugin=False, mixture_bn=False, num_classes=10,
                      data_config={}, results=parse_eval_results(results))
    return render_model_card(DEFAULT_CARD_TEMPLATE.read_text(), facts)


# --- end to end on the digits ------------------------------------------------------------------------------------

@pytest.fixture(scope='module')
def checkpoint(digits_dir, tmp_path_factory, one_thread, train_briefly) -> Path:
    """tiny_bn_resnet trained for a few seconds on the digits: a working classifier, so no check fails for chance."""
    from timm.data import create_dataset, create_transform, resolve_data_config

    torch.manual_seed(0)
    model = timm.create_model('tiny_bn_resnet', num_classes=10)
    transform = create_transform(**resolve_data_config({}, model=model))
    dataset = create_dataset('', root=str(digits_dir / 'digits-32px'), split='train', transform=transform)
    x = torch.stack([dataset[i][0] for i in range(0, len(dataset), 2)])
    y = torch.tensor([dataset[i][1] for i in range(0, len(dataset), 2)])
    train_briefly(model, x, y, steps=60)
    path = tmp_path_factory.mktemp('checkpoint') / 'model.pth.tar'
    torch.save({'state_dict': model.state_dict(), 'arch': 'tiny_bn_resnet'}, path)
    return path


def _argv(digits_dir, checkpoint, out: Path, *extra):
    argv = ['--checkpoint', checkpoint, '--dataset', 'digits', '--data-dir', digits_dir, '--num-samples', 24,
            '-b', 12, '-j', 0, '--attacks', 'pgd', '--attack-eps', 8, '--attack-steps', 2, 5, '--attack-step', 4,
            '--no-progress', '--results-file', out / 'results.json', *extra]
    return [str(a) for a in argv]


def _mark_attacks(monkeypatch):
    """Log a line as each attack stage starts, to see what the evaluation said before the first one."""
    run = AttackStage.run

    def marked(self, *args):
        logging.getLogger('test').info('attack %s starts', self.name)
        return run(self, *args)

    monkeypatch.setattr(AttackStage, 'run', marked)


def _before_first_attack(caplog):
    """The log lines before the first attack stage started."""
    messages = [record.getMessage() for record in caplog.records]
    first = next(i for i, message in enumerate(messages) if message.startswith('attack '))
    return messages[:first]


def test_plan_prints_the_plan_and_evaluates_nothing_else(digits_dir, checkpoint, tmp_path, capsys, caplog,
                                                         monkeypatch):
    state = tmp_path / 'state.jsonl'
    _mark_attacks(monkeypatch)
    # one batch's passes (2 x 12 rows) measured at an hour: the warning
    monkeypatch.setattr(cost_module, 'timed_seconds', lambda work, device, warmup=0, repeat=1: 3600.0)
    with caplog.at_level(logging.INFO):
        assert validate_adv.run('validate_adv.py', _argv(digits_dir, checkpoint, tmp_path, '--plan',
                                                          '--resume-state', state)) == 0
    said = [record.getMessage() for record in caplog.records]
    assert not any(line.startswith('attack ') for line in said)  # no stage runs: the time is a projection
    (warning,) = [line for line in said if line.startswith('The evaluation is projected to take ')]
    assert 'over an hour; shorter: ' in warning and '--reduced' in warning
    printed = capsys.readouterr().out
    assert printed.startswith('Plan of the evaluation of tiny_bn_resnet (protocol custom, 1 variant x 24 samples')
    assert '  pgd-2 (read off pgd-5)' in printed and 'share' in printed and '  sanity/gradient' in printed
    assert "of the requested attacks' " in printed and '(--sanity budget)' in printed
    assert ('  projected time: ' in printed and 'a projection from 24 measured forward+backward passes of the model '
            'on cpu (150 s per pass x ' in printed)
    assert '  time: ' not in printed and 'first batch' not in printed
    assert not (tmp_path / 'results.json').exists() and not state.exists()


def test_plan_of_a_huge_attack_times_a_few_passes_and_runs_no_attack(digits_dir, checkpoint, tmp_path, capsys):
    """--plan of PGD-100000 (xie2020's PGD-2000 alike) costs what timing the model's passes costs: the stem runs once
    per forward pass of the model, a handful of times, not the attack's 100,000 iterations."""
    forwards = []

    def count_stem(module, args):
        if isinstance(module, torch.nn.Conv2d) and module.in_channels == 3:
            forwards.append(args[0].shape[0])

    argv = [str(a) for a in _argv(digits_dir, checkpoint, tmp_path, '--plan')]
    argv[argv.index('--attack-steps') + 1:argv.index('--attack-step')] = ['100000']
    hook = torch.nn.modules.module.register_module_forward_pre_hook(count_stem)
    try:
        assert validate_adv.run('validate_adv.py', argv) == 0
    finally:
        hook.remove()
    assert 0 < len(forwards) <= 4, forwards
    assert 'pgd  ' in capsys.readouterr().out
    assert not (tmp_path / 'results.json').exists()


class _Bar:
    """Stands in for tqdm: records the total it is given and what it is advanced by."""

    made = []

    def __init__(self, total, **kwargs):
        self.total, self.n = total, 0
        _Bar.made.append(self)

    def update(self, n):
        self.n += n

    def set_postfix_str(self, text, refresh=True):
        pass

    def __enter__(self):
        return self

    def __exit__(self, *exc_info):
        return None


def test_one_bar_counts_the_plans_passes_and_the_verdict_says_what_ran(digits_dir, checkpoint, tmp_path, monkeypatch,
                                                                         caplog):
    monkeypatch.setattr(runner, 'tqdm', _Bar)
    _Bar.made.clear()
    _mark_attacks(monkeypatch)
    with caplog.at_level(logging.INFO):
        assert validate_adv.run('validate_adv.py', _argv(digits_dir, checkpoint, tmp_path)) == 0
    plan_text = next(line for line in _before_first_attack(caplog) if line.startswith('Plan of the evaluation'))
    assert '\n  projected time: ' in plan_text and ' measured forward+backward passes of the model on cpu' in plan_text
    assert ' and attack updates of the input (' in plan_text
    assert not any(line.startswith('The evaluation is projected') for line in _before_first_attack(caplog))
    results = json.loads((tmp_path / 'results.json').read_text())
    plan = results['plan']
    assert plan['pass_projected_seconds'] > 0 and plan['timed_passes'] == 24
    (bar,) = _Bar.made
    assert bar.total == bar.n == plan['total_passes'] == sum(stage['passes'] for stage in plan['stages'])
    assert plan['sanity_passes'] <= SANITY_SHARE * plan['attack_passes'] and plan['sanity_mode'] == 'budget'
    assert plan['projected_seconds'] > 0 and plan['first_batch'] == 12
    # the budget left probes out: the verdict is partial, and says which checks did not run and why
    probe = results['variants'][0]['sanity_probe']
    assert probe['mode'] == 'budget' and probe['not_run']
    assert results['sanity_status'] == 'partial' and results['sanity_passed'] is None
    skipped = [c for c in results['variants'][0]['sanity']['checks'] if c['status'] == 'skip']
    assert skipped and all('does not fit the sanity budget' in c['message'] for c in skipped)
    ran = [c for c in results['variants'][0]['sanity']['checks'] if c['status'] == 'pass']
    assert all(c['samples'] > 0 for c in ran)
    line = next(r.getMessage() for r in caplog.records if r.getMessage().startswith('Sanity checks: '))
    assert line.startswith(f'Sanity checks: partial: {len(ran)} of 8 checks ran; not run: ')
    assert f"probes (--sanity budget) on {probe['samples']} samples" in line
    assert f'- **Sanity checks:** partial: {len(ran)} of 8 checks ran' in _card(results)


def test_sanity_samples_0_never_reads_passed(digits_dir, checkpoint, tmp_path, caplog):
    with caplog.at_level(logging.INFO):
        assert validate_adv.run('validate_adv.py', _argv(digits_dir, checkpoint, tmp_path,
                                                          '--sanity-samples', 0)) == 0
    results = json.loads((tmp_path / 'results.json').read_text())
    assert results['sanity_status'] == 'not run' and results['sanity_passed'] is None
    assert results['variants'][0]['sanity']['status'] == 'not run'
    assert results['plan']['sanity_passes'] == 0 and results['plan']['sanity_mode'] == 'off'
    line = next(r.getMessage() for r in caplog.records if r.getMessage().startswith('Sanity checks: '))
    assert line.startswith('Sanity checks: not run: ') and 'the sanity probes were off' in line
    card = _card(results)
    assert '- **Sanity checks:** not run: ' in card and 'passed' not in card.split('Sanity checks:**')[1].split('\n')[0]


def test_sanity_full_is_the_complete_battery(digits_dir, checkpoint, tmp_path):
    from timm_advnorm.commands.validate import eval_options
    from timm_advnorm.eval.run.build import build_evaluation
    from timm_advnorm.eval.run.distributed import init_distributed

    args = validate_adv.parse_args(_argv(digits_dir, checkpoint, tmp_path, '--sanity', 'full'))
    setup = build_evaluation(eval_options(args), init_distributed(args.device))
    complete = build_plan(setup.protocol)
    assert [(s.name, s.limit) for s in setup.plan.stages] == [(s.name, s.limit) for s in complete.stages]
    assert setup.plan.sanity.mode == 'full'


def test_sanity_samples_0_contradicts_another_sanity_mode(capsys):
    with pytest.raises(SystemExit):
        validate_adv.parse_args(['--model', 'm', '--dataset', 'digits', '--sanity', 'full', '--sanity-samples', '0'])
    assert '--sanity-samples 0 turns the sanity probes off: it contradicts --sanity full' in capsys.readouterr().err
