"""Publish a checkpoint to the Hugging Face Hub, or to a local folder: weights, config and model card.

What the ``timm-advnorm-publish`` command runs (`timm_advnorm.commands.publish` parses its arguments into the
typed `publish_options.PublishOptions` this module reads; also ``hub/publish.py`` in a checkout)::

    timm-advnorm-publish output/train/run/model_best.pth.tar \\
        --results output/eval/results.json --repo-id org/mbn_resnet152.xie2020_in1k
    timm-advnorm-publish CKPT --branch adv --results R.json --local-dir exports/r152-adv --dry-run --repo-id org/x

The checkpoint may be a ``timm-advnorm-train`` checkpoint, a bare state dict (``.pth``/``.safetensors``, with
``--model``), an export folder (e.g. from ``timm_advnorm.convert``) or an ``hf-hub:``/``local-dir:`` name.
Uploads read the token from ``HF_TOKEN``. A non-empty target (folder or Hub repository) is replaced only with
``--overwrite``, a folder only if it is an earlier export and holds none of the command's inputs; folders are written
atomically, so a failure leaves nothing half-written. Everything that can be
checked is checked before anything is written (the arguments, the upload token, the ``--local-dir`` target, the
results, the checkpoint and the model, the Hub repository), so a refused command, once its cause is fixed, can be
run again as it was.
"""
import logging
import os
import tempfile
from dataclasses import replace
from pathlib import Path
from typing import Any, Mapping, Optional, Union

import timm
import torch.nn as nn
from huggingface_hub import HfApi
from huggingface_hub.errors import RevisionNotFoundError
from huggingface_hub.utils import validate_repo_id
from timm.models import split_model_name_tag

from ..layers import has_mixture_bn
from ..layers.routing import INFERENCE_BRANCH_ARG, get_inference_branch
from ..weights.checkpoint import Checkpoint, read_checkpoint, split_source
from ..weights.digest import state_dict_digest
from ..weights.export import (
    build_export_model, check_folder_target, export_data_args, export_model_args, needs_plugin, staged_folder,
    write_export)
from ..weights.loading import PLUGIN_CONFIG_KEY
from ..write_guard import EXPORT_MANIFEST, check_write_target
from .card import CardFacts, render_model_card
from .model_stats import count_model_stats
from .publish_options import CardOptions, ExportOptions, PublishOptions, TargetOptions
from .results import CardResults, read_eval_results

__all__ = ['publish', 'check_upload_target', 'upload_export', 'DEFAULT_CARD_TEMPLATE']

_logger = logging.getLogger(__name__)
#: The command an export folder's manifest names as its writer.
_MADE_BY = 'timm-advnorm-publish'
#: The model card template shipped with the package (``--card-template`` replaces it).
DEFAULT_CARD_TEMPLATE = Path(__file__).resolve().parent / 'model_card_template.md'


def _check_options(options: PublishOptions) -> None:
    """What the options alone tell: something to do, and options that fit together."""
    export, target = options.export, options.target
    if not target.repo_id and not target.local_dir:
        raise ValueError('Nothing to do: give --repo-id (upload) and/or --local-dir (folder).')
    if target.dry_run and not target.local_dir:
        raise ValueError('--dry-run writes the folder that would be uploaded: give --local-dir.')
    if (target.private or target.revision) and not target.repo_id:
        raise ValueError('--private and --revision apply to the Hub repository: give --repo-id.')
    if export.branch and export.inference_branch and export.branch != export.inference_branch:
        raise ValueError(f'--branch {export.branch} exports that branch; --inference-branch cannot be another one.')
    if target.repo_id:
        validate_repo_id(target.repo_id)
        if '/' not in target.repo_id:
            raise ValueError(f'--repo-id must be org/name, got {target.repo_id!r}.')


def _check_local_dir(options: PublishOptions) -> None:
    """``--local-dir`` may be written: it holds none of the command's inputs (`write_guard.check_write_target`; an
    ``--overwrite`` would delete them) and it is empty, or an earlier export to replace with ``--overwrite``."""
    kind, location = split_source(options.export.checkpoint)
    check_write_target(options.target.local_dir, '--local-dir', {
        'the checkpoint being published': location if kind != 'hf-hub' else None,
        'the results file': options.card.results, 'the card template': options.card.template})
    check_folder_target(options.target.local_dir, options.target.overwrite)


