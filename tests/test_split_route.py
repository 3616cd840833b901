"""The ``split`` route equals two separate batch norms on its row blocks: outputs, gradients, running statistics
(its fused form, `split_batch_norm`, included)."""
import copy
from typing import Optional

import pytest
import torch
import torch.nn as nn

from timm_advnorm.layers import route
from timm_advnorm.layers.mixture_bn import MixtureBatchNorm2d
from timm_advnorm.layers.split_batch_norm import BlockNorm, split_batch_norm

BATCH, CHANNELS = 6, 4


def _layer(momentum: Optional[float] = 0.1, affine: bool = True, track_running_stats: bool = True
           ) -> MixtureBatchNorm2d:
    """A mixture-BN layer whose branches differ in every parameter and statistic (and have counted batches)."""
    torch.manual_seed(0)
    layer = MixtureBatchNorm2d(CHANNELS, momentum=momentum, affine=affine, track_running_stats=track_running_stats)
    with torch.no_grad():
        for bn in (layer, layer.adv_bn):
            for t in (bn.weight, bn.bias, bn.running_mean):
                if t is not None:
                    t.copy_(torch.randn(CHANNELS))
            if bn.running_var is not None:
                bn.running_var.copy_(torch.rand(CHANNELS) + 0.5)
                bn.num_batches_tracked.fill_(int(torch.randint(1, 5, ())))
    return layer


def _branches(layer: MixtureBatchNorm2d) -> nn.ModuleList:
    """The layer's clean and adversarial branches as two plain, independent batch norms."""
    clean = nn.BatchNorm2d(CHANNELS, momentum=layer.momentum, affine=layer.affine,
                           track_running_stats=layer.track_running_stats)
    clean.load_state_dict({k: v for k, v in layer.state_dict().items() if not k.startswith('adv_bn.')})
    return nn.ModuleList([clean, copy.deepcopy(layer.adv_bn)])


def _input(channels_last: bool, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    x = (torch.randn(BATCH, CHANNELS, 5, 5, generator=torch.Generator().manual_seed(1)) * 3 + 1).to(dtype)
    return x.to(memory_format=torch.channels_last) if channels_last else x


def _run(norm, x: torch.Tensor, upstream: torch.Tensor):
    """Output of `norm` on a leaf copy of `x`, and the gradient of ``(output * upstream).sum()`` to that input."""
    x = x.detach().clone().requires_grad_(True)
    out = norm(x)
    (out.float() * upstream).sum().backward()
    return out, x.grad


def _assert_same_state(layer: MixtureBatchNorm2d, branches: nn.ModuleList) -> None:
    for ours, theirs in zip((layer, layer.adv_bn), branches):
        for name in ('weight', 'bias'):
            ours_grad = getattr(getattr(ours, name), 'grad', None)
            their_grad = getattr(getattr(theirs, name), 'grad', None)
            if their_grad is None:  # a branch no row reached: none, or the idle branch's exact zero
                assert ours_grad is None or not ours_grad.any(), name
            else:
                torch.testing.assert_close(ours_grad, their_grad, msg=name)
        for name in ('running_mean', 'running_var', 'num_batches_tracked'):
            theirs_buffer = getattr(theirs, name)
            if theirs_buffer is None:
                assert getattr(ours, name) is None
            else:
                torch.testing.assert_close(getattr(ours, name), theirs_buffer, rtol=0, atol=1e-6, msg=name)


def _check_against_reference(layer: MixtureBatchNorm2d, x: torch.Tensor, n_clean: int, training: bool) -> None:
    branches = _branches(layer)
    layer.train(training)
    branches.train(training)
    upstream = torch.randn(x.shape, generator=torch.Generator().manual_seed(2))

    def reference(inputs: torch.Tensor) -> torch.Tensor:
        blocks = (inputs[:n_clean], inputs[n_clean:])
        return torch.cat([bn(block) for bn, block in zip(branches, blocks) if len(block)])

    with route(layer, 'split', n_clean=n_clean):
        out, grad = _run(layer, x, upstream)
    expected_out, expected_grad = _run(reference, x, upstream)
    torch.testing.assert_close(out, expected_out)
    torch.testing.assert_close(grad, expected_grad)
    assert out.is_contiguous(memory_format=torch.channels_last) == x.is_contiguous(memory_format=torch.channels_last)
    _assert_same_state(layer, branches)


@pytest.mark.parametrize('training', [True, False])
@pytest.mark.parametrize('channels_last', [False, True])
@pytest.mark.parametrize('n_clean', [0, 1, 3, BATCH - 1, BATCH])
def test_split_route_equals_two_batch_norms(n_clean, channels_last, training):
    _check_against_reference(_layer(), _input(channels_last), n_clean, training)


@pytest.mark.parametrize('momentum, affine, track_running_stats', [
    (None, True, True), (0.1, False, True), (0.1, True, False)])
def test_split_route_equals_two_batch_norms_in_every_configuration(momentum, affine, track_running_stats):
    """Cumulative-average momentum (each branch at its own count), no affine parameters, no running statistics."""
    for training in (True, False):
        _check_against_reference(_layer(momentum, affine, track_running_stats), _input(False), 2, training)


def test_split_route_on_bfloat16_input_with_float_parameters():
    """What a bfloat16 autocast convolution hands the layer."""
    _check_against_reference(_layer(), _input(True, torch.bfloat16), 4, True)



@pytest.mark.parametrize('affine', [True, False])
def test_split_route_on_bfloat16_input_with_or_without_affine_parameters(affine):
    """Batch statistics are kept in the parameters' dtype when there are float parameters, else in the input's."""
    _check_against_reference(_layer(affine=affine), _input(False, torch.bfloat16), 2, True)


@pytest.mark.parametrize('channels_last', [False, True])
def test_split_batch_norm_gradients_pass_gradcheck(channels_last):
    """The fused split's backward against finite differences: input and both blocks' affine parameters."""
    generator = torch.Generator().manual_seed(3)
    x = torch.randn(5, 3, 2, 2, dtype=torch.float64, generator=generator)
    x = x.to(memory_format=torch.channels_last) if channels_last else x
    params = [torch.randn(3, dtype=torch.float64, generator=generator) for _ in range(4)]
    inputs = [t.requires_grad_(True) for t in (x, *params)]

    def fused(x, w1, b1, w2, b2):
        return split_batch_norm(x, 2, BlockNorm(w1, b1, None, None, 0.1), BlockNorm(w2, b2, None, None, 0.1), 1e-5)
    assert torch.autograd.gradcheck(fused, inputs)


@pytest.mark.parametrize('n_first', [0, BATCH])
def test_split_batch_norm_refuses_an_empty_block(n_first):
    block = BlockNorm(None, None, None, None, 0.1)
    with pytest.raises(ValueError, match='rows in both blocks'):
        split_batch_norm(_input(False), n_first, block, block, 1e-5)
