"""`rows_gradient`: the input gradient of some rows, its first-convolution share computed for those rows alone, equals
autograd's wherever the input reaches the loss; models it cannot shortcut get autograd's own."""
import pytest
import timm
import torch
import torch.nn as nn
from timm.layers import StdConv2d

import timm_advnorm  # noqa: F401  (registers the models)
from timm_advnorm.task.input_gradient import first_plain_conv, rows_gradient

ROWS = slice(3, None)


class _Stem(nn.Module):
    """A first convolution and a head; optionally the input also reaches the loss past the convolution (`skip`), or
    is scaled before it (`prescale`)."""

    def __init__(self, conv: nn.Module, skip: bool = False, prescale: bool = False):
        super().__init__()
        self.conv = conv
        self.skip, self.prescale = skip, prescale
        self.pretrained_cfg = {'first_conv': 'conv'}

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        features = self.conv(2.0 * x if self.prescale else x).mean(dim=(2, 3))
        return features + x.mean(dim=(2, 3)).sum(dim=1, keepdim=True) if self.skip else features


def _input(channels_last: bool = False) -> torch.Tensor:
    x = torch.randn(5, 3, 12, 12, generator=torch.Generator().manual_seed(0))
    return x.to(memory_format=torch.channels_last) if channels_last else x


def _loss(output: torch.Tensor) -> torch.Tensor:
    weights = torch.randn(output.shape, generator=torch.Generator().manual_seed(1))
    return (output.float() * weights).sum()


def _autograd_rows_gradient(model: nn.Module, x: torch.Tensor) -> torch.Tensor:
    x = x.clone().requires_grad_(True)
    _loss(model(x)).backward()
    return x.grad[ROWS]


def _rows_gradient(model: nn.Module, x: torch.Tensor):
    x = x.clone().requires_grad_(True)
    with rows_gradient(model, x, ROWS) as gradient:
        output = model(x)
    _loss(output).backward()
    return gradient(), x


@pytest.mark.parametrize('channels_last', [False, True])
@pytest.mark.parametrize('name', ['test_mbn_resnet', 'mbn_resnet26'])
def test_rows_gradient_equals_autograds_and_skips_the_other_rows(name, channels_last):
    model = timm.create_model(name, num_classes=4).train()
    model = model.to(memory_format=torch.channels_last) if channels_last else model
    x = _input(channels_last)
    expected = _autograd_rows_gradient(model, x)
    got, leaf = _rows_gradient(model, x)
    torch.testing.assert_close(got, expected, rtol=1e-4, atol=1e-6)
    assert leaf.grad is None  # the first convolution computed no input gradient for the whole batch


@pytest.mark.parametrize('stem', [
    _Stem(nn.Conv2d(3, 4, 3, stride=2, padding=1, dilation=1), skip=True),  # the conv's share and autograd's, summed
    _Stem(nn.Conv2d(3, 4, 3, padding=1), prescale=True),  # the conv reads a transformed input: autograd's alone
    _Stem(nn.Conv2d(3, 4, 3, padding='same')),  # padding it cannot pass on: autograd's alone
    _Stem(StdConv2d(3, 4, 3, padding=1)),  # a standardized weight: autograd's alone
    _Stem(nn.Conv2d(3, 4, 3, padding=1, padding_mode='reflect')),
], ids=['skip', 'prescale', 'same-padding', 'std-conv', 'reflect-padding'])
def test_rows_gradient_covers_every_path_and_falls_back_where_it_cannot_shortcut(stem):
    x = _input()
    torch.testing.assert_close(_rows_gradient(stem, x)[0], _autograd_rows_gradient(stem, x), rtol=1e-5, atol=1e-6)


def test_rows_gradient_of_a_frozen_first_convolution_is_autograds():
    """A frozen convolution's output carries no gradient to capture: the input keeps autograd's path."""
    stem = _Stem(nn.Conv2d(3, 4, 3, padding=1), skip=True)
    stem.conv.requires_grad_(False)
    x = _input()
    torch.testing.assert_close(_rows_gradient(stem, x)[0], _autograd_rows_gradient(stem, x), rtol=1e-5, atol=1e-6)


def test_first_plain_conv_reads_the_pretrained_config():
    assert first_plain_conv(_Stem(nn.Conv2d(3, 4, 3))) is not None
    for stem in (_Stem(nn.Conv2d(3, 4, 3, padding='same')), _Stem(StdConv2d(3, 4, 3))):
        assert first_plain_conv(stem) is None
    no_config = nn.Sequential(nn.Conv2d(3, 4, 3))
    assert first_plain_conv(no_config) is None
    no_config.pretrained_cfg = None
    assert first_plain_conv(no_config) is None
    missing = _Stem(nn.Conv2d(3, 4, 3))
    missing.pretrained_cfg = {'first_conv': 'stem.conv'}
    assert first_plain_conv(missing) is None


def test_rows_gradient_under_bfloat16_autocast_is_in_the_inputs_dtype():
    model = timm.create_model('test_mbn_resnet', num_classes=4).train()
    x = _input()
    with torch.autocast('cpu', dtype=torch.bfloat16):
        expected = _autograd_rows_gradient(model, x)
        got, _ = _rows_gradient(model, x)
    assert got.dtype == torch.float32
    torch.testing.assert_close(got, expected, rtol=0.05, atol=1e-3)


def test_rows_gradient_says_when_no_backward_ran():
    x = _input().requires_grad_(True)
    model = _Stem(nn.Conv2d(3, 4, 3))
    with rows_gradient(model, x, ROWS) as gradient:
        model(x)
    with pytest.raises(RuntimeError, match='No gradient reached the input rows'):
        gradient()
    assert not model.conv._forward_hooks and not model.conv._forward_pre_hooks  # removed on leaving the block
