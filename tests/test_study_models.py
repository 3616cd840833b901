"""The tiny fair model family of the paper studies: one layout, only the normalization differs."""
import pytest
import timm
import torch

import timm_advnorm  # noqa: F401  (registers the models)
from timm_advnorm.layers import has_mixture_bn, route
from timm_advnorm.models.tiny_norm_family import NORM_LAYERS, NormFreeBlock

FAMILY = [f'tiny_{norm}_resnet' for norm in NORM_LAYERS]


def _parameters(model: torch.nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


def test_family_members_have_the_same_size_within_two_percent():
    counts = {name: _parameters(timm.create_model(name, num_classes=10)) for name in FAMILY}
    assert max(counts.values()) / min(counts.values()) < 1.02, counts
    convs = {name: [tuple(m.weight.shape) for m in timm.create_model(name).modules()
                    if isinstance(m, torch.nn.Conv2d)] for name in FAMILY}
    assert all(shapes == convs['tiny_bn_resnet'] for shapes in convs.values()), 'the layouts differ'


@pytest.mark.parametrize('name', FAMILY)
def test_member_trains_a_step_and_starts_as_its_shortcut_path(name):
    torch.manual_seed(0)
    model = timm.create_model(name, num_classes=10)
    x, y = torch.randn(8, 3, 32, 32), torch.randint(0, 10, (8,))
    loss = torch.nn.functional.cross_entropy(model(x), y)
    loss.backward()
    assert all(p.grad is not None for n, p in model.named_parameters() if 'adv_bn' not in n)
    residual_scales = [m.skip_gain for m in model.modules() if isinstance(m, NormFreeBlock)] or \
        [block.norm2.weight for block in model.stages]
    assert all(float(s.detach().abs().max()) == 0.0 for s in residual_scales)  # zero-initialised residual branch


def test_nf_member_preserves_the_signal_variance_at_init():
    torch.manual_seed(0)
    model = timm.create_model('tiny_nf_resnet', num_classes=10)
    for block in model.stages:
        block.skip_gain.data.fill_(1.0)  # the residual branches switched on: their variance must be the predicted one
    h = model.stem(torch.randn(256, 3, 32, 32))
    for block in model.stages:
        h = block(h)
        assert 0.7 < float(h.var()) < 1.5


def test_mbn_member_routes_and_its_branches_start_equal():
    model = timm.create_model('tiny_mbn_resnet', num_classes=10).eval()
    assert has_mixture_bn(model)
    x = torch.randn(4, 3, 32, 32)
    with torch.no_grad(), route(model, 'adv'):
        adv = model(x)
    with torch.no_grad():
        assert torch.allclose(model(x), adv)


def test_unknown_norm_and_branch_of_a_plain_member_are_errors():
    with pytest.raises(ValueError, match='inference_branch does not apply'):
        timm.create_model('tiny_bn_resnet', inference_branch='adv')
    from timm_advnorm.models.tiny_norm_family import TinyNormResNet
    with pytest.raises(ValueError, match='norm must be one of'):
        TinyNormResNet(norm='ln')
