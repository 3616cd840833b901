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

A damaged file is a one-line ValueError naming it and the damage (empty, truncated, not a checkpoint, a member that
fails its checksum, ``config.json`` not valid JSON at line N), whatever the command: loaders' own errors name
neither (``EOFError``, ``KeyError: 101``, a SafetensorError, miniz's "failed finding central directory").
"""
import argparse
import json
import pickle
import zipfile
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Mapping, Optional, Tuple, Union

import torch
from safetensors import SafetensorError
from timm.utils.checkpoint_saver import load_checkpoint_metadata

from ..messages import counted_names

__all__ = ['Checkpoint', 'read_checkpoint', 'split_source', 'strip_wrapper_prefixes', 'load_weights_file',
           'check_checkpoint_file', 'check_finite_weights', 'file_format', 'zip_members', 'read_config_json',
           'recorded_training_args', 'WEIGHT_FILES', 'MODEL_CONFIG_ARG']

# Weight files of an exported folder, in the order timm prefers them.
WEIGHT_FILES = ('model.safetensors', 'pytorch_model.bin')
#: Training argument holding the trained model's `loading.model_config` (timm's CheckpointSaver saves the args).
MODEL_CONFIG_ARG = 'model_config'
# The training argument only ``train_adv.py`` records: arguments without it are another tool's (timm's train.py).
_TRAIN_ADV_ARG = 'method'
_WRAPPER_PREFIXES = ('module.', '_orig_mod.')
_HUB_PREFIX = 'hf-hub:'
_LOCAL_DIR_PREFIX = 'local-dir:'
# First bytes of the formats weights come in: a zip archive (torch.save since 1.6, numpy's .npz) and torch.save's
# legacy format, a protocol-2 pickle of its magic number.
_ZIP_MAGIC = b'PK\x03\x04'
_TORCH_PICKLE_MAGIC = b'\x80\x02\x8a\nl\xfc\x9cF\xf9 j\xa8P\x19.'
# A safetensors file starts with its header's length (8 bytes, little-endian) and the header, a JSON object; the
# library refuses headers over 100 MB.
_SAFETENSORS_MAX_HEADER = 100_000_000
_SNIFFED_BYTES = 64
# What loaders raise on a file that is whole but not loadable (after `check_checkpoint_file`): bad records, a
# pickle cut short, a tensor header that lies.
_LOAD_ERRORS = (RuntimeError, EOFError, KeyError, SafetensorError)

StateDict = Dict[str, torch.Tensor]


def check_finite_weights(state_dict: Mapping[str, torch.Tensor], source: str) -> None:
    """Refuse weights that hold NaN or infinite values: nothing computed from them means anything.

    Every command that reads weights checks them, so that they fail here with one line naming the first such
    tensor, not as a tolerance error deep in an evaluation's checks, nor as an export that looks like any other.

    Raises:
        ValueError: Some floating-point tensor of `state_dict` holds a non-finite value.
    """
    bad = [name for name, tensor in state_dict.items()
           if tensor.is_floating_point() and not bool(torch.isfinite(tensor).all())]
    if bad:
        raise ValueError(f'{source}: {len(bad)} tensor{"s hold" if len(bad) > 1 else " holds"} NaN or inf values '
                         f'(first: {bad[0]}); these weights cannot be used')


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
        """The model weights, or the EMA weights when `ema` is set; every consumer reads them here, so here they are
        checked to be finite (`check_finite_weights`).

        Raises:
            ValueError: EMA weights requested from a checkpoint without them, or weights holding NaN or inf.
        """
        if ema and self.state_dict_ema is None:
            raise ValueError(f'{self.source} holds no EMA weights (no "state_dict_ema"): drop --use-ema')
        weights = self.state_dict_ema if ema else self.state_dict
        check_finite_weights(weights, f'{self.source}{" (EMA weights)" if ema else ""}')
        return weights

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


def file_format(path: Union[str, Path]) -> str:
    """What `path` holds, from its first bytes rather than its suffix, which may lie.

    Returns:
        ``'zip'`` (torch.save's archive, or another zip such as an ``.npz``), ``'torch-pickle'`` (torch.save's legacy
        format), ``'safetensors'``, ``'empty'``, ``'text'`` or ``'unknown'``.
    """
    with Path(path).open('rb') as f:
        head = f.read(_SNIFFED_BYTES)
    if not head:
        return 'empty'
    if head.startswith(_ZIP_MAGIC):
        return 'zip'
    if head.startswith(_TORCH_PICKLE_MAGIC):
        return 'torch-pickle'
    if head[8:9] == b'{' and 0 < int.from_bytes(head[:8], 'little') <= _SAFETENSORS_MAX_HEADER:
        return 'safetensors'
    if all(byte >= 32 or byte in b'\t\n\r\f' for byte in head):
        return 'text'
    return 'unknown'


def _not_weights(path: Path, kind: str) -> str:
    """Why `path`, of format `kind` (`file_format`), holds no weights: the end of a one-line message."""
    if kind == 'empty':
        return 'empty file (0 bytes): not a checkpoint'
    if kind == 'text':
        with path.open('rb') as f:
            lines = f.read(_SNIFFED_BYTES).decode('utf-8', 'replace').strip().splitlines()
        first_line = (lines or [''])[0][:40]
        return f'not a checkpoint: a text file, beginning {first_line!r}'
    size = path.stat().st_size
    if size < 9:  # too short for any format's header
        return f'only {size} bytes: truncated, or not a checkpoint'
    return 'not a checkpoint: neither a torch.save file (zip or legacy pickle) nor a safetensors file'


def zip_members(path: Union[str, Path]) -> List[str]:
    """The member names of the zip archive at `path` (a torch.save file or an ``.npz``), every member's checksum
    verified first: torch loads a member with a flipped byte as a wrong weight without noticing.

    Raises:
        ValueError: The archive is truncated (its directory, written last, is missing) or a member is damaged.
    """
    try:
        with zipfile.ZipFile(path) as archive:
            damaged = archive.testzip()
            names = archive.namelist()
    except zipfile.BadZipFile as e:
        if 'not a zip file' in str(e):
            raise ValueError(f'{path}: truncated: a zip archive without the directory that ends one (an interrupted '
                             f'save, download or copy)') from None
        raise ValueError(f'{path}: damaged zip archive ({e})') from None
    except (zlib.error, EOFError) as e:
        raise ValueError(f'{path}: damaged zip archive ({e})') from None
    if damaged is not None:
        raise ValueError(f'{path}: damaged: {damaged} fails its checksum')
    return names


def _check_torch_zip(path: Path) -> None:
    """Raise unless the zip archive at `path` is whole and is one torch.save wrote (it holds a ``data.pkl``)."""
    names = zip_members(path)
    if any(name.endswith('/data.pkl') or name == 'data.pkl' for name in names):
        return
    if names and all(name.endswith('.npy') for name in names):
        raise ValueError(f'{path}: not a checkpoint: a numpy .npz archive, not a torch.save file')
    raise ValueError(f'{path}: not a checkpoint: a zip archive torch.save did not write (no data.pkl)')


def _check_safetensors(path: Path) -> None:
    """Raise unless the safetensors file at `path` is whole: its header parses and its tensors end inside it."""
    size = path.stat().st_size
    with path.open('rb') as f:
        length = int.from_bytes(f.read(8), 'little')
        header = f.read(length)
    if len(header) < length:
        raise ValueError(f'{path}: truncated: {size} bytes, not even the whole safetensors header ({8 + length})')
    try:
        entries = json.loads(header)
        end = 8 + length + max((entry['data_offsets'][1] for name, entry in entries.items() if name != '__metadata__'),
                               default=0)
    except (ValueError, KeyError, TypeError, IndexError, AttributeError):
        raise ValueError(f'{path}: damaged: its safetensors header is not a valid one') from None
    if size < end:
        raise ValueError(f'{path}: truncated: {size} of the {end} bytes its safetensors header describes')


def check_checkpoint_file(path: Union[str, Path]) -> str:
    """Check that `path` is a whole torch.save or safetensors file, before anything loads it.

    Verifies a zip archive's directory and every member's checksum (reading the file once, unpickling nothing) or a
    safetensors header against the file's size. Loaders say nothing useful of a damaged file (``EOFError``,
    ``KeyError: 101``, a SafetensorError; timm's resume blames the serialization format), so ``train_adv.py
    --resume`` calls this before timm loads the file.

    Returns:
        ``'torch'`` or ``'safetensors'``: how to load it.

    Raises:
        FileNotFoundError: No file at `path`.
        ValueError: A folder, or a file that is empty, truncated, damaged or not a checkpoint; one line naming it and
            the damage.
    """
    path = Path(path)
    if path.is_dir():
        raise ValueError(f'{path} is a folder, not a checkpoint file: give the weights file (.pth.tar, .pth, .bin or '
                         f'.safetensors)')
    if not path.is_file():
        raise FileNotFoundError(f'Checkpoint not found: {path}')
    kind = file_format(path)
    if kind == 'zip':
        _check_torch_zip(path)
    elif kind == 'safetensors':
        _check_safetensors(path)
    elif kind != 'torch-pickle':
        raise ValueError(f'{path}: {_not_weights(path, kind)}')
    return 'safetensors' if kind == 'safetensors' else 'torch'


def load_weights_file(path: Union[str, Path]) -> Any:
    """The content of a torch.save file (``torch.load`` restricted to tensors and plain containers, plus the
    `argparse.Namespace` of timm checkpoints) or of a safetensors file (a state dict), whatever its suffix.

    Raises:
        FileNotFoundError: No file at `path`.
        ValueError: A damaged file (`check_checkpoint_file`), or one that needs arbitrary code to unpickle (it is
            not read).
    """
    path = Path(path)
    kind = check_checkpoint_file(path)
    try:
        if kind == 'safetensors':
            import safetensors.torch
            return safetensors.torch.load_file(path)
        with torch.serialization.safe_globals([argparse.Namespace]):
            return torch.load(path, map_location='cpu', weights_only=True)
    except pickle.UnpicklingError as e:
        reason = str(e).strip().splitlines()[0]
        raise ValueError(f'{path} cannot be read safely (weights_only): {reason}') from None
    except _LOAD_ERRORS as e:
        reason = ' '.join(str(e).split())[:200] or type(e).__name__
        raise ValueError(f'{path}: damaged: {reason}') from e


def read_config_json(path: Path, name: Optional[str] = None) -> Dict[str, Any]:
    """The JSON object in an export's ``config.json`` at `path` (called `name` in messages; default: the path).

    Raises:
        ValueError: Not UTF-8, not valid JSON (naming the line and column), or not an object.
    """
    name = name or str(path)
    try:
        config = json.loads(path.read_bytes())
    except json.JSONDecodeError as e:
        raise ValueError(f'{name}: not valid JSON at line {e.lineno}, column {e.colno}: {e.msg}') from None
    except UnicodeDecodeError:
        raise ValueError(f'{name}: not valid JSON: not UTF-8 text') from None
    if not isinstance(config, dict):
        raise ValueError(f'{name}: expected a JSON object, got a {type(config).__name__}')
    return config


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


def recorded_training_args(source: Union[str, Path]) -> Optional[Dict[str, Any]]:
    """The arguments of the ``train_adv.py`` run that wrote the checkpoint file `source`, read without its weights
    (memory-mapped): the recipe, data and preprocessing it records. None for any other source (a state dict, an
    export, a Hub name, another tool's checkpoint).

    Raises:
        ValueError: A damaged file (`check_checkpoint_file`).
    """
    kind, location = split_source(source)
    path = Path(location).expanduser()
    if kind != 'path' or not path.is_file() or check_checkpoint_file(path) != 'torch':
        return None
    try:
        obj = load_checkpoint_metadata(str(path))
    except pickle.UnpicklingError as e:
        raise ValueError(f'{path} cannot be read safely (weights_only): {str(e).strip().splitlines()[0]}') from None
    args = _args_dict(obj.get('args')) if isinstance(obj, Mapping) else {}
    return args if _TRAIN_ADV_ARG in args else None


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
    top = counted_names(map(str, obj), 'key') if isinstance(obj, Mapping) else f'a {type(obj).__name__}'
    raise ValueError(f'{source}: not a training checkpoint nor a state dict (top level: {top}).')


def _read_file(path: Path, source: str) -> Checkpoint:
    return _from_torch_object(load_weights_file(path), source)


def _read_export(folder: Path, source: str) -> Checkpoint:
    weights = next((folder / name for name in WEIGHT_FILES if (folder / name).is_file()), None)
    if weights is None:
        raise FileNotFoundError(f'{source}: no {" or ".join(WEIGHT_FILES)} in the folder.')
    config_file = folder / 'config.json'
    config = read_config_json(config_file) if config_file.is_file() else None
    checkpoint = _read_file(weights, source)
    if config is not None:
        checkpoint.config, checkpoint.arch = config, config.get('architecture')
    return checkpoint


def _read_hub(repo: str, source: str) -> Checkpoint:
    from huggingface_hub import hf_hub_download
    from huggingface_hub.errors import EntryNotFoundError
    from timm.models._hub import hf_split

    repo_id, revision = hf_split(repo)
    config = read_config_json(Path(hf_hub_download(repo_id, 'config.json', revision=revision)), f'{source} config.json')
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
        ValueError: The content is not a checkpoint, a state dict or an export, or a file is damaged (empty,
            truncated, a member failing its checksum, ``config.json`` not valid JSON): one line naming it.
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
