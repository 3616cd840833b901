"""Building an evaluation from its options (`options.EvalOptions`): the model, the protocol and its plan, the data
runs, the state file.

`build_evaluation` does it all in an order that finds bad input (a model, a protocol, attack arguments, a BN layer,
data and unreadable images, a state file of another evaluation) before anything is evaluated, and returns the
`EvalSetup` the runner and the results read. The model is evaluated in eval mode with its own preprocessing (the
checkpoint's record, an export's config or the registry's defaults) unless the command line overrides a value; what a
training checkpoint's record set (data, preprocessing, inference branch) is said in one line, and recorded with the
preprocessing's provenance (`recorded`).
"""
import logging
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Tuple

import torch
from timm.data import ImageDataset, create_dataset, create_transform, resolve_data_config
from torch.utils.data import Dataset, IterableDataset

from ... import models  # noqa: F401  (registers the plugin's models)
from ...attacks import InputSpace
from ...attacks.base import DEFAULT_EPS
from ...data import SPLIT_SYNONYMS, builtin_dataset, is_folder_dataset, resolve_dataset, same_split, split_folder
from ...data.folders import check_num_classes, scan_image_folder
from ...data.preprocessing import check_input_channels, check_input_size, explicit_preprocessing
from ...data.readable import checked_indices
from ...usage import AMP_DTYPES, check_pretrained_option, one_line
from ...weights import create_model_from_name_or_checkpoint, split_source
from ...weights.digest import branch_digests, state_dict_digest
from ..options import LOGGER, AttackOptions, EvalDataOptions, EvalModelOptions, EvalOptions, EvalRuntimeOptions
from ..plan.sanity_budget import fit_sanity
from ..plan.stage_plan import EvalPlan, SanityBudget, build_plan, ood_stage
from ..plan.stages import EvalContext, Stage
from ..plan.variants import Variant, model_variants
from ..protocols.ood import IMAGENET_CLASSES, OODDataset, create_ood_dataset, get_ood_dataset
from ..protocols.protocol import (
    Protocol, get_protocol, override_protocol, protocol_from_attacks, reduce_protocol, resolve_protocol,
    with_paper_budgets)
from ..recorded import describe_record
from .bn_stats import collect_bn_stats
from .data import seeded_subset
from .distributed import DistributedInfo, primary_first
from .state import EvalState, evaluation_fingerprint, open_state, state_path, weights_digest
from .subsets import named_subset_order

__all__ = ['EvalSetup', 'DataRun', 'build_evaluation', 'create_eval_model', 'build_protocol', 'evaluation_plan',
           'create_eval_dataset', 'select_subset', 'create_runs', 'REDUCED_ROOT']

_logger = logging.getLogger(LOGGER)

#: ``--reduced`` (smoke tests) takes this root of every iteration and query budget; marked in the results.
REDUCED_ROOT = 3


def create_eval_model(options: EvalModelOptions, dataset: str = '') -> Tuple[torch.nn.Module, str]:
    """The model to evaluate and its architecture name (`dataset`: the evaluation data's, whose class count is the
    default of a model without a checkpoint when it is a built-in one).

    Built by `timm_advnorm.hub.create_model_from_name_or_checkpoint`, as in ``train_adv.py``: a registry,
    ``hf-hub:`` or ``local-dir:`` name (whose weights are always loaded), or a checkpoint naming its architecture;
    the checkpoint's class count is used and any conflicting ``--num-classes`` is an error (timm would silently
    drop the head).
    """
    kwargs = dict(options.kwargs)
    num_classes = options.num_classes
    if num_classes is None and builtin_dataset(dataset) and not options.checkpoint:
        num_classes = builtin_dataset(dataset).num_classes
    if num_classes is not None:
        kwargs['num_classes'] = num_classes
    # an hf-hub: or local-dir: name *is* a set of weights: evaluating its random initialization makes no sense
    from_hub = bool(options.name) and split_source(options.name)[0] != 'path' and not options.checkpoint
    if options.pretrained and not options.checkpoint:
        check_pretrained_option(options.name, num_classes, None, '--checkpoint')
    model = create_model_from_name_or_checkpoint(
        options.name, options.checkpoint or None, pretrained=options.pretrained or from_hub, ema=options.use_ema,
        branch=options.branch, **kwargs)
    name = (getattr(model, 'pretrained_cfg', None) or {}).get('architecture') or options.name
    return model, name


