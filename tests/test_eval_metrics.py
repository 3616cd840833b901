"""NoFrost §4.3 robustness metrics (decision margin, boundary thickness, smoothness) and ImageNet-C mCE."""
import math

import pytest
import torch
import torch.nn as nn

from timm_advnorm.attacks import InputSpace
from timm_advnorm.attacks.corruptions import IMAGENET_C_CORRUPTIONS, SEVERITIES
from timm_advnorm.eval.plan.metrics import boundary_thickness, decision_margin, smoothness_kl
from timm_advnorm.eval.results.corruption_error import ALEXNET_MEAN_ERROR, corruption_errors


def test_decision_margin_is_the_probability_gap_and_its_sign_is_correctness():
    logits = torch.tensor([[2.0, 0.0, 0.0], [0.0, 3.0, 1.0]])
    labels = torch.tensor([0, 2])
    probs = logits.softmax(dim=1)
    margin = decision_margin(logits, labels)
    assert margin[0] == pytest.approx((probs[0, 0] - probs[0, 1]).item())
    assert margin[1] == pytest.approx((probs[1, 2] - probs[1, 1]).item())
    random = torch.randn(64, 10)
    labels = torch.randint(0, 10, (64,))
    margin = decision_margin(random, labels)
    assert torch.equal(margin > 0, random.argmax(dim=1) == labels)
    assert margin.abs().max() <= 1


def test_smoothness_is_zero_for_identical_outputs_and_positive_otherwise():
    logits = torch.randn(16, 10)
    assert torch.allclose(smoothness_kl(logits, logits), torch.zeros(16), atol=1e-6)
    assert (smoothness_kl(logits, logits + torch.randn(16, 10)) > 0).all()


class _Linear2(nn.Module):
    """Two classes with logits (s, -s), s = k * sum(x): p_0 - p_1 = tanh(s), known in closed form."""

    def __init__(self, k: float):
        super().__init__()
        self.k = k

    def forward(self, x):
        s = self.k * x.flatten(1).sum(dim=1, keepdim=True)
        return torch.cat([s, -s], dim=1)


def test_boundary_thickness_matches_the_closed_form_on_a_linear_model():
    space = InputSpace(mean=(0.0,), std=(1.0,))
    k, d = 0.5, 4
    x = torch.full((1, 1, 2, 2), 1.0)       # s = 2: g = tanh(2) = 0.96 > beta
    x_adv = torch.full((1, 1, 2, 2), -1.0)  # s = -2: past the boundary
    thickness = boundary_thickness(_Linear2(k), x, x_adv, torch.tensor([0]), torch.tensor([1]), space,
                                   num_points=2001)
    # g(t) = tanh(2 - 4t) lies in (0, 0.75) for t in (0.5 - atanh(0.75) / 4, 0.5)
    fraction = math.atanh(0.75) / 4
    length = math.sqrt(d) * 2.0
    assert thickness.item() == pytest.approx(length * fraction, rel=1e-2)


def test_boundary_thickness_is_bounded_by_the_segment_length():
    space = InputSpace()
    model = nn.Sequential(nn.Flatten(), nn.Linear(3 * 4 * 4, 5))
    x, x_adv = torch.randn(8, 3, 4, 4), torch.randn(8, 3, 4, 4)
    source, target = torch.zeros(8, dtype=torch.long), torch.ones(8, dtype=torch.long)
    thickness = boundary_thickness(model, x, x_adv, source, target, space, num_points=16)
    length = ((x_adv - x) * space.std_like(x)).flatten(1).norm(dim=1)
    assert (thickness >= 0).all() and (thickness <= length + 1e-6).all()
    same = boundary_thickness(model, x, x_adv, source, source, space, num_points=16)
    assert torch.equal(same, torch.zeros(8))  # g_ii = 0 never lies strictly above alpha = 0


def test_corruption_errors_are_normalized_by_alexnet_and_need_the_whole_suite():
    alexnet = {(name, severity): 100.0 * (1.0 - error) for name, error in ALEXNET_MEAN_ERROR.items()
               for severity in SEVERITIES}
    errors = corruption_errors(alexnet)
    assert errors['mce'] == pytest.approx(100.0) and all(ce == pytest.approx(100.0) for ce in errors['ce'].values())
    assert set(errors['ce']) == set(IMAGENET_C_CORRUPTIONS)
    halved = {key: 100.0 - (100.0 - acc) / 2 for key, acc in alexnet.items()}
    assert corruption_errors(halved)['mce'] == pytest.approx(50.0)
    # severities average before the ratio: an error only at severity 5 counts a fifth
    one = {key: 0.0 if key == ('fog', 5) else 100.0 for key in alexnet}
    assert corruption_errors(one)['ce']['fog'] == pytest.approx(100.0 * 0.2 / ALEXNET_MEAN_ERROR['fog'], rel=1e-4)
    del alexnet['fog', 3]
    assert corruption_errors(alexnet) is None
