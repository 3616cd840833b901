"""The models ``import timm_advnorm`` registers, found by walking the model package rather than listed by hand."""
import pkgutil
from typing import List

import timm

import timm_advnorm.models

MODEL_MODULES: List[str] = sorted(
    m.name for m in pkgutil.iter_modules(timm_advnorm.models.__path__) if not m.name.startswith('_'))
ALL_MODELS: List[str] = sorted(name for module in MODEL_MODULES for name in timm.list_models(module=module))
#: Each family's small variants, which numerical checks run on.
SMALL_MODELS: List[str] = [name for name in ALL_MODELS if name.startswith(('test_', 'tiny_', 'galloway_'))]
#: Feature levels of the models that have fewer than a CNN's four: Galloway et al.'s MNIST models (the flattened
#: input and one level per hidden layer; the linear model has none).
FEATURE_LEVELS = {'galloway_mlp': 3, 'galloway_bn_mlp': 3, 'galloway_linear': 1}
#: Models whose first layer fixes the input side (`img_size` at creation; the cfg's by default).
FIXED_SIZE_MODELS = frozenset(FEATURE_LEVELS)
#: Models without released weights (every registered model but those loading published checkpoints by tag).
UNTRAINED_MODELS: List[str] = [name for name in ALL_MODELS if not timm.models.get_pretrained_cfg(name).hf_hub_id]
