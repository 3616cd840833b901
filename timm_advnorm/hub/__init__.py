"""Hugging Face Hub: publish evaluated runs, and (re-exported from `timm_advnorm.weights`) load and export weights.

Publishing: ``timm-advnorm-publish`` (see `timm_advnorm.hub.publish`). Publishing sits on top of evaluation and
training: the card (`card`) states a ``timm-advnorm-validate`` results file read by the evaluation's schema
(`results`) and the training method's papers. Reading, loading and exporting weights live a floor lower, in
`timm_advnorm.weights`, which training, evaluation and conversion use; this package re-exports those names so that
``timm_advnorm.hub.create_model_from_name_or_checkpoint`` and ``timm_advnorm.hub.install_to_hf_cache`` keep working
(``__all__`` lists the publishing names only: the re-exported ones are `timm_advnorm.weights`'s).
Nothing in the project below this package imports it.
"""
from ..weights import (  # noqa: F401  (re-exported, see above)
    MODEL_CONFIG_ARG, PLUGIN_CONFIG_KEY, Checkpoint, adapt_state_dict, build_export_model, check_num_classes,
    create_model_from_name_or_checkpoint, export_data_args, export_model_args, has_pretrained_weights,
    install_to_hf_cache, load_weights, model_config, needs_plugin, pretrained_num_classes, read_checkpoint,
    split_source, staged_folder, state_dict_num_classes, strip_wrapper_prefixes, write_export)
from .card import CardFacts, render_model_card
from .results import CardEntry, CardResults, parse_eval_results, read_eval_results

__all__ = ['CardFacts', 'render_model_card', 'CardEntry', 'CardResults', 'parse_eval_results', 'read_eval_results']
