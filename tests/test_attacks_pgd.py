"""PGD and FGSM properties on a small BN network trained on synthetic, separable data."""
import copy
import functools

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

from timm_advnorm.attacks import FGSM, PGD, InputSpace, PGDGeometry, attack_context, create_attack, pgd
from timm_advnorm.attacks.base import pixel_l2_norm
from timm_advnorm.attacks.core import cross_entropy_per_sample, is_fooled
from timm_advnorm.layers import convert_to_mixture_bn, get_route, route

NUM_CLASSES = 5
SPACE = InputSpace()  # ImageNet mean/std: per-channel budgets differ


@pytest.fixture(scope='module')
def data(pattern_images):
    """``data(n, seed)``: normalized 8x8 images of NUM_CLASSES classes (see `pattern_images`); ε=16 can flip any."""
    return functools.partial(pattern_images, num_classes=NUM_CLASSES, size=8, space=SPACE)


@pytest.fixture(scope='module')
def trained(data, fit_classifier) -> nn.Module:
    torch.manual_seed(0)
    model = nn.Sequential(
        nn.Conv2d(3, 8, 3, padding=1, bias=False), nn.BatchNorm2d(8), nn.ReLU(),
        nn.Flatten(), nn.Linear(8 * 8 * 8, NUM_CLASSES))
    return fit_classifier(model, data, iterations=40)


@pytest.fixture
def model(trained) -> nn.Module:
    return copy.deepcopy(trained)


@pytest.fixture
def batch(data):
    return data(32, seed=2)


def _loss(model, x, y):
    with torch.no_grad():
        return cross_entropy_per_sample(model(x), y)


def _fooled(model, x, y, targets=None):
    with torch.no_grad():
        return is_fooled(model(x), y, targets)


@pytest.mark.parametrize('norm,eps', [('linf', 16), ('l2', 128)])
@pytest.mark.parametrize('targeted', [False, True])
def test_perturbation_stays_in_the_ball_and_pixels_valid(model, batch, norm, eps, targeted):
    x, y = batch
    x_adv = PGD(SPACE, eps=eps, steps=5, norm=norm, targeted=targeted, seed=0)(model, x, y)
    assert x_adv.shape == x.shape and not x_adv.requires_grad
    delta_pixels = SPACE.to_pixels(x_adv) - SPACE.to_pixels(x)
    pixels = SPACE.to_pixels(x_adv)
    assert pixels.min() >= -1e-6 and pixels.max() <= 1 + 1e-6
    if norm == 'linf':
        assert delta_pixels.abs().max() <= eps / 255 + 1e-6
    else:
        assert pixel_l2_norm(x_adv - x, SPACE.std_like(x)).max() <= eps / 255 + 1e-5
        assert delta_pixels.flatten(1).norm(dim=1).max() <= eps / 255 + 1e-5


@pytest.mark.parametrize('norm,eps', [('linf', 8), ('l2', 128)])
def test_untargeted_attack_raises_the_loss(model, batch, norm, eps):
    x, y = batch
    x_adv = PGD(SPACE, eps=eps, steps=10, norm=norm, seed=0)(model, x, y)
    clean, adv = _loss(model, x, y), _loss(model, x_adv, y)
    assert adv.mean() > clean.mean()
    assert (adv > clean).float().mean() > 0.9


def test_targeted_success_rises_with_iterations(model, batch):
    x, y = batch
    targets = (y + 1) % NUM_CLASSES
    success = []
    for steps in (1, 5, 20):
        attack = PGD(SPACE, eps=8, step=1, steps=steps, step_rule='fixed', targeted=True, seed=0)
        success.append(_fooled(model, attack(model, x, y, targets), y, targets).float().mean().item())
    assert success == sorted(success) and success[-1] > success[0]


def test_seeded_runs_are_identical_and_streams_advance(model, batch):
    x, y = batch
    kwargs = dict(steps=2, targeted=True, clean_start_prob=0.3)
    first, second = PGD(SPACE, seed=7, **kwargs), PGD(SPACE, seed=7, **kwargs)
    a1, a2 = first(model, x, y), first(model, x, y)
    assert torch.equal(a1, second(model, x, y)) and torch.equal(a2, second(model, x, y))
    assert not torch.equal(a1, a2), 'successive calls draw fresh noise'
    assert not torch.equal(a1, PGD(SPACE, seed=8, **kwargs)(model, x, y))


