"""Layout shared by the tiny ``test_*`` ResNets: timm's `test_resnet` (both block types, ~0.37M parameters).

Sharing timm's layout means a branch of `test_mbn_resnet` exports to the stock ``test_resnet`` architecture.
"""
from timm.models.resnet import BasicBlock, Bottleneck

TINY_RESNET_ARGS = dict(
    block=[BasicBlock, BasicBlock, Bottleneck, BasicBlock], layers=(1, 1, 1, 1), stem_width=16, stem_type='deep',
    avg_down=True, channels=(32, 48, 48, 96))

# 32x32 input (CIFAR-sized) keeps tests fast; the last stage then sees a 1x1 map.
TINY_CFG = dict(input_size=(3, 32, 32), pool_size=(1, 1), crop_pct=1.0, first_conv='conv1.0')
