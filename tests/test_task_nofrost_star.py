"""NoFrost*: the views of each loader image (clean, adversarial, DeepAugment, TDA) in one forward, their losses
weighted as the released code (or Eq. 2), its options, its cost model, and a digits epoch through the command.

DeepAugment runs an untrained network (``allow_random_weights``): the authors' weights are not downloaded.
"""
import csv
from pathlib import Path

import pytest
import timm
import torch
import torch.nn as nn
import yaml
from timm.data import Mixup

import timm_advnorm  # noqa: F401  (registers the methods)
from timm_advnorm.attacks import InputSpace, create_attack
from timm_advnorm.augment import DeepAugment
from timm_advnorm.task import NofrostTask, create_task
from timm_advnorm.task.nofrost_star import NofrostStarTask, deepaugment_passes, normalized_view_weights
from timm_advnorm.commands import train as script
from timm_advnorm.commands.train import get_args_parser, parse_args, train_options
from timm_advnorm.train.build import create_run_task

NUM_CLASSES = 10
SPACE = InputSpace()
EPS = 8.0
FAST = ['--epochs', '1', '--attack-steps', '2', '--attack-step', '4', '--val-attack-steps', '2', '--num-samples', '32',
        '-b', '24', '--workers', '0', '--hflip', '0', '--log-interval', '0']


def _model(name: str = 'test_nfr_resnet') -> nn.Module:
    torch.manual_seed(0)
    return timm.create_model(name, num_classes=NUM_CLASSES)