def _preprocessing_provenance(model: EvalModelOptions, overrides: Sequence[str]) -> Dict[str, Any]:
    """Where the evaluated preprocessing came from: the checkpoint's record (what it was trained with), an export's
    config, or the registry's defaults; and which values the command line overrode (`overrides`)."""
    if model.checkpoint:
        source = 'the checkpoint'
    elif model.name and split_source(model.name)[0] != 'path':
        source = f'the config of {model.name}'
    else:
        source = 'the model registry'
    overridden = [f'--{key.replace("_", "-")}' for key in overrides]
    return dict(source=source, overridden=overridden)


def _shown(data_config: Dict[str, Any]) -> str:
    """The preprocessing in one line, for the log."""
    keys = ('input_size', 'interpolation', 'crop_pct', 'mean', 'std')
    return ', '.join(f'{key} {tuple(data_config[key]) if isinstance(data_config[key], list) else data_config[key]}'
                     for key in keys if key in data_config)


def build_protocol(options: AttackOptions, space: InputSpace) -> Protocol:
    """The named protocol or the attack list, with the overrides and reduction of `options` applied.

    A protocol's budgets in units of the standardized input are resolved from `space`, the evaluated model's input
    normalization, before the overrides (`resolve_protocol`: ``--eps`` and ``--step`` are on the 0-255 scale).
    """
    if options.attacks:
        attack_kwargs = dict(options.kwargs)
        for key, value in (('step', options.step), ('norm', options.norm)):
            if value is not None:
                attack_kwargs[key] = value
        if options.targeted:
            attack_kwargs['targeted'] = True
        eps = DEFAULT_EPS if options.eps is None else options.eps
        protocol = protocol_from_attacks(list(options.attacks), eps, attack_kwargs,
                                         'cascade' if options.cascade else 'independent', steps=options.steps)
        if options.eps is None:  # BIM at the galloway protocol's budget, resolved from the model's std
            protocol = resolve_protocol(with_paper_budgets(protocol), space)
    else:
        protocol = override_protocol(resolve_protocol(get_protocol(options.protocol or 'xie2020'), space),
                                     options.eps, options.step, options.steps[0] if options.steps else None,
                                     options.norm)
    if options.reduced or options.max_steps is not None or options.max_queries is not None:
        protocol = reduce_protocol(protocol, options.max_steps, options.max_queries,
                                   root=REDUCED_ROOT if options.reduced else None)
    return protocol


def create_eval_dataset(data: EvalDataOptions, data_config: Dict[str, Any], dist_info: DistributedInfo,
                        batch_size: int):
    """The evaluation split with the model's eval transform (which normalizes: the only normalization); timm's
    iterable datasets are told the `batch_size` (and refused).

    Raises:
        FileNotFoundError: The dataset root does not exist.
        ValueError: The split folder is missing, holds a symbolic-link loop or an image reached twice
            (`scan_image_folder`), or timm cannot load the dataset (its assertion or error, on one line).
    """
    with primary_first(dist_info):  # the built-in datasets are rendered on first use: once, by rank 0
        chosen_by = "the checkpoint's record" if 'dataset' in data.record.taken else None
        dataset_name, root = resolve_dataset(data.dataset, data.data_dir, img_size=data_config['input_size'][-1],
                                             chosen_by=chosen_by)
    if root is not None and not Path(root).exists():
        raise FileNotFoundError(f'dataset root {root} not found')
    search_split = True
    if root is not None and is_folder_dataset(dataset_name) and Path(root).is_dir():
        root, search_split = str(split_folder(Path(root), data.split)), False
        scan_image_folder(Path(root))  # refuses link loops and images reached twice, which timm would read twice
    try:
        dataset = create_dataset(dataset_name, root=root, split=data.split, search_split=search_split,
                                 class_map=data.class_map, is_training=False, batch_size=batch_size)
    except (AssertionError, RuntimeError, OSError) as e:  # unknown name, no images, class map missing, ...
        raise ValueError(f'cannot load dataset {data.dataset or "folder"!r} from {root}: {one_line(e)}') from e
    if isinstance(dataset, IterableDataset):
        raise ValueError(f'dataset {data.dataset!r} is iterable; robust evaluation needs a map-style dataset')
    if isinstance(dataset, ImageDataset):  # a file that turns unreadable after `select_subset` checked it: fail,
        dataset._max_retries = 1  # never evaluate the next image in its place (timm's ImageDataset tries 10)
    dataset.transform = create_transform(**data_config, is_training=False)
    return dataset


