"""timm's training flags on train_adv.py (issue #18), end to end on the digits: the learning rate from the global
batch, gradient accumulation for the mixture-BN methods, augmentation in the training loader, batch-norm settings on
both mixture-BN branches, model and optimizer options, and the schedule's epochs with a cool-down."""
import csv
import logging
import math
from pathlib import Path
from typing import Any, Dict

import pytest
import torch
import torch.nn as nn
import yaml
from timm.data.auto_augment import RandAugment
from timm.data.random_erasing import RandomErasing
from timm.data.transforms import RandomResizedCropAndInterpolation
from torchvision import transforms

from timm_advnorm.hub import create_model_from_name_or_checkpoint
from timm_advnorm.commands import train as script
from timm_advnorm.commands.train import parse_args, train_options
from timm_advnorm.train import build
from timm_advnorm.train.optimization import create_run_scheduler, epoch_schedule
from tiny_runs import tiny_digits, tiny_train_argv

FAST = ['--epochs', '1', '--attack-steps', '1', '--attack-step', '4', '--val-attack-steps', '1', '--num-samples', '16',
        '--workers', '0', '--hflip', '0', '--log-interval', '0']


def _train(tmp_path: Path, digits_dir: Path, *extra: str) -> Path:
    out = tmp_path / 'runs'
    assert script.main(['--data-dir', str(digits_dir), '--output', str(out), '--experiment', 'run', *FAST,
                        *extra]) == 0
    return out / 'run'


def _summary(run: Path):
    with open(run / 'summary.csv') as f:
        return list(csv.DictReader(f))


@pytest.fixture
def built(monkeypatch) -> Dict[str, Any]:
    """What the script builds, recorded: the model, its initial weights and the optimizer (``model``,
    ``initial_state``, ``optimizer``) and the training loader (``train_loader``, the first loader made)."""
    record: Dict[str, Any] = {}
    create_optimizer, create_loader = build.create_run_optimizer, build.create_loader

    def recording_optimizer(model, options):
        record['model'], record['optimizer'] = model, create_optimizer(model, options)
        record['initial_state'] = {k: v.clone() for k, v in model.state_dict().items()}  # before --plan's step
        return record['optimizer']

    def recording_loader(*args, **kwargs):
        loader = create_loader(*args, **kwargs)
        record.setdefault('train_loader', loader)
        return loader

    monkeypatch.setattr(build, 'create_run_optimizer', recording_optimizer)
    monkeypatch.setattr(build, 'create_loader', recording_loader)
    return record


def _plan(tmp_path: Path, digits_dir: Path, *extra: str) -> None:
    """Build the run and measure one step (``--plan``): everything is made, nothing trained."""
    assert script.main(['--data-dir', str(digits_dir), '--output', str(tmp_path / 'runs'), *FAST, '--plan',
                        *extra]) == 0


def test_learning_rate_scales_base_rate_by_batch_and_accumulation(tmp_path, digits_dir, caplog):
    """The run also keeps its pooling (``--gp``) for evaluation: its checkpoint reloads with it."""
    caplog.set_level(logging.INFO, logger='train_adv')
    run = _train(tmp_path, digits_dir, '--method', 'madry', '-b', '32', '--grad-accum-steps', '2', '--lr-base', '0.4',
                 '--lr-base-size', '128', '--sched', 'step', '--dist-bn', 'broadcast', '--gp', 'max')
    expected = 0.4 * (32 * 1 * 2) / 128  # batch x processes x accumulation steps / base size
    assert yaml.safe_load((run / 'args.yaml').read_text())['lr'] == pytest.approx(expected)
    assert f'Learning rate ({expected:g}) calculated from base learning rate (0.4 per 128 images)' in caplog.text
    assert float(_summary(run)[0]['lr']) == pytest.approx(expected)  # the rate the optimizer trained with
    checkpoint = torch.load(run / 'last.pth.tar', map_location='cpu', weights_only=False)
    assert checkpoint['optimizer']['param_groups'][0]['initial_lr'] == pytest.approx(expected)
    assert create_model_from_name_or_checkpoint(checkpoint=run / 'last.pth.tar').global_pool.pool_type == 'max'