def _batch(n: int = 6, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    return SPACE.from_pixels(torch.rand(n, 3, 32, 32, generator=g)), torch.randint(0, NUM_CLASSES, (n,), generator=g)


def _task(model: nn.Module = None, **kwargs) -> NofrostStarTask:
    """NoFrost* with PGD-2 at ε = 8, untargeted, and an untrained EDSR (seeded) unless `kwargs` say otherwise."""
    attack = create_attack('pgd', space=SPACE, eps=EPS, step=4.0, steps=2, targeted=False, best_iterate=False,
                           clean_start_prob=0.0, seed=0)
    kwargs.setdefault('deepaugment', DeepAugment('edsr', seed=0, allow_random_weights=True))
    return create_task('nofrost_star', model or _model(), attack=attack, space=SPACE, **kwargs)


def _step(task: NofrostStarTask, x: torch.Tensor, y: torch.Tensor, seed: int = 0):
    """One training forward from a fixed global seed (TDA and the either-or draw use it)."""
    torch.manual_seed(seed)
    task.train()
    return task(x, y)


def _forward_rows(task: NofrostStarTask, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """The rows the training forward sends through the model."""
    seen = []
    handle = task.trainable_module.register_forward_pre_hook(lambda module, args: seen.append(args[0].detach()))
    try:
        _step(task, x, y)
    finally:
        handle.remove()
    return seen[-1]  # the attack's forwards come first


@pytest.mark.parametrize('mixup', [False, True], ids=['plain', 'mixup'])
def test_it_trains_a_few_steps_with_every_view(mixup):
    """With Mixup/CutMix the views are made from the mixed images, which keep their soft targets."""
    model = _model()
    mixup_fn = Mixup(mixup_alpha=0.8, cutmix_alpha=1.0, num_classes=NUM_CLASSES) if mixup else None
    task = _task(model, mixup_fn=mixup_fn, criterion_kwargs=dict(soft_targets=mixup))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    x, y = _batch()
    for _ in range(2):
        optimizer.zero_grad()
        result = _step(task, x, y)
        result['loss'].backward()
        optimizer.step()
        assert torch.isfinite(result['loss'])
        assert {k for k in result if k.startswith('loss_')} == {'loss_clean', 'loss_adv', 'loss_deepaugment',
                                                                 'loss_tda'}
        assert result['output'].shape == (x.shape[0], NUM_CLASSES)
    assert any(not torch.equal(v, before[k]) for k, v in model.state_dict().items())


def test_the_loss_is_the_released_codes_mean_of_the_four_view_losses():
    result = _step(_task(), *_batch())
    parts = [result[f'loss_{v}'] for v in ('clean', 'adv', 'deepaugment', 'tda')]
    assert result['loss'].item() == pytest.approx(sum(parts).item() / 4, rel=1e-6)


@pytest.mark.parametrize('off', ['clean', 'adv', 'deepaugment', 'tda'])
def test_every_view_contributes(off):
    """Switching a view off changes the loss: the others are weighted a third each, and the view's rows leave."""
    x, y = _batch()
    full = _step(_task(), x, y)
    views = [v for v in ('clean', 'adv', 'deepaugment', 'tda') if v != off]
    partial = _step(_task(views=views), x, y)
    assert f'loss_{off}' not in partial
    assert partial['loss'].item() != pytest.approx(full['loss'].item(), rel=1e-4)
    assert partial['loss'].item() == pytest.approx(sum(partial[f'loss_{v}'] for v in views).item() / 3, rel=1e-6)


def test_the_batch_is_split_into_one_sub_batch_per_view_of_the_loader_images():
    """--batch-size rows of views: a third of it loaded, each image seen clean, through DeepAugment and TDA, then
    attacked from its clean rows (as the released code's three sub-batches of batch / 3)."""
    task = _task(tda_options=dict(color_prob=1.0, jitter_prob=1.0))
    assert task.row_blocks == ['clean', 'deepaugment', 'tda', 'adv']
    assert task.batch_scale == pytest.approx(1 / 3) and int(round(24 * task.batch_scale)) == 8
    x, y = _batch(8)
    rows = _forward_rows(task, x, y)
    clean, deepaug, tda, adv = rows.split(8)
    assert rows.shape[0] == 32 and torch.equal(clean, x)
    assert (deepaug - x).abs().amax() > 0.1 and (tda - x).abs().amax() > 0.1
    lower, upper = SPACE.bounds(x)
    assert ((deepaug >= lower - 1e-5) & (deepaug <= upper + 1e-5)).all(), 'made in pixel space, inside [0, 1]'
    budget = SPACE.linf_budget(EPS, x)
    assert ((adv - x).abs() <= budget + 1e-5).all() and (adv - x).abs().amax() > 0, 'attacked from the clean rows'


def test_the_papers_either_or_objective():
    """Eq. 2: each image gets its DeepAugment or its TDA view (probability 1/2) and the loss divides by 3."""
    task = _task(augment='either')
    assert task.row_blocks == ['clean', 'augmented', 'adv'] and task.batch_scale == pytest.approx(0.5)
    result = _step(task, *_batch(16))
    assert {k for k in result if k.startswith('loss_')} == {'loss_clean', 'loss_augmented', 'loss_adv'}
    parts = result['loss_clean'] + result['loss_augmented'] + result['loss_adv']
    assert result['loss'].item() == pytest.approx(parts.item() / 3, rel=1e-6)


def test_the_either_or_view_is_deepaugments_where_drawn_and_tdas_elsewhere():
    task = _task(augment='either', tda_options=dict(color_prob=0.0, hflip=0.0))  # TDA then leaves its rows as they are
    x, y = _batch(16)
    augmented = _forward_rows(task, x, y)[16:32]
    torch.manual_seed(0)
    from_deepaugment = torch.rand(16) < 0.5  # the step's draw, its first from the seed
    assert 0 < from_deepaugment.sum() < 16
    pixels = SPACE.to_pixels(x).clamp(0, 1)
    deepaug = SPACE.from_pixels(DeepAugment('edsr', seed=0, allow_random_weights=True)(pixels[from_deepaugment]))
    assert torch.allclose(augmented[from_deepaugment], deepaug, atol=1e-5)
    assert torch.allclose(augmented[~from_deepaugment], x[~from_deepaugment], atol=1e-5)


def test_view_weights_are_scaled_to_one_per_image():
    assert normalized_view_weights(['clean', 'adv', 'deepaugment', 'tda']) == pytest.approx(
        {'clean': 0.25, 'adv': 0.25, 'deepaugment': 0.25, 'tda': 0.25})
    assert normalized_view_weights(['clean', 'deepaugment', 'tda']) == pytest.approx(
        {'clean': 1 / 3, 'deepaugment': 1 / 3, 'tda': 1 / 3})  # the released code without the attack
    assert normalized_view_weights(['clean', 'adv', 'deepaugment', 'tda'], [2, 1, 1, 1]) == pytest.approx(
        {'clean': 0.4, 'adv': 0.2, 'deepaugment': 0.2, 'tda': 0.2})
    assert normalized_view_weights(['clean', 'adv', 'deepaugment', 'tda'], augment='either') == pytest.approx(
        {'clean': 1 / 3, 'adv': 1 / 3, 'deepaugment': 1 / 3, 'tda': 1 / 3})


def test_custom_weights_weigh_the_view_losses():
    result = _step(_task(view_weights=[2, 1, 1, 1]), *_batch())
    expected = (2 * result['loss_clean'] + result['loss_adv'] + result['loss_deepaugment'] + result['loss_tda']) / 5
    assert result['loss'].item() == pytest.approx(expected.item(), rel=1e-6)


def test_it_is_nofrost_on_a_normalizer_free_model_and_its_adversarial_share_is_lambda():
    task = _task()
    assert isinstance(task, NofrostTask) and task.adv_weight == 0.25 and task.default_eval_metric == 'robust_top1'
    with pytest.raises(ValueError, match='normalizer-free'):
        _task(_model('test_mbn_resnet'))


@pytest.mark.parametrize('kwargs, message', [
    (dict(deepaugment=None), 'the DeepAugment view needs deepaugment='),
    (dict(views=['clean', 'clean']), 'views must be distinct'),
    (dict(view_weights=[1, 1]), 'one weight > 0 per view'),
    (dict(views=['clean', 'adv', 'tda'], augment='either'), 'both must be among --star-views'),
])
def test_the_constructor_refuses_what_it_cannot_train(kwargs, message):
    with pytest.raises(ValueError, match=message):
        _task(**kwargs)


def test_the_cost_model_counts_every_pass_and_deepaugments_network():
    model = _model()
    d = deepaugment_passes(model, DeepAugment('edsr', seed=0, allow_random_weights=True))
    assert d > 1  # an EDSR forward costs many passes of the tiny test model
    assert _task(model).passes_per_image == pytest.approx(2 + 4 + d)  # PGD-2, clean, DeepAugment, TDA, adversarial
    assert _task(model, augment='either').passes_per_image == pytest.approx(2 + 3 + d / 2)
    no_deepaugment = _task(model, views=['clean', 'adv', 'tda'], deepaugment=None)
    assert no_deepaugment.passes_per_image == 2 + 3 and no_deepaugment.batch_scale == 0.5
    clean_only = _task(model, views=['clean'], deepaugment=None)
    assert clean_only.passes_per_image == 1 and clean_only.batch_scale == 1 and clean_only.attack is None


def test_deepaugments_cost_is_a_flop_ratio_that_leaves_the_random_state_alone():
    model = _model('nf_resnet26')
    deepaugment = DeepAugment('edsr', seed=0, allow_random_weights=True)
    torch.manual_seed(1)
    expected = torch.rand(3)
    torch.manual_seed(1)
    d = deepaugment_passes(model.train(), deepaugment)
    assert torch.equal(torch.rand(3), expected)
    assert 0.5 < d < 1.5  # EDSR's forward is about 0.9 of a training pass of nf_resnet26
    assert deepaugment_passes(model, deepaugment, size=32) == pytest.approx(d, rel=0.02)  # the same at every size


def _groups(parser):
    return {g.title: [s for a in g._group_actions for s in a.option_strings] for g in parser._action_groups}


def test_its_options_are_in_their_own_group_with_the_released_codes_defaults():
    assert _groups(get_args_parser())['Method nofrost_star'] == [
        '--star-views', '--star-view-weights', '--star-augment', '--deepaugment-net', '--deepaugment-weights',
        '--deepaugment-random-weights', '--tda-color-prob', '--tda-color-strength', '--tda-blur-prob']
    args, _ = parse_args(['--method', 'nofrost_star'])
    assert (args.star_views, args.star_view_weights, args.star_augment, args.deepaugment_net,
            args.deepaugment_weights, args.deepaugment_random_weights, args.tda_color_prob, args.tda_blur_prob) == (
        ['clean', 'adv', 'deepaugment', 'tda'], None, 'both', 'edsr', None, False, 0.5, 0.0)


@pytest.mark.parametrize('argv, message', [
    ([], "needs the authors' pretrained EDSR network: --deepaugment-weights PATH, or --deepaugment-random-weights"),
    (['--deepaugment-weights', 'missing.pt'], '--deepaugment-weights: no file missing.pt'),
    (['--deepaugment-weights', 'w.pt', '--deepaugment-random-weights'], 'exclude each other'),
    (['--deepaugment-random-weights', '--star-view-weights', '1', '1'], 'one weight > 0 per view'),
    (['--deepaugment-random-weights', '--star-views', 'clean', 'adv', '--star-augment', 'either'],
     'both must be among --star-views'),
])
def test_option_errors_are_one_line_before_anything_is_built(argv, message):
    args, _ = parse_args(['--method', 'nofrost_star', *argv])
    with pytest.raises(ValueError, match=message) as error:
        train_options(args)
    assert '\n' not in str(error.value)


def test_the_command_refuses_deepaugment_without_weights_on_one_line(tmp_path, digits_dir, capsys):
    status = script.run('train_adv.py', ['--data-dir', str(digits_dir), '--output', str(tmp_path), *FAST,
                                         '--model', 'test_nfr_resnet', '--method', 'nofrost_star'])
    assert status == 2
    line = capsys.readouterr().err.strip().splitlines()[-1]
    assert line.startswith('train_adv.py: error: ') and '--deepaugment-weights PATH' in line
    assert not any(tmp_path.iterdir()), 'refused before the run folder is made'


def test_without_deepaugment_no_weights_are_needed():
    args, _ = parse_args(['--method', 'nofrost_star', '--star-views', 'clean', 'adv', 'tda'])
    train_options(args)


def test_the_recipe_builds_the_released_codes_step():
    args, _ = parse_args(['-c', 'nofrost_star_nf_resnet26', '--deepaugment-random-weights'])
    args.rank, args.distributed = 0, False
    with torch.device('meta'):
        assert not any(isinstance(m, nn.modules.batchnorm._BatchNorm)
                       for m in timm.create_model(args.model, num_classes=1000).modules())
    task = create_run_task(train_options(args), timm.create_model(args.model, num_classes=1000), InputSpace(),
                           num_classes=1000, verbose=False)
    assert int(round(args.batch_size * task.batch_scale)) == 10  # the released int(32 / 3) per GPU
    assert task.view_weights == pytest.approx({'clean': 0.25, 'adv': 0.25, 'deepaugment': 0.25, 'tda': 0.25})
    assert task.attack.steps == 10 and not task.attack.targeted and task.deepaugment.net_name == 'edsr'
    assert task.passes_per_image == pytest.approx(14 + task.deepaugment_passes)
    assert (args.epochs, args.clip_mode, args.smoothing, args.drop, args.drop_path) == (30, 'norm', 0.1, 0.25, 0.1)


def _train(tmp_path: Path, digits_dir: Path, *extra: str) -> Path:
    out = tmp_path / 'runs'
    assert script.main(['--data-dir', str(digits_dir), '--output', str(out), '--experiment', 'run', *FAST,
                        *extra]) == 0
    return out / 'run'


def test_a_digits_epoch_through_the_command(tmp_path, digits_dir):
    run = _train(tmp_path, digits_dir, '--model', 'test_nfr_resnet', '--method', 'nofrost_star',
                 '--deepaugment-random-weights', '--no-attack-targeted', '--attack-clean-start-prob', '0')
    with open(run / 'summary.csv') as f:
        row, = list(csv.DictReader(f))
    for part in ('loss', 'loss_clean', 'loss_adv', 'loss_deepaugment', 'loss_tda'):
        assert torch.isfinite(torch.tensor(float(row[f'train_{part}']))), part
    torch.manual_seed(0)
    d = deepaugment_passes(timm.create_model('test_nfr_resnet', num_classes=NUM_CLASSES),
                           DeepAugment('edsr', seed=0, allow_random_weights=True))
    assert float(row['train_passes_per_image']) == pytest.approx(2 + 4 + d, rel=1e-4)
    saved = yaml.safe_load((run / 'args.yaml').read_text())
    assert saved['method'] == 'nofrost_star' and saved['star_views'] == ['clean', 'adv', 'deepaugment', 'tda']
    assert saved['eval_metric'] == 'robust_top1'
