"""Model weights: read any checkpoint, load it loudly, digest it, export it deployably.

Loading (what ``train_adv.py`` and ``validate_adv.py`` use):

* `create_model_from_name_or_checkpoint(model_name, checkpoint, pretrained=..., ema=..., branch=...)`;
* `load_weights(model, source, ema=False, strict=True, branch=None)`;

where a source is a ``train_adv.py`` checkpoint, a state dict (``.pth``/``.safetensors``), an export folder,
``local-dir:PATH`` or ``hf-hub:org/name``. Exports load with ``timm.create_model('hf-hub:org/name',
pretrained=True)`` (after ``import timm_advnorm`` for this plugin's architectures); a whole mixture-BN export comes
back routed to the inference branch its ``config.json`` records (``model_args.inference_branch``).

This package sits just above the models: it imports nothing but `layers`, `models` and the project's top-level
helpers, so that data, training, evaluation and conversion can all read weights without reaching the publishing
layer (`timm_advnorm.hub`), which sits above evaluation.
"""
from .checkpoint import MODEL_CONFIG_ARG, Checkpoint, read_checkpoint, split_source, strip_wrapper_prefixes
from .export import (
    build_export_model, export_data_args, export_model_args, install_to_hf_cache, needs_plugin, staged_folder,
    write_export)
from .loading import (
    PLUGIN_CONFIG_KEY, adapt_state_dict, check_num_classes, create_model_from_name_or_checkpoint,
    has_pretrained_weights, load_weights, model_config, pretrained_num_classes, state_dict_num_classes)

__all__ = [
    'Checkpoint', 'MODEL_CONFIG_ARG', 'PLUGIN_CONFIG_KEY', 'adapt_state_dict', 'build_export_model',
    'check_num_classes', 'create_model_from_name_or_checkpoint', 'export_data_args', 'export_model_args',
    'has_pretrained_weights', 'install_to_hf_cache', 'load_weights', 'model_config', 'needs_plugin',
    'pretrained_num_classes', 'read_checkpoint', 'split_source', 'staged_folder', 'state_dict_num_classes',
    'strip_wrapper_prefixes', 'write_export']
