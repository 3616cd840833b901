"""The MNIST models of Galloway et al., *Batch Normalization is a Cause of Adversarial Vulnerability* (2019), §4 and
App. B: a ReLU MLP with two hidden layers, with or without one batch-norm hidden layer (Tables 6, 7 and 12: the
"three-layer" MLP of Table 12 is the same network, three weight layers, whose √d = 28 row repeats Table 6's), and a
single linear layer (Table 11).

The paper gives neither the MLP's widths nor where its batch norm sits. We take both from its other MNIST MLP
(Fig. 7, 784–392–BN–196–…): hidden widths 392 and 196, the batch norm between the first hidden layer's affine map
and its ReLU (``fc → BN → ReLU``). Layers use PyTorch's default initialization; a layer followed by batch norm has
no bias (the norm's shift replaces it).

MNIST is grey, timm's folder loaders read RGB (R = G = B): the stem averages the input channels into one grey
channel and flattens it, so the first layer sees d = H·W inputs, as in the paper, and an L∞ attack or noise on the
RGB tensor acts on the grey image the model sees. Features between the layers are ``(B, C, 1, 1)`` maps (the
flattened image as a 1×1 map), so the model keeps timm's NCHW feature contract (pooling, ``features_only``,
intermediates); the linear model, whose one level is the flattened input, refuses ``features_only``.
The input side is fixed by the first layer: ``img_size`` (28, 56, 84: the paper's √d) builds it, and the cfg says
so (``fixed_input_size``; timm then passes the cfg's ``(H, W)`` as ``img_size``).
"""
from typing import Any, Dict, List, Optional, Sequence, Tuple, Union

import torch
import torch.nn as nn
from timm.layers import ClassifierHead, register_notrace_module, to_2tuple
from timm.models import build_model_with_cfg, checkpoint_seq, generate_default_cfgs, register_model
from timm.models._features import feature_take_indices  # what timm's own models use; not re-exported

__all__ = ['GreyFlatten', 'DenseBlock', 'GallowayMLP', 'MNIST_MEAN', 'MNIST_STD']

GALLOWAY_2019 = 'Batch Normalization is a Cause of Adversarial Vulnerability'
#: MNIST's pixel mean and standard deviation (the 60,000 training digits, [0, 1] scale), per RGB channel.
MNIST_MEAN = (0.1307,) * 3
MNIST_STD = (0.3081,) * 3
_HIDDEN = (392, 196)


@register_notrace_module  # a leaf of FX graphs: its size check is control flow
class GreyFlatten(nn.Module):
    """``(B, C, H, W)`` images to ``(B, H·W, 1, 1)``: the channels averaged into one grey channel, then flattened.

    Args:
        img_size: The side the model is built for; another is an error here rather than a shape error later.
    """

    def __init__(self, img_size: int):
        super().__init__()
        self.img_size = img_size

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        torch._assert(x.shape[-1] == self.img_size and x.shape[-2] == self.img_size,
                      'input side differs from the img_size the model was built with')
        # The channels' sum over their count: the values of x.mean(dim=1) (a sum, then a division), and an input
        # gradient that comes back as a broadcast view of the grey gradient over C rather than a (B, C, H, W) division
        # (an attack iteration's largest allocation at 84 px).
        return (x.sum(dim=1) / x.shape[1]).flatten(1)[:, :, None, None]


def _square_side(img_size: Union[int, Sequence[int]]) -> int:
    """The side of a square input given as an int or ``(H, W)``."""
    height, width = to_2tuple(img_size)
    if height != width:
        raise ValueError(f'img_size must be square (the paper\'s d = side²), got {tuple(img_size)}.')
    return int(height)


