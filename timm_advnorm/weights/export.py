"""Deployable exports: a checkpoint becomes a folder that `timm.create_model` loads by name.

An export folder holds ``config.json`` + ``model.safetensors`` (timm's `save_for_hf` layout, so the config's
``architecture`` is a registered name) and optionally a model card ``README.md``. A mixture-BN model is exported
either whole (loads after ``import timm_advnorm``) or as one branch in its plain-BN twin architecture, which stock
timm loads with no plugin. A whole mixture-BN export records its inference branch as ``config.json``'s
``model_args.inference_branch``: timm passes it to the entrypoint, so the loaded model runs on that branch. Folders
are written atomically: staged next to the target, then renamed into place, a rename that refuses a folder another
run filled meanwhile unless told to replace it. Each export folder holds a manifest of its files
(`write_guard.EXPORT_MANIFEST`): told to replace a folder, an export replaces only an earlier export, never a folder
of the user's.
"""
import errno
import hashlib
import json
import logging
import os
import shutil
import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Dict, Iterator, Mapping, Optional, Tuple, Union

import timm
import torch.nn as nn
from timm.models import get_pretrained_cfg, model_entrypoint, save_for_hf

from ..layers import has_mixture_bn
from ..layers.routing import INFERENCE_BRANCH_ARG, get_inference_branch, set_inference_branch
from ..write_guard import (
    check_folder_writable, check_names, check_replaceable, existing_ancestor, reported_write, write_manifest)
from .checkpoint import Checkpoint
from .loading import PLUGIN_CONFIG_KEY, load_weights, plain_twin, state_dict_num_classes

__all__ = [
    'build_export_model', 'export_model_args', 'write_export', 'check_folder_target', 'staged_folder',
    'install_to_hf_cache', 'needs_plugin', 'export_data_args', 'DATA_ARG_KEYS',
]

_logger = logging.getLogger(__name__)
#: What an export folder is staged under, beside it, before it is put in place: .NAME.staging-XXXXXXXX.
_STAGING = '.staging-'

# Training arguments (timm's train.py names) that define the preprocessing recorded in the export.
DATA_ARG_KEYS = ('input_size', 'img_size', 'in_chans', 'mean', 'std', 'crop_pct', 'crop_mode', 'interpolation')


def needs_plugin(architecture: str) -> bool:
    """Whether `architecture` is registered by this plugin (loading needs ``import timm_advnorm``)."""
    return model_entrypoint(architecture).__module__.startswith('timm_advnorm')


def export_data_args(args: Mapping[str, Any]) -> Dict[str, Any]:
    """The preprocessing arguments a training run set (unset ones, ``None`` or ``''``, are left out)."""
    return {k: args[k] for k in DATA_ARG_KEYS if args.get(k) not in (None, '')}


def _num_classes(checkpoint: Checkpoint, weights: Mapping[str, Any], arch: str) -> Optional[int]:
    cfg = checkpoint.pretrained_cfg or {}
    classifier = cfg.get('classifier') or getattr(get_pretrained_cfg(arch), 'classifier', None)
    if isinstance(classifier, (tuple, list)):
        classifier = classifier[0]
    found = state_dict_num_classes(weights, classifier)
    declared = checkpoint.args.get('num_classes')
    if found is not None and declared is not None and found != declared:
        raise ValueError(f'{checkpoint.source}: the classifier has {found} classes but its args say {declared}.')
    return found


def export_model_args(checkpoint: Checkpoint) -> Dict[str, Any]:
    """The creation arguments that shape the checkpoint's model (pooling, ``--model-kwargs``, input channels), which
    its export must record so that `timm.create_model` rebuilds the same network; the inference branch and class
    count are recorded separately."""
    kwargs = dict(checkpoint.model_args, **checkpoint.args.get('model_kwargs', None) or {})
    kwargs.pop(INFERENCE_BRANCH_ARG, None)
    kwargs.pop('num_classes', None)
    if checkpoint.args.get('in_chans'):
        kwargs['in_chans'] = checkpoint.args['in_chans']
    return kwargs


