"""TensorFlow's "SAME" padding for a timm model converted from TensorFlow weights.

TensorFlow pads a strided layer asymmetrically (more on the bottom/right) where PyTorch pads symmetrically, which
shifts the sampling grid by one pixel: weights trained in TensorFlow (Feature Denoising's tensorpack ResNets, say)
give slightly different outputs in stock timm. Swapping those layers for timm's ``Conv2dSame``/``MaxPool2dSame``
reproduces the original exactly. An export records the need (``config.json``'s plugin config), and the loader
applies it, so this lives with the layers rather than with any one converter.
"""
import torch.nn as nn
from timm.layers import Conv2dSame
from timm.layers.pool2d_same import MaxPool2dSame

__all__ = ['use_tf_same_padding']


def use_tf_same_padding(model: nn.Module) -> nn.Module:
    """Give every strided convolution and max pool of `model` TensorFlow's ``SAME`` padding, in place.

    Keeps parameters and state-dict keys; `model` then matches a TensorFlow network with ``SAME`` padding exactly.
    1x1 convolutions are left alone (``SAME`` pads them by nothing).
    """
    for name, module in list(model.named_modules()):
        replacement = None
        if type(module) is nn.Conv2d and max(module.stride) > 1 and max(module.kernel_size) > 1:
            replacement = Conv2dSame(
                module.in_channels, module.out_channels, module.kernel_size, module.stride, 0, module.dilation,
                module.groups, module.bias is not None, device=module.weight.device, dtype=module.weight.dtype)
            replacement.load_state_dict(module.state_dict())
        elif type(module) is nn.MaxPool2d and module.stride not in (1, (1, 1)):
            replacement = MaxPool2dSame(module.kernel_size, module.stride, 0, module.dilation, module.ceil_mode)
        if replacement is not None:
            replacement.train(module.training)
            parent_name, _, child = name.rpartition('.')
            setattr(model.get_submodule(parent_name) if parent_name else model, child, replacement)
    return model
