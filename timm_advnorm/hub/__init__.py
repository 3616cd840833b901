"""Hugging Face Hub publishing and loading: read any checkpoint, load it loudly, export it deployably.

Loading (what ``train_adv.py`` and ``validate_adv.py`` use):

* `create_model_from_name_or_checkpoint(model_name, checkpoint, pretrained=..., ema=..., branch=...)`;
* `load_weights(model, source, ema=False, strict=True, branch=None)`;

where a source is a ``train_adv.py`` checkpoint, a state dict (``.pth``/``.safetensors``), an export folder,
``local-dir:PATH`` or ``hf-hub:org/name``. Exports load with ``timm.create_model('hf-hub:org/name',
pretrained=True)`` (after ``import timm_advnorm`` for this plugin's architectures); a whole mixture-BN export comes
back routed to the inference branch its ``config.json`` records (``model_args.inference_branch``).

Publishing: ``timm-advnorm-publish`` (see `timm_advnorm.hub.publish`). Publishing sits above evaluation: the card
(`card`) states a ``timm-advnorm-validate`` results file read by the evaluation's schema (`results`), while evaluation
and training load their weights here. So this package imports only its loading modules; the card's and the results'
names load on first use (PEP 562), and importing `timm_advnorm.hub` never loads the evaluation.
"""
from ..lazy import lazy_names as _lazy_names
from .checkpoint import MODEL_CONFIG_ARG, Checkpoint, read_checkpoint, split_source, strip_wrapper_prefixes
from .export import (
    build_export_model, export_data_args, export_model_args, install_to_hf_cache, needs_plugin, staged_folder,
    write_export)
from .loading import (
    PLUGIN_CONFIG_KEY, adapt_state_dict, check_num_classes, create_model_from_name_or_checkpoint,
    has_pretrained_weights, load_weights, model_config, pretrained_num_classes, state_dict_num_classes)

#: Names of the publishing modules, loaded on first use, by the module that defines them.
_PUBLISHING_NAMES = {
    'CardFacts': 'card',
    'render_model_card': 'card',
    'CardEntry': 'results',
    'CardResults': 'results',
    'parse_eval_results': 'results',
    'read_eval_results': 'results',
}


__getattr__, __dir__ = _lazy_names(globals(), _PUBLISHING_NAMES)
