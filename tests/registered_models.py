"""The models ``import timm_advnorm`` registers, found by walking the model package rather than listed by hand."""
import pkgutil
from typing import List

import timm

import timm_advnorm.models

MODEL_MODULES: List[str] = sorted(
    m.name for m in pkgutil.iter_modules(timm_advnorm.models.__path__) if not m.name.startswith('_'))
ALL_MODELS: List[str] = sorted(name for module in MODEL_MODULES for name in timm.list_models(module=module))
#: The rule for a small model, which every numerical check runs on: fewer parameters than this at its default 1000
#: classes (the largest is ~0.6M, the smallest other model ResNet-18's 11.7M). Building every model to count them
#: would cost seconds at collection, so the names say it (``test_*``, ``tiny_*``, ``galloway_*``) and the meta-device
#: contract test checks each name against its count.
SMALL_MODEL_MAX_PARAMS = 1_000_000
SMALL_MODELS: List[str] = [name for name in ALL_MODELS if name.startswith(('test_', 'tiny_', 'galloway_'))]
#: Feature levels (`forward_intermediates`) of the models that have fewer than a CNN's five: Galloway et al.'s MNIST
#: models (the flattened input and one level per hidden layer; the linear model has the input alone).
FEATURE_LEVELS = {'galloway_mlp': 3, 'galloway_bn_mlp': 3, 'galloway_linear': 1}
#: Models that refuse ``features_only`` (a `RuntimeError`, as timm's models without feature maps): the linear model,
#: whose one level would be its own flattened input.
NO_FEATURE_EXTRACTOR = frozenset({'galloway_linear'})
#: Models whose first layer fixes the input side (`img_size` at creation; the cfg's by default).
FIXED_SIZE_MODELS = frozenset(FEATURE_LEVELS)
#: Models without released weights (every registered model but those loading published checkpoints by tag).
UNTRAINED_MODELS: List[str] = [name for name in ALL_MODELS if not timm.models.get_pretrained_cfg(name).hf_hub_id]
