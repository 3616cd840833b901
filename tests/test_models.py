"""Registered models: the checks timm applies to its own models, plus normalization-specific properties.

Real-size models are built on the meta device (shapes only, no memory, no compute); every numerical check runs on
the tiny ``test_*`` variant of its family. timm's generic contract (cfg fields, classifier reset, TorchScript,
``features_only``, intermediates, pruning, checkpointing) is `test_model_contract.py`'s.
"""
import json
import sys

import pytest
import torch
import torch.nn as nn
import timm
from timm.layers import GroupNorm
from timm.models import create_feature_extractor, get_graph_node_names
from timm.models.resnet import BasicBlock, Bottleneck
from torch.nn.modules.batchnorm import _BatchNorm

import timm_advnorm  # noqa: F401  (registers the models)
from timm_advnorm.layers import MixtureBatchNorm2d, branch_state_dict, mixture_bn_modules, route
from timm_advnorm.models import AffineInstanceNorm2d, base_architecture
from registered_models import (
    ALL_MODELS, FEATURE_LEVELS, FIXED_SIZE_MODELS, MODEL_MODULES, NO_FEATURE_EXTRACTOR, SMALL_MODELS, UNTRAINED_MODELS)

OUR_MODULES = MODEL_MODULES
OUR_MODELS = ALL_MODELS
MBN_MODELS = timm.list_models(module='mbn_resnet')
SHALLOW_MODELS = [name for name in OUR_MODELS if not name.endswith(('338', '518', '638'))]
LIGHT_MODELS = [name for name in SHALLOW_MODELS if not name.endswith(('152', '200'))]
TINY_MODELS = SMALL_MODELS
ROUTES = [('clean', {}), ('adv', {}), ('split', {'n_clean': 2}), ('interleaved', {}), ('mix', {'gamma': 0.3})]
BATCH = 4


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)


def _meta_model(name: str, **kwargs) -> nn.Module:
    with torch.device('meta'):
        return timm.create_model(name, **kwargs)


def _tiny_input(model: nn.Module, batch: int = BATCH) -> torch.Tensor:
    return torch.randn(batch, *model.pretrained_cfg['input_size'])


def _randomize_adv_branch(model: nn.Module) -> None:
    """Make the adversarial branch differ from the clean one, so that routes give different outputs."""
    with torch.no_grad():
        for mbn in mixture_bn_modules(model):
            mbn.adv_bn.weight.uniform_(0.5, 1.5)
            mbn.adv_bn.bias.normal_(0.0, 0.2)
            mbn.adv_bn.running_mean.normal_(0.0, 0.2)
            mbn.adv_bn.running_var.uniform_(0.5, 2.0)


