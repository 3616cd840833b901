"""BN folding for attacks: the folded copy computes the same function and input gradient, and never folds unsafely."""
import pytest
import timm
import torch
import torch.nn as nn
from timm.layers import StdConv2d
from torch.nn.modules.batchnorm import _BatchNorm

from timm_advnorm.attacks import PGD, InputSpace
from timm_advnorm.attacks.fold_bn import BatchNormFolder, find_conv_bn_pairs, fold_batchnorm
from timm_advnorm.layers import LogitInterpolation, MixtureBatchNorm2d, convert_to_mixture_bn, route

IMG = 32


def _randomize_bn(model: nn.Module, seed: int = 0) -> nn.Module:
    """Give every BN (each mixture branch its own) non-trivial statistics and affine parameters."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, _BatchNorm):
                n = m.num_features
                m.running_mean.copy_(torch.randn(n, generator=g) * 0.5)
                m.running_var.copy_(torch.rand(n, generator=g) * 2 + 0.1)
                m.weight.copy_(torch.randn(n, generator=g))
                m.bias.copy_(torch.randn(n, generator=g) * 0.5)
    return model


def _model(name: str, mixture: bool = False) -> nn.Module:
    model = timm.create_model(name, num_classes=10)
    if mixture:
        model = convert_to_mixture_bn(model)
    return _randomize_bn(model).double().eval()


def _input_gradient(model: nn.Module, x: torch.Tensor, weights: torch.Tensor):
    x = x.clone().requires_grad_(True)
    logits = model(x)
    grad, = torch.autograd.grad((logits * weights).sum(), x)
    return logits.detach(), grad


def _assert_same_function(model: nn.Module, folded: nn.Module) -> None:
    g = torch.Generator().manual_seed(1)
    x = torch.randn(4, 3, IMG, IMG, generator=g, dtype=torch.float64)
    weights = torch.randn(4, 10, generator=g, dtype=torch.float64)
    logits, grad = _input_gradient(model, x, weights)
    logits_f, grad_f = _input_gradient(folded, x, weights)
    torch.testing.assert_close(logits_f, logits, rtol=0, atol=1e-10)
    torch.testing.assert_close(grad_f, grad, rtol=0, atol=1e-10 * grad.abs().max().item())


def _norm_layers(model: nn.Module):
    return [m for m in model.modules() if isinstance(m, _BatchNorm)]


@pytest.mark.parametrize('name', ['test_resnet', 'test_efficientnet'])
def test_fold_is_exact_and_removes_every_bn(name):
    model = _model(name)
    state = {k: v.clone() for k, v in model.state_dict().items()}
    folded = fold_batchnorm(model)
    assert not _norm_layers(folded)
    _assert_same_function(model, folded)
    assert _norm_layers(model), 'the original keeps its BN layers'
    for k, v in model.state_dict().items():
        assert torch.equal(v, state[k]), f'{k} changed in the original'


@pytest.mark.parametrize('channels_last', [None, True, False])
def test_folded_weights_take_the_requested_layout_and_leave_the_original_alone(channels_last):
    """On the CPU the folded copy defaults to channels_last (oneDNN's fast layout); the model keeps its own."""
    model = _model('test_resnet')
    folded = fold_batchnorm(model, channels_last=channels_last)
    want = torch.channels_last if channels_last in (None, True) else torch.contiguous_format
    folded_convs = [m for m in folded.modules() if isinstance(m, nn.Conv2d)]
    assert folded_convs and all(m.weight.is_contiguous(memory_format=want) for m in folded_convs)
    assert all(m.weight.is_contiguous() for m in model.modules() if isinstance(m, nn.Conv2d))
    _assert_same_function(model, folded)


@pytest.mark.parametrize('name', ['test_resnet', 'test_efficientnet'])
@pytest.mark.parametrize('branch', ['clean', 'adv'])
def test_fold_mixture_bn_uses_current_route(name, branch):
    model = _model(name, mixture=True)
    with route(model, branch):
        folded = fold_batchnorm(model)
        assert not _norm_layers(folded)
        _assert_same_function(model, folded)


def test_fold_mixture_bn_mix_route():
    model = _model('test_resnet', mixture=True)
    with route(model, 'mix', gamma=0.3):
        _assert_same_function(model, fold_batchnorm(model))


def test_split_route_is_left_unfolded():
    model = _model('test_resnet', mixture=True)
    with route(model, 'split', n_clean=2):
        folded = fold_batchnorm(model)
        assert all(not isinstance(m, MixtureBatchNorm2d) or m.route == 'split' for m in folded.modules())
        assert len([m for m in folded.modules() if isinstance(m, MixtureBatchNorm2d)]) == \
            len([m for m in model.modules() if isinstance(m, MixtureBatchNorm2d)])
        _assert_same_function(model, folded)


def test_training_mode_bn_is_not_folded():
    model = _model('test_resnet').train()
    assert fold_batchnorm(model) is model


def test_module_called_twice_is_not_folded():
    """LogitInterpolation runs every layer once per route: no single affine map per BN, so nothing folds."""
    model = LogitInterpolation(_model('test_resnet', mixture=True), gamma=0.5)
    assert find_conv_bn_pairs(model) == []
    assert fold_batchnorm(model) is model


def test_conv_subclass_and_shared_conv_output_are_not_folded():
    std_conv = nn.Sequential(StdConv2d(3, 4, 3), nn.BatchNorm2d(4)).eval()
    assert find_conv_bn_pairs(std_conv) == []

    class Residual(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv, self.bn = nn.Conv2d(3, 3, 1), nn.BatchNorm2d(3)

        def forward(self, x):
            z = self.conv(x)
            return self.bn(z) + z  # the conv output is used twice: folding the BN would change the residual

    assert find_conv_bn_pairs(Residual().eval()) == []


class _ConvBN(nn.Module):
    def __init__(self, conv: nn.Module = None):
        super().__init__()
        self.conv = conv if conv is not None else nn.Conv2d(3, 4, 3, padding=1)
        self.bn = nn.BatchNorm2d(4)

    def forward(self, x):
        return self.bn(self.conv(x))


def test_hooked_or_reparametrized_layers_are_not_folded():
    """A hook would be dropped with the BN or see the folded weight; hook-based weight norm breaks the copy."""
    hooked_bn = _randomize_bn(_ConvBN()).eval()
    hooked_bn.bn.register_forward_hook(lambda module, args, out: 2 * out)
    pre_hooked_conv = _randomize_bn(_ConvBN()).eval()
    pre_hooked_conv.conv.register_forward_pre_hook(lambda module, args: (args[0] + 1,))
    weight_normed = _randomize_bn(_ConvBN(nn.utils.weight_norm(nn.Conv2d(3, 4, 3, padding=1)))).eval()
    for model in (hooked_bn, pre_hooked_conv, weight_normed):
        assert find_conv_bn_pairs(model) == []
        assert fold_batchnorm(model) is model


def test_conv_weight_read_elsewhere_is_not_folded():
    class TiedWeight(_ConvBN):
        def forward(self, x):
            return self.bn(self.conv(x)) + nn.functional.conv2d(x, self.conv.weight, padding=1)

    assert find_conv_bn_pairs(TiedWeight().eval()) == []


def test_folder_keeps_layouts_for_a_model_viewing_feature_maps():
    """``.view`` of a feature map fails on the channels_last layout of the CPU default: the folder checks once."""
    class Viewing(nn.Module):
        def __init__(self):
            super().__init__()
            self.features, self.fc = _ConvBN(), nn.Linear(4 * 8 * 8, 10)

        def forward(self, x):
            return self.fc(self.features(x).view(x.shape[0], -1))

    model = _randomize_bn(Viewing()).double().eval()
    x = torch.randn(2, 3, 8, 8, dtype=torch.float64)
    with pytest.raises(RuntimeError):
        fold_batchnorm(model)(x)
    folded = BatchNormFolder()(model, x)
    assert folded is not model and not isinstance(folded.features.bn, nn.BatchNorm2d)
    torch.testing.assert_close(folded(x), model(x))
    space = InputSpace.from_model(model)
    y = torch.tensor([0, 1])
    torch.testing.assert_close(PGD(space, steps=2, seed=0)(model, x, y),
                               PGD(space, steps=2, seed=0, fold_bn=False)(model, x, y))


def test_folder_falls_back_to_the_model_when_the_fold_changes_the_function():
    """What tracing cannot see (here: a global forward hook doubling every BN output) is caught by the check."""
    model = _model('test_resnet')
    x = torch.randn(2, 3, IMG, IMG, dtype=torch.float64)
    handle = nn.modules.module.register_module_forward_hook(
        lambda module, args, out: 2 * out if isinstance(module, _BatchNorm) else out)
    try:
        assert BatchNormFolder()(model, x) is model
    finally:
        handle.remove()


def test_untraceable_model_falls_back():
    class DataDependent(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv, self.bn = nn.Conv2d(3, 3, 1), nn.BatchNorm2d(3)

        def forward(self, x):
            return self.bn(self.conv(x)) if x.sum() > 0 else x

    model = DataDependent().eval()
    assert fold_batchnorm(model) is model


def test_folder_retraces_only_when_structure_changes(monkeypatch):
    import timm_advnorm.attacks.fold_bn as fold_bn
    calls = []
    original = fold_bn.find_conv_bn_pairs
    monkeypatch.setattr(fold_bn, 'find_conv_bn_pairs', lambda m: calls.append(1) or original(m))
    model = _model('test_resnet')
    folder = BatchNormFolder()
    folder(model)
    folder(model)
    assert len(calls) == 1
    model.bn1 = nn.Identity()
    folder(model)
    assert len(calls) == 2


def test_pgd_with_and_without_folding_agree():
    model = _model('test_resnet')
    space = InputSpace.from_model(model)
    g = torch.Generator().manual_seed(0)
    x = space.from_pixels(torch.rand(2, 3, IMG, IMG, generator=g, dtype=torch.float64))
    y = torch.randint(0, 10, (2,), generator=g)
    kwargs = dict(steps=2, seed=0, targeted=True, best_iterate=False)
    x_folded = PGD(space, fold_bn=True, **kwargs)(model, x, y)
    x_plain = PGD(space, fold_bn=False, **kwargs)(model, x, y)
    torch.testing.assert_close(x_folded, x_plain, rtol=0, atol=1e-9)
