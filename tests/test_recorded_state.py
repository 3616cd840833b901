"""Recorded state wins: ``train_adv.py --resume`` keeps the recipe its checkpoint records (a change needs
``--resume-with-changes``, which records it), and ``validate_adv.py --checkpoint`` and publishing take the data,
preprocessing and inference branch the checkpoint records unless told otherwise, saying so.

One tiny run of a recipe unlike the defaults (ε 8, lr 0.02, 16-pixel images, 2 epochs), stopped after its first
epoch, serves every test; each test that writes works on its own copy of the run folder.
"""
import argparse
import json
import logging
import shutil
from pathlib import Path
from typing import List, Tuple

import pytest
import torch
import yaml

from snapshots import folder_snapshot
from tiny_runs import tiny_digits, tiny_train_argv
from timm_advnorm.commands import validate as validate_adv
from timm_advnorm.commands.publish import run as run_publish
from timm_advnorm.commands import train as train_command
from timm_advnorm.commands.train import main, run
from timm_advnorm.train import runner

RECIPE = ('--epochs', '2', '--attack-eps', '8', '--lr', '0.02', '--img-size', '16')


@pytest.fixture(scope='module')
def tiny(digits_dir, tmp_path_factory) -> Path:
    return tiny_digits(digits_dir, tmp_path_factory.mktemp('tiny'))


@pytest.fixture(scope='module')
def stopped_run(tiny, tmp_path_factory) -> Path:
    """The folder of a tiny run of `RECIPE` stopped when its second epoch began (``last.pth.tar`` at epoch 0)."""
    out = tmp_path_factory.mktemp('runs')
    train_one_epoch = runner.train_one_epoch

    def stop_at_epoch_1(epoch, *args, **kwargs):
        if epoch == 1:
            raise KeyboardInterrupt
        return train_one_epoch(epoch, *args, **kwargs)

    with pytest.MonkeyPatch.context() as patches:
        patches.setattr(runner, 'train_one_epoch', stop_at_epoch_1)
        with pytest.raises(KeyboardInterrupt):
            main(tiny_train_argv(tiny, out, *RECIPE))
    return out / 'run'


@pytest.fixture
def folder(stopped_run, tmp_path) -> Path:
    """A copy of the stopped run's folder, for a test that resumes it."""
    return Path(shutil.copytree(stopped_run, tmp_path / 'run'))


def _built(monkeypatch, argv: List[str]):
    """Build the run `argv` describes as the command would, and stop before it trains: its `TrainingRun`."""
    built = []
    monkeypatch.setattr(train_command, 'prepare_training', lambda training: None)
    monkeypatch.setattr(train_command, 'run_training', lambda training, start: built.append(training) or 0)
    assert main(argv) == 0
    return built[0]


def _run(capsys, argv: List[str]) -> Tuple[int, List[str]]:
    """Run the command in-process as the console does: its status and its error lines."""
    capsys.readouterr()
    status = run('train_adv.py', argv)
    return status, [line for line in capsys.readouterr().err.splitlines() if line.startswith('train_adv.py: error:')]


# resume

def test_a_resume_without_the_config_keeps_the_recorded_recipe(tiny, folder, monkeypatch, caplog):
    """``--resume CKPT`` alone used to train on the command-line defaults (targeted PGD-30, ε 16, 10 epochs, another
    lr); now the recorded recipe is the defaults, and the original command line is no change either."""
    caplog.set_level(logging.INFO, logger='train_adv')
    resume = ['--resume', str(folder / 'last.pth.tar')]
    for argv in (resume + ['--checkpoint-hist', '1'], tiny_train_argv(tiny, folder.parent, *RECIPE, *resume)):
        training = _built(monkeypatch, argv)
        args = training.recorded
        assert [args[name] for name in ('attack_eps', 'attack_steps', 'attack_targeted', 'lr')] == [8.0, 1, False,
                                                                                                  0.02], argv
        assert [args[name] for name in ('dataset', 'data_dir', 'img_size', 'method')] == ['', str(tiny), 16,
                                                                                         'mbn'], argv
        assert (training.start_epoch, training.epochs) == (1, 2), argv
        assert (training.task.attack.eps, training.task.attack.steps) == (8.0, 1), argv  # on the 0-255 scale
        assert set(training.scheduler.base_values) == {0.02}, argv  # each parameter group
        assert training.step_shape[-1] == 16, argv
        assert yaml.safe_load(training.args_text)['attack_eps'] == 8.0
    assert 'changed here, free to change: --checkpoint-hist: 3 -> 1' in caplog.text  # free options may change


