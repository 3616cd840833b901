"""Load weights into models, and create models from names or checkpoints, loudly.

timm's pretrained loading silently drops the classifier when the requested ``num_classes`` differs from the
weights' (the right thing when fine-tuning, the wrong thing when evaluating a checkpoint). Here every class-count
mismatch raises unless the caller opts into a new head with ``reset_classifier=True``.

Mixture-BN checkpoints and plain-BN models meet in three ways, each explicit:

* mixture-BN checkpoint into a mixture-BN model: loaded as is;
* plain-BN checkpoint into a mixture-BN model: both branches start from its BN (as `convert_to_mixture_bn` does);
* mixture-BN checkpoint into a plain-BN model: only with ``branch='clean'`` or ``'adv'``.

A mixture-BN model is rebuilt on the inference branch its source records (``model_args.inference_branch`` of an
export's ``config.json``, or of the model config a training checkpoint carries): timm passes an export's
``model_args`` to the entrypoint, and checkpoints are routed here after their weights load.
"""
import difflib
import logging
import re
from pathlib import Path
from typing import Any, Dict, Mapping, Optional, Tuple, Union

import timm
import torch
import torch.nn as nn
from huggingface_hub.errors import EntryNotFoundError
from timm.models import get_pretrained_cfg

from ..layers import ADV_BN_KEY, branch_state_dict, has_mixture_bn, mixture_bn_modules
from ..layers.routing import INFERENCE_BRANCH_ARG, get_inference_branch, set_inference_branch
from ..layers.tf_same_padding import use_tf_same_padding
from ..messages import counted_names, shape_text
from .checkpoint import (
    WEIGHT_FILES, Checkpoint, check_checkpoint_file, check_finite_weights, read_checkpoint, read_config_json,
    split_source, strip_wrapper_prefixes)

__all__ = [
    'load_weights', 'create_model_from_name_or_checkpoint', 'adapt_state_dict', 'check_num_classes',
    'state_dict_num_classes', 'source_config', 'model_config', 'PLUGIN_CONFIG_KEY', 'has_pretrained_weights',
    'pretrained_num_classes', 'plain_twin',
]

_logger = logging.getLogger(__name__)

#: Top-level ``config.json`` entry holding what stock timm cannot express (e.g. TF "SAME" padding of a conversion).
PLUGIN_CONFIG_KEY = 'timm_advnorm'
# Model attribute holding the plugin config a model was built with, for `model_config`.
_PLUGIN_CONFIG_ATTR = 'timm_advnorm_config'
# Plugin-config entries that describe where weights came from, not the model: not carried into a trained model.
_PROVENANCE_KEYS = ('converted_from',)
_BN_TENSORS = ('weight', 'bias', 'running_mean', 'running_var', 'num_batches_tracked')

StateDict = Dict[str, torch.Tensor]
Source = Union[str, Path, Checkpoint, Mapping[str, torch.Tensor]]
# How Python names an argument a constructor does not take.
_UNEXPECTED_ARGUMENT = re.compile(r"unexpected keyword argument '(\w+)'")


def _create_model(name: str, **kwargs: Any) -> nn.Module:
    """`timm.create_model`, with an argument the architecture does not take (``--model-kwargs bogus=1``) reported
    as bad input naming it, not as a TypeError from inside the constructor."""
    try:
        return timm.create_model(name, **kwargs)
    except TypeError as e:
        unexpected = _UNEXPECTED_ARGUMENT.search(str(e))
        if unexpected is None:
            raise
        raise ValueError(f'{name} takes no model argument {unexpected.group(1)!r} ({" ".join(str(e).split())})') from e


def _classifier_name(model: nn.Module) -> Optional[str]:
    get_classifier = getattr(model, 'get_classifier', None)
    classifier = get_classifier() if callable(get_classifier) else None
    if classifier is None or getattr(classifier, 'weight', None) is None:
        return None
    return next((name for name, module in model.named_modules() if module is classifier), None)