@pytest.mark.parametrize('bn_stats', ['running', 'batch'])
def test_model_state_is_restored_and_parameters_get_no_grad(model, batch, bn_stats):
    x, y = batch
    model = convert_to_mixture_bn(model).train()
    model[0].eval()  # a mixed mode must come back as it was
    model[4].weight.requires_grad_(False)
    flags = [(m.training) for m in model.modules()]
    grads = [p.requires_grad for p in model.parameters()]
    buffers = {k: v.clone() for k, v in model.named_buffers()}
    with route(model, 'adv'):
        routes = [(name, n, g) for _, name, n, g in get_route(model)]
        PGD(SPACE, steps=2, bn_stats=bn_stats, seed=0)(model, x, y)
        assert [(name, n, g) for _, name, n, g in get_route(model)] == routes
    assert [m.training for m in model.modules()] == flags
    assert [p.requires_grad for p in model.parameters()] == grads
    assert all(p.grad is None for p in model.parameters())
    for k, v in model.named_buffers():
        assert torch.equal(v, buffers[k]), f'{k} changed'


def test_random_targets_never_equal_labels(model, data):
    x, y = data(256, seed=3)
    seen = []

    def recording_loss(logits, target):
        seen.append(target.clone())
        return cross_entropy_per_sample(logits, target)

    PGD(SPACE, steps=1, targeted=True, best_iterate=False, loss_fn=recording_loss, seed=0)(model, x, y)
    targets = seen[0]
    assert targets.shape == y.shape and (targets != y).all()
    assert set(targets.tolist()) == set(range(NUM_CLASSES)), 'every other class can be drawn'


def test_best_iterate_is_never_worse_than_last_iterate(model, batch):
    x, y = batch
    kwargs = dict(eps=4, steps=10, seed=0)
    best = PGD(SPACE, best_iterate=True, **kwargs)(model, x, y)
    last = PGD(SPACE, best_iterate=False, **kwargs)(model, x, y)
    fooled_best, fooled_last = _fooled(model, best, y), _fooled(model, last, y)
    assert (fooled_best >= fooled_last).all()
    assert fooled_last.any() and not fooled_last.all(), 'the budget must make the comparison informative'


def test_pruning_fooled_samples_gives_the_per_sample_result(model, batch):
    """Evaluation drops fooled rows from the batch; for an eval-mode model this must not change any sample."""
    model, (x, y) = model.double(), batch
    x = x.double()
    targets = (y + 2) % NUM_CLASSES
    kwargs = dict(space=SPACE, eps=8, step=2, steps=8, targeted=True, random_start=False, best_iterate=True)
    with attack_context(model):
        batched = pgd(model, x, y, targets=targets, **kwargs)
        alone = torch.cat([pgd(model, x[i:i + 1], y[i:i + 1], targets=targets[i:i + 1], **kwargs)
                           for i in range(len(x))])
    fooled = _fooled(model, batched, y, targets)
    assert fooled.any() and not fooled.all(), 'some rows must be pruned while others go on'
    torch.testing.assert_close(batched, alone, rtol=0, atol=1e-12)


def test_bf16_autocast_runs_and_stays_close_to_fp32(model, batch):
    x, y = batch
    kwargs = dict(steps=1, random_start=False, best_iterate=False, fold_bn=False)
    fp32 = PGD(SPACE, **kwargs)(model, x, y)
    bf16 = PGD(SPACE, autocast_dtype=torch.bfloat16, **kwargs)(model, x, y)
    assert bf16.dtype == torch.float32 and torch.isfinite(bf16).all()
    moved = (fp32 - x).abs() > 0
    agree = ((bf16 - x).sign() == (fp32 - x).sign())[moved].float().mean()
    assert agree > 0.9, f'bf16 step direction agrees with fp32 on only {agree:.2%} of pixels'
    ten_fp32 = PGD(SPACE, steps=10, seed=0)(model, x, y)
    ten_bf16 = PGD(SPACE, steps=10, seed=0, autocast_dtype=torch.bfloat16)(model, x, y)
    assert abs(_loss(model, ten_bf16, y).mean() - _loss(model, ten_fp32, y).mean()) < \
        0.2 * (_loss(model, ten_fp32, y).mean() - _loss(model, x, y).mean())