def test_a_change_of_the_recorded_recipe_is_refused_naming_each(folder, capsys):
    checkpoint = str(folder / 'last.pth.tar')
    before = folder_snapshot(folder)
    status, errors = _run(capsys, ['--resume', checkpoint, '--epochs', '3', '--attack-steps', '2', '--workers', '0'])
    assert status == 2 and len(errors) == 1, errors
    assert ('--epochs: 2 -> 3, --attack-steps: 1 -> 2;' in errors[0] and '--workers' not in errors[0]
            and '--resume-with-changes' in errors[0]), errors[0]
    # what trains another model never changes
    status, errors = _run(capsys, ['--resume', checkpoint, '--method', 'madry', '--resume-with-changes'])
    assert status == 2 and len(errors) == 1 and "cannot change --method: 'mbn' -> 'madry'" in errors[0], errors
    assert folder_snapshot(folder) == before


def test_resume_with_changes_trains_on_with_them_and_records_them(folder, caplog):
    caplog.set_level(logging.WARNING, logger='train_adv')
    assert main(['--resume', str(folder / 'last.pth.tar'), '--resume-with-changes', '--attack-eps', '4']) == 0
    assert "--resume-with-changes: the resumed run changes its recorded recipe: --attack-eps: 8.0 -> 4.0" in caplog.text
    resumed = (folder / 'args-resumed-epoch1.yaml').read_text()
    assert resumed.startswith(f'# Resumed from {folder / "last.pth.tar"} with --resume-with-changes (recorded -> '
                              f'given):\n#   attack_eps: 8.0 -> 4.0\n'), resumed
    assert yaml.safe_load(resumed)['attack_eps'] == 4.0 and yaml.safe_load(resumed)['lr'] == 0.02
    last = torch.load(folder / 'last.pth.tar', map_location='cpu', weights_only=True)
    assert last['epoch'] == 1 and last['args']['attack_eps'] == 4.0  # the next resume keeps the changed recipe


def test_a_checkpoint_recording_a_namespace_resumes_with_its_recipe(tiny, folder, monkeypatch):
    """Checkpoints record their arguments as a dict of plain values; older ones, as timm does, as an
    `argparse.Namespace`, which is still read."""
    checkpoint = torch.load(folder / 'last.pth.tar', map_location='cpu', weights_only=True)
    checkpoint['args'] = argparse.Namespace(**checkpoint['args'])
    torch.save(checkpoint, folder / 'last.pth.tar')
    training = _built(monkeypatch, ['--resume', str(folder / 'last.pth.tar')])
    assert (training.recorded['attack_eps'], training.recorded['lr'], training.start_epoch) == (8.0, 0.02, 1)


def test_a_checkpoint_recording_no_arguments_resumes_on_the_command_line_with_a_warning(tiny, folder, monkeypatch,
                                                                                        caplog):
    checkpoint = torch.load(folder / 'last.pth.tar', map_location='cpu', weights_only=False)
    del checkpoint['args']
    torch.save(checkpoint, folder / 'last.pth.tar')
    caplog.set_level(logging.WARNING, logger='train_adv')
    training = _built(monkeypatch, tiny_train_argv(tiny, folder.parent, '--epochs', '2', '--resume',
                                                   str(folder / 'last.pth.tar')))
    assert training.recorded['attack_eps'] == 16.0  # the recipe's and the command line's, nothing recorded
    assert 'records no timm-advnorm-train arguments: this command line and its defaults set the whole recipe' in caplog.text