def _registry_classifier(arch: str, pretrained_cfg: Optional[Mapping[str, Any]] = None) -> Optional[str]:
    cfg = pretrained_cfg or {}
    classifier = cfg.get('classifier')
    if classifier is None:
        registered = get_pretrained_cfg(arch)
        classifier = registered.classifier if registered is not None else None
    if isinstance(classifier, (tuple, list)):
        classifier = classifier[0] if classifier else None
    return classifier


def state_dict_num_classes(state_dict: Mapping[str, torch.Tensor], classifier: Optional[str]) -> Optional[int]:
    """Classes of the classifier named `classifier` (e.g. ``fc``, ``head.fc``) in `state_dict`; None if absent."""
    if not classifier:
        return None
    weight = state_dict.get(f'{classifier}.weight')
    return int(weight.shape[0]) if weight is not None else None


def check_num_classes(model: nn.Module, state_dict: Mapping[str, torch.Tensor], source: str = 'checkpoint') -> None:
    """Raise unless `state_dict`'s classifier has as many classes as `model`'s.

    Raises:
        ValueError: The class counts differ, or only one of the two has a classifier.
    """
    name = _classifier_name(model)
    if name is None:
        return
    expected = int(getattr(model.get_submodule(name), 'weight').shape[0])
    found = state_dict_num_classes(state_dict, name)
    if found is None:
        raise ValueError(f'{source} has no classifier "{name}.weight", which the model ({_architecture(model)}, '
                         f'{expected} classes) has: are these weights of another architecture? Build the model they '
                         f'were trained as (--model)')
    if found != expected:
        raise ValueError(
            f'{source} has {found} classes but the model has {expected}: create it with num_classes={found}.')


def _load_error_summary(error: RuntimeError, state_dict: Mapping[str, torch.Tensor], model: nn.Module) -> str:
    """`load_state_dict`'s error in a few names: its lists of keys run to hundreds of names on one line."""
    expected = model.state_dict()
    missing = [key for key in expected if key not in state_dict]
    unexpected = [key for key in state_dict if key not in expected]
    shapes = [f'{key} {shape_text(state_dict[key].shape)} vs {shape_text(expected[key].shape)}'
              for key in state_dict if key in expected and state_dict[key].shape != expected[key].shape]
    if not (missing or unexpected or shapes):
        return ' '.join(str(error).split())[:400]
    parts = [counted_names(missing, 'missing key'), counted_names(unexpected, 'unexpected key')]
    if shapes:
        parts.append(counted_names(shapes, 'mis-shaped key', shown=2))
    return '; '.join(parts)


def _architecture(model: nn.Module) -> str:
    """The registered architecture `model` was built as (its class name where timm recorded none)."""
    return (getattr(model, 'pretrained_cfg', None) or {}).get('architecture') or type(model).__name__


def _family(arch: str) -> str:
    """`arch` without its pretrained tag, a mixture-BN model as the plain one its branches load into: the
    architectures whose weights meet (`adapt_state_dict`) are one family."""
    from ..models import base_architecture
    name = arch.split('.', 1)[0]
    try:
        return base_architecture(name)
    except ValueError:
        return name


def _classes_text(count: Optional[int]) -> str:
    return f'{count} classes' if count is not None else 'no classifier found'


def _architecture_clash(checkpoint: Checkpoint, weights: Mapping[str, torch.Tensor], model: nn.Module
                        ) -> Optional[str]:
    """Why weights that failed to load do not fit `model`, when the checkpoint records another architecture: both
    architectures and their classes (the first error found, a missing classifier or a normalization layout, names
    a symptom, not the cause). None when the checkpoint records none, or one of the model's family."""
    recorded, built = checkpoint.arch, _architecture(model)
    if not recorded or _family(recorded) == _family(built):
        return None
    found = state_dict_num_classes(weights, _registry_classifier(recorded, checkpoint.pretrained_cfg))
    classifier = _classifier_name(model)
    expected = int(model.get_submodule(classifier).weight.shape[0]) if classifier else None
    return (f'{checkpoint.source} holds {recorded} weights ({_classes_text(found)}) but the model is {built} '
            f'({_classes_text(expected)}): build it as {recorded} (--model {recorded}, or no --model: the checkpoint '
            f'names it)')