def test_soft_targets_are_attacked_as_given(model, batch):
    x, y = batch
    soft = 0.7 * F.one_hot(y, NUM_CLASSES).float() + 0.3 * F.one_hot((y + 1) % NUM_CLASSES, NUM_CLASSES).float()
    x_adv = PGD(SPACE, steps=5, seed=0)(model, x, soft)
    assert _loss(model, x_adv, soft).mean() > _loss(model, x, soft).mean()


@pytest.mark.parametrize('p', [0.0, 0.5, 1.0])
def test_clean_start_probability(model, data, p):
    x, y = data(64, seed=4)
    start = pgd(model, x, y, space=SPACE, eps=16, step=1, steps=0, clean_start_prob=p,
                generator=torch.Generator().manual_seed(0))  # 0 iterations: the start point
    clean_rows = (start == x).flatten(1).all(dim=1)
    if p == 1.0:
        assert clean_rows.all()
    elif p == 0.0:
        assert not clean_rows.any()
    else:
        assert clean_rows.any() and not clean_rows.all()


def test_step_rule(model, batch):
    assert PGD(SPACE, eps=16, step=1, steps=10).step_size == pytest.approx(1.6)
    assert PGD(SPACE, eps=16, step=1, steps=30).step_size == 1.0
    assert PGD(SPACE, eps=16, step=1, steps=10, step_rule='fixed').step_size == 1.0
    x, y = batch
    x_adv = PGD(SPACE, eps=16, step=1, steps=10, random_start=False, best_iterate=False)(model, x, y)
    one = PGD(SPACE, eps=16, step=1, steps=1, random_start=False, best_iterate=False, step_rule='fixed')
    delta = (SPACE.to_pixels(one(model, x, y)) - SPACE.to_pixels(x)).abs()
    assert delta.max() == pytest.approx(1 / 255, abs=1e-6)
    assert (SPACE.to_pixels(x_adv) - SPACE.to_pixels(x)).abs().max() == pytest.approx(16 / 255, abs=1e-6)


def test_fgsm_is_one_random_start_step_of_one_and_a_quarter_eps(model, batch):
    x, y = batch
    attack = create_attack('fgsm', space=SPACE, eps=8, seed=0)
    assert isinstance(attack, FGSM) and attack.steps == 1 and attack.step_size == 10.0
    x_adv = attack(model, x, y)
    assert (SPACE.to_pixels(x_adv) - SPACE.to_pixels(x)).abs().max() <= 8 / 255 + 1e-6
    assert _loss(model, x_adv, y).mean() > _loss(model, x, y).mean()


def test_registry_and_bad_arguments(model, batch):
    x, y = batch
    assert isinstance(create_attack('pgd', space=SPACE, steps=3), PGD)
    with pytest.raises(ValueError, match='norm'):
        PGD(SPACE, norm='l3')
    with pytest.raises(ValueError, match='step_rule'):
        PGD(SPACE, step_rule='linear')
    with pytest.raises(ValueError, match='targets'):
        pgd(model, x, y, space=SPACE, eps=16, step=1, steps=1, targeted=True)
    with pytest.raises(ValueError, match='labels'):
        PGD(SPACE)(model, x, y[:3])


@pytest.mark.parametrize('best_iterate', [True, False], ids=['best', 'last'])
@pytest.mark.parametrize('targeted', [False, True])
def test_budgets_from_one_run_equal_separate_runs(model, batch, best_iterate, targeted):
    """One run of the longest budget returns, at each shorter budget, exactly that budget's own attack."""
    x, y = batch
    budgets = [6, 1, 2, 6, 4]
    kwargs = dict(eps=16, step=1, step_rule='fixed', targeted=targeted, best_iterate=best_iterate)
    targets = (y + 1) % NUM_CLASSES if targeted else None
    swept = PGD(SPACE, steps=6, seed=3, **kwargs).at_budgets(model, x, y, budgets, targets=targets)
    assert len(swept) == len(budgets)
    for n, x_n in zip(budgets, swept):
        alone = PGD(SPACE, steps=n, seed=3, **kwargs)(model, x, y, targets=targets)
        torch.testing.assert_close(x_n, alone, rtol=0, atol=1e-6)
    if best_iterate:
        by_budget = sorted(range(len(budgets)), key=budgets.__getitem__)
        fooled = [int(_fooled(model, swept[i], y, targets).sum()) for i in by_budget]
        assert fooled == sorted(fooled), f'a longer budget fooled fewer samples: {fooled}'
        assert fooled[0] < fooled[-1], 'the budgets must differ in strength for the comparison to mean anything'