def test_explicit_lr_is_used_as_given(tmp_path, digits_dir, built):
    _plan(tmp_path, digits_dir, '--method', 'madry', '--lr', '0.03', '--grad-accum-steps', '4')
    assert {group['lr'] for group in built['optimizer'].param_groups} == {0.03}


@pytest.mark.parametrize('method', ['mbn', 'fast_advprop'])
def test_gradient_accumulation_makes_one_update_per_group_of_batches(tmp_path, digits_dir, method):
    """Adam counts its updates: half the batches (rounded up) with two accumulation steps, and the run is sound."""
    run = _train(tmp_path, digits_dir, '--method', method, '-b', '32', '--grad-accum-steps', '2', '--opt', 'adamw',
                 '--lr', '0.001')
    batches = yaml.safe_load((run / 'budget.yaml').read_text())['steps_per_epoch']
    checkpoint = torch.load(run / 'last.pth.tar', map_location='cpu', weights_only=False)
    steps = {float(state['step']) for state in checkpoint['optimizer']['state'].values()}
    assert steps == {math.ceil(batches / 2)}
    row = _summary(run)[0]
    assert math.isfinite(float(row['train_loss'])) and float(row['eval_top1']) > 0


def _train_transforms(loader) -> list:
    return list(loader.dataset.transform.transforms)


def test_augmentation_flags_reach_the_training_loader(tmp_path, digits_dir, built):
    _plan(tmp_path, digits_dir, '--method', 'madry', '--aa', 'rand-m9-mstd0.5', '--reprob', '0.25', '--remode',
          'const', '--vflip', '0.3', '--scale', '0.5', '1.0', '--ratio', '0.9', '1.1', '--train-interpolation',
          'bicubic')
    steps = _train_transforms(built['train_loader'])
    crop = next(t for t in steps if isinstance(t, RandomResizedCropAndInterpolation))
    assert crop.scale == (0.5, 1.0) and crop.ratio == (0.9, 1.1)
    assert crop.interpolation == transforms.InterpolationMode.BICUBIC
    assert any(isinstance(t, transforms.RandomVerticalFlip) and t.p == 0.3 for t in steps)
    assert any(isinstance(t, RandAugment) for t in steps)
    erasing = next(t for t in steps if isinstance(t, RandomErasing))
    assert erasing.probability == 0.25 and erasing.mode == 'const'


@pytest.mark.parametrize('strength', [0.0, 0.4])
def test_color_jitter_strength_reaches_the_loader(tmp_path, digits_dir, built, strength):
    _plan(tmp_path, digits_dir, '--method', 'madry', '--color-jitter', str(strength))
    jitter = next(t for t in _train_transforms(built['train_loader']) if isinstance(t, transforms.ColorJitter))
    factors = (jitter.brightness, jitter.contrast, jitter.saturation)
    # torchvision keeps no range for a factor of 0: the jitter changes nothing
    assert factors == ((None,) * 3 if strength == 0 else ((1 - strength, 1 + strength),) * 3)


def _batch_norms(model: nn.Module):
    return [m for m in model.modules() if isinstance(m, nn.modules.batchnorm._BatchNorm)]


def test_bn_options_reach_both_mixture_bn_branches_and_model_kwargs_the_model(tmp_path, digits_dir, built):
    _plan(tmp_path, digits_dir, '--method', 'mbn', '--bn-momentum', '0.01', '--bn-eps', '0.001', '--model-kwargs',
          'zero_init_last=False', '--head-init-bias', '0.5')
    model = built['model']
    norms = _batch_norms(model)
    adversarial = [m for name, m in model.named_modules() if name.endswith('adv_bn')]
    assert adversarial and all(m in norms for m in adversarial)
    assert {(m.momentum, m.eps) for m in norms} == {(0.01, 0.001)}
    initial = built['initial_state']
    last_norms = [f'layer1.{i}.bn2.weight' for i in range(len(model.layer1))]  # timm zero-initializes them
    assert last_norms and all(initial[name].abs().sum() > 0 for name in last_norms)
    assert torch.all(initial['fc.bias'] == 0.5)


