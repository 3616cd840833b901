"""Read model weights from every place they live: training checkpoints, state dicts, exports, the Hub.

One reader, `read_checkpoint`, so that publishing, `train_adv.py --initial-checkpoint` and
`validate_adv.py --checkpoint` accept the same sources:

* a timm `CheckpointSaver` file written by ``train_adv.py`` (a dict with ``state_dict``, ``arch``, ``args``,
  ``epoch`` and optionally ``state_dict_ema``);
* a bare state dict, as a torch file or a ``.safetensors`` file;
* an exported folder (``config.json`` + ``model.safetensors`` or ``pytorch_model.bin``), named by its path or as
  ``local-dir:PATH``;
* a Hugging Face Hub repository, ``hf-hub:org/name[@revision]`` (honours ``HF_HUB_OFFLINE`` and the local cache).

Prefixes added by wrappers (``module.`` from DataParallel/DDP, ``_orig_mod.`` from ``torch.compile``) are removed.
"""
import argparse
import json
import pickle
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, Mapping, Optional, Tuple, Union

import torch

__all__ = ['Checkpoint', 'read_checkpoint', 'split_source', 'strip_wrapper_prefixes', 'load_torch_file', 'WEIGHT_FILES',
           'MODEL_CONFIG_ARG']

# Weight files of an exported folder, in the order timm prefers them.
WEIGHT_FILES = ('model.safetensors', 'pytorch_model.bin')
# Training argument holding the trained model's `loading.model_config` (timm's CheckpointSaver saves the args).
MODEL_CONFIG_ARG = 'model_config'
_WRAPPER_PREFIXES = ('module.', '_orig_mod.')
_HUB_PREFIX = 'hf-hub:'
_LOCAL_DIR_PREFIX = 'local-dir:'

StateDict = Dict[str, torch.Tensor]


@dataclass
class Checkpoint:
    """Weights and what is known about them.

    Attributes:
        state_dict: The model weights, wrapper prefixes removed.
        state_dict_ema: EMA weights of a training checkpoint, if it kept them.
        arch: Registered architecture name, from the export's ``config.json``, the model config a training
            checkpoint's args record, or its ``arch``.
        args: Training arguments of a `CheckpointSaver` checkpoint, as a dict.
        epoch: Epoch of a training checkpoint.
        config: The ``config.json`` of an exported folder or Hub repository, or its equivalent recorded in a
            training checkpoint's args (``model_config``).
        source: Where the weights were read from, for messages.
    """

    state_dict: StateDict
    state_dict_ema: Optional[StateDict] = None
    arch: Optional[str] = None
    args: Dict[str, Any] = field(default_factory=dict)
    epoch: Optional[int] = None
    config: Dict[str, Any] = field(default_factory=dict)
    source: str = ''

    def weights(self, ema: bool = False) -> StateDict:
        """The model weights, or the EMA weights when `ema` is set.

        Raises:
            ValueError: EMA weights requested from a checkpoint without them.
        """
        if not ema:
            return self.state_dict
        if self.state_dict_ema is None:
            raise ValueError(f'{self.source} holds no EMA weights (no "state_dict_ema").')
        return self.state_dict_ema

    @property
    def pretrained_cfg(self) -> Optional[Dict[str, Any]]:
        """The export's pretrained config (preprocessing, classifier name), if the source is an export."""
        cfg = self.config.get('pretrained_cfg')
        return dict(cfg, architecture=self.arch) if cfg else None

    @property
    def model_args(self) -> Dict[str, Any]:
        """Model construction arguments recorded by an export (``num_classes``, ``in_chans``, ...)."""
        return dict(self.config.get('model_args', {}))


def strip_wrapper_prefixes(state_dict: Mapping[str, Any]) -> Dict[str, Any]:
    """Remove the ``module.`` and ``_orig_mod.`` prefixes that DDP and ``torch.compile`` put on every key."""
    out = {}
    for key, value in state_dict.items():
        stripped = True
        while stripped:
            stripped = False
            for prefix in _WRAPPER_PREFIXES:
                if key.startswith(prefix):
                    key, stripped = key[len(prefix):], True
        out[key] = value
    return out


def load_torch_file(path: Union[str, Path]) -> Any:
    """``torch.load`` restricted to tensors and plain containers, plus the `argparse.Namespace` of timm checkpoints.

    Raises:
        ValueError: The file needs arbitrary code to unpickle; it is not read.
    """
    try:
        with torch.serialization.safe_globals([argparse.Namespace]):
            return torch.load(path, map_location='cpu', weights_only=True)
    except pickle.UnpicklingError as e:
        reason = str(e).strip().splitlines()[0]
        raise ValueError(f'{path} cannot be read safely (weights_only): {reason}') from None