def test_budgets_are_checked(model, batch):
    x, y = batch
    attack = PGD(SPACE, steps=5, seed=0)
    with pytest.raises(ValueError, match='at most steps=5'):
        attack.at_budgets(model, x, y, [2, 10])
    with pytest.raises(ValueError, match='at most steps=5'):
        attack.at_budgets(model, x, y, [])
    with pytest.raises(ValueError, match='must be >= 0'):
        pgd(model, x, y, space=SPACE, eps=16, step=1, steps=-1)


def test_targeted_best_iterate_accuracy_is_never_above_the_last_iterate(model, batch):
    """xie2020 reports accuracy beside the success rate: a sample the best iterate leaves correctly classified must be
    correctly classified by the last iterate too (same start), though the attack aims at a target, not at error."""
    x, y = batch
    targets = (y + 1) % NUM_CLASSES
    kwargs = dict(eps=8, step=1, steps=12, step_rule='fixed', targeted=True, seed=0)
    best = PGD(SPACE, best_iterate=True, **kwargs)(model, x, y, targets=targets)
    last = PGD(SPACE, best_iterate=False, **kwargs)(model, x, y, targets=targets)
    correct_best, correct_last = ~_fooled(model, best, y), ~_fooled(model, last, y)
    assert not (correct_best & ~correct_last).any(), 'the best iterate kept a correct one where the last was wrong'
    assert _fooled(model, best, y, targets).sum() >= _fooled(model, last, y, targets).sum()


@pytest.mark.parametrize('name', ['pgd', 'square'])
def test_long_attacks_report_progress_only_when_asked_and_print_nothing(model, batch, capsys, name):
    """Long attacks report every iteration or query to the evaluator's callback, and never write to the console."""
    x, y = batch
    kwargs = dict(steps=3) if name == 'pgd' else dict(n_queries=5)
    attack = create_attack(name, space=SPACE, eps=8, seed=0, **kwargs)
    attack(model, x, y)
    events = []
    attack.progress = events.append
    attack(model, x, y)
    assert capsys.readouterr() == ('', '')
    assert events and {event.attack for event in events} == {name}


def test_a_geometry_of_one_std_for_every_channel_holds_numbers_and_steps_as_a_per_channel_one():
    """Grey images (one mean and std for the three channels) get the radius, step and pixel box as numbers, which
    spare the element-wise work broadcasting the channels, and the very same iterates."""
    space = InputSpace(mean=(0.1307,) * 3, std=(0.3081,) * 3)
    x = (torch.rand(4, 3, 8, 8, generator=torch.Generator().manual_seed(0)) - 0.1307) / 0.3081
    geometry = PGDGeometry.build(space, 12.75, 0.5, 'linf', x)
    assert all(isinstance(v, float) for v in (geometry.radius, geometry.step_size, geometry.lower, geometry.upper))
    channels = lambda v: torch.full((1, 3, 1, 1), v)  # noqa: E731
    per_channel = PGDGeometry('linf', channels(geometry.radius), channels(geometry.step_size), geometry.std,
                              channels(geometry.lower), channels(geometry.upper))
    gradient, start = torch.randn_like(x), x + 0.05 * torch.randn_like(x)
    given = (gradient.clone(), start.clone(), x.clone())
    for sign in (1.0, -1.0):
        step = geometry.step(start, x, gradient, sign)
        assert torch.equal(step, per_channel.step(start, x, gradient, sign))
        # the textbook expression, out of place: the step, the projection onto the ball, the pixel box
        delta = start + sign * per_channel.step_size * gradient.sign() - x
        delta = torch.maximum(torch.minimum(delta, per_channel.radius), -per_channel.radius)
        assert torch.equal(step, torch.clamp(x + delta, per_channel.lower, per_channel.upper))
    assert all(torch.equal(a, b) for a, b in zip((gradient, start, x), given))  # its inputs untouched
    assert torch.equal(geometry.clip(start), per_channel.clip(start))
    colour = PGDGeometry.build(InputSpace(), 8, 2, 'linf', x)  # ImageNet's statistics differ by channel
    assert colour.radius.shape == colour.lower.shape == (1, 3, 1, 1)
