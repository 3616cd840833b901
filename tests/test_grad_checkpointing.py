"""Gradient checkpointing: a checkpointed training step equals the unchecked one, gradients and BN statistics alike.

The recomputation of a checkpointed block runs during the backward pass, outside the ``route`` block of its forward
and after the batch was counted in the running statistics: mixture BN must recompute on the route the forward used,
and no BN may count the batch twice.
"""
import copy
from pathlib import Path
from typing import Dict, Tuple

import pytest
import torch
import torch.nn as nn
import yaml

import timm_advnorm  # noqa: F401  (registers the models and methods)
from timm_advnorm.attacks import InputSpace, create_attack
from timm_advnorm.layers import (
    guard_batch_norm_statistics, interleave, route, set_grad_checkpointing)
from timm_advnorm.layers.recompute import PositionedHistory, autograd_position
from timm_advnorm.task import list_tasks
from timm_advnorm.commands.train import parse_args, train_options
from timm_advnorm.train.build import create_run_task

from device_checks import NUM_CLASSES, seeded_model

pytestmark = pytest.mark.usefixtures('one_thread')

CPU = torch.device('cpu')
SPACE = InputSpace()
FAMILIES = {'bn': 'test_resnet', 'mbn': 'test_mbn_resnet', 'gn': 'test_gn_resnet', 'nf': 'test_nfr_resnet'}
METHOD_OPTIONS = ['--attack-steps', '2', '--attack-step', '2', '--deepaugment-net', 'cae',
                  '--deepaugment-random-weights']
TRAIN_ROUTES = [('clean', {}), ('adv', {}), ('split', {'n_clean': 3}), ('interleaved', {}), ('mix', {'gamma': 0.3})]
Tensors = Dict[str, torch.Tensor]


def _batch(n: int = 10) -> Tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    return SPACE.from_pixels(torch.rand(n, 3, 32, 32, generator=g)), torch.randint(0, NUM_CLASSES, (n,), generator=g)


def _state(model: nn.Module) -> Tuple[Tensors, Tensors]:
    """Every parameter's gradient and every buffer (running statistics, ``num_batches_tracked``)."""
    grads = {name: p.grad.clone() for name, p in model.named_parameters() if p.grad is not None}
    return grads, {name: b.clone() for name, b in model.named_buffers()}


def _assert_same(expected: Tuple[Tensors, Tensors], got: Tuple[Tensors, Tensors]) -> None:
    for kind, want, have in zip(('gradient', 'buffer'), expected, got):
        assert want.keys() == have.keys(), kind
        for name in want:
            torch.testing.assert_close(have[name], want[name], rtol=1e-4, atol=1e-5, msg=f'{kind} {name}')


def _training_step(method: str, name: str, checkpointing: bool, amp: bool = False, channels_last: bool = False,
                   extra: Tuple[str, ...] = ()) -> Tuple[Tensors, Tensors]:
    """One training step of `method` as the training command builds and runs it; its gradients and buffers.

    Raises:
        ValueError: The method refuses the model.
    """
    model = seeded_model(name, CPU, checkpointing)
    args, _ = parse_args(['--method', method, *METHOD_OPTIONS, *extra])
    args.rank, args.distributed = 0, False
    amp_dtype = torch.bfloat16 if amp else None
    task = create_run_task(train_options(args), model, SPACE, num_classes=NUM_CLASSES, amp_dtype=amp_dtype,
                           verbose=False)
    task.train()
    x, y = _batch()
    if channels_last:
        model.to(memory_format=torch.channels_last)
        x = x.contiguous(memory_format=torch.channels_last)
    torch.manual_seed(1)  # the methods' own draws (TDA views, Mixup) start alike
    with torch.autocast('cpu', dtype=torch.bfloat16, enabled=amp):
        result = task(x, y)
    result['loss'].backward()
    task.finalize_gradients()
    return _state(model)


#: The families each method trains (the others it refuses with a ValueError).
METHOD_FAMILIES = {'mbn': ('mbn',), 'fast_advprop': ('mbn',), 'nofrost': ('gn', 'nf'), 'nofrost_star': ('gn', 'nf')}


@pytest.mark.parametrize('method, family', [(method, family) for method in list_tasks()
                                            for family in METHOD_FAMILIES.get(method, FAMILIES)])
def test_a_checkpointed_training_step_equals_the_unchecked_one(method, family):
    expected = _training_step(method, FAMILIES[family], checkpointing=False)
    _assert_same(expected, _training_step(method, FAMILIES[family], checkpointing=True))


@pytest.mark.parametrize('amp, channels_last', [(True, False), (False, True), (True, True)],
                         ids=['bf16', 'channels_last', 'bf16-channels_last'])
@pytest.mark.parametrize('method, family, extra', [
    ('vanilla', 'bn', ()),
    ('madry', 'bn', ('--attack-bn-stats', 'batch')),
    ('mbn', 'mbn', ()),
    ('mbn', 'mbn', ('--attack-bn-stats', 'batch', '--pairing-weight', '0.5')),
    ('fast_advprop', 'mbn', ()),
], ids=['vanilla-bn', 'madry-bn-batch-stats', 'mbn', 'mbn-batch-stats-alp', 'fast_advprop'])
def test_checkpointing_under_autocast_and_channels_last(method, family, extra, amp, channels_last):
    expected = _training_step(method, FAMILIES[family], False, amp, channels_last, extra)
    _assert_same(expected, _training_step(method, FAMILIES[family], True, amp, channels_last, extra))