def build_export_model(
        checkpoint: Checkpoint,
        model_name: Optional[str] = None,
        ema: bool = False,
        branch: Optional[str] = None,
        inference_branch: Optional[str] = None,
) -> Tuple[nn.Module, str]:
    """The model to export, weights loaded strictly, and the architecture it was trained as.

    Args:
        checkpoint: Weights and their metadata (`read_checkpoint`).
        model_name: Architecture, when the checkpoint does not name it (bare state dicts).
        ema: Export the EMA weights.
        branch: Export this mixture-BN branch (``clean``/``adv``) in the plain-BN twin architecture.
        inference_branch: The branch a whole mixture-BN model runs on once loaded (default: the one the checkpoint
            records, else ``clean``).

    Raises:
        ValueError: No architecture, a class-count mismatch, missing EMA weights, a branch of a non-MBN model, or
            an inference branch for a model without mixture BN.
    """
    source_arch = model_name or checkpoint.arch
    if not source_arch:
        raise ValueError(f'{checkpoint.source} does not name its architecture: pass --model.')
    if not timm.is_model(source_arch):
        raise ValueError(f'Unknown architecture {source_arch!r}.')
    arch = source_arch
    if branch is not None:
        arch = plain_twin(source_arch)
    weights = checkpoint.weights(ema)
    pretrained_cfg = checkpoint.pretrained_cfg or get_pretrained_cfg(source_arch).to_dict()
    pretrained_cfg['architecture'] = arch
    model_kwargs = export_model_args(checkpoint)
    recorded_branch = checkpoint.model_args.get(INFERENCE_BRANCH_ARG)  # routed below, once the layout is known
    num_classes = _num_classes(checkpoint, weights, source_arch)
    if num_classes is not None:
        model_kwargs['num_classes'] = num_classes
    model = timm.create_model(arch, pretrained_cfg=pretrained_cfg, **model_kwargs)
    if has_mixture_bn(model):  # routed before loading: the load then has no default branch to tell the user about
        set_inference_branch(model, inference_branch or recorded_branch or 'clean')
    elif inference_branch is not None:
        raise ValueError(f'An inference branch applies to mixture-BN models; {arch} has plain normalization.')
    load_weights(model, Checkpoint(state_dict=weights, arch=checkpoint.arch, config=checkpoint.config,
                                   source=checkpoint.source), branch=branch)
    return model.eval(), source_arch


def write_export(
        model: nn.Module,
        folder: Union[str, Path],
        data_args: Optional[Mapping[str, Any]] = None,
        plugin_config: Optional[Mapping[str, Any]] = None,
        model_args: Optional[Mapping[str, Any]] = None,
) -> Dict[str, Any]:
    """Write ``config.json`` + ``model.safetensors`` for `model` into `folder` (which must exist).

    Args:
        model: The model, with the pretrained config its export should carry; a mixture-BN model on the branch it
            should load on (recorded as ``model_args.inference_branch``).
        folder: Destination folder.
        data_args: Preprocessing overrides (`export_data_args`), recorded in the config.
        plugin_config: What stock timm cannot express, stored under ``config.json``'s ``timm_advnorm`` key.
        model_args: Creation arguments `model` was built with (`export_model_args`), recorded under ``model_args``:
            timm passes them to the architecture when it loads the folder.

    Returns:
        The written config.

    Raises:
        ValueError: A mixture-BN model that is not on one branch (inside a ``split`` or ``mix`` route block).
    """
    recorded_args = dict(model_args or {})
    if has_mixture_bn(model):
        branch = get_inference_branch(model)
        if branch is None:
            raise ValueError('Export a mixture-BN model on one branch: `set_inference_branch(model, "clean" | "adv")`'
                             ' outside any route block.')
        recorded_args[INFERENCE_BRANCH_ARG] = branch
    model_config = {PLUGIN_CONFIG_KEY: dict(plugin_config)} if plugin_config else None
    save_for_hf(model, folder, model_config=model_config, model_args=recorded_args or None, safe_serialization=True,
                data_config=dict(data_args) if data_args else None)
    return json.loads((Path(folder) / 'config.json').read_text())


def _make_readable(folder: Path) -> None:
    """Give a staged tree ordinary permissions (temporary folders and some writers create owner-only files)."""
    folder.chmod(0o755)
    for path in folder.rglob('*'):
        path.chmod(0o755 if path.is_dir() else 0o644)


def _put_in_place(staging: Path, target: Path, overwrite: bool) -> None:
    """Move the finished `staging` folder to `target` in one step.

    Without `overwrite` the rename itself refuses a `target` that another run filled since the check (a folder
    replaces only a missing or empty one), so the check and the move are one step. With it, a filled `target` is
    checked again to be an earlier export (files may have been added to it while the export was made), then moved
    aside, then removed.

    Raises:
        FileExistsError: `target` was filled meanwhile and `overwrite` is not set, or it is not an export.
    """
    target.parent.mkdir(parents=True, exist_ok=True)
    if overwrite and target.exists():
        if any(target.iterdir()):
            check_replaceable(target)
        retired = staging.with_name(staging.name.replace(_STAGING, '.retired-'))
        os.replace(target, retired)
        os.replace(staging, target)
        shutil.rmtree(retired)
        return
    try:
        os.rename(staging, target)
    except OSError as e:
        if e.errno not in (errno.ENOTEMPTY, errno.EEXIST, errno.ENOTDIR):
            raise
        raise FileExistsError(f'{target} was written by another run meanwhile: pass --overwrite to replace it.'
                              ) from None


