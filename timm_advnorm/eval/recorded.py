"""The data, preprocessing and inference branch a training checkpoint records: what ``validate_adv.py --checkpoint``
evaluates unless the command line says otherwise.

A ``train_adv.py`` checkpoint records its run's arguments (`hub.checkpoint.recorded_training_args`): the dataset, its
root, validation split and class map. `recorded_data` takes those the command line (or ``-c`` file) does not give:
the dataset, and, while it is the recorded one, its root, split and class map. The preprocessing and the inference
branch come with the model, from its recorded pretrained config and model arguments (`hub.loading`).
`describe_record` says in one line what came from the record, and names each option given against it.
"""
from dataclasses import dataclass, field
from typing import Any, Collection, Dict, List, Mapping, Optional, Sequence, Tuple

import torch.nn as nn

from ..layers import has_mixture_bn
from ..layers.routing import INFERENCE_BRANCH_ARG
from ..weights.checkpoint import MODEL_CONFIG_ARG, recorded_training_args

__all__ = ['DataRecord', 'recorded_data', 'describe_record']

# The options of the evaluation data a training run records, its dataset first.
_DATA_OPTIONS = ('dataset', 'data_dir', 'val_split', 'class_map')


@dataclass(frozen=True)
class DataRecord:
    """What a checkpoint records of its data, against this evaluation's options.

    Attributes:
        recorded: Whether the checkpoint records a training run's arguments at all.
        taken: The data options set from the record, by destination.
        overridden: The data options given unlike the record, as ``{dest: (recorded, given)}``.
        inference_branch: The branch the checkpoint's mixture-BN model is recorded to run on (None: none recorded).
        train_split: The split the checkpoint trained on, while this evaluation reads its dataset from its root
            (None: another dataset, or none recorded).
    """

    recorded: bool = False
    taken: Dict[str, Any] = field(default_factory=dict)
    overridden: Dict[str, Tuple[Any, Any]] = field(default_factory=dict)
    inference_branch: Optional[str] = None
    train_split: Optional[str] = None


def recorded_data(checkpoint: str, data: Mapping[str, Any], given: Collection[str]) -> DataRecord:
    """The data options of `checkpoint`'s record that the invocation does not give (`given`, by destination), and
    those it gives unlike the record.

    The dataset's root, split and class map are taken only while the dataset is the recorded one: they belong to it.

    Args:
        checkpoint: The checkpoint evaluated.
        data: The invocation's data options by destination (``dataset``, ``data_dir``, ``val_split``,
            ``class_map``).
        given: The destinations the invocation gives.

    Raises:
        ValueError: A damaged checkpoint file.
    """
    recorded = recorded_training_args(checkpoint)
    if not recorded:
        return DataRecord()
    current = {dest: data.get(dest) for dest in _DATA_OPTIONS}
    taken, overridden = {}, {}
    for dest in _DATA_OPTIONS:
        if dest != 'dataset' and current['dataset'] != recorded.get('dataset'):
            break
        value = recorded.get(dest)
        if value in (None, '') and dest != 'dataset':  # unset in training: the default, as here
            continue
        if dest not in given:
            current[dest] = taken[dest] = value
        elif value != current[dest]:
            overridden[dest] = (value, current[dest])
    model_args = (recorded.get(MODEL_CONFIG_ARG) or {}).get('model_args') or {}
    same_data = all(current[dest] == recorded.get(dest) for dest in ('dataset', 'data_dir'))
    return DataRecord(recorded=True, taken=taken, overridden=overridden,
                      inference_branch=model_args.get(INFERENCE_BRANCH_ARG),
                      train_split=recorded.get('train_split') if same_data else None)


def _option(dest: str) -> str:
    return '--' + dest.replace('_', '-')


def _data_name(dest: str, value: Any) -> str:
    """``dataset digits``, ``data dir /data``; the folder dataset (``''``) as ``folder``."""
    if dest == 'dataset':
        return f'dataset {value or "folder"}'
    return f'{dest.replace("_", " ").replace("val ", "")} {value}'


def _shown(option: str, value: Any) -> str:
    """An option's value for a message: the folder dataset (``''``) as ``folder``, sizes as ``3x16x16``."""
    if option == '--dataset':
        return value or 'folder'
    if isinstance(value, (list, tuple)):
        return 'x'.join(map(str, value))
    return str(value)


def _size(config: Mapping[str, Any]) -> str:
    height, width = config['input_size'][-2:]
    return str(height) if height == width else f'{height}x{width}'


def describe_record(record: DataRecord, model: nn.Module, data_config: Mapping[str, Any],
                    recorded_config: Mapping[str, Any], overrides: Sequence[str], branch: Optional[str]
                    ) -> Tuple[Optional[str], Optional[str], Dict[str, Any]]:
    """What this evaluation took from the checkpoint's record, and what it was told otherwise.

    Args:
        record: The data options taken and overridden (`recorded_data`).
        model: The model as loaded (a whole mixture-BN model routed to its recorded inference branch).
        data_config: The preprocessing evaluated.
        recorded_config: The preprocessing the model records, without the command line's overrides.
        overrides: The preprocessing options the command line gives (`explicit_preprocessing`, timm's names).
        branch: The branch asked for (``--branch``; None: none).

    Returns:
        The console line of what came from the record (``dataset digits, img size 16, branch adv: from the
        checkpoint's record``), the line naming each option given against it, each None when there is nothing to
        say, and both as a dict for the results (``from_checkpoint``, ``unlike_checkpoint``).
    """
    if not record.recorded:
        return None, None, {}
    taken: Dict[str, Any] = dict(record.taken)
    unlike: Dict[str, List[Any]] = {_option(dest): list(change) for dest, change in record.overridden.items()}
    size_given = 'img_size' in overrides or 'input_size' in overrides
    if not size_given:
        taken['input_size'] = list(data_config['input_size'])
    for key in overrides:
        config_key = 'input_size' if key == 'img_size' else key
        if config_key in data_config and data_config[config_key] != recorded_config.get(config_key):
            unlike[_option(key)] = [recorded_config.get(config_key), data_config[config_key]]
    recorded_branch = record.inference_branch if has_mixture_bn(model) else None  # a whole model, loaded on it
    if recorded_branch is not None:
        taken['inference_branch'] = recorded_branch
    if branch is not None and record.inference_branch not in (None, branch):
        unlike['--branch'] = [record.inference_branch, branch]
    parts = [_data_name(dest, value) for dest, value in record.taken.items()]
    parts += [] if size_given else [f'img size {_size(data_config)}']
    parts += [f'branch {recorded_branch}'] if recorded_branch else []
    said = f'{", ".join(parts)}: from the checkpoint\'s record' if parts else None
    against = ('Given here unlike the checkpoint\'s record: ' + ', '.join(
        f'{option} {_shown(option, given)} (records {_shown(option, recorded)})'
        for option, (recorded, given) in unlike.items())) if unlike else None
    return said, against, dict(from_checkpoint=taken, unlike_checkpoint=unlike)
