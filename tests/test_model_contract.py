"""timm's model contract, checked on every model that ``import timm_advnorm`` registers.

The model modules are discovered, not listed, so a new family is checked the day it is added. Every registered
model, the 338/518/638-layer ones included, is built on the meta device in float64 (cfg fields, classifier reset on
the model's device and dtype, as timm's ``test_model_default_cfgs`` checks); the numerical checks run on the small
models (`registered_models.SMALL_MODEL_MAX_PARAMS`: every family's ``test_*``/``tiny_*`` variant and Galloway et
al.'s MNIST models) at their own input size, one model built per check.
"""
import copy
import math

import pytest
import torch
import torch.nn as nn
import timm
from timm.layers import set_layer_config
from timm.models import create_feature_extractor, get_graph_node_names
from registered_models import (
    ALL_MODELS, FEATURE_LEVELS, MODEL_MODULES, NO_FEATURE_EXTRACTOR, SMALL_MODEL_MAX_PARAMS, SMALL_MODELS)

BATCH = 2
CFG_FIELDS = ('input_size', 'pool_size', 'crop_pct', 'interpolation', 'mean', 'std', 'first_conv', 'classifier')


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)


def _input(model: nn.Module, in_chans: int = 3, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    return torch.randn(BATCH, in_chans, *model.pretrained_cfg['input_size'][1:], dtype=dtype)


def _levels(name: str) -> int:
    return FEATURE_LEVELS.get(name, 5)  # a CNN's stem and four stages


def _first_block(model: nn.Module):
    """The first block or stage grad checkpointing recomputes; None for the linear model, which has none."""
    return next((m for n, m in model.named_modules() if n in ('layer1.0', 'stages.0')), None)


def test_every_model_module_registers_models_and_is_checked():
    assert set(MODEL_MODULES) >= {'mbn_resnet', 'deep_resnet', 'norm_resnet', 'nf_deep_resnet', 'robust_resnet',
                                  'tiny_norm_family', 'galloway_mlp'}
    assert all(timm.list_models(module=module) for module in MODEL_MODULES)
    families_with_small_variant = {module for module in MODEL_MODULES
                                   if any(n in SMALL_MODELS for n in timm.list_models(module=module))}
    # plain-BN deep ResNets and the robust ResNet-50 are timm's own ResNet class, checked by timm's tests
    assert set(MODEL_MODULES) - families_with_small_variant <= {'deep_resnet', 'robust_resnet'}


@pytest.mark.parametrize('name', ALL_MODELS)
def test_meta_create_cfg_fields_and_classifier_reset(name):
    """timm's default-cfg checks, and a classifier removed then re-added keeps the model's device and dtype."""
    model = timm.create_model(name, device='meta', dtype=torch.float64)
    state_dict = model.state_dict()
    assert all(t.is_meta and t.dtype in (torch.float64, torch.int64) for t in state_dict.values())
    assert (sum(p.numel() for p in model.parameters()) < SMALL_MODEL_MAX_PARAMS) == (name in SMALL_MODELS)
    cfg = model.pretrained_cfg
    for field in CFG_FIELDS:
        assert cfg.get(field) is not None, field
    assert f'{cfg["first_conv"]}.weight' in state_dict and f'{cfg["classifier"]}.weight' in state_dict
    assert model.in_chans == 3 and model.num_classes == 1000
    assert model.num_features > 0 and model.head_hidden_size > 0
    model.reset_classifier(0)
    assert model.num_classes == 0 and isinstance(model.get_classifier(), nn.Identity)
    model.reset_classifier(7)
    classifier = model.get_classifier()
    assert model.num_classes == 7 and classifier.weight.shape == (7, model.head_hidden_size)
    assert classifier.weight.is_meta and classifier.weight.dtype == torch.float64


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
def test_features_head_and_classifier_reset(name):
    """timm's `test_model_default_cfgs` on real tensors: features at the cfg's pool size, ``pre_logits`` of
    ``head_hidden_size``, the same values with the classifier removed, the unpooled features with the pooling removed
    too (by `reset_classifier` or at creation); a new classifier keeps the pooling it is given."""
    model = timm.create_model(name).eval()
    x = _input(model)
    with torch.no_grad():
        features = model.forward_features(x)
        pre_logits = model.forward_head(features, pre_logits=True)
        assert features.shape == (BATCH, model.num_features, *model.pretrained_cfg['pool_size'])
        assert pre_logits.shape == (BATCH, model.head_hidden_size)
        assert model(x).shape == (BATCH, model.pretrained_cfg['num_classes'])
        model.reset_classifier(0)
        assert model.num_classes == 0
        torch.testing.assert_close(model(x), pre_logits)
        model.reset_classifier(0, '')
        torch.testing.assert_close(model(x), features)
        model.reset_classifier(7, 'max')
        torch.testing.assert_close(model.forward_head(features, pre_logits=True), features.amax(dim=(2, 3)))
        assert model(x).shape == (BATCH, 7)
        headless = timm.create_model(name, num_classes=0, global_pool='').eval()
        assert headless(x).shape == features.shape


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
def test_features_only_with_grad_checkpointing(name):
    """The extractor returns `forward_intermediates`' levels as `feature_info` describes them (at least timm's
    three); checkpointed, its backward reaches the input. A model with no feature maps refuses, as timm's do."""
    if name in NO_FEATURE_EXTRACTOR:
        with pytest.raises(RuntimeError, match='features_only not implemented'):
            timm.create_model(name, features_only=True)
        return
    torch.manual_seed(0)  # the extractor gets the same weights as `model`: it wraps the same network
    model = timm.create_model(name).eval()
    torch.manual_seed(0)
    extractor = timm.create_model(name, features_only=True).eval()
    extractor.set_grad_checkpointing(True)
    x = _input(model).requires_grad_()
    outputs = extractor(x)
    assert len(outputs) == len(extractor.feature_info) == _levels(name) >= 3
    with torch.no_grad():
        expected = model.forward_intermediates(x, indices=extractor.feature_info.out_indices, intermediates_only=True)
    side = x.shape[-1]
    for out, want, channels, reduction in zip(
            outputs, expected, extractor.feature_info.channels(), extractor.feature_info.reduction()):
        assert out.shape[1] == channels and out.shape[-1] <= math.ceil(side / reduction) + 1
        torch.testing.assert_close(out, want)
    sum(out.mean() for out in outputs).backward()
    assert x.grad is not None and torch.isfinite(x.grad).all() and x.grad.abs().sum() > 0


@pytest.mark.parametrize('name', SMALL_MODELS)
def test_forward_intermediates_and_pruning(name):
    """timm's `test_model_forward_intermediates`, then each level pruned to: the kept level is unchanged, the
    features end there (`forward_features`, `num_features`, ``pre_logits``) and the classifier is gone."""
    model = timm.create_model(name).eval()
    x = _input(model)
    with torch.no_grad():
        final, intermediates = model.forward_intermediates(x)
        torch.testing.assert_close(final, model.forward_features(x))
        assert len(intermediates) == len(model.feature_info) == _levels(name)
        for out, info in zip(intermediates, model.feature_info):
            assert out.shape[1] == info['num_chs'] and out.shape[-1] <= math.ceil(x.shape[-1] / info['reduction']) + 1
        last_n = min(2, len(intermediates))
        last_two = model.forward_intermediates(x, indices=last_n, intermediates_only=True)
        assert [t.shape for t in last_two] == [t.shape for t in intermediates[-last_n:]]
        logits = model(x)
        for level in range(len(intermediates)):
            pruned = copy.deepcopy(model)
            assert pruned.prune_intermediate_layers(indices=[level], prune_head=True) == [level]
            kept = pruned.forward_intermediates(x, indices=[level], stop_early=True, intermediates_only=True)
            torch.testing.assert_close(kept[0], intermediates[level])
            features = pruned.forward_features(x)
            torch.testing.assert_close(pruned.forward_intermediates(x)[0], features)
            if level < len(intermediates) - 1:
                torch.testing.assert_close(features, intermediates[level])
            assert pruned.num_classes == 0 and pruned.num_features == features.shape[1]
            assert pruned.forward_head(features, pre_logits=True).shape[1] == pruned.head_hidden_size
            torch.testing.assert_close(pruned(x), features)
        last = len(intermediates) - 1
        assert model.prune_intermediate_layers(indices=[last], prune_head=False) == [last]
        torch.testing.assert_close(model(x), logits)
        model.set_grad_checkpointing(True)
        torch.testing.assert_close(model.forward_intermediates(x)[0], final)


@pytest.mark.parametrize('name', SMALL_MODELS)
def test_grad_checkpointing_recomputes_and_keeps_the_result(name):
    """`set_grad_checkpointing` really checkpoints: a block runs again in the backward pass, with equal gradients
    (the linear model has no block: checkpointing changes nothing)."""
    model = timm.create_model(name, num_classes=10).eval()  # eval: running statistics, no double counting
    x = _input(model)
    block = _first_block(model)
    assert (block is None) == (_levels(name) == 1)
    calls = []
    if block is not None:
        block.register_forward_pre_hook(lambda *_: calls.append(1))  # a recomputation may stop before its end

    def gradients():
        model.zero_grad(set_to_none=True)
        calls.clear()
        model(x).logsumexp(1).mean().backward()
        return len(calls), [p.grad.clone() for p in model.parameters() if p.grad is not None]

    plain_calls, plain = gradients()
    model.set_grad_checkpointing(True)
    checked_calls, checked = gradients()
    assert (plain_calls, checked_calls) == ((1, 2) if block is not None else (0, 0))
    assert len(plain) == len(checked) > 0
    for a, b in zip(plain, checked):
        torch.testing.assert_close(a, b)
