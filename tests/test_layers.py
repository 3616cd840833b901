"""Mixture BN layers: conversion, routing, training semantics, export, logit interpolation and synchronized BN."""
import copy

import pytest
import timm
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn as nn
from ports import free_port
from timm.layers import BatchNormAct2d
from timm.layers.norm_act import convert_sync_batchnorm as timm_convert_sync_batchnorm

import timm_advnorm  # noqa: F401  (registers the models)
from timm_advnorm.layers import (
    LogitInterpolation, MixtureBatchNorm2d, MixtureBatchNormAct2d, SyncMixtureBatchNorm2d, branch_state_dict,
    convert_sync_mixture_bn, convert_to_mixture_bn, deinterleave, export_branch, get_route, has_mixture_bn, interleave,
    mixture_bn_modules, route, set_route)
from timm_advnorm.layers.routing import get_inference_branch, set_inference_branch


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)


def _randomize_bn(model: nn.Module) -> None:
    """Give every BN non-trivial statistics and affine parameters (a fresh model has zeros, ones, zero gammas)."""
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, nn.modules.batchnorm._BatchNorm):
                m.weight.uniform_(0.5, 1.5)
                m.bias.normal_(0.0, 0.2)
                m.running_mean.normal_(0.0, 0.2)
                m.running_var.uniform_(0.5, 2.0)


def _mbn_model(num_classes: int = 10) -> nn.Module:
    """timm's tiny `test_resnet`, converted, with clean and adversarial branches that differ."""
    model = timm.create_model('test_resnet', num_classes=num_classes)
    _randomize_bn(model)
    model = convert_to_mixture_bn(model)
    with torch.no_grad():
        for mbn in mixture_bn_modules(model):
            _randomize_bn(mbn.adv_bn)
    return model


def _buffers(model: nn.Module) -> dict:
    return {k: v.clone() for k, v in model.named_buffers()}


def _input(batch: int = 4, size: int = 32) -> torch.Tensor:
    return torch.randn(batch, 3, size, size)


# --- conversion ------------------------------------------------------------------------------------------------------

def test_conversion_keeps_resnet50_eval_outputs():
    model = timm.create_model('resnet50', pretrained=False).eval()
    _randomize_bn(model)
    x = _input(2, 64)
    with torch.no_grad():
        expected = model(x)
        converted = convert_to_mixture_bn(copy.deepcopy(model))
        assert len(mixture_bn_modules(converted)) == sum(isinstance(m, nn.BatchNorm2d) for m in model.modules())
        for name, kwargs in (('clean', {}), ('adv', {}), ('mix', {'gamma': 0.4}), ('split', {'n_clean': 1})):
            with route(converted, name, **kwargs):
                assert torch.allclose(converted(x), expected, atol=1e-5), name


def test_conversion_copies_zero_init_last_gamma():
    converted = convert_to_mixture_bn(timm.create_model('resnet26'))
    last_bns = [block.bn3 for stage in (converted.layer1, converted.layer4) for block in stage]
    assert all(torch.count_nonzero(bn.adv_bn.weight) == 0 for bn in last_bns)


def test_conversion_keeps_batchnorm_act_activation_and_drop():
    model = timm.create_model('efficientnet_b0', pretrained=False).eval()
    _randomize_bn(model)
    originals = {name: m for name, m in model.named_modules() if isinstance(m, BatchNormAct2d)}
    x = _input(2, 64)
    with torch.no_grad():
        expected = model(x)
        converted = convert_to_mixture_bn(copy.deepcopy(model))
        assert torch.allclose(converted(x), expected, atol=1e-5)
    modules = dict(converted.named_modules())
    for name, original in originals.items():
        assert isinstance(modules[name], MixtureBatchNormAct2d)
        assert type(modules[name].act) is type(original.act) and type(modules[name].drop) is type(original.drop)
    assert any(isinstance(m.act, nn.SiLU) for m in mixture_bn_modules(converted))


def test_conversion_keeps_a_real_drop_layer():
    layer = BatchNormAct2d(8, act_layer='silu', drop_layer=nn.Dropout)
    converted = convert_to_mixture_bn(nn.Sequential(layer))[0]
    assert isinstance(converted, MixtureBatchNormAct2d)
    assert isinstance(converted.drop, nn.Dropout) and isinstance(converted.act, nn.SiLU)


