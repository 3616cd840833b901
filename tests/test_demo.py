"""``timm-advnorm-demo``: the README's demo from the installed commands (run end to end by test_install), its steps
held to the commands' parsers here, and its report table."""
import json
import shlex

import pytest

from timm_advnorm.commands.demo import demo_steps, report_table, run
from timm_advnorm.commands.validate import parse_args as parse_validate_args
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
    for _, argv in steps:  # every option once: the command line printed is the one that runs
        options = [a for a in argv if a.startswith('--')]
        assert len(options) == len(set(options)), shlex.join(argv)


def _results(variants) -> dict:
    attack = dict(label='pgd', protocol_label='pgd', attack='pgd', threat='white-box', norm='linf', eps=16.0, steps=20,
                  targeted=False, kwargs=dict(steps=20, step=2.0), step=2.0, step_rule='sign step', iterate='best',
                  accuracy=None)
    return dict(model='test_mbn_resnet', protocol=dict(name='custom', attacks=[]), variants=[
        dict(name=name, kind=name, clean=clean, attacks=[dict(attack, accuracy=robust)], robust=robust)
        for name, clean, robust in variants])


def test_report_table_lists_each_run_s_variants(tmp_path):
    (tmp_path / 'a.json').write_text(json.dumps(_results([('clean', 97.8, 75.2), ('adv', 97.2, 83.3)])))
    (tmp_path / 'c.json').write_text(json.dumps(_results([('clean', 97.8, 0.0)])))
    pgd = 'PGD-20 L∞, ε = 16/255, α = 2/255 (sign step), untargeted, best iterate'
    assert report_table([('adversarial (mbn)', tmp_path / 'a.json'), ('clean (vanilla)', tmp_path / 'c.json')]) == (
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
