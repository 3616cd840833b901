"""What every converter shares: strict key checks, the target model, provenance and the atomic export."""
import hashlib
import logging
from pathlib import Path
from typing import Any, Dict, Mapping, Optional, Union

import timm
import torch
import torch.nn as nn
from timm.models import get_pretrained_cfg

from ..messages import counted_names
from ..weights.checkpoint import check_finite_weights
from ..weights.export import staged_folder, write_export

__all__ = ['create_target', 'load_exactly', 'provenance', 'save_converted']

_logger = logging.getLogger(__name__)
_SOURCE_KEYS = ('url', 'hf_hub_id', 'tag', 'test_input_size', 'test_crop_pct', 'license', 'origin_url',
                'paper_ids', 'paper_name', 'notes')


def create_target(architecture: str, preprocessing: Mapping[str, Any], num_classes: int) -> nn.Module:
    """The timm model a conversion fills, its pretrained config describing the original preprocessing.

    Raises:
        ValueError: `architecture` is not registered.
    """
    if not timm.is_model(architecture):
        raise ValueError(f'Unknown target architecture {architecture!r}.')
    cfg = get_pretrained_cfg(architecture).to_dict()
    for key in _SOURCE_KEYS:  # describe timm's default weights, not the converted ones
        cfg.pop(key, None)
    cfg.update(preprocessing, architecture=architecture)
    return timm.create_model(architecture, pretrained_cfg=cfg, num_classes=num_classes).eval()


def load_exactly(model: nn.Module, state_dict: Mapping[str, torch.Tensor], source: str) -> nn.Module:
    """Load `state_dict` into `model` only if keys and shapes match one to one (no leftovers, nothing missing) and
    its values are finite.

    Raises:
        ValueError: Keys differ (listing some of each), a tensor has the wrong shape, or one holds NaN or inf.
    """
    expected = model.state_dict()
    missing, unexpected = set(expected) - set(state_dict), set(state_dict) - set(expected)
    if missing or unexpected:
        parts = [counted_names(sorted(keys), f'{what} key') for what, keys in (('missing', missing),
                                                                            ('unexpected', unexpected)) if keys]
        raise ValueError(f'{source} does not match {type(model).__name__}: ' + '; '.join(parts))
    wrong = [k for k, v in state_dict.items() if tuple(v.shape) != tuple(expected[k].shape)]
    if wrong:
        key = wrong[0]
        raise ValueError(f'{source}: {key} has shape {tuple(state_dict[key].shape)}, the model expects '
                         f'{tuple(expected[key].shape)} ({len(wrong)} mismatched).')
    check_finite_weights(state_dict, source)
    model.load_state_dict(state_dict, strict=True)
    return model


def provenance(path: Union[str, Path], fmt: str, **details: Any) -> Dict[str, Any]:
    """Where converted weights came from: format, file name and SHA-256, plus converter-specific details."""
    path = Path(path)
    digest = hashlib.sha256()
    with path.open('rb') as f:
        for block in iter(lambda: f.read(1 << 20), b''):
            digest.update(block)
    return dict(format=fmt, file=path.name, sha256=digest.hexdigest(), **details)


def save_converted(
        model: nn.Module,
        dst: Union[str, Path],
        origin: Mapping[str, Any],
        overwrite: bool = False,
        plugin_config: Optional[Mapping[str, Any]] = None,
) -> Path:
    """Write `model` as an export folder (``config.json`` + ``model.safetensors``) atomically.

    The origin is recorded in ``config.json`` under ``timm_advnorm.converted_from``; `hub/publish.py` puts it in
    the model card. With `overwrite`, `dst` is replaced only if it is an earlier export (`hub.export.staged_folder`).
    """
    with staged_folder(dst, overwrite=overwrite, made_by=f'timm-advnorm-convert {origin["format"]}') as stage:
        write_export(model, stage, plugin_config=dict(plugin_config or {}, converted_from=dict(origin)))
    if plugin_config:  # e.g. TF "SAME" padding, which stock timm does not apply
        how = f'timm_advnorm.hub.create_model_from_name_or_checkpoint("local-dir:{dst}")'
    else:
        how = f'timm.create_model("local-dir:{dst}", pretrained=True)'
    _logger.info(f'Wrote {dst}: load it with {how}.')
    return Path(dst)