# evaluation

VALIDATE = ('--attacks', 'fgsm', '--gammas', '1', '--num-samples', '8', '-b', '8', '-j', '0', '--sanity-samples', '0',
            '--no-progress')


def _validate(*argv) -> int:
    return validate_adv.run('validate_adv.py', [str(a) for a in argv])


def test_evaluation_takes_the_data_preprocessing_and_branch_the_checkpoint_records(tiny, stopped_run, tmp_path,
                                                                                    caplog):
    """``--checkpoint CKPT`` alone used to evaluate an image folder it had to be given (``--dataset`` defaults to
    one); now the run's data (its image folder here), 16-pixel preprocessing and adversarial branch are used, said
    in one line and recorded in the results."""
    caplog.set_level(logging.INFO, logger='validate_adv')
    results = tmp_path / 'results.json'
    assert _validate('--checkpoint', stopped_run / 'last.pth.tar', *VALIDATE, '--results-file', results) == 0
    assert (f'dataset folder, data dir {tiny}, split validation, img size 16, branch adv: from the checkpoint\'s '
            f'record.') in caplog.text
    written = json.loads(results.read_text())
    assert written['dataset'] == 'folder' and written['inference_branch'] == 'adv'
    assert written['preprocessing']['from_checkpoint'] == dict(dataset='', data_dir=str(tiny), val_split='validation',
                                                               input_size=[3, 16, 16], inference_branch='adv')
    assert written['preprocessing']['unlike_checkpoint'] == {}


def test_evaluation_options_given_against_the_record_win_and_are_named(digits_dir, stopped_run, tmp_path, caplog):
    caplog.set_level(logging.INFO, logger='validate_adv')
    results = tmp_path / 'results.json'
    assert _validate('--checkpoint', stopped_run / 'last.pth.tar', '--dataset', 'digits', '--data-dir', digits_dir,
                     '--img-size', '32', *VALIDATE, '--results-file', results) == 0
    assert ('Given here unlike the checkpoint\'s record: --dataset digits (records folder), --img-size 3x32x32 '
            '(records 3x16x16).') in caplog.text
    written = json.loads(results.read_text())
    assert written['dataset'] == 'digits' and written['data_config']['input_size'] == [3, 32, 32]
    assert written['preprocessing']['unlike_checkpoint'] == {'--dataset': ['', 'digits'],
                                                             '--img-size': [[3, 16, 16], [3, 32, 32]]}


# publishing

def test_publishing_takes_the_recorded_inference_branch_and_a_flag_against_it_is_named(stopped_run, tmp_path,
                                                                                        caplog):
    """Publishing used to demand ``--inference-branch`` of a checkpoint that records one."""
    caplog.set_level(logging.INFO, logger='timm_advnorm.hub.publish')
    caplog.set_level(logging.INFO, logger='timm_advnorm.layers.branch_notice')
    out = tmp_path / 'export'
    assert run_publish(argv=[str(stopped_run / 'last.pth.tar'), '--local-dir', str(out)]) == 0
    assert json.loads((out / 'config.json').read_text())['model_args']['inference_branch'] == 'adv'
    assert "Inference branch adv, dataset folder: from the checkpoint's record." in caplog.text
    assert 'runs on its clean branch' not in caplog.text  # the model is routed before it loads: no default to tell of
    assert run_publish(argv=[str(stopped_run / 'last.pth.tar'), '--inference-branch', 'clean', '--local-dir',
                             str(tmp_path / 'clean')]) == 0
    assert json.loads((tmp_path / 'clean' / 'config.json').read_text())['model_args']['inference_branch'] == 'clean'
    assert 'Inference branch clean: given here (--inference-branch); the checkpoint records adv.' in caplog.text
