"""Evaluation attacks (APGD, FAB-T, Square, AutoAttack, MI-FGSM, CW-L∞, BIM, noise, corruptions): properties.

A small BN network is trained on synthetic, separable 16x16 images; budgets and iteration counts are far below
the protocols' so the file runs in seconds, and the protocols' defaults are checked separately.
"""
import copy
import functools
import math

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

from timm_advnorm.attacks import (
    AutoAttack, InputSpace, apgd, attack_context, autoattack, create_attack, cw_loss, dlr_loss, gaussian_noise, margin,
    targeted_dlr_loss)
from timm_advnorm.attacks.apgd import apgd_checkpoints
from timm_advnorm.attacks.autoattack import AUTOATTACK_STANDARD
from timm_advnorm.attacks.base import pixel_l2_norm
from timm_advnorm.attacks.bim import GALLOWAY_EPS_LINF, galloway_l2_eps
from timm_advnorm.attacks.core import is_fooled
from timm_advnorm.attacks.fab import min_linf_step_to_hyperplane
from timm_advnorm.attacks.square import square_fraction

NUM_CLASSES = 10
SIZE = 16
SPACE = InputSpace()  # ImageNet mean/std: per-channel budgets differ

# Reduced budgets: every attack runs in well under a second on the fixture.
CONFIGS = {
    'apgd-ce': dict(eps=8, steps=10),
    'apgd-dlr': dict(eps=8, steps=10),
    'apgd-t': dict(eps=8, steps=5, n_target_classes=2),
    'fab-t': dict(eps=8, steps=10, n_target_classes=2),
    'square': dict(eps=8, n_queries=60),
    'autoattack': dict(eps=8, steps=5, n_target_classes=2, n_queries=30),
    'mifgsm': dict(eps=8, steps=5),
    'cw-linf': dict(eps=8, steps=5),
    'bim-linf': dict(eps=8, steps=5),
    'bim-l2': dict(eps=256, steps=5),
}
LINF = [name for name in CONFIGS if name != 'bim-l2']


@pytest.fixture(scope='module')
def data(pattern_images):
    """``data(n, seed)``: normalized SIZExSIZE images of NUM_CLASSES classes (see `pattern_images`); ε=8 flips many."""
    return functools.partial(pattern_images, num_classes=NUM_CLASSES, size=SIZE, space=SPACE)