def _forward(model: nn.Module, x: torch.Tensor):
    """Forward on the split route for mixture-BN models (every parameter in use), plainly otherwise."""
    if mixture_bn_modules(model):
        with route(model, 'split', n_clean=x.shape[0] // 2):
            return model(x)
    return model(x)


def test_families_and_tiny_variants_registered():
    assert set(TINY_MODELS) <= set(OUR_MODELS)
    assert {'mbn_resnet152', 'resnet338', 'resnet518', 'resnet638', 'gn_resnet152', 'in_resnet26',
            'nfr_resnet152', 'nfr_resnet200'} <= set(OUR_MODELS)


def test_no_name_taken_from_timm():
    """Re-registering a timm name only warns and wipes timm's pretrained tags; a shared module name merges registries.

    timm's `register_model` lists every entrypoint in its module's ``__all__``, so timm's own names are there.
    """
    timm_modules = {name: module for name, module in list(sys.modules.items()) if name.startswith('timm.models.')}
    timm_names = {entry for module in timm_modules.values() for entry in getattr(module, '__all__', ())}
    assert 'resnet50' in timm_names and 'test_resnet' in timm_names
    assert not set(OUR_MODELS) & timm_names
    assert not set(OUR_MODULES) & {name.rsplit('.', 1)[-1] for name in timm_modules}


@pytest.mark.parametrize('name', UNTRAINED_MODELS)
def test_default_cfg_lists_no_weights_and_serializes(name):
    cfg = timm.models.get_pretrained_cfg(name)
    assert cfg.architecture == name
    assert not cfg.has_weights and not cfg.hf_hub_id and not cfg.url
    json.dumps(cfg.to_dict())
    assert name not in timm.list_pretrained()


# Meta forwards cost ~10 ms per layer (meta kernels are Python). Deeper models share their classes with the shallower
# ones: 338/518/638-layer models are covered structurally (and by one real step) in test_deep_resnet.py, and
# 152/200-layer models skip the feature and backward checks.
@pytest.mark.parametrize('name', SHALLOW_MODELS)
def test_meta_forward_head_and_reset_classifier(name):
    """timm's default-cfg test: feature and pooled shapes match the cfg, classifier reset, no-pool/no-head model."""
    model = _meta_model(name).eval()
    cfg = model.pretrained_cfg
    features = model.forward_features(torch.empty(1, *cfg['input_size'], device='meta'))
    assert features.shape[1] == model.num_features and tuple(features.shape[-2:]) == tuple(cfg['pool_size'])
    pre_logits = model.forward_head(features, pre_logits=True)
    assert pre_logits.shape == (1, model.head_hidden_size)
    assert model.forward_head(features).shape == (1, cfg['num_classes'])
    model.reset_classifier(0)
    assert model.num_classes == 0 and model.forward_head(features).shape == pre_logits.shape
    model.reset_classifier(0, '')
    assert model.forward_head(features).shape == features.shape
    assert _meta_model(name, num_classes=0, global_pool='').forward_head(features).shape == features.shape


@pytest.mark.parametrize('name', [name for name in LIGHT_MODELS if name not in NO_FEATURE_EXTRACTOR])
def test_meta_features_only(name):
    model = _meta_model(name, features_only=True)
    side = 28 if name in FIXED_SIZE_MODELS else 224
    outputs = model(torch.empty(2, 3, side, side, device='meta'))  # 2: a BN over a 1x1 map needs 2 samples
    assert len(outputs) == len(model.feature_info.channels())
    assert len(outputs) == FEATURE_LEVELS[name] if name in FEATURE_LEVELS else len(outputs) >= 4
    for out, channels, reduction in zip(outputs, model.feature_info.channels(), model.feature_info.reduction()):
        assert out.shape[1] == channels and out.shape[-1] == side // reduction


@pytest.mark.parametrize('name', LIGHT_MODELS)
def test_meta_backward_reaches_every_parameter(name):
    """timm's backward test on the meta device; mixture-BN models on the split route, where both branches work."""
    model = _meta_model(name, num_classes=42).train()
    side = 28 if name in FIXED_SIZE_MODELS else 64
    out = _forward(model, torch.empty(2, 3, side, side, device='meta'))
    assert out.shape == (2, 42)
    out.mean().backward()
    assert [n for n, p in model.named_parameters() if p.grad is None] == []


@pytest.mark.parametrize('name', TINY_MODELS)
def test_tiny_forward_backward(name):
    model = timm.create_model(name, num_classes=42).train()
    x = _tiny_input(model)
    out = _forward(model, x)
    assert out.shape == (BATCH, 42) and torch.isfinite(out).all()
    out.mean().backward()
    assert [n for n, p in model.named_parameters() if p.grad is None] == []


def _script_set_route(scripted: torch.jit.ScriptModule, name: str, n_clean: int = 0, gamma: float = 0.0) -> None:
    """`route` finds eager modules only; a scripted model keeps the route as a mutable attribute of each layer."""
    for module in scripted.modules():
        if module.original_name == 'MixtureBatchNorm2d':
            module.route, module.n_clean, module.gamma = name, n_clean, gamma


def test_mbn_torchscript_every_route():
    model = timm.create_model('test_mbn_resnet').eval()
    _randomize_adv_branch(model)
    x = _tiny_input(model)
    scripted = torch.jit.script(model)
    outputs = []
    with torch.no_grad():
        for name, kwargs in ROUTES:
            with route(model, name, **kwargs):
                expected = model(x)
            _script_set_route(scripted, name, **kwargs)
            assert torch.allclose(scripted(x), expected, atol=1e-5), name
            outputs.append(expected)
    assert not torch.allclose(outputs[0], outputs[1])  # the routes really differ


@pytest.mark.parametrize('name', MBN_MODELS)
def test_mbn_entrypoints_take_the_inference_branch(name):
    assert {m.route for m in mixture_bn_modules(_meta_model(name))} == {'clean'}
    model = _meta_model(name, inference_branch='adv')
    assert {m.route for m in mixture_bn_modules(model)} == {'adv'}
    with pytest.raises(ValueError, match='inference branch'):
        _meta_model(name, inference_branch='mix')


def test_mbn_inference_branch_is_what_a_plain_and_a_scripted_forward_use():
    torch.manual_seed(0)
    model = timm.create_model('test_mbn_resnet', inference_branch='adv').eval()
    _randomize_adv_branch(model)
    x = _tiny_input(model)
    with torch.no_grad():
        with route(model, 'clean'):
            clean = model(x)
        with route(model, 'adv'):
            adv = model(x)
        assert torch.equal(model(x), adv) and not torch.allclose(clean, adv)
        assert torch.allclose(torch.jit.script(model)(x), adv, atol=1e-5)


def _fx_model(model: nn.Module) -> nn.Module:
    train_nodes, eval_nodes = get_graph_node_names(model)
    return create_feature_extractor(model, {train_nodes[-1]: 'out'} if model.training else {eval_nodes[-1]: 'out'})


@pytest.mark.parametrize('name', TINY_MODELS)
def test_tiny_fx_forward_backward(name):
    model = timm.create_model(name, num_classes=42).eval()
    _randomize_adv_branch(model)
    x = _tiny_input(model)
    fx_eval = _fx_model(model)
    with torch.no_grad():
        for route_name, kwargs in ROUTES if mixture_bn_modules(model) else ROUTES[:1]:
            with route(model, route_name, **kwargs):
                assert torch.equal(fx_eval(x)['out'], model(x)), route_name

    model.train()
    fx_train = _fx_model(model)
    out = _forward(fx_train, x)['out']  # FX keeps mixture-BN layers as leaves, so they still read their route
    out.mean().backward()
    assert [n for n, p in fx_train.named_parameters() if p.grad is None] == []


def test_mbn_layers_are_fx_leaves():
    graph_nodes, _ = get_graph_node_names(timm.create_model('test_mbn_resnet'))
    assert 'layer1.0.bn1' in graph_nodes
    assert not any('adv_bn' in n for n in graph_nodes)


@pytest.mark.parametrize('name', ['test_mbn_resnet', 'mbn_resnet18', 'mbn_resnet26'])
def test_mbn_branches_identical_at_init(name):
    """The adversarial branch starts as the clean one, including timm's zero-init of each block's last BN."""
    model = timm.create_model(name)
    modules = mixture_bn_modules(model)
    assert modules and sum(isinstance(m, _BatchNorm) for m in model.modules()) == 2 * len(modules)
    for mbn in modules:
        for key in ('weight', 'bias', 'running_mean', 'running_var'):
            assert torch.equal(getattr(mbn, key), getattr(mbn.adv_bn, key))
    blocks = [m for m in model.modules() if isinstance(m, (BasicBlock, Bottleneck))]
    last_bns = [block.bn3 if isinstance(block, Bottleneck) else block.bn2 for block in blocks]
    assert blocks and all(torch.count_nonzero(bn.adv_bn.weight) == 0 for bn in last_bns)


def test_mbn_fresh_model_same_function_on_every_route():
    model = timm.create_model('test_mbn_resnet').eval()
    x = _tiny_input(model)
    with torch.no_grad():
        reference = model(x)
        for name, kwargs in ROUTES[1:]:
            with route(model, name, **kwargs):
                assert torch.allclose(model(x), reference, atol=1e-6), name


@pytest.mark.parametrize('name', MBN_MODELS)
def test_mbn_branches_load_strictly_into_base_architecture(name):
    model = _meta_model(name)
    plain = _meta_model(base_architecture(name))
    for branch in ('clean', 'adv'):
        plain.load_state_dict(branch_state_dict(model.state_dict(), branch), strict=True)
    plain_affine = sum(m.weight.numel() + m.bias.numel() for m in plain.modules() if isinstance(m, nn.BatchNorm2d))
    n_params = sum(p.numel() for p in model.parameters())
    assert n_params == sum(p.numel() for p in plain.parameters()) + plain_affine


def test_tiny_mbn_adv_branch_exports_to_stock_timm():
    model = timm.create_model('test_mbn_resnet', num_classes=10).eval()
    _randomize_adv_branch(model)
    plain = timm.create_model(base_architecture('test_mbn_resnet'), num_classes=10).eval()
    plain.load_state_dict(branch_state_dict(model.state_dict(), 'adv'), strict=True)
    x = _tiny_input(model)
    with torch.no_grad(), route(model, 'adv'):
        assert torch.allclose(plain(x), model(x), atol=1e-5)


def test_base_architecture():
    assert base_architecture('mbn_resnet50') == 'resnet50'
    assert base_architecture('mbn_resnet338') == 'resnet338'
    assert base_architecture('mbn_resnet152.some_tag') == 'resnet152'
    assert base_architecture('test_mbn_resnet') == 'test_resnet'
    assert {base_architecture(name) for name in MBN_MODELS} <= set(timm.list_models())
    for name in ('resnet50', 'gn_resnet50', 'nfr_resnet152', 'mbn_vit'):
        with pytest.raises(ValueError, match='no plain-BN base architecture'):
            base_architecture(name)


def test_mbn_norm_layer_is_fixed():
    with pytest.raises(TypeError, match='norm_layer'):
        timm.create_model('test_mbn_resnet', norm_layer='batchnorm')


@pytest.mark.parametrize('name', ['gn_resnet26', 'gn_resnet50', 'gn_resnet152', 'in_resnet26', 'in_resnet50',
                                  'test_gn_resnet', 'test_in_resnet'])
def test_batch_independent_models_have_no_batch_norm(name):
    model = _meta_model(name)
    norms = [m for m in model.modules() if isinstance(m, nn.GroupNorm)]
    assert norms and not any(isinstance(m, _BatchNorm) for m in model.modules())
    assert not any('running' in key for key in model.state_dict())
    for norm in norms:
        if name.startswith('in_') or name == 'test_in_resnet':
            assert isinstance(norm, AffineInstanceNorm2d) and norm.num_groups == norm.num_channels
        elif name.startswith('gn_'):
            assert norm.num_groups == 32


@pytest.mark.parametrize('name', [n for n in OUR_MODELS if n.startswith('nfr_') or n == 'test_nfr_resnet'])
def test_normalizer_free_models_have_no_norm_layer(name):
    model = _meta_model(name)
    norm_types = (_BatchNorm, nn.GroupNorm, nn.LayerNorm, nn.InstanceNorm2d)
    assert not any(isinstance(m, norm_types) for m in model.modules())


@pytest.mark.parametrize('name', ['test_gn_resnet', 'test_in_resnet', 'test_nfr_resnet', 'test_mbn_resnet'])
def test_batch_independence_in_training(name):
    """An image's output must not depend on the rest of its batch, except under batch norm (the control)."""
    model = timm.create_model(name).train()
    x = _tiny_input(model)
    other = x.clone()
    other[1:] = torch.randn_like(other[1:]) * 3
    with torch.no_grad():
        same = torch.allclose(model(x)[0], model(other)[0], atol=1e-5)
    assert same == (name != 'test_mbn_resnet')


def test_affine_instance_norm_matches_torch_instance_norm():
    norm = AffineInstanceNorm2d(16)
    reference = nn.InstanceNorm2d(16, affine=True)
    with torch.no_grad():
        norm.weight.uniform_(0.5, 1.5)
        norm.bias.normal_()
    reference.load_state_dict(norm.state_dict())
    x = torch.randn(3, 16, 5, 7) * 4 + 2
    assert torch.allclose(norm(x), reference(x), atol=1e-5)
    assert isinstance(norm, GroupNorm)


def test_create_real_size_model_after_import():
    with torch.device('meta'):
        model = timm.create_model('mbn_resnet152')
    assert len(mixture_bn_modules(model)) == sum(isinstance(m, MixtureBatchNorm2d) for m in model.modules()) > 150