def _resolve_inference_branch(export: ExportOptions, checkpoint: Checkpoint) -> ExportOptions:
    """`export` with the branch a whole mixture-BN export loads routed to: ``--inference-branch``, else the one the
    checkpoint records (a ``train_adv.py`` checkpoint records the branch its checkpoints were ranked by), said in one
    line with the dataset it records; a flag against the record is named with it. None when neither says (refused
    for a mixture-BN model, `_check_inference_branch`) and for ``--branch``."""
    if export.branch:
        return replace(export, inference_branch=None)
    recorded = checkpoint.model_args.get(INFERENCE_BRANCH_ARG)
    dataset = checkpoint.args.get('dataset')
    data = '' if dataset is None else f', dataset {dataset or "folder"}'
    if export.inference_branch and recorded not in (None, export.inference_branch):
        _logger.warning(f'Inference branch {export.inference_branch}: given here (--inference-branch); the checkpoint '
                        f'records {recorded}.')
    elif not export.inference_branch and recorded:
        _logger.info(f'Inference branch {recorded}{data}: from the checkpoint\'s record.')
    return replace(export, inference_branch=export.inference_branch or recorded)


def _check_inference_branch(model: nn.Module, branch: Optional[str]) -> None:
    if has_mixture_bn(model) and not branch:
        raise ValueError('A mixture-BN model needs --inference-branch clean|adv (the checkpoint records none), or '
                         '--branch to export one branch.')


def _check_results(card: CardOptions, results: CardResults) -> None:
    """Refuse smoke-test results unless the publisher says they mean to publish them (the card then says so)."""
    if results.reduced and not card.allow_reduced_results:
        raise ValueError(f'{card.results} holds a reduced run of protocol {results.protocol} (timm-advnorm-validate '
                         f'--reduced: smaller attack budgets than the protocol\'s); evaluate without --reduced, or '
                         f'pass --allow-reduced-results to publish it marked as a smoke test.')


def _check_results_weights(card: CardOptions, results: CardResults, model: nn.Module) -> Optional[bool]:
    """Whether `results` evaluated the weights published (`model`'s; see `CardResults.describes`): results of other
    weights, or of weights they do not record, are refused unless ``--allow-other-results`` (the card then says so).

    Returns:
        True (the weights published), False (other weights) or None (the results do not record which).

    Raises:
        ValueError: Not the weights published, or not known to be, without ``--allow-other-results``.
    """
    digest = state_dict_digest(model.state_dict())
    describes = results.describes(digest)
    if describes or card.allow_other_results:
        return describes
    if describes is None:
        raise ValueError(f'{card.results} does not record which weights it evaluated (results that predate weight '
                         f'digests, or from another tool): evaluate these weights again with timm-advnorm-validate, or '
                         f'pass --allow-other-results to publish the numbers marked as those of unverified weights.')
    evaluated = f'{results.checkpoint}, ' if results.checkpoint else ''
    raise ValueError(f'{card.results} evaluated other weights ({evaluated}digest {results.weights_digest[:12]}) than '
                     f'those published (digest {digest[:12]}): evaluate these weights with timm-advnorm-validate (with '
                     f'the same --use-ema and --branch), or pass --allow-other-results to publish the numbers marked '
                     f'as those of other weights.')


def _check_results_model(results: CardResults, *architectures: str) -> None:
    evaluated, _ = split_model_name_tag(results.model)
    if timm.is_model(evaluated) and evaluated not in architectures:
        _logger.warning(f'The results are for {results.model}, not {" or ".join(architectures)}.')


def _card_facts(
        options: PublishOptions,
        checkpoint: Checkpoint,
        model: nn.Module,
        source_arch: str,
        config: Mapping[str, Any],
        results: Optional[CardResults],
        results_weights: Optional[bool],
) -> CardFacts:
    mixture_bn = has_mixture_bn(model)
    repo_id = options.target.repo_id
    # the folder's name only: a card never shows paths of the publisher's machine
    title = repo_id.split('/')[-1] if repo_id else Path(options.target.local_dir).expanduser().absolute().name
    plugin_config = config.get(PLUGIN_CONFIG_KEY) or {}
    architecture = config['architecture']
    return CardFacts(
        title=title,
        load_name=f'hf-hub:{repo_id}' if repo_id else f'local-dir:path/to/{title}',
        architecture=architecture,
        source_architecture=source_arch,
        needs_plugin=needs_plugin(architecture),
        mixture_bn=mixture_bn,
        num_classes=config['num_classes'],
        data_config=config['pretrained_cfg'],
        branch=options.export.branch,
        inference_branch=get_inference_branch(model),
        ema=options.export.ema,
        args=checkpoint.args,
        epoch=checkpoint.epoch,
        results=results,
        results_weights=results_weights,
        provenance=plugin_config.get('converted_from'),
        tf_same_padding=plugin_config.get('padding') == 'tf_same',
        license=options.card.license or config['pretrained_cfg'].get('license') or 'other',
        stats=count_model_stats(model, config['pretrained_cfg']['input_size']),
    )