def plain_twin(arch: str) -> str:
    """The plain-BN architecture one branch of the mixture-BN `arch` loads into (what ``--branch`` builds).

    Raises:
        ValueError: `arch` has no mixture BN, so there is no branch to choose.
    """
    from ..models import base_architecture
    try:
        return base_architecture(arch)
    except ValueError:
        raise ValueError(f'--branch: {arch} has no mixture BN (one set of batch-norm statistics), so --branch does '
                         f'not apply; drop it') from None


def _with_adversarial_copies(state_dict: StateDict, model: nn.Module) -> StateDict:
    out = dict(state_dict)
    names = {module: name for name, module in model.named_modules()}
    for module in mixture_bn_modules(model):
        prefix = f'{names[module]}.' if names[module] else ''
        for tensor in _BN_TENSORS:
            if f'{prefix}{tensor}' in out:
                out[f'{prefix}{ADV_BN_KEY}.{tensor}'] = out[f'{prefix}{tensor}']
    return out


def adapt_state_dict(state_dict: StateDict, model: nn.Module, branch: Optional[str] = None) -> StateDict:
    """Match a state dict's normalization layout to `model`'s (see the module docstring for the three cases).

    Raises:
        ValueError: A mixture-BN checkpoint into a plain-BN model without `branch`, or a `branch` that selects
            nothing (plain-BN checkpoint, or a mixture-BN model).
    """
    checkpoint_mbn = any(f'.{ADV_BN_KEY}.' in key for key in state_dict)
    model_mbn = has_mixture_bn(model)
    if branch is not None:
        if not checkpoint_mbn:
            raise ValueError(f'--branch {branch}: the checkpoint has no mixture BN (one set of batch-norm statistics), '
                             f'so --branch does not apply; drop it')
        if model_mbn:
            raise ValueError(f'--branch {branch} loads one branch into a plain-BN model, but the model '
                             f'({_architecture(model)}) has mixture BN: drop --branch, or build the plain-BN model')
        return branch_state_dict(state_dict, branch)
    if checkpoint_mbn and not model_mbn:
        one_branch, expected = branch_state_dict(state_dict, 'clean'), model.state_dict()
        missing = [key for key in expected if key not in one_branch]
        unexpected = [key for key in one_branch if key not in expected]
        if missing or unexpected:  # not the plain twin: choosing a branch would not help
            raise ValueError(f'the checkpoint has mixture BN and the model ({_architecture(model)}) plain BN, and not '
                             f'even one branch fits it ({counted_names(missing, "missing key")}, '
                             f'{counted_names(unexpected, "unexpected key")}): are these weights of another '
                             f'architecture? Build the model they were trained as (--model)')
        raise ValueError(f'the checkpoint has mixture BN and the model ({_architecture(model)}) plain BN: pass '
                         f'--branch clean or --branch adv to load one branch, or build the mixture-BN model')
    if model_mbn and not checkpoint_mbn:
        _logger.info('Plain-BN weights into a mixture-BN model: both branches start from the same BN.')
        return _with_adversarial_copies(state_dict, model)
    return dict(state_dict)


def _as_checkpoint(source: Source) -> Checkpoint:
    if isinstance(source, Checkpoint):
        return source
    if isinstance(source, Mapping):
        return Checkpoint(state_dict=strip_wrapper_prefixes(source), source='state dict')
    return read_checkpoint(source)