def _is_state_dict(obj: Any) -> bool:
    return isinstance(obj, Mapping) and bool(obj) and all(
        isinstance(k, str) and isinstance(v, torch.Tensor) for k, v in obj.items())


def _args_dict(args: Any) -> Dict[str, Any]:
    if args is None:
        return {}
    if isinstance(args, argparse.Namespace):
        return vars(args).copy()
    if isinstance(args, Mapping):
        return dict(args)
    raise ValueError(f'Checkpoint "args" is a {type(args).__name__}, expected a Namespace or a dict.')


def _from_torch_object(obj: Any, source: str) -> Checkpoint:
    if isinstance(obj, Mapping) and 'state_dict' in obj:
        if not _is_state_dict(obj['state_dict']):
            raise ValueError(f'{source}: "state_dict" is not a mapping of names to tensors.')
        ema = obj.get('state_dict_ema')
        args = _args_dict(obj.get('args'))
        config = args.get(MODEL_CONFIG_ARG)
        config = dict(config) if isinstance(config, Mapping) else {}
        return Checkpoint(
            state_dict=strip_wrapper_prefixes(obj['state_dict']),
            state_dict_ema=strip_wrapper_prefixes(ema) if _is_state_dict(ema) else None,
            arch=config.get('architecture') or obj.get('arch'),
            args=args,
            epoch=obj.get('epoch'),
            config=config,
            source=source,
        )
    if _is_state_dict(obj):
        return Checkpoint(state_dict=strip_wrapper_prefixes(obj), source=source)
    keys = list(obj)[:8] if isinstance(obj, Mapping) else type(obj).__name__
    raise ValueError(f'{source}: not a training checkpoint nor a state dict (top level: {keys}).')


def _read_file(path: Path, source: str) -> Checkpoint:
    if path.suffix == '.safetensors':
        import safetensors.torch
        return Checkpoint(state_dict=strip_wrapper_prefixes(safetensors.torch.load_file(path)), source=source)
    return _from_torch_object(load_torch_file(path), source)


def _read_export(folder: Path, source: str) -> Checkpoint:
    weights = next((folder / name for name in WEIGHT_FILES if (folder / name).is_file()), None)
    if weights is None:
        raise FileNotFoundError(f'{source}: no {" or ".join(WEIGHT_FILES)} in the folder.')
    checkpoint = _read_file(weights, source)
    config_file = folder / 'config.json'
    if config_file.is_file():
        checkpoint.config = json.loads(config_file.read_text())
        checkpoint.arch = checkpoint.config.get('architecture')
    return checkpoint


def _read_hub(repo: str, source: str) -> Checkpoint:
    from huggingface_hub import hf_hub_download
    from huggingface_hub.errors import EntryNotFoundError
    from timm.models._hub import hf_split

    repo_id, revision = hf_split(repo)
    config = json.loads(Path(hf_hub_download(repo_id, 'config.json', revision=revision)).read_text())
    for name in WEIGHT_FILES:
        try:
            weights = Path(hf_hub_download(repo_id, name, revision=revision))
        except EntryNotFoundError:
            continue
        checkpoint = _read_file(weights, source)
        checkpoint.config, checkpoint.arch = config, config.get('architecture')
        return checkpoint
    raise FileNotFoundError(f'{source}: the repository holds no {" or ".join(WEIGHT_FILES)}.')


def split_source(source: Union[str, Path]) -> Tuple[str, str]:
    """``('hf-hub', 'org/name')``, ``('local-dir', PATH)`` or ``('path', PATH)`` for a weights source."""
    text = str(source)
    if text.startswith(_HUB_PREFIX):
        return 'hf-hub', text[len(_HUB_PREFIX):]
    if text.startswith(_LOCAL_DIR_PREFIX):
        return 'local-dir', text[len(_LOCAL_DIR_PREFIX):]
    return 'path', text


def read_checkpoint(source: Union[str, Path]) -> Checkpoint:
    """Read weights from a file, an exported folder, ``local-dir:PATH`` or ``hf-hub:org/name[@rev]``.

    Raises:
        FileNotFoundError: The file, folder or weights file does not exist.
        ValueError: The content is not a checkpoint, a state dict or an export.
    """
    kind, location = split_source(source)
    if not location:
        raise ValueError(f'Empty weights source {str(source)!r}.')
    if kind == 'hf-hub':
        return _read_hub(location, str(source))
    path = Path(location).expanduser()
    if path.is_dir():
        return _read_export(path, str(source))
    if kind == 'local-dir':
        raise FileNotFoundError(f'{source}: not a folder.')
    if not path.is_file():
        raise FileNotFoundError(f'Checkpoint not found: {path}')
    return _read_file(path, str(source))