def select_subset(data: EvalDataOptions, runtime: EvalRuntimeOptions, dataset: Dataset, subset: Optional[str]
                  ) -> Tuple[List[int], List[Dict[str, str]]]:
    """The seeded subset to evaluate (or the named `subset`'s images), its images decoded first (`checked_indices`):
    unreadable files are an error naming them, or with ``--skip-bad-images`` skipped for the next readable images of
    the seeded order (`data`'s subset size, drawn with `runtime`'s seed and decoded by its workers).

    Every rank draws and checks the same subset itself (no rank waits on another, so an error ends them all alike).

    Returns:
        The dataset indices, and the skipped files as ``{file, error}`` entries (file names relative to the root).

    Raises:
        ValueError: Unreadable images without ``--skip-bad-images``, or no readable image at all.
    """
    order = (named_subset_order(dataset, subset, data.num_samples) if subset
             else seeded_subset(len(dataset), 0, runtime.seed))
    return checked_indices(dataset, order, data.num_samples, data.skip_bad_images, runtime.workers, 'evaluate')


@dataclass(frozen=True)
class DataRun:
    """One data set of an evaluation and the work run on it.

    Attributes:
        name: The out-of-distribution set (`ood.OOD_DATASETS`); ``None``: the evaluation data.
        dataset: Its images, with the model's eval transform.
        indices: The dataset index of every subset position.
        skipped: Unreadable files skipped, as ``{file, error}`` entries.
        stages: The work per batch.
        classes: The model's class index of each label when the set has 200 of ImageNet's classes (`ClassSubset`).
        folder: The out-of-distribution set's folder, as given (its identity in the state file's fingerprint).
    """

    name: Optional[str]
    dataset: Dataset
    indices: List[int]
    skipped: List[Dict[str, str]]
    stages: Tuple[Stage, ...]
    classes: Optional[List[int]] = None
    folder: Optional[str] = None

    @property
    def num_classes(self) -> Optional[int]:
        """Classes scored, when a subset of the model's (`classes`)."""
        return None if self.classes is None else len(self.classes)


def _ood_run(options: EvalOptions, dataset: OODDataset, stages: Sequence[Stage], transform) -> DataRun:
    """`stages` on the seeded subset of `dataset`'s folder, scored on its classes."""
    folder = options.data.ood_folders[dataset.name]
    images = create_ood_dataset(dataset, Path(folder), transform)
    return DataRun(dataset.name, images, *select_subset(options.data, options.runtime, images, None), tuple(stages),
                   dataset.logit_indices(), folder)


def _check_model_classes(model: EvalModelOptions, data: EvalDataOptions, num_classes: int, dataset: Dataset) -> None:
    """The model's classes must be the evaluation data's (`check_num_classes`), where the dataset's reader says what
    its classes are: a checkpoint with fewer classes would fail on the first label it lacks, and one with more be
    scored against labels numbered by folder, not by the model's classes, unless ``--class-map`` says how."""
    reader = getattr(dataset, 'reader', dataset)  # torchvision's ImageFolder holds its class map itself
    class_to_idx = getattr(reader, 'class_to_idx', None)
    if class_to_idx:
        source = (f'the checkpoint {model.checkpoint}' if model.checkpoint else '--num-classes' if model.num_classes
                  else f'the default of {model.name}')
        check_num_classes(num_classes, class_to_idx, bool(data.class_map), source)


def create_runs(options: EvalOptions, protocol: Protocol, plan: EvalPlan, data_config: Dict[str, Any],
                dist_info: DistributedInfo, num_classes: int) -> List[DataRun]:
    """The data sets of an evaluation, each subset drawn and decoded before anything is evaluated: first the plan's
    stages on the evaluation data (or on the out-of-distribution set the protocol runs on), then a clean pass over
    each further out-of-distribution set of the protocol (`Protocol.ood`).

    Args:
        num_classes: The model's classes, which the evaluation data must have (`_check_model_classes`).

    Raises:
        FileNotFoundError: A data folder is missing.
        ValueError: A folder that is not its data set, data with other classes than the model's, or images that
            cannot be read (see `select_subset`).
    """
    transform = create_transform(**data_config, is_training=False)
    if protocol.dataset:
        main = _ood_run(options, get_ood_dataset(protocol.dataset), plan.stages, transform)
    else:
        data = options.data
        dataset = create_eval_dataset(data, data_config, dist_info, options.runtime.batch_size)
        _check_model_classes(options.model, data, num_classes, dataset)
        main = DataRun(None, dataset, *select_subset(data, options.runtime, dataset, data.subset), plan.stages)
    return [main] + [_ood_run(options, get_ood_dataset(name), (ood_stage(name),), transform)
                     for name in protocol.ood]


