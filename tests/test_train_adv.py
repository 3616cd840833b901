"""train_adv.py end to end on the built-in digits data: single process, resume, torchrun, configs and bad input."""
import csv
import json
import logging
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import yaml

REPO = Path(__file__).resolve().parents[1]
FAST = ['--epochs', '1', '--attack-steps', '2', '--attack-step', '4', '--val-attack-steps', '2', '--num-samples', '32',
        '-b', '64', '--workers', '0', '--hflip', '0', '--log-interval', '0']


def _train(tmp_path: Path, digits_dir: Path, *extra: str) -> Path:
    from timm_advnorm.commands.train import main
    out = tmp_path / 'runs'
    assert main(['--data-dir', str(digits_dir), '--output', str(out), '--experiment', 'run', *FAST, *extra]) == 0
    return out / 'run'


def _summary(run: Path):
    with open(run / 'summary.csv') as f:
        return list(csv.DictReader(f))


@pytest.fixture(autouse=True)
def _repo_on_path(monkeypatch):
    monkeypatch.syspath_prepend(str(REPO))


def test_mbn_run_writes_summary_checkpoint_and_args(tmp_path, digits_dir):
    run = _train(tmp_path, digits_dir, '--method', 'mbn', '--attack-bn-stats', 'batch', '--model-ema')
    rows = _summary(run)
    assert len(rows) == 1
    for column in ('eval_top1', 'eval_robust_top1', 'eval_adv_branch_top1', 'eval_adv_branch_robust_top1',
                   'eval_ema_top1', 'eval_ema_adv_branch_robust_top1',
                   'train_passes_per_image', 'train_loss_clean', 'train_loss_adv'):
        assert column in rows[0], column
    assert float(rows[0]['train_passes_per_image']) == 4.0  # PGD-2 + clean + adversarial pass
    args = yaml.safe_load((run / 'args.yaml').read_text())
    assert args['attack_bn_stats'] == 'batch' and args['method'] == 'mbn'
    checkpoint = torch.load(run / 'last.pth.tar', map_location='cpu', weights_only=False)
    assert any('.adv_bn.' in k for k in checkpoint['state_dict'])
    assert checkpoint['state_dict_ema'].keys() == checkpoint['state_dict'].keys()
    assert not list(run.glob('tmp*')), 'a temporary checkpoint was left behind'


def test_resume_continues_from_the_next_epoch(tmp_path, digits_dir, caplog):
    run = _train(tmp_path, digits_dir, '--method', 'madry')
    caplog.set_level(logging.INFO, logger='train_adv')
    _train(tmp_path, digits_dir, '--method', 'madry', '--epochs', '2', '--resume-with-changes',
           '--resume', str(run / 'last.pth.tar'))
    assert [row['epoch'] for row in _summary(run)] == ['0', '1']
    assert f'as {run / "last.pth.tar"} records it' in caplog.text, 'the rate came from the record, not --lr'


def _ema_distance(a: dict, b: dict) -> float:
    return sum((a[k].float() - b[k].float()).abs().sum().item() for k in a if a[k].is_floating_point())


def test_resume_stays_in_its_run_and_restores_history_ema_and_task_state(tmp_path, digits_dir):
    """Resuming an earlier epoch of the second of two runs (``--resume-from-earlier``): it continues in that run's
    folder (the first run and the second's args.yaml untouched), drops the summary rows it redoes, and starts from the
    checkpoint's EMA."""
    args = ('--method', 'fast_advprop', '--model-ema', '--epochs', '2')
    first = _train(tmp_path, digits_dir, *args)
    _train(tmp_path, digits_dir, *args)
    second = first.parent / f'{first.name}-1'  # a second run never writes into the first's folder
    before = {path: path.read_bytes() for path in first.iterdir()}
    args_yaml = (second / 'args.yaml').read_text()
    _train(tmp_path, digits_dir, *args, '--resume', str(second / 'checkpoint-0.pth.tar'), '--resume-from-earlier')
    assert {path: path.read_bytes() for path in first.iterdir()} == before
    assert (second / 'args.yaml').read_text() == args_yaml and (second / 'args-resumed-epoch1.yaml').exists()
    assert [row['epoch'] for row in _summary(second)] == ['0', '1']
    resumed = torch.load(second / 'last.pth.tar', map_location='cpu', weights_only=False)
    uninterrupted = torch.load(first / 'last.pth.tar', map_location='cpu', weights_only=False)
    fresh = torch.load(first / 'checkpoint-0.pth.tar', map_location='cpu', weights_only=False)['state_dict']
    # the EMA barely moves in an epoch of the digits: resumed from the checkpoint's it stays next to the uninterrupted
    assert _ema_distance(resumed['state_dict_ema'], uninterrupted['state_dict_ema']) < 0.1 * _ema_distance(
        uninterrupted['state_dict_ema'], fresh)
    assert resumed['task_state']['step_count'] == uninterrupted['task_state']['step_count'] > 0


