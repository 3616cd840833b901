"""timm's model contract, checked on every model that ``import timm_advnorm`` registers.

The model modules are discovered, not listed, so a new family is checked the day it is added. Numerical checks run
on each family's small variants (``test_*``, ``tiny_*``) at their own input size, as timm's model tests do; every
registered model, the 338/518/638-layer ones included, is built and checked on the meta device.
"""
import pytest
import torch
import torch.nn as nn
import timm
from timm.layers import set_layer_config
from timm.models import create_feature_extractor, get_graph_node_names
from registered_models import ALL_MODELS, FEATURE_LEVELS, MODEL_MODULES, SMALL_MODELS

BATCH = 2


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)


def _input(model: nn.Module, in_chans: int = 3, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    return torch.randn(BATCH, in_chans, *model.pretrained_cfg['input_size'][1:], dtype=dtype)


def test_every_model_module_registers_models_and_is_checked():
    assert set(MODEL_MODULES) >= {'mbn_resnet', 'deep_resnet', 'norm_resnet', 'nf_deep_resnet', 'robust_resnet',
                                  'tiny_norm_family', 'galloway_mlp'}
    assert all(timm.list_models(module=module) for module in MODEL_MODULES)
    families_with_small_variant = {module for module in MODEL_MODULES
                                   if any(n in SMALL_MODELS for n in timm.list_models(module=module))}
    # plain-BN deep ResNets and the robust ResNet-50 are timm's own ResNet class, checked by timm's tests
    assert set(MODEL_MODULES) - families_with_small_variant <= {'deep_resnet', 'robust_resnet'}


@pytest.mark.parametrize('name', ALL_MODELS)
def test_meta_create_with_cfg_fields(name):
    model = timm.create_model(name, device='meta')
    assert all(t.is_meta for t in model.state_dict().values())
    cfg = model.pretrained_cfg
    for field in ('input_size', 'pool_size', 'crop_pct', 'interpolation', 'mean', 'std', 'first_conv', 'classifier'):
        assert cfg.get(field) is not None, field
    state_dict = model.state_dict()
    assert f'{cfg["first_conv"]}.weight' in state_dict and f'{cfg["classifier"]}.weight' in state_dict
    assert model.in_chans == 3 and model.num_classes == 1000


@pytest.mark.parametrize('name', ALL_MODELS)
def test_unknown_creation_argument_is_a_type_error(name):
    with pytest.raises(TypeError):
        timm.create_model(name, device='meta', not_an_argument=1)


@pytest.mark.parametrize('name', SMALL_MODELS)
def test_creation_arguments(name):
    model = timm.create_model(name, in_chans=1, num_classes=0, global_pool='max').eval()
    assert model.in_chans == 1 and model.num_classes == 0
    x = _input(model, in_chans=1)
    with torch.no_grad():
        features = model.forward_features(x)
        pooled = model(x)
    assert pooled.shape == (BATCH, model.num_features)
    torch.testing.assert_close(pooled, features.amax(dim=(2, 3)))
    doubles = timm.create_model(name, dtype=torch.float64)
    assert {t.dtype for t in doubles.parameters()} == {torch.float64}


@pytest.mark.parametrize('name', SMALL_MODELS)
def test_reset_classifier_keeps_pooling_device_and_dtype(name):
    model = timm.create_model(name, global_pool='max', dtype=torch.float64).eval()
    model.reset_classifier(7)
    assert model.num_classes == 7
    assert model.get_classifier().weight.dtype == torch.float64
    x = _input(model, dtype=torch.float64)
    with torch.no_grad():
        features = model.forward_features(x)
        torch.testing.assert_close(model.forward_head(features, pre_logits=True), features.amax(dim=(2, 3)))
        assert model(x).shape == (BATCH, 7)
    meta = timm.create_model(name, device='meta')
    meta.reset_classifier(5)
    assert meta.get_classifier().weight.is_meta


@pytest.mark.parametrize('name', SMALL_MODELS)
def test_plain_training_backward_reaches_every_parameter(name):
    """No route set: what timm's train.py runs; every parameter receives a gradient (plain DDP needs it)."""
    model = timm.create_model(name, num_classes=10).train()
    model(_input(model)).logsumexp(1).mean().backward()
    assert [n for n, p in model.named_parameters() if p.grad is None] == []


@pytest.mark.parametrize('name', SMALL_MODELS)
def test_torchscript_forward_and_backward(name):
    with set_layer_config(scriptable=True):
        model = timm.create_model(name, num_classes=10).eval()
    x = _input(model)
    scripted = torch.jit.script(model)
    with torch.no_grad():
        torch.testing.assert_close(scripted(x), model(x), atol=1e-5, rtol=1e-5)
    scripted.train()
    scripted(x).logsumexp(1).mean().backward()
    assert any(p.grad is not None for p in scripted.parameters())


@pytest.mark.parametrize('name', SMALL_MODELS)
def test_fx_forward_and_backward(name):
    model = timm.create_model(name, num_classes=10).train()
    train_nodes, _ = get_graph_node_names(model)
    fx_model = create_feature_extractor(model, {train_nodes[-1]: 'out'})
    fx_model(_input(model))['out'].logsumexp(1).mean().backward()
    assert [n for n, p in fx_model.named_parameters() if p.grad is None] == []


@pytest.mark.parametrize('name', SMALL_MODELS)
def test_features_only_matches_feature_info(name):
    model = timm.create_model(name).eval()
    extractor = timm.create_model(name, features_only=True).eval()
    x = _input(model)
    with torch.no_grad():
        outputs = extractor(x)
    assert len(outputs) == len(model.feature_info)
    assert len(outputs) == FEATURE_LEVELS[name] if name in FEATURE_LEVELS else len(outputs) >= 4
    for out, channels, reduction in zip(outputs, extractor.feature_info.channels(), extractor.feature_info.reduction()):
        assert out.shape[1] == channels and out.shape[-1] == x.shape[-1] // reduction


@pytest.mark.parametrize('name', SMALL_MODELS)
def test_forward_intermediates_and_pruning(name):
    if FEATURE_LEVELS.get(name, 4) < 2:
        pytest.skip('one feature level: nothing to select or prune')
    model = timm.create_model(name).eval()
    x = _input(model)
    with torch.no_grad():
        final, intermediates = model.forward_intermediates(x)
        torch.testing.assert_close(final, model.forward_features(x))
        assert [t.shape[1] for t in intermediates] == [info['num_chs'] for info in model.feature_info]
        last_two = model.forward_intermediates(x, indices=2, intermediates_only=True)
        assert [t.shape for t in last_two] == [t.shape for t in intermediates[-2:]]
        kept = model.prune_intermediate_layers(indices=[1], prune_head=True)
        assert list(kept) == [1]
        pruned = model.forward_intermediates(x, indices=[1], intermediates_only=True)
        torch.testing.assert_close(pruned[0], intermediates[1])
        assert model.num_classes == 0


@pytest.mark.parametrize('name', SMALL_MODELS)
def test_grad_checkpointing_recomputes_and_keeps_the_result(name):
    """`set_grad_checkpointing` really checkpoints: a block runs again in the backward pass, with equal gradients."""
    model = timm.create_model(name, num_classes=10).eval()  # eval: running statistics, no double counting
    x = _input(model)
    if FEATURE_LEVELS.get(name, 4) < 2:
        pytest.skip('one affine layer: no block to recompute')
    block = next(m for n, m in model.named_modules() if n in ('layer1.0', 'stages.0'))  # the first block or stage
    calls = []
    block.register_forward_pre_hook(lambda *_: calls.append(1))  # a recomputation may stop before its end

    def gradients():
        model.zero_grad(set_to_none=True)
        calls.clear()
        model(x).logsumexp(1).mean().backward()
        return len(calls), [p.grad.clone() for p in model.parameters() if p.grad is not None]

    plain_calls, plain = gradients()
    model.set_grad_checkpointing(True)
    checked_calls, checked = gradients()
    assert (plain_calls, checked_calls) == (1, 2)
    for a, b in zip(plain, checked):
        torch.testing.assert_close(a, b)