def _routed_step(checkpointing: bool, name: str, kwargs: dict, channels_last: bool) -> Tuple[Tensors, Tensors]:
    """A training forward on route `name`, the backward after the route block (as the training loop does it)."""
    model = seeded_model('test_mbn_resnet', CPU, checkpointing).train()
    x, _ = _batch(6)
    if name == 'interleaved':
        x = interleave(x[:3], x[3:])
    if channels_last:
        model.to(memory_format=torch.channels_last)
        x = x.contiguous(memory_format=torch.channels_last)
    with route(model, name, **kwargs):
        out = model(x)
    (out * torch.linspace(-1, 1, out.numel()).view_as(out)).sum().backward()
    return _state(model)


@pytest.mark.parametrize('channels_last', [False, True], ids=['nchw', 'channels_last'])
@pytest.mark.parametrize('name, kwargs', TRAIN_ROUTES, ids=[r for r, _ in TRAIN_ROUTES])
def test_recomputation_runs_on_the_forwards_route_and_counts_no_batch_twice(name, kwargs, channels_last):
    expected = _routed_step(False, name, kwargs, channels_last)
    _assert_same(expected, _routed_step(True, name, kwargs, channels_last))


def _two_graphs(checkpointing: bool) -> Tuple[Tensors, Tensors]:
    """Two forwards on different routes, one backward through both after both route blocks have closed."""
    model = seeded_model('test_mbn_resnet', CPU, checkpointing).train()
    x, _ = _batch(6)
    with route(model, 'adv'):
        out_adv = model(x)
    with route(model, 'split', n_clean=2):
        out_split = model(x.flip(0))
    out_clean = model(x * 0.5)  # on the inference branch, outside any route block
    (out_adv.square().sum() + out_split.sum() + out_clean.abs().sum()).backward()
    return _state(model)


def test_graphs_of_several_routes_backpropagated_together():
    _assert_same(_two_graphs(False), _two_graphs(True))


def _attacked(checkpointing: bool, bn_stats: str) -> Tuple[torch.Tensor, Tensors]:
    model = seeded_model('test_mbn_resnet', CPU, checkpointing).train()
    attack = create_attack('pgd', space=SPACE, eps=8.0, step=2.0, steps=3, bn_stats=bn_stats, seed=0)
    x, y = _batch(4)
    with route(model, 'adv'):
        x_adv = attack(model, x, y)
    return x_adv, dict(model.named_buffers())


@pytest.mark.parametrize('bn_stats', ['running', 'batch'])
def test_attack_input_gradients_through_a_checkpointed_model(bn_stats):
    x_adv, buffers = _attacked(False, bn_stats)
    x_adv_checkpointed, buffers_checkpointed = _attacked(True, bn_stats)
    torch.testing.assert_close(x_adv_checkpointed, x_adv)
    _assert_same(({}, buffers), ({}, buffers_checkpointed))


def test_plain_batch_norm_guard_is_installed_once_and_removed():
    model = seeded_model('test_resnet', CPU, checkpointing=False)
    assert guard_batch_norm_statistics(model) == guard_batch_norm_statistics(model) > 0
    hooks = sum(len(m._forward_pre_hooks) for m in model.modules())
    assert hooks == guard_batch_norm_statistics(model)
    assert sum(len(m._forward_pre_hooks) for m in copy.deepcopy(model).modules()) == hooks  # copies keep one guard
    set_grad_checkpointing(model, enable=False)
    assert not model.grad_checkpointing and sum(len(m._forward_pre_hooks) for m in model.modules()) == 0
    with pytest.raises(ValueError, match='no gradient checkpointing'):
        set_grad_checkpointing(nn.Sequential(nn.Conv2d(3, 3, 1), nn.BatchNorm2d(3)))


def _node_built_under(history: PositionedHistory, value: str, x: torch.Tensor) -> int:
    """Set `value`, then build a node; its creation number."""
    history.set(value)
    return (x * 2).grad_fn._sequence_nr()


def test_positioned_history_answers_what_each_node_was_built_under():
    x = torch.ones(1, requires_grad=True)
    history = PositionedHistory('a', max_len=3)
    before = autograd_position() - 1
    built = {value: _node_built_under(history, value, x) for value in ('b', 'c')}
    history.set('c')
    history.set('d')  # no node built under it yet: the next value replaces it
    history.set('e')
    assert history.current == 'e'
    assert [history.at(built['b']), history.at(built['c']), history.at(autograd_position())] == ['b', 'c', 'e']
    with pytest.raises(RuntimeError, match='older than the last 3 changes'):
        history.at(before)


def test_training_command_with_grad_checkpointing(tmp_path, digits_dir, monkeypatch):
    from timm_advnorm.commands.train import main
    monkeypatch.syspath_prepend(str(Path(__file__).resolve().parents[1]))
    fast = ['--epochs', '1', '--attack-steps', '2', '--attack-step', '4', '--val-attack-steps', '2', '--num-samples',
            '32', '-b', '64', '--workers', '0', '--hflip', '0', '--log-interval', '0']
    out = tmp_path / 'runs'
    assert main(['--data-dir', str(digits_dir), '--output', str(out), '--experiment', 'run', *fast, '--method', 'mbn',
                 '--grad-checkpointing']) == 0
    assert yaml.safe_load((out / 'run' / 'args.yaml').read_text())['grad_checkpointing'] is True