def check_folder_target(target: Union[str, Path], overwrite: bool = False) -> Path:
    """Check that an export folder may be written at `target`, creating nothing; returns it resolved (a symlinked
    target stands for the folder it points to).

    Raises:
        FileExistsError: `target` is a file, or a non-empty folder and `overwrite` is not set, or a non-empty folder
            that is not an earlier export (`write_guard.check_replaceable`).
        ValueError: `target` cannot be made: a name too long for its file system, a folder above it that is a file,
            a pseudo or read-only file system, a missing permission (`write_guard.check_folder_writable`).
    """
    check_names(target, reserve=len(_STAGING) + 9)  # staged first as .NAME.staging-XXXXXXXX beside it
    target = Path(target).expanduser().resolve()
    if target.exists() and not target.is_dir():
        raise FileExistsError(f'{target} exists and is not a folder.')
    if target.is_dir() and any(target.iterdir()):
        if not overwrite:
            raise FileExistsError(f'{target} is not empty: pass --overwrite to replace it.')
        check_replaceable(target)
    check_folder_writable(target.parent if target.exists() else target)
    return target


@contextmanager
def staged_folder(target: Union[str, Path], overwrite: bool = False, made_by: str = 'timm-advnorm') -> Iterator[Path]:
    """Yield an empty staging folder that replaces `target` when the block succeeds, and vanishes if it fails.

    The staging folder is made next to `target`, or in its nearest existing ancestor when its folder is missing, so
    that a failing block leaves no folder behind; the missing folders are created when the result is put in place.
    The folder put in place holds a manifest naming `made_by` and its files, which lets a later ``--overwrite``
    replace it.

    Raises:
        FileExistsError: `target` is a file, or a non-empty folder and `overwrite` is not set (checked by
            `check_folder_target` before the block runs, and again atomically when the result is put in place), or
            a non-empty folder that is not an earlier export.
        WriteError: An OS error while writing (a full disk): one line naming `target`; an earlier export there is
            left intact.
    """
    target = check_folder_target(target, overwrite)
    kept = 'the previous export is intact' if target.is_dir() and any(target.iterdir()) else 'nothing was written'
    with reported_write(target, kept):
        staging = Path(tempfile.mkdtemp(prefix=f'.{target.name}{_STAGING}', dir=existing_ancestor(target.parent)))
    try:
        with reported_write(target, kept):
            yield staging
            write_manifest(staging, made_by)
            _make_readable(staging)
            _put_in_place(staging, target, overwrite)
    finally:
        if staging.exists():
            shutil.rmtree(staging, ignore_errors=True)


def install_to_hf_cache(
        folder: Union[str, Path],
        repo_id: str,
        cache_dir: Optional[Union[str, Path]] = None,
        revision: str = 'main',
) -> Path:
    """Lay an export out as a Hugging Face cache snapshot, so ``hf-hub:repo_id`` loads it offline.

    Useful on machines without network (set ``HF_HUB_OFFLINE=1``) and in tests. The layout is the one
    ``huggingface_hub`` reads: ``models--org--name/refs/<revision>`` holds a commit hash and
    ``models--org--name/snapshots/<hash>/`` the files.

    Args:
        folder: An export folder.
        repo_id: ``org/name``.
        cache_dir: Hub cache (default: huggingface_hub's, i.e. ``$HF_HOME/hub``).
        revision: Branch name the snapshot is registered under.

    Returns:
        The snapshot folder.
    """
    from huggingface_hub import constants
    from huggingface_hub.utils import validate_repo_id

    validate_repo_id(repo_id)
    folder = Path(folder)
    digest = hashlib.sha1()
    for path in sorted(p for p in folder.rglob('*') if p.is_file()):
        digest.update(path.relative_to(folder).as_posix().encode())
        digest.update(path.read_bytes())
    commit = digest.hexdigest()
    repo_dir = Path(cache_dir or constants.HF_HUB_CACHE) / f'models--{repo_id.replace("/", "--")}'
    snapshot = repo_dir / 'snapshots' / commit
    shutil.copytree(folder, snapshot, dirs_exist_ok=True)
    (repo_dir / 'refs').mkdir(parents=True, exist_ok=True)
    (repo_dir / 'refs' / revision).write_text(commit)
    _logger.info(f'Installed {folder} as hf-hub:{repo_id} in {repo_dir}.')
    return snapshot

