"""Threat-model geometry shared by attacks: projections, random starts and steepest-ascent directions."""
import pytest
import torch

from timm_advnorm.attacks import InputSpace, PIXEL_SCALE
from timm_advnorm.attacks.base import (
    bernoulli, l2_direction, pixel_l2_norm, project, project_l2, project_linf, random_l2_start, random_linf_start,
    uniform)

SPACE = InputSpace()  # ImageNet mean/std: per-channel budgets differ


def _batch(seed: int = 0, n: int = 16):
    g = torch.Generator().manual_seed(seed)
    return SPACE.from_pixels(torch.rand(n, 3, 8, 8, generator=g))


def test_random_linf_start_fills_the_box_per_channel():
    x = _batch()
    radius = SPACE.linf_budget(16, x)
    delta = random_linf_start(x, radius, torch.Generator().manual_seed(0))
    pixels = (delta * SPACE.std_like(x)).abs()
    assert pixels.max() <= 16 / PIXEL_SCALE + 1e-6
    assert pixels.amax(dim=(0, 2, 3)).min() > 0.9 * 16 / PIXEL_SCALE, 'every channel uses its whole budget'
    assert not torch.equal(delta[0], delta[1]), 'independent per sample'


def test_random_l2_start_lies_in_the_pixel_ball():
    x = _batch()
    std = SPACE.std_like(x)
    delta = random_l2_start(x, 0.5, std, torch.Generator().manual_seed(0))
    norms = pixel_l2_norm(delta, std)
    assert norms.max() <= 0.5 + 1e-6
    assert norms.min() > 0.4, 'uniform in a 192-dim ball puts almost all mass near the sphere'
    assert random_l2_start(x[:0], 0.5, std, torch.Generator().manual_seed(0)).shape == x[:0].shape


def test_projections_bound_the_perturbation():
    x = _batch()
    std = SPACE.std_like(x)
    big = torch.randn_like(x) * 3
    radius = SPACE.linf_budget(8, x)
    assert ((project_linf(big, radius) * std).abs() <= 8 / PIXEL_SCALE + 1e-6).all()
    assert pixel_l2_norm(project_l2(big, 0.25, std), std).max() <= 0.25 + 1e-6
    small = big * 1e-4
    torch.testing.assert_close(project_l2(small, 0.25, std), small)


@pytest.mark.parametrize('norm', ['linf', 'l2'])
def test_project_keeps_pixels_valid_and_inside_the_ball(norm):
    x = _batch()
    std = SPACE.std_like(x)
    radius = SPACE.linf_budget(16, x) if norm == 'linf' else 1.0
    x_adv = project(x + torch.randn_like(x) * 5, x, SPACE, radius, norm)
    pixels = SPACE.to_pixels(x_adv)
    assert pixels.min() >= -1e-6 and pixels.max() <= 1 + 1e-6
    delta = x_adv - x
    if norm == 'linf':
        assert ((delta * std).abs() <= 16 / PIXEL_SCALE + 1e-6).all()
    else:
        assert pixel_l2_norm(delta, std).max() <= 1.0 + 1e-6


def test_l2_direction_is_a_unit_pixel_step_of_steepest_ascent():
    x = _batch()
    std = SPACE.std_like(x)
    grad = torch.randn_like(x)
    direction = l2_direction(grad, std)
    torch.testing.assert_close(pixel_l2_norm(direction, std), torch.ones(x.shape[0]))
    # For a linear loss <grad, x>, no unit pixel step raises it more than the steepest direction.
    gain = (grad * direction).flatten(1).sum(1)
    other = l2_direction(torch.randn_like(x), std)
    assert (gain >= (grad * other).flatten(1).sum(1)).all()


def test_draws_follow_the_generator():
    x = _batch()
    a = uniform(x.shape, x, torch.Generator().manual_seed(3))
    b = uniform(x.shape, x, torch.Generator().manual_seed(3))
    assert torch.equal(a, b)
    mask = bernoulli(4000, 0.2, x, torch.Generator().manual_seed(0))
    assert mask.dtype == torch.bool and 0.17 < mask.float().mean() < 0.23