@pytest.fixture(scope='module')
def trained(data, fit_classifier) -> nn.Module:
    torch.manual_seed(0)
    model = nn.Sequential(
        nn.Conv2d(3, 8, 3, padding=1, bias=False), nn.BatchNorm2d(8), nn.ReLU(), nn.AvgPool2d(2),
        nn.Flatten(), nn.Linear(8 * (SIZE // 2) ** 2, NUM_CLASSES))
    return fit_classifier(model, data, iterations=60)


@pytest.fixture
def model(trained) -> nn.Module:
    return copy.deepcopy(trained)


@pytest.fixture
def batch(trained, data):
    """16 correctly classified samples."""
    x, y = data(64, seed=2)
    with torch.no_grad():
        correct = trained(x).argmax(1) == y
    return x[correct][:16], y[correct][:16]


def _accuracy(model, x, y) -> float:
    with torch.no_grad():
        return (model(x).argmax(1) == y).float().mean().item()


def _attack(name, seed=0, **overrides):
    return create_attack(name, space=SPACE, seed=seed, **{**CONFIGS[name], **overrides})


@pytest.mark.parametrize('name', list(CONFIGS))
def test_budget_respected_and_pixels_valid(model, batch, name):
    x, y = batch
    attack = _attack(name)
    x_adv = attack(model, x, y)
    assert x_adv.shape == x.shape and x_adv.dtype == x.dtype and not x_adv.requires_grad
    pixels = SPACE.to_pixels(x_adv)
    assert pixels.min() >= -1e-6 and pixels.max() <= 1 + 1e-6
    if name == 'bim-l2':
        assert pixel_l2_norm(x_adv - x, SPACE.std_like(x)).max() <= attack.eps / 255 + 1e-5
    else:
        assert (pixels - SPACE.to_pixels(x)).abs().max() <= attack.eps / 255 + 1e-6


@pytest.mark.parametrize('name', list(CONFIGS))
def test_attacks_lower_accuracy_and_keep_misclassified_samples_unchanged(model, batch, name):
    x, y = batch
    y = y.clone()
    y[:3] = (y[:3] + 1) % NUM_CLASSES  # the model now misclassifies these three
    x_adv = _attack(name)(model, x, y)
    assert torch.equal(x_adv[:3], x[:3])
    assert _accuracy(model, x_adv[3:], y[3:]) < 0.5


@pytest.mark.parametrize('name', list(CONFIGS))
def test_seeded_runs_are_identical(model, batch, name):
    x, y = batch
    assert torch.equal(_attack(name, seed=3)(model, x, y), _attack(name, seed=3)(model, x, y))


@pytest.mark.parametrize('name', ['apgd-ce', 'fab-t', 'square', 'autoattack', 'mifgsm', 'cw-linf'])
def test_model_state_is_restored_and_parameters_get_no_grad(model, batch, name):
    x, y = batch
    model.train()
    model[0].weight.requires_grad_(False)
    buffers = {k: v.clone() for k, v in model.state_dict().items()}
    _attack(name)(model, x, y)
    assert model.training and all(m.training for m in model.modules())
    assert not model[0].weight.requires_grad and model[1].weight.requires_grad
    assert all(p.grad is None for p in model.parameters())
    for k, v in model.state_dict().items():
        assert torch.equal(v, buffers[k]), k


def test_evaluation_attacks_refuse_batch_statistics_and_targets_when_untargeted(model, batch):
    x, y = batch
    with pytest.raises(ValueError, match='running'):
        create_attack('apgd-ce', space=SPACE, bn_stats='batch')
    with pytest.raises(ValueError, match='untargeted'):
        _attack('square')(model, x, y, targets=(y + 1) % NUM_CLASSES)
    with pytest.raises(ValueError):
        create_attack('autoattack', space=SPACE, attacks=('apgd-ce', 'pgd'))


def test_bf16_autocast_runs_within_budget(model, batch):
    x, y = batch
    x_adv = _attack('apgd-ce', autocast_dtype=torch.bfloat16)(model, x, y)
    assert x_adv.dtype == x.dtype and (SPACE.to_pixels(x_adv) - SPACE.to_pixels(x)).abs().max() <= 8 / 255 + 1e-6
    assert _accuracy(model, x_adv, y) < 0.5


@pytest.mark.parametrize('name', ['apgd-ce', 'square', 'mifgsm'])
def test_soft_labels_count_as_their_argmax(model, batch, name):
    x, y = batch
    soft = F.one_hot(y, NUM_CLASSES).float()
    assert torch.equal(_attack(name)(model, x, soft), _attack(name)(model, x, y))


def test_too_few_classes_get_a_clear_error(batch):
    x, y = batch
    three = nn.Sequential(nn.Flatten(), nn.Linear(3 * SIZE * SIZE, 3))
    with pytest.raises(ValueError, match='at least 4 classes'):
        _attack('apgd-t')(three, x, y % 3)
    with pytest.raises(ValueError, match='at least 3 classes'):
        _attack('apgd-dlr')(nn.Sequential(nn.Flatten(), nn.Linear(3 * SIZE * SIZE, 2)), x, y % 2)


@pytest.mark.parametrize('name', ['apgd-t', 'fab-t'])
def test_targeted_attacks_hit_given_targets_more_than_chance(model, batch, name):
    x, y = batch
    targets = (y + 1 + torch.randint(0, NUM_CLASSES - 1, y.shape, generator=torch.Generator().manual_seed(0))) % \
        NUM_CLASSES
    hit = lambda x_adv: is_fooled(model(x_adv), y, targets).float().mean().item()  # noqa: E731
    with torch.no_grad():
        untargeted = hit(_attack('apgd-ce', eps=16)(model, x, y))
        targeted = hit(_attack(name, eps=16, steps=20)(model, x, y, targets=targets))
    assert targeted > max(untargeted, 2 / (NUM_CLASSES - 1))


def test_apgd_t_and_fab_t_attack_the_runner_up_class_first(model, batch):
    """Without targets, the first target is the class ranked 2nd by the clean logits (AutoAttack's scheme)."""
    x, y = batch
    with torch.no_grad():
        runner_up = model(x).topk(2, dim=1).indices[:, 1]
    for name in ('apgd-t', 'fab-t'):
        x_adv = _attack(name, eps=16, steps=20, n_target_classes=1)(model, x, y)
        with torch.no_grad():
            pred = model(x_adv).argmax(1)
        fooled = pred != y
        assert fooled.sum() >= 4, name
        assert (pred[fooled] == runner_up[fooled]).float().mean() > 0.5, name


class _QueryCounter(nn.Module):
    """Counts the rows the wrapped model is queried on, and fails if a query could build an autograd graph."""

    def __init__(self, model: nn.Module):
        super().__init__()
        self.model = model
        self.rows = 0

    def forward(self, x):
        assert not torch.is_grad_enabled() and not x.requires_grad, 'Square must only run forward passes'
        self.rows += x.shape[0]
        return self.model(x)


@pytest.mark.parametrize('n_queries', [2, 25])
def test_square_only_queries_forward_within_budget(model, batch, n_queries):
    x, y = batch
    counter = _QueryCounter(model)
    x_adv = create_attack('square', space=SPACE, eps=8, n_queries=n_queries, seed=0, fold_bn=False)(counter, x, y)
    assert 0 < counter.rows <= x.shape[0] * n_queries
    if n_queries > 2:
        assert counter.rows < x.shape[0] * n_queries, 'fooled samples must stop being queried'
        assert _accuracy(model, x_adv, y) < 1.0


def test_square_schedule_is_the_reference_one():
    fractions = [square_fraction(0.8, i, 5000) for i in (0, 10, 11, 50, 51, 200, 201, 500, 501, 1000, 1001, 2000,
                                                          2001, 4000, 4001, 6000, 6001, 8000, 8001)]
    divisors = [1, 1, 2, 2, 4, 4, 8, 8, 16, 16, 32, 32, 64, 64, 128, 128, 256, 256, 512]
    assert fractions == pytest.approx([0.8 / d for d in divisors])
    assert square_fraction(0.8, 250, 500, rescale_schedule=True) == pytest.approx(0.8 / 128)  # as iteration 5000


def test_autoattack_worst_case_is_no_better_than_any_component(model, batch):
    x, y = batch
    common = dict(space=SPACE, eps=4, steps=5, n_target_classes=2, n_queries=30)
    with attack_context(model):
        result = autoattack(model, x, y, generator=torch.Generator().manual_seed(0), **common)
        alone = {name: autoattack(model, x, y, attacks=(name,), generator=torch.Generator().manual_seed(0), **common)
                 for name in AUTOATTACK_STANDARD}
    robust = result.robust_accuracy_after('square')
    assert robust == pytest.approx(_accuracy(model, result.x_adv, y))
    assert [result.robust_accuracy_after(s) for s in result.stages] == sorted(
        [result.robust_accuracy_after(s) for s in result.stages], reverse=True)
    # Same seed, same first stage: the cascade's first stage is APGD-CE alone, sample for sample.
    assert torch.equal(result.fooled_by == 1, alone['apgd-ce'].fooled_by == 1)
    for name, single in alone.items():
        assert robust <= single.robust_accuracy_after(name), name
    assert robust < 1.0


class _LogitShift(nn.Module):
    """Adds a constant to every logit: no prediction changes, but the attacks' rounding tolerance grows with it."""

    def forward(self, logits: torch.Tensor) -> torch.Tensor:
        return logits + 1e4


def test_autoattack_scores_misclassification_whatever_the_logit_scale(model, data):
    """As in the reference, a sample counts as fooled once misclassified, even within the rounding tolerance."""
    shifted = nn.Sequential(model, _LogitShift()).eval()
    x, y = data(32, seed=5)
    with attack_context(shifted):
        result = autoattack(shifted, x, y, space=SPACE, eps=4, steps=5, n_target_classes=2, n_queries=30,
                            generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        clean_fooled, adv_fooled = is_fooled(shifted(x), y), is_fooled(shifted(result.x_adv), y)
    assert clean_fooled.any()
    assert torch.equal(result.fooled_by == 0, clean_fooled)
    assert torch.equal(result.fooled_by >= 0, adv_fooled)
    assert result.robust_accuracy_after('square') == pytest.approx(1 - adv_fooled.float().mean().item())


def test_autoattack_run_reports_stages(model, batch):
    x, y = batch
    attack = AutoAttack(SPACE, **CONFIGS['autoattack'], seed=0)
    result = attack.run(model, x, y)
    assert result.stages == ('clean',) + AUTOATTACK_STANDARD
    assert torch.equal(result.x_adv, AutoAttack(SPACE, **CONFIGS['autoattack'], seed=0)(model, x, y))
    fooled = is_fooled(model(result.x_adv), y)
    assert torch.equal(fooled, result.fooled_by >= 0)


def test_defaults_are_the_reference_protocols():
    aa = create_attack('autoattack', space=SPACE)
    assert (aa.eps, aa.attacks, aa.steps, aa.n_target_classes, aa.n_queries) == (4.0, AUTOATTACK_STANDARD, 100, 9, 5000)
    ce, dlr, apgd_t = (create_attack(n, space=SPACE) for n in ('apgd-ce', 'apgd-dlr', 'apgd-t'))
    assert (ce.eps, ce.steps, ce.n_restarts, ce.rho) == (4.0, 100, 1, 0.75) == (dlr.eps, dlr.steps, dlr.n_restarts,
                                                                             dlr.rho)
    assert (apgd_t.steps, apgd_t.n_target_classes, apgd_t.n_restarts) == (100, 9, 1)
    fab = create_attack('fab-t', space=SPACE)
    assert (fab.steps, fab.n_target_classes, fab.n_restarts, fab.alpha_max, fab.eta, fab.beta) == (
        100, 9, 1, 0.1, 1.05, 0.9)
    sq = create_attack('square', space=SPACE)
    assert (sq.n_queries, sq.p_init, sq.n_restarts, sq.rescale_schedule) == (5000, 0.8, 1, False)
    mi, cw = create_attack('mifgsm', space=SPACE), create_attack('cw-linf', space=SPACE)
    assert (mi.steps, mi.decay, mi.step) == (10, 1.0, None)
    assert (cw.steps, cw.confidence, cw.random_start) == (30, 50.0, True)
    bim_linf, bim_l2 = create_attack('bim-linf', space=SPACE), create_attack('bim-l2', space=SPACE)
    assert (bim_linf.eps, bim_linf.steps) == (pytest.approx(7.65), 20)
    assert bim_l2.eps == pytest.approx(0.03 * 255 * math.sqrt(3 * 224 * 224))
    assert galloway_l2_eps(GALLOWAY_EPS_LINF, (3, 32, 32)) == pytest.approx(7.65 * 32 * math.sqrt(3))
    assert create_attack('gaussian-noise', space=SPACE).std == 0.5


def test_apgd_checkpoints_follow_the_paper():
    """p_0 = 0, p_1 = 0.22, p_{j+1} = p_j + max(p_j - p_{j-1} - 0.03, 0.06); checkpoints at ⌈p_j·N⌉ for N = 100."""
    p = [0.0, 0.22]
    while p[-1] + max(p[-1] - p[-2] - 0.03, 0.06) <= 1.0:
        p.append(p[-1] + max(p[-1] - p[-2] - 0.03, 0.06))
    assert apgd_checkpoints(100) == [math.ceil(round(100 * q, 6)) for q in p[1:]]
    assert apgd_checkpoints(1) == [1]


def test_apgd_raises_the_loss_above_its_random_start(model, batch):
    x, y = batch
    with attack_context(model):
        x_adv = apgd(model, x, y, space=SPACE, eps=1, steps=20, generator=torch.Generator().manual_seed(0))
        x_one = apgd(model, x, y, space=SPACE, eps=1, steps=1, generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        assert F.cross_entropy(model(x_adv), y) > F.cross_entropy(model(x_one), y)


def test_losses():
    logits = torch.tensor([[3.0, 1.0, 0.0, -1.0], [0.0, 2.0, 1.0, 0.5]])
    labels = torch.tensor([0, 0])
    assert margin(logits, labels).tolist() == [2.0, -2.0]
    assert cw_loss(logits, labels, confidence=1.0).tolist() == [-3.0, 0.0]
    # DLR is invariant to shifting and positive rescaling of the logits.
    assert torch.allclose(dlr_loss(3 * logits + 7, labels), dlr_loss(logits, labels))
    yt = torch.tensor([[0, 3], [0, 1]])
    assert torch.allclose(targeted_dlr_loss(2 * logits - 1, yt), targeted_dlr_loss(logits, yt))
    assert targeted_dlr_loss(logits, yt)[0] < 0 < targeted_dlr_loss(logits, yt)[1]


def test_fab_projection_is_the_smallest_linf_move_onto_the_hyperplane():
    g = torch.Generator().manual_seed(0)
    points = torch.rand(32, 20, generator=g, dtype=torch.float64)
    w = torch.randn(32, 20, generator=g, dtype=torch.float64)
    value = 0.5 * torch.randn(32, generator=g, dtype=torch.float64)
    move = min_linf_step_to_hyperplane(points, w, value)
    moved = points + move
    assert moved.min() >= -1e-12 and moved.max() <= 1 + 1e-12
    room = (move.abs().amax(1) < torch.where(move > 0, 1 - points, points).abs().amax(1))  # not a box corner
    assert room.any()
    reached = (w * move).sum(1) + value
    assert torch.allclose(reached[room], torch.zeros_like(reached[room]), atol=1e-9)
    # Any smaller move (the same box-clipped direction, shrunk) falls short of the hyperplane.
    size = move.abs().amax(1, keepdim=True)
    shrunk = torch.minimum(move.abs(), 0.99 * size) * move.sign()
    assert ((w * shrunk).sum(1) + value).abs()[room].min() > 0


def test_gaussian_noise_statistics_units_and_clipping():
    g = torch.Generator().manual_seed(0)
    x = SPACE.from_pixels(torch.full((4, 3, 32, 32), 0.5))
    noise = gaussian_noise(x, space=SPACE, std=0.5, clip=False, generator=g) - x
    assert noise.std().item() == pytest.approx(0.5, rel=0.05) and abs(noise.mean().item()) < 0.02
    pixel_noise = SPACE.to_pixels(gaussian_noise(x, space=SPACE, std=8, units='pixels', clip=False, generator=g)) - 0.5
    assert pixel_noise.std().item() == pytest.approx(8 / 255, rel=0.05)
    clipped = SPACE.to_pixels(gaussian_noise(x, space=SPACE, std=2.0, generator=g))
    assert clipped.min() >= -1e-6 and clipped.max() <= 1 + 1e-6
    a, b = (create_attack('gaussian-noise', space=SPACE, seed=1)(nn.Identity(), x, torch.zeros(4).long())
            for _ in range(2))
    assert torch.equal(a, b)


@pytest.fixture
def imagecorruptions():
    return pytest.importorskip('imagecorruptions')


def _images(n=3, seed=0):
    g = torch.Generator().manual_seed(seed)
    smooth = F.interpolate(torch.rand(n, 3, 8, 8, generator=g), size=32, mode='bilinear', align_corners=False)
    return SPACE.from_pixels(smooth)


@pytest.mark.parametrize('corruption', ['gaussian_noise', 'impulse_noise', 'fog', 'contrast', 'jpeg_compression'])
def test_corruptions_keep_shape_and_range_and_grow_with_severity(imagecorruptions, corruption):
    x = _images()
    y = torch.zeros(len(x), dtype=torch.long)
    change = []
    for severity in (1, 5):
        attack = create_attack('corruption', space=SPACE, corruption=corruption, severity=severity, seed=0)
        out = attack(nn.Identity(), x, y)
        assert out.shape == x.shape and out.dtype == x.dtype
        pixels = SPACE.to_pixels(out)
        assert pixels.min() >= -1e-5 and pixels.max() <= 1 + 1e-5
        assert torch.equal(out, create_attack('corruption', space=SPACE, corruption=corruption, severity=severity,
                                              seed=0)(nn.Identity(), x, y))
        change.append((pixels - SPACE.to_pixels(x)).abs().mean().item())
    assert 0 < change[0] < change[1]


def test_corruptions_reject_bad_input_and_explain_a_missing_package(monkeypatch, imagecorruptions):
    with pytest.raises(ValueError, match='Unknown corruption'):
        create_attack('corruption', space=SPACE, corruption='rain')
    with pytest.raises(ValueError, match='severity'):
        create_attack('corruption', space=SPACE, severity=6)
    with pytest.raises(ValueError, match='32x32'):
        create_attack('corruption', space=SPACE)(nn.Identity(), torch.zeros(1, 3, 16, 16), torch.zeros(1).long())
    monkeypatch.setitem(__import__('sys').modules, 'imagecorruptions', None)
    with pytest.raises(ImportError, match='imagecorruptions-imaug'):
        create_attack('corruption', space=SPACE)


def test_protocol_specs_build_their_attacks():
    """Every attack of the built-in protocols (but corruptions) accepts the configuration its spec gives."""
    protocols = pytest.importorskip('timm_advnorm.eval.protocols.protocol')
    for name in ('robustbench', 'nofrost', 'galloway'):
        for spec in protocols.resolve_protocol(protocols.get_protocol(name), SPACE).attacks:
            if spec.attack in ('pgd', 'fgsm'):
                continue
            eps = protocols.resolve_eps(spec, (3, 224, 224))
            attack = protocols.create_spec_attack(spec, SPACE, (3, 224, 224), seed=0)
            assert attack.eps == pytest.approx(eps)