def test_resume_refuses_another_method(tmp_path, digits_dir):
    run = _train(tmp_path, digits_dir, '--method', 'madry')
    from timm_advnorm.commands.train import main
    with pytest.raises(ValueError, match='--method'):
        main(['--data-dir', str(digits_dir), '--output', str(tmp_path), *FAST, '--method', 'mbn',
              '--resume', str(run / 'last.pth.tar')])


def test_yaml_config_and_fast_advprop_same_budget(tmp_path, digits_dir, caplog):
    caplog.set_level(logging.WARNING, logger='train_adv')
    config = tmp_path / 'fast.yaml'
    config.write_text(yaml.safe_dump({'method': 'fast_advprop', 'attack_eps': 1.0, 'attack_step': 1.0,
                                      'attack_steps': 1, 'mixup': 0.8, 'epochs': 3, 'same_budget': True}))
    run = _train(tmp_path, digits_dir, '-c', str(config), '--epochs', '2', '--batch-size', '32')
    rows = _summary(run)
    # the command line overrides the YAML (its 3 epochs would give 2 rows), then the budget scales epochs
    assert len(rows) == round(2 / 1.4) == 1
    assert float(rows[0]["train_passes_per_image"]) == pytest.approx(1.4)  # p_adv * K + 1 with K = 2
    assert 'shuffle BN cannot prevent label leaking' in caplog.text, 'one process must say shuffle BN cannot work'


def _run_script(*args: str, cwd: Path = REPO, **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, *args], cwd=cwd, capture_output=True, text=True, timeout=300, **kwargs)


BAD_INPUTS = (
    (['--model', 'no_such_model'], 'Unknown model'),
    (['--attack-steps', '0'], '--attack-steps'),
    (['--eval-metric', 'accuracy'], '--eval-metric'),
    (['--eval-metric', 'accuracy', '--plan'], '--eval-metric'),  # a plan is refused what the run would be
    (['--resume', 'missing.pth.tar'], 'not found'),
    (['--checkpoint-hist', '0'], '--checkpoint-hist'),
    (['--smoothing', '2'], '--smoothing'),
    (['--model-ema', '--model-ema-decay', '2'], '--model-ema-decay'),
    (['--img-size', '0'], '--img-size'),
    (['--mixup', '0.8', '-b', '31'], 'even'),
    (['--method', 'fast_advprop', '-b', '1'], 'no clean row'),
    (['--num-classes', '5'], '10 classes'),
    (['--val-split', 'valdation'], "no folder of split 'valdation'"),
    (['--method', 'fast_advprop', '--attack-norm', 'l2'], '--attack-norm l2'),
    (['--pretrained'], '--pretrained: test_mbn_resnet has no pretrained weights'),  # the cause, not a class count
    (['--model', 'resnet18', '--pretrained'], 'have 1000 classes but the run has 10 (--num-classes or the data set); '
                                              'add --reset-classifier'),
)


def _assert_refused_before_the_run_folder(bad, message, status, stderr, output: Path) -> None:
    assert status == 2, f'{bad}: {stderr[-3000:]}'
    lines = stderr.strip().splitlines()
    assert lines[-1].startswith('train_adv.py: error:') and message in lines[-1], f'{bad}: {lines[-1]}'
    assert 'Traceback' not in stderr, f'{bad}: {stderr[-3000:]}'
    assert not any(output.iterdir()), f'{bad}: bad input must fail before the run folder is made'


def test_the_script_refuses_bad_input_on_one_line_with_exit_status_2(tmp_path, digits_dir):
    bad, message = BAD_INPUTS[0]
    result = _run_script('train_adv.py', '--data-dir', str(digits_dir), '--output', str(tmp_path), *FAST, *bad)
    _assert_refused_before_the_run_folder(bad, message, result.returncode, result.stderr, tmp_path)


@pytest.mark.parametrize('bad, message', BAD_INPUTS, ids=[' '.join(bad) for bad, _ in BAD_INPUTS])
def test_bad_input_is_one_line_and_nonzero(bad, message, tmp_path, digits_dir, capsys):
    """The script's own route (`run`) in this process: one subprocess per case would cost its imports each time."""
    from timm_advnorm.commands.train import run
    argv = ['--data-dir', str(digits_dir), '--output', str(tmp_path), *FAST, *bad]
    try:
        status = run('train_adv.py', argv)
    except SystemExit as e:  # the parser's own usage errors
        status = e.code
    _assert_refused_before_the_run_folder(bad, message, status, capsys.readouterr().err, tmp_path)


def test_torchcompile_trains_through_every_route(tmp_path, digits_dir):
    # The compiled module sees the split route in training and the clean/adv routes in validation. aot_eager traces
    # them as inductor does (dynamo, then AOT autograd) without its C++ code generation, over a minute and a half of
    # a cold CI machine; inductor itself runs in the GPU kit's train-compiled stage and the CUDA tier.
    run = _train(tmp_path, digits_dir, '--method', 'mbn', '--torchcompile', 'aot_eager')
    assert float(_summary(run)[0]['eval_adv_branch_top1']) > 0
    checkpoint = torch.load(run / 'last.pth.tar', map_location='cpu', weights_only=False)
    assert not any('_orig_mod' in k for k in checkpoint['state_dict'])