class DenseBlock(nn.Module):
    """A fully connected ReLU layer on a 1×1 map: ``act(norm(fc(x)))``, the norm optional (batch norm or none).

    The layers are `nn.Linear` and `nn.BatchNorm1d` on the map's channels (on CPU several times faster than their
    1×1-convolution equivalents); the block takes and returns the ``(B, C, 1, 1)`` map.
    """

    def __init__(self, in_features: int, out_features: int, batch_norm: bool = False, device=None, dtype=None):
        super().__init__()
        dd = dict(device=device, dtype=dtype)
        self.fc = nn.Linear(in_features, out_features, bias=not batch_norm, **dd)
        self.norm = nn.BatchNorm1d(out_features, **dd) if batch_norm else nn.Identity()
        self.act = nn.ReLU(inplace=True)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.act(self.norm(self.fc(x.flatten(1))))[:, :, None, None]


class GallowayMLP(nn.Module):
    """A ReLU MLP (or, without hidden layers, a linear model) on flattened grey images.

    Args:
        hidden: Widths of the hidden layers (empty: the linear model).
        bn_layers: Indices of the hidden layers with batch norm.
        img_size: Side of the square input images, or their ``(H, W)`` (timm's form for fixed-size models).
        num_classes: Classifier outputs (0: no classifier, the last hidden layer's features).
        in_chans: Input channels (averaged into one grey channel).
        global_pool: timm's pooling type of the head (the features are a 1×1 map: every type is the identity).
        drop_rate: Dropout before the classifier.
        device: Device of the parameters and buffers.
        dtype: Floating-point type of the parameters and buffers.
    """

    def __init__(self, hidden: Sequence[int] = _HIDDEN, bn_layers: Sequence[int] = (),
                 img_size: Union[int, Tuple[int, int]] = 28,
                 num_classes: int = 1000, in_chans: int = 3, global_pool: str = 'avg', drop_rate: float = 0.0,
                 device=None, dtype=None):
        super().__init__()
        if any(not 0 <= i < len(hidden) for i in bn_layers):
            raise ValueError(f'bn_layers {tuple(bn_layers)} must index the {len(hidden)} hidden layers.')
        img_size = _square_side(img_size)
        dd = dict(device=device, dtype=dtype)
        self.num_classes = num_classes
        self.in_chans = in_chans
        self.img_size = img_size
        self.drop_rate = drop_rate
        self.grad_checkpointing = False
        self.stem = GreyFlatten(img_size)
        width = img_size * img_size
        self.feature_info = [dict(num_chs=width, reduction=img_size, module='stem')]
        blocks = []
        for i, out_features in enumerate(hidden):
            blocks.append(DenseBlock(width, out_features, batch_norm=i in bn_layers, **dd))
            self.feature_info.append(dict(num_chs=out_features, reduction=img_size, module=f'stages.{i}'))
            width = out_features
        self.stages = nn.Sequential(*blocks)
        self.num_features = width
        self.head = ClassifierHead(width, num_classes, pool_type=global_pool, drop_rate=drop_rate, **dd)
        self.head_hidden_size = self.head.num_features
        # Where a new classifier's device and dtype come from (timm reads a parameter's, but the linear model has
        # none left after ``reset_classifier(0)``): empty, not saved, moved and cast with the model.
        self.register_buffer('factory_anchor', torch.empty(0, **dd), persistent=False)

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
        dd = dict(device=self.factory_anchor.device, dtype=self.factory_anchor.dtype)
        self.head.reset(num_classes, pool_type=global_pool, **dd)
        self.head_hidden_size = self.head.num_features

    @torch.jit.ignore
    def set_grad_checkpointing(self, enable: bool = True) -> None:
        """Recompute each hidden layer in the backward pass instead of keeping its activations."""
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
        """The flattened input and the hidden layers' outputs `indices` selects (timm's convention: an int takes the
        last n, None all), as 1×1 maps, and the final features unless `intermediates_only`.

        Args:
            x: Input images.
            indices: Which feature levels (flattened input, hidden layers) to return.
            norm: Unused: the model has no final norm layer (timm's signature).
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
        return x, intermediates

    def prune_intermediate_layers(
            self,
            indices: Union[int, List[int]] = 1,
            prune_norm: bool = False,
            prune_head: bool = True,
    ) -> List[int]:
        """Drop the hidden layers after the last level `indices` selects, and the classifier when asked or when the
        final features change; returns the kept indices."""
        take_indices, max_index = feature_take_indices(len(self.stages) + 1, indices)
        prune_end = max_index < len(self.stages)
        if prune_end:
            self.stages = self.stages[:max_index]
            self.num_features = self.head_hidden_size = self.feature_info[max_index]['num_chs']
        if prune_head or prune_end:
            self.num_classes = 0
            self.head.reset(0, pool_type='', in_features=self.num_features)
        return take_indices

    def forward_features(self, x: torch.Tensor) -> torch.Tensor:
        x = self.stem(x)
        if self.grad_checkpointing and not torch.jit.is_scripting():
            return checkpoint_seq(self.stages, x)
        return self.stages(x)

    def forward_head(self, x: torch.Tensor, pre_logits: bool = False) -> torch.Tensor:
        return self.head(x, pre_logits=pre_logits)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.forward_head(self.forward_features(x))


def _create_galloway(variant: str, pretrained: bool = False, **kwargs: Any) -> GallowayMLP:
    if kwargs.get('features_only') and not kwargs['hidden']:
        # as timm's models without feature maps refuse it: the one level would be the flattened input itself
        raise RuntimeError(f'features_only not implemented for {variant}: a linear model has no hidden features.')
    img_size = _square_side(kwargs.get('img_size', 28))
    levels = len(kwargs['hidden']) + 1  # the flattened input and each hidden layer (timm's default takes five)
    model = build_model_with_cfg(GallowayMLP, variant, pretrained,
                                 feature_cfg=dict(flatten_sequential=True, out_indices=tuple(range(levels))), **kwargs)
    model.pretrained_cfg = {**model.pretrained_cfg, 'input_size': (3, img_size, img_size)}
    return model


def _cfg(**kwargs: Any) -> Dict[str, Any]:
    """28×28 MNIST input, already at its size (nearest, no crop; fixed: the first layer's width depends on it);
    MNIST's mean and std; no released weights."""
    return {
        'url': '', 'num_classes': 1000, 'input_size': (3, 28, 28), 'fixed_input_size': True, 'pool_size': (1, 1),
        'crop_pct': 1.0,
        'interpolation': 'nearest', 'mean': MNIST_MEAN, 'std': MNIST_STD, 'first_conv': 'stages.0.fc',
        'classifier': 'head.fc', 'license': 'apache-2.0', 'paper_name': GALLOWAY_2019, **kwargs,
    }


default_cfgs = generate_default_cfgs({
    'galloway_mlp': _cfg(),
    'galloway_bn_mlp': _cfg(),
    'galloway_linear': _cfg(first_conv='head.fc'),
})


@register_model
def galloway_mlp(pretrained: bool = False, **kwargs: Any) -> GallowayMLP:
    """Galloway et al.'s MNIST MLP without batch norm: d–392–196–classes, ReLU (Tables 6, 7, 12)."""
    return _create_galloway('galloway_mlp', pretrained, **dict(dict(hidden=_HIDDEN), **kwargs))


@register_model
def galloway_bn_mlp(pretrained: bool = False, **kwargs: Any) -> GallowayMLP:
    """Galloway et al.'s MNIST MLP with one batch-norm hidden layer: d–392–BN–196–classes, ReLU (Tables 6, 7, 12)."""
    return _create_galloway('galloway_bn_mlp', pretrained, **dict(dict(hidden=_HIDDEN, bn_layers=(0,)), **kwargs))


@register_model
def galloway_linear(pretrained: bool = False, **kwargs: Any) -> GallowayMLP:
    """Galloway et al.'s linear model on MNIST: one affine layer d–classes (Table 11)."""
    return _create_galloway('galloway_linear', pretrained, **dict(dict(hidden=()), **kwargs))
