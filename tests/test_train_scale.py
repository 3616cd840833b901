"""The scale path of the training command: `--plan`, the budget a run records, float16 with its loss scaler, and
Weights & Biases tracking (offline)."""
import math
from pathlib import Path
from typing import List

import pytest
import timm
import torch
import torch.nn as nn
import yaml

import timm_advnorm  # noqa: F401  (registers the models and methods)
from timm_advnorm.attacks import InputSpace, create_attack
from timm_advnorm.attacks import core
from timm_advnorm.attacks.core import cross_entropy_per_sample, input_gradient
from timm_advnorm.task import create_task
from timm_advnorm.train import tracking
from timm_advnorm.train.loop import LossScaler, train_one_epoch
from timm_advnorm.commands.train import main, run
from tiny_runs import tiny_digits

pytestmark = pytest.mark.usefixtures('one_thread')

SPACE = InputSpace()
FAST = ['--epochs', '1', '--attack-steps', '2', '--attack-step', '4', '--val-attack-steps', '1', '--num-samples',
        '16', '-b', '64', '--workers', '0', '--hflip', '0', '--log-interval', '0', '--no-progress']


def _train(digits_dir: Path, out: Path, *extra: str) -> int:
    return main(['--data-dir', str(digits_dir), '--output', str(out), '--experiment', 'run', *FAST, *extra])


def test_plan_prints_the_budget_and_trains_nothing(tmp_path, digits_dir, capsys):
    out = tmp_path / 'runs'
    assert _train(digits_dir, out, '--plan', '--world-size', '4') == 0
    printed = capsys.readouterr().out
    assert 'Budget of mbn on test_mbn_resnet (4 process(es) on cpu' in printed
    for line in ('passes per image', 'FLOPs per pass', 'peak memory', 'step time', 'epoch time', 'validation',
                 'training time', 'validation time', 'total time'):
        assert f'\n  {line} ' in printed
    assert printed.count('(projection') == 6  # the step too: projected from its measured passes
    assert not out.exists()


def test_a_run_records_its_budget_and_each_epochs_time_and_memory(tmp_path, digits_dir):
    out = tmp_path / 'runs'
    assert _train(digits_dir, out, '--epochs', '2') == 0
    budget = yaml.safe_load((out / 'run' / 'budget.yaml').read_text())
    assert budget['method'] == 'mbn' and budget['passes_per_image'] == 4.0 and budget['epochs'] == 2
    assert budget['measured_epochs'] == 2 and budget['measured_epoch_seconds'] > 0
    assert budget['passes_total'] == budget['passes_per_image'] * budget['images_per_epoch'] * 2
    header, *rows = (out / 'run' / 'summary.csv').read_text().splitlines()
    assert 'train_seconds' in header and 'train_peak_memory_mb' in header and len(rows) == 2
    seconds = [float(row.split(',')[header.split(',').index('train_seconds')]) for row in rows]
    assert budget['measured_epoch_seconds'] == pytest.approx(sum(seconds) / 2)


def test_float16_trains_with_a_loss_scaler_saved_and_resumed_and_logs_to_wandb_offline(
        tmp_path, digits_dir, monkeypatch):
    """fp16 + --log-wandb (offline): the checkpoint keeps the scaler; the resumed run logs its epoch to the same
    wandb files with the summary's columns, and its budget counts both epochs."""
    monkeypatch.setenv('WANDB_MODE', 'offline')
    monkeypatch.setenv('WANDB_SILENT', 'true')
    logged: List[dict] = []
    real_log = tracking.WandbRun.log_epoch

    def spy(self, epoch, train_metrics, eval_metrics, lr):
        logged.append(dict(epoch=epoch, **{f'train_{k}': v for k, v in train_metrics.items()},
                           **{f'eval_{k}': v for k, v in eval_metrics.items()}, lr=lr))
        real_log(self, epoch, train_metrics, eval_metrics, lr)

    monkeypatch.setattr(tracking.WandbRun, 'log_epoch', spy)
    out, data = tmp_path / 'runs', tiny_digits(digits_dir, tmp_path / 'data')  # fp16 on the CPU is slow: few images
    fp16 = ('--method', 'madry', '--amp', '--amp-dtype', 'float16', '--epochs', '2', '--log-wandb', '--dataset', '',
            '--num-classes', '10', '--img-size', '32', '-b', '16')
    assert _train(data, out, *fp16) == 0
    run_dir = out / 'run'
    checkpoint = torch.load(run_dir / 'last.pth.tar', weights_only=False)
    assert checkpoint['amp_scaler']['scale'] > 0
    args = yaml.safe_load((run_dir / 'args.yaml').read_text())
    assert args['amp_dtype'] == 'float16' and args['log_wandb'] is True
    header = (run_dir / 'summary.csv').read_text().splitlines()[0].split(',')
    assert set(logged[0]) == set(header)
    records = list(run_dir.glob('wandb/offline-run-*/run-*.wandb'))
    assert len(records) == 1 and b'train_loss' in records[0].read_bytes()
    assert b'budget/passes_per_image' in records[0].read_bytes()

    # resumed after the first epoch (its ranked checkpoint, earlier than the run's last): the second epoch again
    assert main(['--resume', str(run_dir / 'checkpoint-0.pth.tar'), '--resume-from-earlier', '--data-dir',
                 str(data), *FAST, *fp16]) == 0
    assert [row['epoch'] for row in logged] == [0, 1, 1]
    assert yaml.safe_load((run_dir / 'budget.yaml').read_text())['measured_epochs'] == 2