def _hub_api() -> HfApi:
    """A Hub client with the token in ``HF_TOKEN``.

    Raises:
        ValueError: ``HF_TOKEN`` is not set.
    """
    token = os.environ.get('HF_TOKEN')
    if not token:
        raise ValueError('Set HF_TOKEN (a write token from https://huggingface.co/settings/tokens) to upload.')
    return HfApi(token=token)


def check_upload_target(api: HfApi, target: TargetOptions) -> None:
    """Refuse to upload into the Hub repository (branch) of `target` that already holds files, unless it says
    overwrite.

    Raises:
        FileExistsError: The repository already holds files and `target.overwrite` is not set.
    """
    if target.overwrite or not api.repo_exists(target.repo_id):
        return
    try:
        existing = [f for f in api.list_repo_files(target.repo_id, revision=target.revision) if f != '.gitattributes']
    except RevisionNotFoundError:
        existing = []
    if existing:
        raise FileExistsError(f'hf-hub:{target.repo_id} already holds {len(existing)} files: pass --overwrite.')


def upload_export(folder: Union[str, Path], target: TargetOptions) -> str:
    """Upload an export folder to the Hub repository of `target` with the token in ``HF_TOKEN``; returns the commit
    URL.

    With `target.overwrite`, remote files absent from the folder are deleted so the repository matches it exactly.

    Raises:
        ValueError: ``HF_TOKEN`` is not set.
        FileExistsError: The repository already holds files and `target.overwrite` is not set.
    """
    api = _hub_api()
    check_upload_target(api, target)
    api.create_repo(target.repo_id, private=target.private, exist_ok=True)
    if target.revision:
        api.create_branch(target.repo_id, branch=target.revision, exist_ok=True)
    commit = api.upload_folder(
        repo_id=target.repo_id, folder_path=str(folder), revision=target.revision,
        commit_message=target.commit_message, delete_patterns='*' if target.overwrite else None,
        ignore_patterns=EXPORT_MANIFEST)
    return str(getattr(commit, 'commit_url', commit))


def publish(options: PublishOptions, card_template: str) -> Optional[str]:
    """Export, write the card, and write and/or upload the folder, as `options` say.

    Checks come first, cheapest first, and nothing is written until all have passed: the options, the upload
    token, the ``--local-dir`` target, the results, the checkpoint and the model built from it (and that the results
    evaluated its weights), then the Hub repository (it may not hold files without ``--overwrite``).

    Returns:
        The Hub commit URL, or None when nothing was uploaded.
    """
    _check_options(options)
    target, card = options.target, options.card
    api = _hub_api() if target.upload else None
    if target.local_dir:
        _check_local_dir(options)
    results = read_eval_results(card.results) if card.results else None
    if results is not None:
        _check_results(card, results)
    checkpoint = read_checkpoint(options.export.checkpoint)
    export = _resolve_inference_branch(options.export, checkpoint)
    model, source_arch = build_export_model(checkpoint, export.model, ema=export.ema, branch=export.branch,
                                            inference_branch=export.inference_branch)
    _check_inference_branch(model, export.inference_branch)
    results_weights = None
    if results is not None:
        _check_results_model(results, source_arch, model.pretrained_cfg['architecture'])
        results_weights = _check_results_weights(card, results, model)
    plugin_config = checkpoint.config.get(PLUGIN_CONFIG_KEY)
    if api is not None:
        check_upload_target(api, target)

    def fill(folder: Path) -> None:
        config = write_export(model, folder, export_data_args(checkpoint.args), plugin_config,
                              export_model_args(checkpoint))
        facts = _card_facts(options, checkpoint, model, source_arch, config, results, results_weights)
        (folder / 'README.md').write_text(render_model_card(card_template, facts), encoding='utf-8')

    if target.local_dir:
        with staged_folder(target.local_dir, overwrite=target.overwrite, made_by=_MADE_BY) as stage:
            fill(stage)
        _logger.info(f'Wrote {target.local_dir}.')
        if not target.upload:
            return None
        return upload_export(target.local_dir, target)
    with tempfile.TemporaryDirectory() as tmp:
        fill(Path(tmp))
        return upload_export(tmp, target)