def _check_imagenet_model(protocol: Protocol, model: torch.nn.Module) -> None:
    """The out-of-distribution sets score ImageNet classifiers: a model with another number of classes is refused."""
    if protocol.datasets and model.num_classes != IMAGENET_CLASSES:
        titles = ' and '.join(get_ood_dataset(name).title for name in protocol.datasets)
        raise ValueError(f'protocol {protocol.name} scores ImageNet classifiers on {titles}: the model has '
                         f'{model.num_classes} classes, not ImageNet\'s {IMAGENET_CLASSES}')


def _check_bn_layer(bn_layer: Optional[str], bn_stats: Dict[str, Any]) -> None:
    """``--bn-layer`` must name a mixture-BN layer of the model: found now, not when the plots are drawn after the
    evaluation."""
    if bn_layer is not None and bn_layer not in bn_stats:
        examples = f'; e.g. {", ".join(list(bn_stats)[:3])}' if bn_stats else ' (it has none)'
        raise ValueError(f'--bn-layer {bn_layer}: the model has no mixture-BN layer of that name{examples}')


@dataclass(frozen=True)
class EvalSetup:
    """An evaluation ready to run.

    Attributes:
        model: The model, on its device, in eval mode.
        model_name: Its architecture.
        data_config: The preprocessing evaluated.
        preprocessing: Where it came from (``source``), the options that overrode it (``overridden``) and, for a
            training checkpoint, what its record set (``from_checkpoint``) and what was given against it
            (``unlike_checkpoint``, option: [recorded, given]).
        protocol: The protocol, with the command line's overrides and reduction.
        variants: What is evaluated (the model, or mixture-BN branches and interpolations).
        plan: The stages per batch.
        ctx: What every stage needs to know.
        bn_stats: The model's clean and adversarial BN statistics (empty without mixture BN).
        runs: The data runs, the evaluation data (or the set the protocol runs on) first.
        state: The resumable state file, with ``--resume-state``.
        weights_digest: Digest of the evaluated weights (`timm_advnorm.weights.digest.state_dict_digest`).
        branch_weights_digests: Digest of each mixture-BN branch as a plain-BN model (empty without mixture BN).
    """

    model: torch.nn.Module
    model_name: str
    data_config: Dict[str, Any]
    preprocessing: Dict[str, Any]
    protocol: Protocol
    variants: List[Variant]
    plan: EvalPlan
    ctx: EvalContext
    bn_stats: Dict[str, Dict[str, List[float]]]
    runs: List[DataRun]
    state: Optional[EvalState]
    weights_digest: str
    branch_weights_digests: Dict[str, str]


def _warn_training_split(data: EvalDataOptions) -> None:
    """Warn once when the split evaluated holds training images: a training split by name (``train``,
    ``training``), the split the checkpoint's run trained on (its record), or the root of an image folder that holds
    a training split (``--val-split ''``). The numbers are then measured on images the model may have trained on."""
    trained = data.record.train_split
    names = [name for name in (*SPLIT_SYNONYMS[0], trained) if name]
    if any(same_split(data.split, name) for name in names):
        what = (f'the split the checkpoint trained on (its --train-split {trained!r})' if trained
                and same_split(data.split, trained) else 'a training split')
    elif not data.split and (builtin_dataset(data.dataset) is not None or data.data_dir and is_folder_dataset(
            data.dataset) and any((Path(data.data_dir) / name).is_dir() for name in names if '[' not in name)):
        what = f'the root of {data.data_dir or data.dataset}, which holds the training split'
    else:
        return
    _logger.warning(f'--val-split {data.split!r} is {what}: the numbers are measured on images the model trained '
                    f'on, so they are optimistic; evaluate a held-out split')


