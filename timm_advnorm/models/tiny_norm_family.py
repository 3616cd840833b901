"""A tiny ResNet family in which only the normalization differs: the fair small-scale comparison of the papers.

The seed papers compare normalizations at equal architecture: BN vs mixture BN vs GN (Xie & Yuille, ICLR 2020, §4.2
and §4.3), BN vs no BN (Galloway et al., 2019) and BN vs normalizer-free (Wang et al., NoFrost, ICML 2022, Table 3).
The other tiny ``test_*`` models differ in layout and size (``test_nfr_resnet`` is timm's NF bottleneck layout with
56K parameters against ``test_resnet``'s 374K), so a comparison of them measures the layout as much as the
normalization. These models share one layout: a 3x3 stem and four stages of one basic block (two 3x3 convolutions),
widths 16, 32, 64, 96, stride 2 from the second stage on (32x32 input: a 4x4 last stage, enough for per-image
statistics), global pooling and a linear head.

* ``tiny_bn_resnet``: batch norm. ``tiny_mbn_resnet``: mixture BN (one BN per domain; ``--method mbn``).
* ``tiny_gn_resnet``: group norm, 8 groups. ``tiny_in_resnet``: affine instance norm.
* ``tiny_nf_resnet``: normalizer-free (Brock et al., ICLR 2021, as timm's NF-ResNets): weight-standardized
  convolutions with a learned gain, gamma-scaled ReLU, pre-activation residual blocks ``x + α·f(x/β)`` whose β
  tracks the expected signal variance, and a zero-initialised residual gain (SkipInit).

Each normalized block zero-initialises its last norm's scale and the NF block its residual gain, so every member
starts as the same near-identity residual network. A norm layer's scale and shift and an NF convolution's gain and
bias are two values per output channel each, so the normalized members have the same parameter count (~0.22M; the
mixture-BN one adds its adversarial BN, +0.6%) and the NF member is within 0.1% of it.
"""
from functools import partial
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple, Union

import torch
import torch.nn as nn
import torch.nn.functional as F
from timm.layers import ClassifierHead, GroupNorm, ScaledStdConv2d, get_device_dtype
from timm.models import build_model_with_cfg, checkpoint_seq, generate_default_cfgs, register_model
from timm.models._features import feature_take_indices  # what timm's own models use; not re-exported

from ..layers import MixtureBatchNorm2d
from ..layers.branch_notice import notice_default_branch
from ..layers.routing import check_inference_branch, set_inference_branch
from ._cfg import XIE_YUILLE_2020, resnet_cfg
from .norm_resnet import AffineInstanceNorm2d

__all__ = ['NORM_LAYERS', 'NormBlock', 'NormFreeBlock', 'ScaledReLU', 'TinyNormResNet']

#: The normalizations of the family by name; ``None`` is the normalizer-free member.
NORM_LAYERS: Dict[str, Optional[Callable[..., nn.Module]]] = {
    'bn': nn.BatchNorm2d,
    'mbn': MixtureBatchNorm2d,
    'gn': partial(GroupNorm, num_groups=8),
    'in': AffineInstanceNorm2d,
    'nf': None,
}

_WIDTHS = (16, 32, 64, 96)
_STEM_WIDTH = 16
# NF-ResNet residual scale α (Brock et al. 2021).
_NF_ALPHA = 0.2


def _scaled_relu(x: torch.Tensor) -> torch.Tensor:
    """ReLU with a variance-preserving gain, the activation of NF-ResNets.

    The gain is ReLU's output scaled to unit variance for a unit Gaussian input, timm's NF-ResNets' constant; a
    literal, since TorchScript does not read module-level constants.
    """
    return F.relu(x) * 1.7139588594436646