def load_weights(
        model: nn.Module,
        source: Source,
        ema: bool = False,
        strict: bool = True,
        branch: Optional[str] = None,
) -> nn.Module:
    """Load weights from any source `read_checkpoint` accepts (or a `Checkpoint`, or a state dict) into `model`.

    Args:
        model: The model to fill, already built with the right architecture and class count.
        source: File path, export folder, ``local-dir:PATH``, ``hf-hub:org/name``, `Checkpoint` or state dict.
        ema: Load a training checkpoint's EMA weights.
        strict: Require every key to match, as `nn.Module.load_state_dict`.
        branch: Load one branch of a mixture-BN checkpoint into a plain-BN model.

    Returns:
        `model`, for chaining.

    Raises:
        ValueError: Class counts differ, EMA weights are missing, or the normalization layouts do not meet.
    """
    checkpoint = _as_checkpoint(source)
    weights = checkpoint.weights(ema)
    try:
        state_dict = adapt_state_dict(weights, model, branch)
        check_num_classes(model, state_dict, checkpoint.source)
        try:
            result = model.load_state_dict(state_dict, strict=strict)
        except RuntimeError as e:  # keys or shapes that do not fit: the weights are not this model's
            raise ValueError(f'{checkpoint.source} does not fit {_architecture(model)}: '
                             f'{_load_error_summary(e, state_dict, model)}') from e
    except ValueError as e:
        clash = _architecture_clash(checkpoint, weights, model)
        if clash is None:
            raise
        raise ValueError(clash) from e
    if result.missing_keys or result.unexpected_keys:
        _logger.warning(f'Loaded {checkpoint.source} non-strictly: '
                        f'{counted_names(result.missing_keys, "missing key")}, '
                        f'{counted_names(result.unexpected_keys, "unexpected key")}.')
    _logger.info(f'Loaded {"EMA " if ema else ""}weights from {checkpoint.source}.')
    return model


def source_config(model_name: str) -> Optional[Dict[str, Any]]:
    """The ``config.json`` behind an ``hf-hub:`` or ``local-dir:`` model name; None for registry names."""
    kind, location = split_source(model_name)
    if kind == 'path':
        return None
    if kind == 'local-dir':
        path = Path(location).expanduser() / 'config.json'
        if not path.is_file():
            raise FileNotFoundError(f'{model_name}: no config.json in the folder.')
        return read_config_json(path)
    from huggingface_hub import hf_hub_download
    from timm.models._hub import hf_split
    repo_id, revision = hf_split(location)
    return read_config_json(Path(hf_hub_download(repo_id, 'config.json', revision=revision)),
                            f'{model_name} config.json')


def _check_local_weights(model_name: str) -> None:
    """Check the weights file of a ``local-dir:`` name before timm loads it: timm's loader says of a damaged file
    neither which it is nor what is wrong."""
    kind, location = split_source(model_name)
    if kind != 'local-dir':
        return
    folder = Path(location).expanduser()
    weights = next((folder / name for name in WEIGHT_FILES if (folder / name).is_file()), None)
    if weights is not None:
        check_checkpoint_file(weights)


def _check_registered(model_name: str) -> None:
    """Raise a ValueError, not timm's RuntimeError, for a registry name timm does not know (bad input, not a defect)."""
    if split_source(model_name)[0] == 'path' and not timm.is_model(model_name):
        close = difflib.get_close_matches(model_name.split('.', 1)[0], timm.list_models(), n=3)
        hint = f'did you mean {" or ".join(close)}? ' if close else ''
        raise ValueError(f'Unknown model {model_name!r}: not registered with timm ({hint}timm.list_models() lists '
                         f'those that are; this plugin registers its own on import timm_advnorm).')


def _hub_weights_file(model_name: str) -> Optional[Tuple[str, str]]:
    """``(repo_id, filename)`` of a registry name's pretrained weights on the Hugging Face Hub; None elsewhere."""
    if split_source(model_name)[0] != 'path':
        return None
    cfg = get_pretrained_cfg(model_name)
    if cfg is None or not cfg.hf_hub_id:
        return None
    return cfg.hf_hub_id, cfg.hf_hub_filename or 'pytorch_model.bin'


def _unreachable_weights_message(model_name: str, repo_id: str, filename: str, error: BaseException) -> str:
    """Why `model_name`'s weights could not be fetched, and how to put them in the cache of an offline machine."""
    reason = ' '.join(str(error).split())[:200] or type(error).__name__
    return (f'{model_name}: cannot get {filename} of hf-hub:{repo_id} ({reason}). On a machine with network, '
            f'`hf download {repo_id} {filename}` fills the Hugging Face cache ($HF_HOME/hub); copy it here and '
            f'run with HF_HUB_OFFLINE=1.')


