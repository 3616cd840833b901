"""``timm-advnorm-demo``: the README's demo from the installed commands (run end to end by test_install), its steps
held to the commands' parsers here, and its report: what ran, then the table."""
import json
import shlex

import pytest
import yaml

from timm_advnorm.commands.demo import SMOKE_PLOT_NOTE, demo_steps, run
from timm_advnorm.commands.demo_report import SMOKE_NOTICE, report_table, report_text
from timm_advnorm.commands.validate import parse_args as parse_validate_args
from timm_advnorm.eval.schema import EvalResults
from timm_advnorm.commands.train import parse_args as parse_train_args


@pytest.mark.parametrize('smoke', [False, True])
def test_demo_steps_are_the_readme_s_runs_and_parse_as_their_commands(tmp_path, smoke):
    steps = demo_steps(tmp_path / 'demo', data_dir=str(tmp_path / 'data'), smoke=smoke)
    assert [command for command, _ in steps] == ['timm-advnorm-train'] * 2 + ['timm-advnorm-validate'] * 2
    (adversarial, _), (clean, _) = [parse_train_args(argv) for _, argv in steps[:2]]
    assert (adversarial.method, clean.method) == ('mbn', 'vanilla')
    assert adversarial.output == clean.output == str(tmp_path / 'demo') and clean.data_dir == str(tmp_path / 'data')
    assert (adversarial.epochs == 1) == smoke
    evaluations = [parse_validate_args(argv) for _, argv in steps[2:]]
    assert [e.checkpoint for e in evaluations] == [str(tmp_path / 'demo' / run / 'last.pth.tar')
                                                    for run in ('adversarial', 'clean')]
    assert [e.gammas for e in evaluations] == [[0.0, 0.5, 1.0], [0.0]]
    assert evaluations[0].attack_steps == ([2] if smoke else [20]) and evaluations[0].attack_eps == 16.0
    # the smoke run's plots say so first; the γ plot is the adversarial run's only
    assert [e.plot_note for e in evaluations] == [SMOKE_PLOT_NOTE if smoke else '', '']
    assert 'mean nothing' in SMOKE_PLOT_NOTE
    for _, argv in steps:  # every option once: the command line printed is the one that runs
        options = [a for a in argv if a.startswith('--')]
        assert len(options) == len(set(options)), shlex.join(argv)


def _results(variants, samples: int = 359) -> dict:
    attack = dict(label='pgd', protocol_label='pgd', attack='pgd', threat='white-box', norm='linf', eps=16.0, steps=20,
                  targeted=False, kwargs=dict(steps=20, step=2.0), step=2.0, step_rule='sign step', iterate='best',
                  accuracy=None)
    return dict(model='test_mbn_resnet', dataset='digits', split='validation', num_samples=samples, seed=42,
                sanity_status='passed', protocol=dict(name='custom', attacks=[]), variants=[
                    dict(name=name, kind=name, clean=clean, attacks=[dict(attack, accuracy=robust)], robust=robust)
                    for name, clean, robust in variants])


def _demo_folder(folder, samples: int, epochs: int):
    """A finished demo's records, as its runs write them: each training's arguments and budget, each evaluation's
    results (the adversarial one with its plots)."""
    runs = {'adversarial': ('mbn', [('clean', 97.8, 75.2), ('adv', 97.2, 83.3)]),
            'clean': ('vanilla', [('clean', 97.8, 0.0)])}
    for name, (method, variants) in runs.items():
        (folder / name).mkdir(parents=True)
        (folder / name / 'args.yaml').write_text(yaml.safe_dump(dict(
            model='test_mbn_resnet', method=method, dataset='digits', epochs=epochs, attack='pgd', attack_eps=16.0,
            attack_step=4.0, attack_steps=5, attack_targeted=False, attack_norm='linf', attack_step_rule='max')))
        (folder / name / 'budget.yaml').write_text(yaml.safe_dump(dict(train_images=1438, epochs=epochs)))
        results = dict(_results(variants, samples), plots=['gamma_tradeoff.png'] if name == 'adversarial' else [])
        (folder / name / 'robust.json').write_text(json.dumps(results))
    return [('adversarial', 'adversarial (mbn)'), ('clean', 'clean (vanilla)')]


@pytest.mark.parametrize('smoke', [False, True])
def test_report_says_what_ran_and_whether_its_numbers_mean_anything(tmp_path, smoke):
    """Issue #38: the data, the training and evaluated sample counts, epochs, models, methods, the attacks with their
    budgets, the plots; a smoke run's report says first that its numbers mean nothing about robustness."""
    samples, epochs = (32, 1) if smoke else (359, 12)
    report = report_text(tmp_path, _demo_folder(tmp_path, samples, epochs), smoke)
    head, table = report.split('\n\n| training |')
    assert (SMOKE_NOTICE in head) == smoke and ('mean nothing about robustness' in report) == smoke
    if smoke:
        assert head.index(SMOKE_NOTICE) < head.index('- **adversarial (mbn)**')  # before any number
    adversarial, clean, attacks, plots = head.splitlines()[-4:]
    epochs_text = '1 epoch' if smoke else '12 epochs'
    assert adversarial.startswith(f'- **adversarial (mbn)**: trained test_mbn_resnet, {epochs_text} of method mbn on '
                                  '1,438 images of digits (training split), with adversarial examples of PGD-5 L∞, '
                                  'ε = 16/255, α = 4/255 (sign step, max(4/255, ε/N)), untargeted;')
    assert clean.startswith(f'- **clean (vanilla)**: trained test_mbn_resnet, {epochs_text} of method vanilla on '
                            '1,438 images of digits (training split), clean images only;')
    for line in (adversarial, clean):
        assert line.endswith(f'evaluated on {samples} images of digits (validation split, seed 42), custom protocol; '
                             'sanity checks: passed.')
    assert attacks == ('- **Attack** (every branch): pgd: PGD-20 L∞, ε = 16/255, α = 2/255 (sign step), untargeted, '
                       'best iterate.')
    assert plots == '- **Plots**: `adversarial/plots/gamma_tradeoff.png`.'
    assert table.count('\n| adversarial (mbn) |') == 2 and table.count('\n| clean (vanilla) |') == 1


def test_report_table_lists_each_run_s_variants():
    a, c = (EvalResults.from_dict(_results(variants)) for variants in (
        [('clean', 97.8, 75.2), ('adv', 97.2, 83.3)], [('clean', 97.8, 0.0)]))
    pgd = 'PGD-20 L∞, ε = 16/255, α = 2/255 (sign step), untargeted, best iterate'
    assert report_table([('adversarial (mbn)', a), ('clean (vanilla)', c)]) == (
        '| training | branch | clean top-1 | robust top-1 (attack) |\n| --- | --- | --- | --- |\n'
        f'| adversarial (mbn) | clean | 97.8% | 75.2% ({pgd}) |\n'
        f'| adversarial (mbn) | adv | 97.2% | 83.3% ({pgd}) |\n'
        f'| clean (vanilla) | clean | 97.8% | 0.0% ({pgd}) |\n')


def test_demo_refuses_an_existing_output_folder(tmp_path, capsys):
    (tmp_path / 'demo').mkdir()
    assert run(argv=['--output', str(tmp_path / 'demo')]) == 2
    err = capsys.readouterr().err.strip()
    assert err == f'timm-advnorm-demo: error: {tmp_path / "demo"} already exists; give a new folder with --output'
    assert list((tmp_path / 'demo').iterdir()) == []