def test_same_budget_scales_epochs_decay_points_and_running_statistics_epochs():
    """Xie & Yuille's running statistics in the last 10 of 110 epochs stay a share of the run, not all of it; the step
    schedule's decay period shrinks as the multistep schedule's milestones do."""
    import argparse

    from timm_advnorm.train.optimization import EpochSchedule, epoch_schedule
    args = argparse.Namespace(epochs=110, decay_milestones=[35, 70, 95], decay_epochs=30.0, running_stats_epochs=10,
                              same_budget=True)
    assert epoch_schedule(args, 31.0) == EpochSchedule(4, (1, 2, 3), 30.0 / 31.0, 1)
    assert epoch_schedule(args, 2.0) == EpochSchedule(55, (18, 35, 48), 15.0, 5)
    no_running = argparse.Namespace(**{**vars(args), 'running_stats_epochs': 0})
    assert epoch_schedule(no_running, 31.0).running_stats_epochs == 0
    assert epoch_schedule(argparse.Namespace(**{**vars(args), 'same_budget': False}), 31.0) == EpochSchedule(
        110, (35, 70, 95), 30.0, 10)


def test_evaluation_uses_the_preprocessing_the_checkpoint_was_trained_with(tmp_path, digits_dir):
    """test_resnet's registry default is 160 px with mean = std = 0.5: a run at 32 px with ImageNet statistics must
    be evaluated at 32 px with ImageNet statistics unless the user overrides a value, and the results say which."""
    from timm_advnorm.commands.validate import run as run_validate
    imagenet = (['--mean', '0.485', '0.456', '0.406', '--std', '0.229', '0.224', '0.225'])
    run = _train(tmp_path, digits_dir, '--model', 'test_resnet', '--method', 'vanilla', '--img-size', '32', *imagenet)
    common = ['--checkpoint', str(run / 'last.pth.tar'), '--dataset', 'digits', '--data-dir', str(digits_dir),
              '--attacks', 'fgsm', '--sanity-samples', '0', '--workers', '0', '--no-progress']
    assert run_validate('validate_adv.py', common + ['--results-file', str(tmp_path / 'as_trained.json')]) == 0
    results = json.loads((tmp_path / 'as_trained.json').read_text())
    assert results['data_config']['input_size'] == [3, 32, 32]
    assert results['data_config']['mean'] == pytest.approx([0.485, 0.456, 0.406])
    assert results['preprocessing'] == {'source': 'the checkpoint', 'overridden': [], 'unlike_checkpoint': {},
                                        'from_checkpoint': {'input_size': [3, 32, 32], 'val_split': 'validation'}}
    # the whole validation split as training validated it: the same clean accuracy, to the image
    assert results['variants'][0]['clean'] == pytest.approx(float(_summary(run)[0]['eval_top1']), abs=1e-3)

    assert run_validate('validate_adv.py', common + ['--img-size', '48', '--results-file',
                                                     str(tmp_path / 'overridden.json')]) == 0
    results = json.loads((tmp_path / 'overridden.json').read_text())
    assert results['data_config']['input_size'] == [3, 48, 48]
    assert results['data_config']['mean'] == pytest.approx([0.485, 0.456, 0.406])
    preprocessing = results['preprocessing']
    assert preprocessing['source'] == 'the checkpoint' and preprocessing['overridden'] == ['--img-size']
    assert preprocessing['unlike_checkpoint'] == {'--img-size': [[3, 32, 32], [3, 48, 48]]}
    assert 'input_size' not in preprocessing['from_checkpoint']


def test_vanilla_on_a_mixture_bn_model_neither_logs_nor_ranks_by_the_untrained_branch(tmp_path, digits_dir):
    """The adversarial BN of a model trained on clean images only is never trained: its chance-level accuracy is
    not logged, and checkpoints are ranked by the method's own metric (clean top-1 for vanilla)."""
    run = _train(tmp_path, digits_dir, '-c', 'digits_demo_mbn', '--method', 'vanilla', '--epochs', '2')
    rows = _summary(run)
    assert not any('adv_branch' in column for column in rows[0])
    assert [c for c in rows[0] if c.startswith('train_loss')] == ['train_loss']  # loss_clean would repeat it
    assert 'train_lr' not in rows[0] and 'lr' in rows[0]
    best = torch.load(run / 'model_best.pth.tar', map_location='cpu', weights_only=False)
    assert best['args']['eval_metric'] == 'top1'
    assert best['metric'] == max(float(row['eval_top1']) for row in rows)
    assert yaml.safe_load((run / 'args.yaml').read_text())['eval_metric'] == 'top1'
