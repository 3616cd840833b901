"""Very deep bottleneck ResNets (ResNet-338/518/638) for adversarial training.

Xie & Yuille, *Intriguing Properties of Adversarial Training at Scale* (ICLR 2020), Section 5 and Figure 7: unlike
clean training, where accuracy saturates past ResNet-200, adversarial robustness keeps growing with depth up to
ResNet-638. The paper gives the depths, not the per-stage block counts; `deep_resnet_layers` states ours.

These are timm's own `ResNet` with `Bottleneck` blocks, so every timm feature (features_only, grad checkpointing,
drop path, TorchScript, FX) works unchanged, and ``layers=...`` still overrides the stage split.
"""
from functools import partial
from typing import Any, Tuple

from timm.models import build_model_with_cfg, generate_default_cfgs, register_model
from timm.models.resnet import Bottleneck, ResNet

from ._cfg import XIE_YUILLE_2020, resnet_cfg

__all__ = ['deep_resnet_layers', 'bottleneck_resnet_depth']

_OUTER_STAGE_BLOCKS = 3
# ResNet-200 puts 24 and 36 blocks in its two middle stages: deeper models keep that 2:3 proportion.
_MIDDLE_SPLIT = (24, 36)


def bottleneck_resnet_depth(layers: Tuple[int, ...]) -> int:
    """Depth of a bottleneck ResNet: 3 weighted layers per block, plus the stem convolution and the classifier."""
    return 3 * sum(layers) + 2


def deep_resnet_layers(depth: int) -> Tuple[int, int, int, int]:
    """Blocks per stage of a bottleneck ResNet of `depth` layers (ResNet-200 and deeper).

    Rule: a bottleneck ResNet of depth ``3·Σblocks + 2`` has ``(depth - 2) / 3`` blocks. The first and last stage
    keep 3 blocks; stages 2 and 3 share the rest in ResNet-200's 24:36 proportion (rounded). This gives
    ResNet-200 = (3, 24, 36, 3), ResNet-338 = (3, 42, 64, 3), ResNet-518 = (3, 66, 100, 3) and
    ResNet-638 = (3, 82, 124, 3). Every bottleneck block costs the same FLOPs whatever its stage (the spatial size
    halves when the width doubles), so the split changes neither the depth nor the compute, only where the
    parameters sit.

    Raises:
        ValueError: `depth` is below 200 or not of the form ``3·n + 2``.
    """
    if depth < 200 or (depth - 2) % 3:
        raise ValueError(f'Depth must be >= 200 and of the form 3*blocks + 2, got {depth}.')
    middle = (depth - 2) // 3 - 2 * _OUTER_STAGE_BLOCKS
    stage2 = round(middle * _MIDDLE_SPLIT[0] / sum(_MIDDLE_SPLIT))
    return _OUTER_STAGE_BLOCKS, stage2, middle - stage2, _OUTER_STAGE_BLOCKS


def _create_deep_resnet(variant: str, pretrained: bool = False, **kwargs: Any) -> ResNet:
    return build_model_with_cfg(ResNet, variant, pretrained, **kwargs)


_cfg = partial(resnet_cfg, XIE_YUILLE_2020)

# No released weights yet: untagged cfgs only, no hub ids.
default_cfgs = generate_default_cfgs({
    'resnet338': _cfg(),
    'resnet518': _cfg(),
    'resnet638': _cfg(),
})


def _deep_resnet(depth: int, pretrained: bool, **kwargs: Any) -> ResNet:
    model_args = dict(block=Bottleneck, layers=deep_resnet_layers(depth))
    return _create_deep_resnet(f'resnet{depth}', pretrained, **dict(model_args, **kwargs))


@register_model
def resnet338(pretrained: bool = False, **kwargs: Any) -> ResNet:
    """ResNet-338, blocks (3, 42, 64, 3); see `deep_resnet_layers` for the split rule."""
    return _deep_resnet(338, pretrained, **kwargs)


@register_model
def resnet518(pretrained: bool = False, **kwargs: Any) -> ResNet:
    """ResNet-518, blocks (3, 66, 100, 3); see `deep_resnet_layers` for the split rule."""
    return _deep_resnet(518, pretrained, **kwargs)


@register_model
def resnet638(pretrained: bool = False, **kwargs: Any) -> ResNet:
    """ResNet-638, blocks (3, 82, 124, 3); see `deep_resnet_layers` for the split rule."""
    return _deep_resnet(638, pretrained, **kwargs)