def test_float16_refuses_a_method_that_back_propagates_inside_its_step(tmp_path, digits_dir, capsys):
    out = tmp_path / 'runs'
    argv = ['--data-dir', str(digits_dir), '--output', str(out), *FAST, '--method', 'fast_advprop', '--amp',
            '--amp-dtype', 'float16']
    assert run(argv=argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and 'fast_advprop back-propagates inside its step' in err[0] and 'bfloat16' in err[0]
    assert not out.exists()


def test_log_wandb_without_the_package_is_a_one_line_error(tmp_path, digits_dir, capsys, monkeypatch):
    def missing(name):
        raise ImportError(name)

    monkeypatch.setattr(tracking.importlib, 'import_module', missing)
    out = tmp_path / 'runs'
    assert run(argv=['--data-dir', str(digits_dir), '--output', str(out), *FAST, '--log-wandb']) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and 'pip install "timm-advnorm[wandb]"' in err[0]
    assert not out.exists()


class _Quiet(nn.Module):
    """A small network whose input gradients sit below float16's smallest normal number (about 6e-5)."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.features = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.ReLU(), nn.Conv2d(8, 8, 3, padding=1),
                                      nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten())
        self.head = nn.Linear(8, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.features(x)) * 1e-4


def test_float16_attack_gradients_are_loss_scaled_and_agree_with_float32(monkeypatch):
    model = _Quiet().eval()
    x = torch.rand(4, 3, 16, 16)
    y = torch.arange(4)
    reference, _, _ = input_gradient(model, x, y, cross_entropy_per_sample)
    scaled, _, _ = input_gradient(model, x, y, cross_entropy_per_sample, torch.float16)
    monkeypatch.setattr(core, 'FP16_LOSS_SCALE', 1.0)
    unscaled, _, _ = input_gradient(model, x, y, cross_entropy_per_sample, torch.float16)
    agree = (scaled.sign() == reference.sign()).float().mean().item()
    assert (unscaled == 0).float().mean().item() > 0.5  # without scaling, most of the gradient flushes to zero
    assert agree > 0.95
    torch.testing.assert_close(scaled, reference, rtol=0.05, atol=reference.abs().max().item() * 0.02)


def test_an_overflowing_float16_step_is_skipped_and_the_scale_lowered():
    """A scale that overflows the gradients: no optimizer step, no divergence error, a lower scale."""
    torch.manual_seed(0)
    model = timm.create_model('test_resnet', num_classes=10)
    task = create_task('madry', model, attack=create_attack('pgd', space=SPACE, eps=8.0, step=4.0, steps=1, seed=0))
    g = torch.Generator().manual_seed(0)
    loader = [(SPACE.from_pixels(torch.rand(4, 3, 32, 32, generator=g)), torch.arange(4))]
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    before = [p.detach().clone() for p in model.parameters()]
    scaler = LossScaler('cpu', init_scale=2.0 ** 127)  # the scaled loss overflows float32
    metrics = train_one_epoch(0, task, loader, optimizer, torch.device('cpu'), amp_dtype=torch.float16,
                              log_interval=0, loss_scaler=scaler)
    assert all(torch.equal(a, b) for a, b in zip(before, model.parameters()))
    assert scaler.get_scale() == 2.0 ** 126 and metrics['images_per_sec'] == 0 and math.isfinite(metrics['loss'])