def has_pretrained_weights(model_name: str) -> bool:
    """Whether ``pretrained=True`` can load weights for `model_name`: an ``hf-hub:``/``local-dir:`` name always names
    weights; a registry name (optionally ``.tag``) only when timm registers a file, URL or Hub id for it."""
    if split_source(model_name)[0] != 'path':
        return True
    cfg = get_pretrained_cfg(model_name)
    return bool(cfg is not None and cfg.has_weights)


def pretrained_num_classes(model_name: str) -> Optional[int]:
    """Classes of the pretrained weights `model_name` names (None where nothing says)."""
    return _pretrained_num_classes(model_name, source_config(model_name))


def _pretrained_num_classes(model_name: str, config: Optional[Mapping[str, Any]]) -> Optional[int]:
    if config is not None:
        return config.get('num_classes', config.get('pretrained_cfg', {}).get('num_classes'))
    cfg = get_pretrained_cfg(model_name)
    return cfg.num_classes if cfg is not None else None


def _check_pretrained_classes(source: str, available: Optional[int], requested: Optional[int], reset: bool) -> None:
    if available is None or requested is None or available == requested:
        return
    if not reset:
        raise ValueError(
            f'{source} has {available} classes but num_classes={requested} was requested: timm would drop the '
            f'classifier; pass num_classes={available}, or reset_classifier=True to train a new head.')
    _logger.warning(f'{source}: {available}-class classifier replaced by a new {requested}-class head.')


def _apply_plugin_config(model: nn.Module, config: Optional[Mapping[str, Any]]) -> nn.Module:
    plugin = {k: v for k, v in ((config or {}).get(PLUGIN_CONFIG_KEY) or {}).items() if k not in _PROVENANCE_KEYS}
    if plugin.get('padding') == 'tf_same':
        _logger.info('Export records TensorFlow "SAME" padding: switching stride-2 layers to it.')
        use_tf_same_padding(model)
    if plugin:
        setattr(model, _PLUGIN_CONFIG_ATTR, plugin)
    return model


def model_config(model: nn.Module) -> Dict[str, Any]:
    """How to rebuild `model` as built: its registered architecture, pretrained config (preprocessing, classifier),
    inference branch (mixture BN) and plugin config (TF padding), in the layout of an export's ``config.json``.

    A training checkpoint carries it (`train_adv.py`), so that a model trained from a converted or exported one is
    reloaded, evaluated and published with the preprocessing, branch and padding it was trained with, under its
    registered architecture rather than the ``hf-hub:``/``local-dir:`` name it was first loaded by.
    """
    cfg = {k: list(v) if isinstance(v, tuple) else v for k, v in (getattr(model, 'pretrained_cfg', None) or {}).items()}
    config: Dict[str, Any] = dict(architecture=cfg.get('architecture'), pretrained_cfg=cfg)
    branch = get_inference_branch(model)
    if branch is not None:
        config['model_args'] = {INFERENCE_BRANCH_ARG: branch}
    plugin = getattr(model, _PLUGIN_CONFIG_ATTR, None)
    if plugin:
        config[PLUGIN_CONFIG_KEY] = dict(plugin)
    return config


