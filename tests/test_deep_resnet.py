"""Very deep ResNets (Xie & Yuille): stage split rule, depth, parameter counts, and one real training step."""
import pytest
import torch
import torch.nn as nn
import timm

import timm_advnorm  # noqa: F401  (registers the models)
from timm_advnorm.layers import mixture_bn_modules, route
from timm_advnorm.models import bottleneck_resnet_depth, deep_resnet_layers

DEEP_LAYERS = {338: (3, 42, 64, 3), 518: (3, 66, 100, 3), 638: (3, 82, 124, 3)}  # the documented stage split
STANDARD_LAYERS = {152: (3, 8, 36, 3), 200: (3, 24, 36, 3)}
DEEP_MODELS = [f'{prefix}resnet{depth}' for prefix in ('', 'mbn_', 'nfr_') for depth in DEEP_LAYERS]
DEEP_MODELS += ['mbn_resnet152', 'mbn_resnet200', 'nfr_resnet152', 'nfr_resnet200', 'gn_resnet152']


def _meta_model(name: str, **kwargs) -> nn.Module:
    with torch.device('meta'):
        return timm.create_model(name, **kwargs)


def _stages(model: nn.Module) -> list:
    return list(model.stages) if hasattr(model, 'stages') else [model.layer1, model.layer2, model.layer3, model.layer4]


def _n_params(module: nn.Module) -> int:
    return sum(p.numel() for p in module.parameters())


def _weighted_depth(model: nn.Module) -> int:
    """Convolutions and linear layers on the main path: shortcut projections do not count towards a ResNet's depth."""
    return sum(isinstance(m, (nn.Conv2d, nn.Linear)) and 'downsample' not in name for name, m in model.named_modules())


@pytest.mark.parametrize('depth, layers', [*DEEP_LAYERS.items(), (200, STANDARD_LAYERS[200])])
def test_split_rule(depth, layers):
    assert deep_resnet_layers(depth) == layers
    assert bottleneck_resnet_depth(layers) == depth


def test_split_rule_anchored_on_timm_resnet200():
    resnet200 = _meta_model('resnet200')
    assert tuple(len(stage) for stage in _stages(resnet200)) == deep_resnet_layers(200)


@pytest.mark.parametrize('depth', [152, 199, 339, 0])
def test_split_rule_rejects_other_depths(depth):
    with pytest.raises(ValueError, match='3\\*blocks \\+ 2'):
        deep_resnet_layers(depth)


@pytest.mark.parametrize('name', DEEP_MODELS)
def test_blocks_and_depth(name):
    depth = int(name.rsplit('resnet', 1)[1])
    model = _meta_model(name)
    layers = tuple(len(stage) for stage in _stages(model))
    assert layers == STANDARD_LAYERS.get(depth, DEEP_LAYERS.get(depth))
    assert _weighted_depth(model) == bottleneck_resnet_depth(layers) == depth


def _bottleneck_params(width: int) -> int:
    """A bottleneck block inside a stage: 1x1 (4w->w), 3x3 (w->w), 1x1 (w->4w) convolutions and three BNs."""
    return 17 * width * width + 12 * width


@pytest.mark.parametrize('depth', sorted(DEEP_LAYERS))
def test_plain_param_count(depth):
    """Relative to timm's ResNet-200, only whole blocks are added to stages 2 (width 128) and 3 (width 256)."""
    extra = [n - n200 for n, n200 in zip(DEEP_LAYERS[depth], STANDARD_LAYERS[200])]
    added = extra[1] * _bottleneck_params(128) + extra[2] * _bottleneck_params(256)
    expected = _n_params(_meta_model('resnet200')) + added
    assert extra[0] == extra[3] == 0
    assert _n_params(_meta_model(f'resnet{depth}')) == expected


@pytest.mark.parametrize('depth', sorted(DEEP_LAYERS))
def test_normalizer_free_param_count(depth):
    model, reference = _meta_model(f'nfr_resnet{depth}'), _meta_model('nfr_resnet200')
    extra = sum((n - n200) * _n_params(stage[-1])
                for n, n200, stage in zip(DEEP_LAYERS[depth], STANDARD_LAYERS[200], _stages(model)))
    assert _n_params(model) == _n_params(reference) + extra


def test_layers_stay_overridable():
    assert _n_params(_meta_model('resnet338', layers=(3, 4, 6, 3))) == _n_params(_meta_model('resnet50'))
    assert _n_params(_meta_model('mbn_resnet638', layers=(3, 4, 6, 3))) == _n_params(_meta_model('mbn_resnet50'))


def test_normalizer_free_matches_timm_nf_resnet():
    """Our NF config is timm's: at ResNet-50 depths it gives exactly timm's `nf_resnet50` (names and shapes)."""
    ours = _meta_model('nfr_resnet152', depths=(3, 4, 6, 3)).state_dict()
    timms = _meta_model('nf_resnet50').state_dict()
    assert {k: v.shape for k, v in ours.items()} == {k: v.shape for k, v in timms.items()}


def test_mbn_resnet338_trains_one_step():
    """One real split-route training step through 338 layers: finite, every parameter reached, both branches used."""
    torch.manual_seed(0)
    model = timm.create_model('mbn_resnet338', num_classes=10).train()
    x, target = torch.randn(4, 3, 32, 32), torch.randint(0, 10, (4,))
    with route(model, 'split', n_clean=2):
        loss = nn.functional.cross_entropy(model(x), target)
    loss.backward()
    assert torch.isfinite(loss)
    assert [n for n, p in model.named_parameters() if p.grad is None or not torch.isfinite(p.grad).all()] == []
    for mbn in mixture_bn_modules(model):
        assert mbn.num_batches_tracked.item() == mbn.adv_bn.num_batches_tracked.item() == 1