def test_conversion_rejects_what_it_cannot_convert():
    with pytest.raises(TypeError, match='2-D batch norm'):
        convert_to_mixture_bn(nn.Sequential(nn.BatchNorm1d(4)))
    with torch.device('meta'):
        meta_model = timm.create_model('test_resnet')
    with pytest.raises(ValueError, match='meta'):
        convert_to_mixture_bn(meta_model)


# --- training semantics ----------------------------------------------------------------------------------------------

def test_split_route_equals_separate_clean_and_adversarial_forwards():
    """One fused forward gives what two separate forwards give: outputs and running statistics (unequal split)."""
    fused = _mbn_model().train()
    separate = copy.deepcopy(fused)
    x_clean, x_adv = _input(3), _input(5)
    with route(fused, 'split', n_clean=3):
        out = fused(torch.cat([x_clean, x_adv]))
    with route(separate, 'clean'):
        out_clean = separate(x_clean)
    with route(separate, 'adv'):
        out_adv = separate(x_adv)
    assert torch.allclose(out, torch.cat([out_clean, out_adv]), atol=1e-5)
    expected = _buffers(separate)
    for key, value in _buffers(fused).items():
        assert torch.allclose(value.float(), expected[key].float(), atol=1e-6), key


def _interleaved_and_split_steps(model: nn.Module, x_clean: torch.Tensor, x_adv: torch.Tensor):
    """Outputs (clean rows, adversarial rows), parameter gradients and buffers after one training forward/backward
    on the interleaved route and on the split route, from the same start."""
    results = []
    for name in ('interleaved', 'split'):
        net = copy.deepcopy(model)
        with route(net, name, n_clean=len(x_clean) if name == 'split' else None):
            if name == 'interleaved':
                out_clean, out_adv = deinterleave(net(interleave(x_clean, x_adv)))
            else:
                out_clean, out_adv = net(torch.cat([x_clean, x_adv])).split(len(x_clean))
        (out_clean.logsumexp(1).sum() + 2 * out_adv.logsumexp(1).sum()).backward()
        grads = {n: p.grad for n, p in net.named_parameters()}
        results.append((torch.cat([out_clean, out_adv]), grads, _buffers(net)))
    return results


@pytest.mark.parametrize('channels_last', [False, True], ids=['one_batch_norm', 'channels_last_per_branch'])
def test_interleaved_route_equals_split_route(channels_last):
    """Same outputs, gradients (through timm's in-place residual adds and activations) and running statistics."""
    model = _mbn_model().train()
    if channels_last:
        model = model.to(memory_format=torch.channels_last)
    (out, grads, buffers), (expected_out, expected_grads, expected_buffers) = _interleaved_and_split_steps(
        model, _input(3), _input(3))
    torch.testing.assert_close(out, expected_out, atol=1e-4, rtol=1e-4)
    for name, grad in grads.items():
        torch.testing.assert_close(grad, expected_grads[name], atol=1e-3, rtol=1e-3, msg=name)
    for key, value in buffers.items():
        torch.testing.assert_close(value, expected_buffers[key], atol=1e-6, rtol=1e-6, msg=key)