def create_model_from_name_or_checkpoint(
        model_name: Optional[str] = None,
        checkpoint: Optional[Union[str, Path]] = None,
        *,
        pretrained: bool = False,
        ema: bool = False,
        branch: Optional[str] = None,
        reset_classifier: bool = False,
        strict: bool = True,
        **kwargs: Any,
) -> nn.Module:
    """Create a model from a registry name, ``hf-hub:``/``local-dir:`` name, or a checkpoint — one entry point for
    ``train_adv.py --model/--pretrained/--initial-checkpoint`` and ``validate_adv.py --model/--checkpoint``.

    A mixture-BN model comes back routed to the inference branch its source records (``inference_branch`` in the
    export's or checkpoint's model config; ``clean`` when none is recorded), unless `kwargs` names one.

    Args:
        model_name: A registered architecture (``mbn_resnet50``, optionally ``.tag``), ``hf-hub:org/name`` or
            ``local-dir:PATH``. Optional with a checkpoint that names its architecture.
        checkpoint: Weights to load, any source `read_checkpoint` accepts. Its class count sets ``num_classes``.
        pretrained: Load the pretrained weights named by `model_name` (ignored when `checkpoint` is given).
        ema: Load a training checkpoint's EMA weights.
        branch: Build the plain-BN twin and load this branch (``clean``/``adv``) of a mixture-BN checkpoint.
        reset_classifier: Allow `num_classes` to differ from the pretrained weights' (a new, untrained head).
        strict: Strict state-dict loading of `checkpoint`.
        **kwargs: Passed to `timm.create_model` (``num_classes``, ``drop_rate``, ...).

    Raises:
        ValueError: Class counts differ, nothing names the architecture, or a source is given twice.
    """
    if checkpoint is None:
        if not model_name:
            raise ValueError('Name a model, a checkpoint, or both.')
        if ema or branch:
            raise ValueError('ema and branch select weights inside a checkpoint: pass checkpoint=... as well.')
        _check_registered(model_name)
        config = source_config(model_name)
        if pretrained and not has_pretrained_weights(model_name):
            raise ValueError(f'{model_name} has no pretrained weights (timm registers no weight file for it).')
        if pretrained:
            _check_pretrained_classes(
                model_name, _pretrained_num_classes(model_name, config), kwargs.get('num_classes'), reset_classifier)
            _check_local_weights(model_name)
        try:
            model = _create_model(model_name, pretrained=pretrained, **kwargs)
        except (EntryNotFoundError, OSError) as e:  # offline with an empty cache, no network, a moved file
            hub_file = _hub_weights_file(model_name) if pretrained else None
            if hub_file is None:
                raise
            raise ValueError(_unreachable_weights_message(model_name, *hub_file, e)) from e
        if pretrained:  # timm loaded them: checked as every weights `read_checkpoint` reads are
            check_finite_weights(model.state_dict(), model_name)
        return _apply_plugin_config(model, config)

    if model_name and split_source(model_name)[0] != 'path':
        raise ValueError(f'Give the weights once: {model_name} as model name and {checkpoint} as checkpoint.')
    loaded = read_checkpoint(checkpoint)
    arch = model_name or loaded.arch
    if not arch:
        raise ValueError(f'{checkpoint} does not name its architecture: pass a model name.')
    _check_registered(arch)
    if branch is not None and not model_name:
        arch = plain_twin(arch)
    pretrained_cfg = loaded.pretrained_cfg
    if pretrained_cfg is not None:
        pretrained_cfg['architecture'] = arch
    found = state_dict_num_classes(loaded.weights(ema), _registry_classifier(arch, pretrained_cfg))
    requested = kwargs.get('num_classes')
    if found is not None and requested is not None and found != requested:
        raise ValueError(f'{checkpoint} has {found} classes but num_classes={requested} was requested '
                         f'(--num-classes): drop it, the checkpoint sets the classes')
    if found is not None:
        kwargs['num_classes'] = found
    recorded_args = loaded.model_args
    recorded_branch = recorded_args.pop(INFERENCE_BRANCH_ARG, None)
    for key, value in recorded_args.items():
        kwargs.setdefault(key, value)
    if pretrained:
        _logger.info(f'Weights come from {checkpoint}; pretrained weights of {arch} are not loaded.')
    model = _create_model(arch, pretrained=False, pretrained_cfg=pretrained_cfg, **kwargs)
    if recorded_branch and INFERENCE_BRANCH_ARG not in kwargs and has_mixture_bn(model):
        set_inference_branch(model, recorded_branch)  # before loading: the branch is chosen, nothing to notice
    load_weights(model, loaded, ema=ema, strict=strict, branch=branch)
    return _apply_plugin_config(model, loaded.config)