class ScaledReLU(nn.Module):
    """`_scaled_relu` as a layer: the normalizer-free member's final activation, which pruning can remove."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return _scaled_relu(x)


class NormBlock(nn.Module):
    """Basic residual block, post-activation: ``act(norm(conv(act(norm(conv(x))))) + shortcut(x))``."""

    def __init__(self, in_chs: int, out_chs: int, stride: int, norm_layer: Callable[..., nn.Module],
                 device=None, dtype=None):
        super().__init__()
        dd = dict(device=device, dtype=dtype)
        self.conv1 = nn.Conv2d(in_chs, out_chs, 3, stride=stride, padding=1, bias=False, **dd)
        self.norm1 = norm_layer(out_chs, **dd)
        self.conv2 = nn.Conv2d(out_chs, out_chs, 3, padding=1, bias=False, **dd)
        self.norm2 = norm_layer(out_chs, **dd)
        self.act = nn.ReLU(inplace=True)
        self.shortcut = nn.Identity() if stride == 1 and in_chs == out_chs else nn.Sequential(
            nn.Conv2d(in_chs, out_chs, 1, stride=stride, bias=False, **dd), norm_layer(out_chs, **dd))
        nn.init.zeros_(self.norm2.weight)  # starts as the identity plus shortcut, like timm's zero_init_last

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.act(self.norm1(self.conv1(x)))
        return self.act(self.norm2(self.conv2(out)) + self.shortcut(x))


class NormFreeBlock(nn.Module):
    """Normalizer-free basic block, pre-activation: ``x + α·g·f(act(x)/β)`` (Brock et al. 2021).

    Args:
        beta: Expected standard deviation of the block's input, which the block divides it by.
        alpha: Growth of the signal variance per block (``α²``).
    """

    def __init__(self, in_chs: int, out_chs: int, stride: int, beta: float, alpha: float = _NF_ALPHA,
                 device=None, dtype=None):
        super().__init__()
        conv = partial(ScaledStdConv2d, eps=1e-5, device=device, dtype=dtype)
        self.beta = beta
        self.alpha = alpha
        self.conv1 = conv(in_chs, out_chs, 3, stride=stride, padding=1)
        self.conv2 = conv(out_chs, out_chs, 3, padding=1)
        self.shortcut = None if stride == 1 and in_chs == out_chs else conv(in_chs, out_chs, 1, stride=stride)
        self.skip_gain = nn.Parameter(torch.zeros((), device=device, dtype=dtype))  # SkipInit: starts as identity

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = _scaled_relu(x) / self.beta
        shortcut = x if self.shortcut is None else self.shortcut(out)  # a transition block rescales the signal
        out = self.conv2(_scaled_relu(self.conv1(out)))
        return shortcut + out * (self.alpha * self.skip_gain)


class TinyNormResNet(nn.Module):
    """The family's network: stem, four one-block stages, pooled linear head.

    Args:
        norm: ``bn``, ``mbn``, ``gn``, ``in`` or ``nf`` (see `NORM_LAYERS`).
        num_classes: Classifier outputs (0: no classifier, the pooled features).
        in_chans: Input channels.
        global_pool: timm's pooling type of the head (``avg``, ``max``, ``avgmax``, ``''`` for none, ...).
        widths: Channels of the four stages.
        drop_rate: Dropout before the classifier.
        device: Device of the parameters and buffers.
        dtype: Floating-point type of the parameters and buffers.
    """

    def __init__(self, norm: str = 'bn', num_classes: int = 1000, in_chans: int = 3, global_pool: str = 'avg',
                 widths: Sequence[int] = _WIDTHS, drop_rate: float = 0.0, device=None, dtype=None):
        super().__init__()
        if norm not in NORM_LAYERS:
            raise ValueError(f'norm must be one of {", ".join(NORM_LAYERS)}, got {norm!r}.')
        dd = dict(device=device, dtype=dtype)
        self.num_classes = num_classes
        self.in_chans = in_chans
        self.drop_rate = drop_rate
        self.num_features = widths[-1]
        self.grad_checkpointing = False
        norm_layer = NORM_LAYERS[norm]
        if norm_layer is None:
            self.stem = ScaledStdConv2d(in_chans, _STEM_WIDTH, 3, padding=1, eps=1e-5, **dd)
            stem_module = 'stem'
            blocks, expected_var, in_chs = [], 1.0, _STEM_WIDTH
            for i, width in enumerate(widths):
                stride = 1 if i == 0 else 2
                if stride != 1 or in_chs != width:  # a transition block's shortcut re-standardizes the signal
                    expected_var = 1.0
                blocks.append(NormFreeBlock(in_chs, width, stride, beta=expected_var ** 0.5, **dd))
                expected_var += _NF_ALPHA ** 2
                in_chs = width
        else:
            self.stem = nn.Sequential(
                nn.Conv2d(in_chans, _STEM_WIDTH, 3, padding=1, bias=False, **dd), norm_layer(_STEM_WIDTH, **dd),
                nn.ReLU())
            stem_module = 'stem.2'
            blocks, in_chs = [], _STEM_WIDTH
            for i, width in enumerate(widths):
                blocks.append(NormBlock(in_chs, width, 1 if i == 0 else 2, norm_layer, **dd))
                in_chs = width
        self.stages = nn.Sequential(*blocks)
        # NF blocks are pre-activation: their features end with the activation a next block would apply
        self.final_act = ScaledReLU() if norm_layer is None else nn.Identity()
        self.feature_info = [dict(num_chs=_STEM_WIDTH, reduction=1, module=stem_module)] + [
            dict(num_chs=width, reduction=2 ** i, module=f'stages.{i}') for i, width in enumerate(widths)]
        self.head = ClassifierHead(widths[-1], num_classes, pool_type=global_pool, drop_rate=drop_rate, **dd)
        self.head_hidden_size = self.head.num_features
        for module in self.modules():
            if isinstance(module, MixtureBatchNorm2d):
                module.copy_clean_to_adv()  # both branches start alike, the zero-initialised scales included

    @torch.jit.ignore
    def group_matcher(self, coarse: bool = False) -> Dict[str, Any]:
        return dict(stem=r'^stem', blocks=r'^stages\.(\d+)')

    @torch.jit.ignore
    def get_classifier(self) -> nn.Module:
        return self.head.fc

    def reset_classifier(self, num_classes: int, global_pool: Optional[str] = None) -> None:
        """A new classifier for `num_classes` (0: none), on the model's device and dtype; the current pooling unless
        `global_pool` is given."""
        self.num_classes = num_classes
        self.head.reset(num_classes, pool_type=global_pool, **get_device_dtype(self))
        self.head_hidden_size = self.head.num_features

    @torch.jit.ignore
    def set_grad_checkpointing(self, enable: bool = True) -> None:
        """Recompute each stage in the backward pass instead of keeping its activations."""
        self.grad_checkpointing = enable

    def forward_intermediates(
            self,
            x: torch.Tensor,
            indices: Optional[Union[int, List[int]]] = None,
            norm: bool = False,
            stop_early: bool = False,
            output_fmt: str = 'NCHW',
            intermediates_only: bool = False,
    ) -> Union[List[torch.Tensor], Tuple[torch.Tensor, List[torch.Tensor]]]:
        """The features of the stem and of the stages `indices` selects (timm's convention: an int takes the last n,
        None all), and the final features unless `intermediates_only` (those of `forward_features` when every stage
        ran; the last stage's output when `stop_early` stopped before).

        Args:
            x: Input images.
            indices: Which of the five feature levels (stem, four stages) to return.
            norm: Unused: the family has no final norm layer (timm's signature).
            stop_early: Stop after the last requested level (the final features are then that level's).
            output_fmt: Only ``NCHW``.
            intermediates_only: Return the list of intermediates alone.
        """
        assert output_fmt == 'NCHW', 'Output shape must be NCHW.'
        take_indices, max_index = feature_take_indices(len(self.stages) + 1, indices)
        intermediates = []
        x = self.stem(x)
        if 0 in take_indices:
            intermediates.append(x)
        stages = self.stages[:max_index] if stop_early else self.stages
        for index, stage in enumerate(stages, start=1):
            x = stage(x)
            if index in take_indices:
                intermediates.append(x)
        if intermediates_only:
            return intermediates
        return (self.final_act(x) if len(stages) == len(self.stages) else x), intermediates

    def prune_intermediate_layers(
            self,
            indices: Union[int, List[int]] = 1,
            prune_norm: bool = False,
            prune_head: bool = True,
    ) -> List[int]:
        """Drop the stages after the last level `indices` selects (and the final activation with them, so that the
        features end at that level), and the classifier when asked or when the final features change; returns the
        kept indices."""
        take_indices, max_index = feature_take_indices(len(self.stages) + 1, indices)
        prune_end = max_index < len(self.stages)
        if prune_end:
            self.stages = self.stages[:max_index]
            self.final_act = nn.Identity()
            self.num_features = self.head_hidden_size = self.feature_info[max_index]['num_chs']
        if prune_head or prune_end:
            self.num_classes = 0
            self.head.reset(0, pool_type='', in_features=self.num_features)
        return take_indices

    def forward_features(self, x: torch.Tensor) -> torch.Tensor:
        x = self.stem(x)
        if self.grad_checkpointing and not torch.jit.is_scripting():
            x = checkpoint_seq(self.stages, x)
        else:
            x = self.stages(x)
        return self.final_act(x)

    def forward_head(self, x: torch.Tensor, pre_logits: bool = False) -> torch.Tensor:
        return self.head(x, pre_logits=pre_logits)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.forward_head(self.forward_features(x))


def _create_tiny(variant: str, norm: str, pretrained: bool = False, inference_branch: Optional[str] = None,
                 **kwargs: Any) -> TinyNormResNet:
    """Build `variant`; the mixture-BN member takes ``inference_branch`` (``clean``, default, or ``adv``)."""
    if norm == 'mbn':
        check_inference_branch(inference_branch or 'clean')
    elif inference_branch is not None:
        raise ValueError(f'{variant} has no mixture BN: inference_branch does not apply.')
    model = build_model_with_cfg(
        TinyNormResNet, variant, pretrained, norm=norm, feature_cfg=dict(flatten_sequential=True), **kwargs)
    if norm != 'mbn':
        return model
    set_inference_branch(model, inference_branch or 'clean')
    return model if inference_branch else notice_default_branch(model)


# 32x32 input (the digits); no released weights: untagged cfgs only, no hub ids.
_cfg = partial(resnet_cfg, XIE_YUILLE_2020, input_size=(3, 32, 32), pool_size=(4, 4), crop_pct=1.0,
               first_conv='stem.0', classifier='head.fc')
default_cfgs = generate_default_cfgs({
    'tiny_bn_resnet': _cfg(),
    'tiny_mbn_resnet': _cfg(),
    'tiny_gn_resnet': _cfg(),
    'tiny_in_resnet': _cfg(),
    'tiny_nf_resnet': _cfg(first_conv='stem'),
})


@register_model
def tiny_bn_resnet(pretrained: bool = False, **kwargs: Any) -> TinyNormResNet:
    """Tiny fair-family ResNet with batch norm (~0.22M parameters, 32x32 input)."""
    return _create_tiny('tiny_bn_resnet', 'bn', pretrained, **kwargs)


@register_model
def tiny_mbn_resnet(pretrained: bool = False, **kwargs: Any) -> TinyNormResNet:
    """Tiny fair-family ResNet with mixture BN."""
    return _create_tiny('tiny_mbn_resnet', 'mbn', pretrained, **kwargs)


@register_model
def tiny_gn_resnet(pretrained: bool = False, **kwargs: Any) -> TinyNormResNet:
    """Tiny fair-family ResNet with group norm (8 groups)."""
    return _create_tiny('tiny_gn_resnet', 'gn', pretrained, **kwargs)


@register_model
def tiny_in_resnet(pretrained: bool = False, **kwargs: Any) -> TinyNormResNet:
    """Tiny fair-family ResNet with affine instance norm."""
    return _create_tiny('tiny_in_resnet', 'in', pretrained, **kwargs)


@register_model
def tiny_nf_resnet(pretrained: bool = False, **kwargs: Any) -> TinyNormResNet:
    """Tiny fair-family normalizer-free ResNet (weight-standardized convolutions, SkipInit)."""
    return _create_tiny('tiny_nf_resnet', 'nf', pretrained, **kwargs)
