"""Converters from the authors' released robust checkpoints to timm exports.

* `convert_fast_advprop`: Fast AdvProp (``aux_bn`` mixture BN, torchvision ResNet) to ``mbn_resnet50`` & co;
* `convert_nofrost`: NoFrost NF-ResNets (already timm's layout behind ``module.``) to ``nf_resnet26/50``;
* `convert_tensorpack_resnet`: Feature Denoising's tensorpack ``R152.npz`` to ``resnet152``
  (`use_tf_same_padding` reproduces TensorFlow's padding exactly).

Command line: ``python -m timm_advnorm.convert <format> SRC DST`` (`timm_advnorm.commands.convert`).
"""
from .fast_advprop import convert_fast_advprop, fast_advprop_state_dict, torchvision_resnet_name
from .nofrost import convert_nofrost, nf_resnet_name, nofrost_state_dict
from .tensorpack import (
    convert_tensorpack_resnet, read_tensorpack_npz, tensorpack_resnet_layers, tensorpack_resnet_state_dict,
    use_tf_same_padding)