@pytest.mark.parametrize('all_params', [False, True])
def test_weight_decay_skips_one_dimensional_parameters_unless_asked(tmp_path, digits_dir, built, all_params):
    _plan(tmp_path, digits_dir, '--method', 'madry', '--weight-decay', '0.001', '--opt', 'momentum',
          *(['--wd-all-params'] if all_params else []))
    decays = {group['weight_decay'] for group in built['optimizer'].param_groups}
    assert decays == ({0.001} if all_params else {0.0, 0.001})
    assert {group['nesterov'] for group in built['optimizer'].param_groups} == {False}  # momentum: plain SGD


def test_schedule_runs_its_epochs_with_cooldown_and_same_budget():
    args, _ = parse_args(['--sched', 'cosine', '--epochs', '12', '--cooldown-epochs', '2', '--same-budget',
                          '--lr', '0.1'])
    options = train_options(args).schedule
    schedule = epoch_schedule(options, passes_per_image=3.0)
    optimizer = torch.optim.SGD([nn.Parameter(torch.zeros(1))], lr=args.lr)
    scheduler, total = create_run_scheduler(optimizer, options, schedule, updates_per_epoch=5)
    assert (schedule.epochs, total) == (4, 6)  # 12 epochs / 3 passes, then 2 cool-down epochs
    scheduler.step(4)
    assert optimizer.param_groups[0]['lr'] == pytest.approx(args.min_lr)


def test_same_budget_step_schedule_decays_at_the_scaled_period():
    """``--sched step --decay-epochs 6`` over 12 epochs at 3 passes per image: 4 epochs, a decay every 2."""
    args, _ = parse_args(['--sched', 'step', '--epochs', '12', '--decay-epochs', '6', '--decay-rate', '0.1',
                          '--same-budget', '--lr', '0.1', '--warmup-epochs', '0'])
    optimizer = torch.optim.SGD([nn.Parameter(torch.zeros(1))], lr=args.lr)
    options = train_options(args).schedule
    scheduler, total = create_run_scheduler(optimizer, options, epoch_schedule(options, passes_per_image=3.0),
                                            updates_per_epoch=5)
    lrs = []
    for epoch in range(total):
        scheduler.step(epoch)
        lrs.append(optimizer.param_groups[0]['lr'])
    assert lrs == pytest.approx([0.1, 0.1, 0.01, 0.01])


def test_bad_training_flags_are_usage_errors(tmp_path, digits_dir):
    with pytest.raises(SystemExit) as exit_info:
        parse_args(['--dist-bn', 'average'])
    assert exit_info.value.code == 2
    with pytest.raises(ValueError, match='--aug-repeats needs distributed training'):
        _plan(tmp_path, digits_dir, '--aug-repeats', '3')
    with pytest.raises(ValueError, match='--ratio is a range'):
        _plan(tmp_path, digits_dir, '--ratio', '1.2', '0.8')


def test_a_run_records_the_iterations_its_attack_runs(tmp_path, digits_dir, caplog):
    """FGSM is one fixed step whatever ``--attack-steps`` says: the saved arguments (and a card made from them) say
    what ran, and the log says so."""
    caplog.set_level(logging.INFO, logger='train_adv')
    run = _train(tmp_path, digits_dir, '--method', 'madry', '--attack', 'fgsm', '--attack-steps', '7')
    saved = yaml.safe_load((run / 'args.yaml').read_text())
    assert (saved['attack_steps'], saved['attack_step_rule']) == (1, 'fixed')
    assert '--attack fgsm runs with --attack-steps 1, --attack-step-rule fixed' in caplog.text
    checkpoint = torch.load(run / 'last.pth.tar', map_location='cpu', weights_only=True)  # a plain dict of values
    assert checkpoint['args']['attack_steps'] == 1


def test_no_schedule_trains_every_epoch_at_a_constant_lr(tmp_path, digits_dir):
    """``--sched none`` (timm: no scheduler) used to stop after the first epoch, stepping a schedule that is not
    there; the run trains on at the optimizer's lr."""
    data = tiny_digits(digits_dir, tmp_path / 'data')
    argv = tiny_train_argv(data, tmp_path / 'runs', '--sched', 'none', '--epochs', '2', '--lr', '0.05',
                           '--warmup-epochs', '0')
    assert script.main(argv) == 0
    assert [float(row['lr']) for row in _summary(tmp_path / 'runs' / 'run')] == [0.05, 0.05]