def evaluation_plan(options: EvalOptions, space: InputSpace) -> Tuple[Protocol, EvalPlan]:
    """The protocol `options` name, its budgets resolved for the model's input `space`, and its stages with the
    complete battery of sanity probes (`fit_sanity` sizes them to the evaluated subset)."""
    checks = options.checks
    protocol = build_protocol(options.attacks, space)
    probes = SanityBudget(**checks.sanity_pinned) if checks.sanity != 'off' else SanityBudget(samples=0)
    return protocol, build_plan(protocol, sanity_samples=probes.samples, sanity_steps=probes.steps,
                                sanity_queries=probes.queries, metrics=checks.metrics,
                                metric_samples=checks.metric_samples, amp_samples=checks.amp_samples,
                                share_budgets=options.attacks.share_budgets, reduced_sanity=options.attacks.reduced)


def build_evaluation(options: EvalOptions, dist_info: DistributedInfo) -> EvalSetup:
    """Everything the evaluation `options` describe needs, each part checked as it is built.

    Raises:
        FileNotFoundError: A checkpoint or data folder is missing.
        ValueError: Bad input: model, protocol, attacks, variants, BN layer, data, or a state file of another
            evaluation.
    """
    runtime, checks = options.runtime, options.checks
    torch.manual_seed(runtime.seed)  # a randomly initialized model (no checkpoint) is then reproducible too
    model, model_name = create_eval_model(options.model, options.data.dataset)
    weights = weights_digest(model) if options.outputs.resume_state else ''
    digest, branches = state_dict_digest(model.state_dict()), branch_digests(model)  # what the results describe
    preprocessing_args = options.preprocessing.as_args()
    data_config = resolve_data_config(preprocessing_args, model=model, use_test_size=True)
    check_input_channels(model, data_config)
    check_input_size(model, data_config)
    overrides = explicit_preprocessing(preprocessing_args)
    preprocessing = _preprocessing_provenance(options.model, overrides)
    _logger.info('Preprocessing %s, from %s%s.', _shown(data_config), preprocessing['source'],
                 f" with {', '.join(preprocessing['overridden'])} from the command line"
                 if preprocessing['overridden'] else '')
    said, against, record = describe_record(options.data.record, model, data_config,
                                            resolve_data_config({}, model=model, use_test_size=True), overrides,
                                            options.model.branch)
    if said:
        _logger.info(said + '.')
    if against:
        _logger.warning(against + '.')
    preprocessing.update(record)
    space = InputSpace.from_data_config(data_config)
    protocol, plan = evaluation_plan(options, space)
    if protocol.dataset is None:  # not an out-of-distribution set: the evaluation data's split
        _warn_training_split(options.data)
    variants = model_variants(model, options.variants.gammas, options.variants.interpolations)
    ctx = EvalContext(space=space, input_size=tuple(data_config['input_size']),
                      autocast_dtype=AMP_DTYPES[runtime.amp_dtype] if runtime.amp else None, fold_bn=runtime.fold_bn)
    plan.check_attacks(ctx)
    bn_stats = collect_bn_stats(model)
    _check_bn_layer(options.outputs.bn_layer, bn_stats)
    _check_imagenet_model(protocol, model)

    runs = create_runs(options, protocol, plan, data_config, dist_info, model.num_classes)
    if checks.sanity == 'budget':  # a share of the attacks' cost, which the subset's size sets
        plan = fit_sanity(plan, len(runs[0].indices), pinned=checks.sanity_pinned)
        runs[0] = replace(runs[0], stages=plan.stages)
    model.to(dist_info.device)
    if runtime.channels_last:
        model.to(memory_format=torch.channels_last)
    state = None
    if options.outputs.resume_state and not options.plan_only:  # a plan evaluates one batch and keeps nothing
        fingerprint = evaluation_fingerprint(options, model_name, weights, protocol, variants, plan, runs,
                                             data_config, dist_info)
        state = open_state(state_path(options.outputs.resume_state, dist_info), fingerprint)
    return EvalSetup(model=model, model_name=model_name, data_config=data_config, preprocessing=preprocessing,
                     protocol=protocol, variants=variants, plan=plan, ctx=ctx, bn_stats=bn_stats, runs=runs,
                     state=state, weights_digest=digest, branch_weights_digests=branches)
