"""Cross-checks of our evaluation attacks against reference implementations, on a small adversarially trained model.

Oracles (test-only dependencies, skipped when absent):

* `pyautoattack` (0.2.0): the reference AutoAttack code of Croce & Hein packaged on PyPI; its `AutoAttack` wrapper has
  another API than the GitHub original, so we use the attack classes (`APGDAttack`, `APGDAttack_targeted`,
  `FABAttack_PT`) and FAB's projection directly. They work on [0, 1] pixels: the model is wrapped to normalize.
* `torchattacks` (3.5.1, install with ``pip install --no-deps torchattacks``): its PGD returns the last iterate, ours
  the best one, so from the same random start ours can only be as strong or stronger.

The model: a small BN CNN trained in a few seconds with PGD-2 on scikit-learn's 8x8 digits (grey levels replicated
to RGB, ImageNet normalization so per-channel budgets differ), L∞ ε=32/255.
"""
import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

from timm_advnorm.attacks import InputSpace, apgd, apgd_targeted, attack_context, fab_targeted, pgd
from timm_advnorm.attacks.fab import min_linf_step_to_hyperplane

SPACE = InputSpace()
EPS = 32.0
N_TRAIN = 1297


class _PixelModel(nn.Module):
    """The model as the reference code sees it: [0, 1] pixels in, logits out."""

    def __init__(self, model: nn.Module, space: InputSpace):
        super().__init__()
        self.model = model
        self.space = space

    def forward(self, pixels):
        return self.model(self.space.from_pixels(pixels))


@pytest.fixture(scope='module')
def digits():
    """(model, pixel model, normalized test images, their pixels, labels) after a few epochs of PGD training."""
    datasets = pytest.importorskip('sklearn.datasets')
    data = datasets.load_digits()
    pixels = (torch.tensor(data.images, dtype=torch.float32) / 16.0)[:, None].repeat(1, 3, 1, 1)
    labels = torch.tensor(data.target)
    g = torch.Generator().manual_seed(0)
    order = torch.randperm(len(labels), generator=g)
    x, y = SPACE.from_pixels(pixels[order]), labels[order]
    torch.manual_seed(0)
    model = nn.Sequential(
        nn.Conv2d(3, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU(),
        nn.Conv2d(16, 16, 3, stride=2, padding=1), nn.ReLU(), nn.Flatten(), nn.Linear(16 * 4 * 4, 10))
    optimizer = torch.optim.Adam(model.parameters(), 3e-3)
    for _ in range(6):
        for i in range(0, N_TRAIN, 64):
            xb, yb = x[i:i + 64], y[i:i + 64]
            with attack_context(model):
                x_adv = pgd(model, xb, yb, space=SPACE, eps=EPS, step=EPS / 2, steps=2, generator=g)
            model.train()
            optimizer.zero_grad()
            F.cross_entropy(model(x_adv), yb).backward()
            optimizer.step()
    model.eval()
    x_test, y_test = x[N_TRAIN:N_TRAIN + 300], y[N_TRAIN:N_TRAIN + 300]
    with torch.no_grad():
        assert (model(x_test).argmax(1) == y_test).float().mean() > 0.9, 'the fixture model must have learned'
    return model, _PixelModel(model, SPACE).eval(), x_test, SPACE.to_pixels(x_test), y_test


def _accuracy(model, inputs, y) -> float:
    with torch.no_grad():
        return (model(inputs).argmax(1) == y).float().mean().item()


def test_apgd_ce_matches_the_reference_autoattack(digits):
    autopgd = pytest.importorskip('pyautoattack.autopgd_base')
    model, pixel_model, x, pixels, y = digits
    reference = autopgd.APGDAttack(pixel_model, n_iter=100, norm='Linf', n_restarts=1, eps=EPS / 255, seed=0,
                                   loss='ce', rho=0.75, device='cpu')
    robust_reference = _accuracy(pixel_model, reference.perturb(pixels, y), y)
    with attack_context(model):
        x_adv = apgd(model, x, y, space=SPACE, eps=EPS, steps=100, generator=torch.Generator().manual_seed(0))
    robust = _accuracy(model, x_adv, y)
    assert 0.2 < robust_reference < _accuracy(model, x, y) - 0.1, 'the check needs a partly robust model'
    assert abs(robust - robust_reference) <= 0.01


@pytest.mark.parametrize('name', ['apgd-t', 'fab-t'])
def test_targeted_attacks_match_the_reference_autoattack(digits, name):
    model, pixel_model, x, pixels, y = digits
    x, pixels, y = x[:200], pixels[:200], y[:200]
    if name == 'apgd-t':
        autopgd = pytest.importorskip('pyautoattack.autopgd_base')
        reference = autopgd.APGDAttack_targeted(pixel_model, n_iter=20, eps=EPS / 255, seed=0, n_target_classes=3,
                                                device='cpu')
        ours = lambda: apgd_targeted(model, x, y, space=SPACE, eps=EPS, steps=20, n_target_classes=3,  # noqa: E731
                                     generator=torch.Generator().manual_seed(0))
    else:
        fab_pt = pytest.importorskip('pyautoattack.fab_pt')
        reference = fab_pt.FABAttack_PT(pixel_model, n_iter=20, eps=EPS / 255, seed=0, targeted=True,
                                        n_target_classes=3, device='cpu')
        ours = lambda: fab_targeted(model, x, y, space=SPACE, eps=EPS, steps=20, n_target_classes=3)  # noqa: E731
    robust_reference = _accuracy(pixel_model, reference.perturb(pixels, y), y)
    with attack_context(model):
        robust = _accuracy(model, ours(), y)
    assert abs(robust - robust_reference) <= 0.01


def test_fab_projection_matches_the_reference():
    projections = pytest.importorskip('pyautoattack.fab_projections')
    g = torch.Generator().manual_seed(0)
    points = torch.rand(64, 50, generator=g, dtype=torch.float64)
    w = torch.randn(64, 50, generator=g, dtype=torch.float64)
    w[:, :5] = 0.0
    b = (w * points).sum(1) + 3.0 * torch.randn(64, generator=g, dtype=torch.float64)  # some beyond the box
    reference = projections.projection_linf(points, w, b)
    assert torch.allclose(min_linf_step_to_hyperplane(points, w, (w * points).sum(1) - b), reference, atol=1e-12)


@pytest.mark.parametrize('random_start', [False, True])
def test_pgd_is_no_weaker_than_torchattacks(digits, random_start):
    torchattacks = pytest.importorskip('torchattacks')
    model, pixel_model, x, pixels, y = digits
    # Both draw the random start from torch's global RNG as uniform(-ε, ε) per pixel: same seed, same start.
    torch.manual_seed(0)
    theirs = torchattacks.PGD(pixel_model, eps=EPS / 255, alpha=EPS / 4 / 255, steps=10, random_start=random_start)
    robust_theirs = _accuracy(pixel_model, theirs(pixels, y), y)
    torch.manual_seed(0)
    with attack_context(model):
        x_adv = pgd(model, x, y, space=SPACE, eps=EPS, step=EPS / 4, steps=10, random_start=random_start,
                    best_iterate=True)
    assert _accuracy(model, x_adv, y) <= robust_theirs