def test_interleaved_route_in_eval_uses_each_branchs_running_statistics():
    model = _mbn_model().eval()
    x_clean, x_adv = _input(2), _input(2)
    with torch.no_grad():
        with route(model, 'interleaved'):
            out_clean, out_adv = deinterleave(model(interleave(x_clean, x_adv)))
        with route(model, 'clean'):
            expected_clean = model(x_clean)
        with route(model, 'adv'):
            expected_adv = model(x_adv)
    torch.testing.assert_close(out_clean, expected_clean, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(out_adv, expected_adv, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize('affine, track_running_stats', [(False, True), (True, False)])
def test_interleaved_route_without_affine_or_running_statistics(affine, track_running_stats):
    layer = MixtureBatchNorm2d(4, affine=affine, track_running_stats=track_running_stats).train()
    reference = copy.deepcopy(layer)
    x_clean, x_adv = torch.randn(3, 4, 5, 5) * 3 + 1, torch.randn(3, 4, 5, 5)
    with route(layer, 'interleaved'):
        out_clean, out_adv = deinterleave(layer(interleave(x_clean, x_adv)))
    with route(reference, 'split', n_clean=3):
        expected = reference(torch.cat([x_clean, x_adv]))
    torch.testing.assert_close(torch.cat([out_clean, out_adv]), expected, atol=1e-5, rtol=1e-5)
    for (key, value), expected_value in zip(_buffers(layer).items(), _buffers(reference).values()):
        torch.testing.assert_close(value, expected_value, msg=key)


def test_interleaved_route_with_cumulative_average_at_different_counts():
    """momentum=None averages each branch over its own batches, even when the branches have seen different counts."""
    layer = MixtureBatchNorm2d(4, momentum=None).train()
    with route(layer, 'clean'):
        layer(torch.randn(6, 4, 5, 5))
    reference = copy.deepcopy(layer)
    x_clean, x_adv = torch.randn(3, 4, 5, 5) + 2, torch.randn(3, 4, 5, 5) - 2
    with route(layer, 'interleaved'):
        layer(interleave(x_clean, x_adv))
    with route(reference, 'split', n_clean=3):
        reference(torch.cat([x_clean, x_adv]))
    assert int(layer.num_batches_tracked) == 2 and int(layer.adv_bn.num_batches_tracked) == 1
    for (key, value), expected_value in zip(_buffers(layer).items(), _buffers(reference).values()):
        torch.testing.assert_close(value, expected_value, msg=key)


def test_interleaved_route_rejects_unpaired_batches():
    layer = MixtureBatchNorm2d(4).train()
    with route(layer, 'interleaved'), pytest.raises(ValueError, match='pairs'):
        layer(torch.randn(5, 4, 3, 3))
    with pytest.raises(ValueError, match='one shape'):
        interleave(torch.randn(2, 3), torch.randn(3, 3))


def test_interleave_round_trip():
    x_clean, x_adv = torch.randn(3, 2), torch.randn(3, 2)
    both = interleave(x_clean, x_adv)
    assert torch.equal(both[0], x_clean[0]) and torch.equal(both[1], x_adv[0])
    out_clean, out_adv = deinterleave(both)
    assert torch.equal(out_clean, x_clean) and torch.equal(out_adv, x_adv)


@pytest.mark.parametrize('branch', ['clean', 'adv'])
def test_each_route_updates_only_its_own_statistics(branch):
    model = _mbn_model().train()
    before = _buffers(model)
    with route(model, branch):
        model(_input())
    after = _buffers(model)
    for key in before:
        is_adv = '.adv_bn.' in key
        touched = not torch.equal(before[key], after[key])
        assert touched == (is_adv == (branch == 'adv')), key


def test_split_backward_reaches_both_branches():
    model = _mbn_model().train()
    with route(model, 'split', n_clean=2):
        model(_input()).logsumexp(1).sum().backward()
    for mbn in mixture_bn_modules(model):
        for bn in (mbn, mbn.adv_bn):
            assert bn.weight.grad is not None and bn.bias.grad is not None
            assert bn.bias.grad.abs().sum() > 0


@pytest.mark.parametrize('branch', ['clean', 'adv'])
def test_one_branch_route_gives_the_idle_branch_a_zero_gradient(branch):
    """Every parameter gets a gradient (plain DDP, timm's model checks); the idle branch's is exactly zero and its
    values do not reach the output, NaN included."""
    model = _mbn_model().train()
    x = _input()
    with route(model, branch):
        expected = model(x)
    for mbn in mixture_bn_modules(model):
        idle = mbn if branch == 'adv' else mbn.adv_bn
        with torch.no_grad():
            idle.weight.fill_(float('nan'))
    with route(model, branch):
        output = model(x)
        output.logsumexp(1).sum().backward()
    torch.testing.assert_close(output, expected)
    for mbn in mixture_bn_modules(model):
        active, idle = (mbn.adv_bn, mbn) if branch == 'adv' else (mbn, mbn.adv_bn)
        assert idle.weight.grad is not None and idle.bias.grad is not None
        assert not idle.weight.grad.any() and not idle.bias.grad.any()
        assert active.bias.grad.abs().sum() > 0


def test_idle_branch_joins_only_training_forwards_that_build_a_graph():
    model = _mbn_model()
    with route(model, 'clean'):
        model.eval()(_input()).sum().backward()
        with torch.no_grad():
            model.train()(_input())
    assert all(mbn.adv_bn.weight.grad is None for mbn in mixture_bn_modules(model))


@pytest.mark.parametrize('gamma, branch', [(0.0, 'clean'), (1.0, 'adv')])
def test_mix_route_endpoints(gamma, branch):
    model = _mbn_model().eval()
    x = _input()
    with torch.no_grad():
        with route(model, 'mix', gamma=gamma):
            mixed = model(x)
        with route(model, branch):
            expected = model(x)
    assert torch.allclose(mixed, expected, atol=1e-6)


# --- export ----------------------------------------------------------------------------------------------------------

@pytest.mark.parametrize('branch', ['clean', 'adv'])
def test_exported_branch_reproduces_its_route(branch):
    model = _mbn_model().eval()
    x = _input()
    with torch.no_grad(), route(model, branch):
        expected = model(x)
    exported = export_branch(model, branch).eval()
    assert not has_mixture_bn(exported) and has_mixture_bn(model)
    plain = timm.create_model('test_resnet', num_classes=10).eval()
    plain.load_state_dict(branch_state_dict(model.state_dict(), branch), strict=True)
    plain.load_state_dict(exported.state_dict(), strict=True)
    with torch.no_grad():
        assert torch.allclose(exported(x), expected, atol=1e-5)
        assert torch.allclose(plain(x), expected, atol=1e-5)


def test_exported_batchnorm_act_branch_keeps_activation():
    model = timm.create_model('efficientnet_b0').eval()
    _randomize_bn(model)
    model = convert_to_mixture_bn(model)
    for mbn in mixture_bn_modules(model):
        _randomize_bn(mbn.adv_bn)
    x = _input(2, 64)
    with torch.no_grad(), route(model, 'adv'):
        expected = model(x)
    plain = timm.create_model('efficientnet_b0').eval()
    plain.load_state_dict(branch_state_dict(model.state_dict(), 'adv'), strict=True)
    with torch.no_grad():
        assert torch.allclose(plain(x), expected, atol=1e-4)
        assert torch.allclose(export_branch(model, 'adv')(x), expected, atol=1e-4)


def test_branch_state_dict_rejects_bad_input():
    with pytest.raises(ValueError, match='branch'):
        branch_state_dict(_mbn_model().state_dict(), 'noisy')
    with pytest.raises(ValueError, match='not a mixture-BN model'):
        branch_state_dict(timm.create_model('test_resnet').state_dict(), 'adv')


# --- routing ---------------------------------------------------------------------------------------------------------

def _routes(model: nn.Module) -> list:
    return [(name, n_clean, gamma) for _, name, n_clean, gamma in get_route(model)]


def test_route_context_restores_previous_route_even_on_error():
    model = _mbn_model()
    set_route(model, 'mix', gamma=0.25)
    before = _routes(model)
    with route(model, 'adv'):
        assert {r[0] for r in _routes(model)} == {'adv'}
        with route(model, 'split', n_clean=3):
            assert {r[:2] for r in _routes(model)} == {('split', 3)}
        assert {r[0] for r in _routes(model)} == {'adv'}
    assert _routes(model) == before
    with pytest.raises(RuntimeError, match='boom'):
        with route(model, 'clean'):
            raise RuntimeError('boom')
    assert _routes(model) == before


@pytest.mark.parametrize('name, kwargs', [
    ('noisy', {}), ('split', {}), ('split', {'n_clean': -1}), ('mix', {}), ('mix', {'gamma': 1.5})])
def test_set_route_rejects_bad_arguments(name, kwargs):
    model = _mbn_model()
    before = _routes(model)
    with pytest.raises(ValueError):
        set_route(model, name, **kwargs)
    assert _routes(model) == before


def test_adversarial_route_needs_mixture_bn():
    plain = timm.create_model('test_resnet')
    with route(plain, 'clean'):
        pass
    with pytest.raises(ValueError, match='no'):
        set_route(plain, 'adv')


def test_inference_branch_is_the_route_route_blocks_return_to():
    model = _mbn_model().eval()
    x = _input()
    assert get_inference_branch(model) == 'clean'
    assert set_inference_branch(model, 'adv') is model and get_inference_branch(model) == 'adv'
    with torch.no_grad():
        with route(model, 'clean'):
            assert get_inference_branch(model) == 'clean'
            with route(model, 'split', n_clean=2):
                assert get_inference_branch(model) is None
        with route(model, 'adv'):
            expected = model(x)
        assert get_inference_branch(model) == 'adv'
        assert torch.equal(model(x), expected)
    assert get_inference_branch(convert_sync_mixture_bn(copy.deepcopy(model))) == 'adv'
    assert get_inference_branch(timm.create_model('test_resnet')) is None


@pytest.mark.parametrize('branch', ['split', 'interleaved', 'mix', 'noisy'])
def test_inference_branch_is_clean_or_adv_of_a_mixture_bn_model(branch):
    model = _mbn_model()
    with pytest.raises(ValueError, match='inference branch'):
        set_inference_branch(model, branch)
    assert get_inference_branch(model) == 'clean'
    with pytest.raises(ValueError, match='none'):
        set_inference_branch(timm.create_model('test_resnet'), 'adv')


# --- logit interpolation ---------------------------------------------------------------------------------------------

def test_logit_interpolation():
    model = _mbn_model().eval()
    set_route(model, 'mix', gamma=0.9)
    before = _routes(model)
    x = _input()
    with torch.no_grad():
        with route(model, 'clean'):
            z_clean = model(x)
        with route(model, 'adv'):
            z_adv = model(x)
        for gamma in (0.0, 0.3, 1.0):
            assert torch.allclose(LogitInterpolation(model, gamma)(x), (1 - gamma) * z_clean + gamma * z_adv,
                                  atol=1e-5)
    assert _routes(model) == before
    with pytest.raises(ValueError, match='gamma'):
        LogitInterpolation(model, 1.2)


# --- synchronized BN -------------------------------------------------------------------------------------------------

def test_sync_conversion_keeps_routes_state_and_activations():
    model = convert_to_mixture_bn(timm.create_model('efficientnet_b0'))
    set_route(model, 'split', n_clean=3)
    state = model.state_dict()
    synced = convert_sync_mixture_bn(model)
    modules = mixture_bn_modules(synced)
    assert modules and all(isinstance(m, SyncMixtureBatchNorm2d) for m in modules)
    assert {(m.route, m.n_clean) for m in modules} == {('split', 3)}
    assert any(isinstance(m.act, nn.SiLU) for m in modules)
    assert set(synced.state_dict()) == set(state)
    for key, value in synced.state_dict().items():
        assert torch.equal(value, state[key]), key


@pytest.mark.parametrize('converter', [nn.SyncBatchNorm.convert_sync_batchnorm, timm_convert_sync_batchnorm])
def test_stock_sync_converters_lose_the_route(converter):
    """The bug our converter avoids: torch's and timm's converters turn mixture BN into a single-branch SyncBN."""
    model = converter(_mbn_model())
    assert not has_mixture_bn(model)
    with pytest.raises(ValueError):
        set_route(model, 'adv')
    assert isinstance(convert_sync_mixture_bn(_mbn_model()).layer1[0].bn1, SyncMixtureBatchNorm2d)


def test_stock_timm_sync_converter_also_drops_the_activation():
    """timm's converter keeps the act of its own `BatchNormAct2d` only: ours becomes a SyncBN that never calls it."""
    layer = nn.Sequential(MixtureBatchNormAct2d(8, act_layer='relu')).eval()
    x = torch.randn(4, 8, 3, 3)
    assert (layer(x) >= 0).all()
    assert (timm_convert_sync_batchnorm(copy.deepcopy(layer))(x) < 0).any()
    assert (convert_sync_mixture_bn(layer)(x) >= 0).all()


_WORLD = 2
_ROWS = 3  # clean and adversarial rows per rank


def _sync_data():
    generator = torch.Generator().manual_seed(1)
    clean = torch.randn(_WORLD * _ROWS, 3, 32, 32, generator=generator)
    adv = torch.randn(_WORLD * _ROWS, 3, 32, 32, generator=generator)
    weights = torch.randn(2 * _WORLD * _ROWS, 10, generator=generator)
    return clean, adv, weights


# every layout, with and without gradient checkpointing, in one process group: starting one costs more than a check
_SYNC_CONFIGURATIONS = [(layout, checkpointing) for layout in ('split', 'interleaved') for checkpointing in (False, True)]


def _configuration_name(layout: str, checkpointing: bool) -> str:
    return f'{layout}-checkpointed' if checkpointing else layout


def _sync_step(rank: int, layout: str, checkpointing: bool) -> dict:
    """One synchronized forward and backward of this rank's rows: its outputs, its buffers, the summed gradients."""
    torch.manual_seed(0)
    model = convert_sync_mixture_bn(_mbn_model()).train()
    model.set_grad_checkpointing(checkpointing)  # recomputed in the backward pass, outside the route block
    clean, adv, weights = _sync_data()
    rows = slice(rank * _ROWS, (rank + 1) * _ROWS)
    w = torch.cat([weights[:_WORLD * _ROWS][rows], weights[_WORLD * _ROWS:][rows]])
    if layout == 'interleaved':
        with route(model, 'interleaved'):
            out = torch.cat(deinterleave(model(interleave(clean[rows], adv[rows]))))
    else:
        with route(model, 'split', n_clean=_ROWS):
            out = model(torch.cat([clean[rows], adv[rows]]))
    (out * w).sum().backward()
    grads = {n: p.grad.clone() for n, p in model.named_parameters()}
    for g in grads.values():
        dist.all_reduce(g)
    return {'out': out.detach(), 'buffers': _buffers(model), 'grads': grads}


def _sync_worker(rank: int, port: int, path: str) -> None:
    dist.init_process_group('gloo', init_method=f'tcp://127.0.0.1:{port}', rank=rank, world_size=_WORLD)
    try:
        results = {}
        for layout, checkpointing in _SYNC_CONFIGURATIONS:
            name = _configuration_name(layout, checkpointing)
            try:
                results[name] = _sync_step(rank, layout, checkpointing)
            except Exception as error:
                error.add_note(f'in configuration {name}')  # the child's traceback, which spawn re-raises, says it
                raise
        torch.save(results, f'{path}/rank{rank}.pt')
    finally:
        dist.destroy_process_group()


def test_synced_fused_forward_equals_single_process_over_all_rows(tmp_path):
    """Two gloo processes on CPU: per-branch statistics, outputs and summed gradients match one process that sees
    every rank's clean rows and every rank's adversarial rows, in either layout, with gradient checkpointing too."""
    mp.spawn(_sync_worker, args=(free_port(), str(tmp_path)), nprocs=_WORLD, join=True)
    results = [torch.load(tmp_path / f'rank{r}.pt') for r in range(_WORLD)]

    torch.manual_seed(0)
    model = _mbn_model().train()
    clean, adv, weights = _sync_data()
    with route(model, 'split', n_clean=len(clean)):
        out = model(torch.cat([clean, adv]))
    (out * weights).sum().backward()

    for layout, checkpointing in _SYNC_CONFIGURATIONS:
        name = _configuration_name(layout, checkpointing)
        for rank, result in enumerate(ranks[name] for ranks in results):
            rows = slice(rank * _ROWS, (rank + 1) * _ROWS)
            expected = torch.cat([out[:len(clean)][rows], out[len(clean):][rows]])
            assert torch.allclose(result['out'], expected.detach(), atol=1e-4), name
            for key, value in _buffers(model).items():
                assert torch.allclose(result['buffers'][key].float(), value.float(), atol=1e-5), f'{name}: {key}'
            for param, p in model.named_parameters():
                assert torch.allclose(result['grads'][param], p.grad, atol=1e-3, rtol=1e-3), f'{name}: {param}'
