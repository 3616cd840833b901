"""Model cards for published checkpoints: recipe, evaluation protocol, robust accuracies, and how to load.

The card's layout lives in a Markdown template (``hub/model_card_template.md``) with `string.Template`
placeholders; this module renders the sections that fill them. The YAML front matter carries Hugging Face
``model-index`` metadata, so the Hub shows the accuracies next to the model.
"""
import json
from dataclasses import dataclass, field, replace
from string import Template
from typing import Any, Dict, List, Mapping, Optional

import yaml

from .checkpoint import MODEL_CONFIG_ARG
from .results import AttackResult, EvalResults

__all__ = ['CardFacts', 'render_model_card', 'front_matter', 'results_table']

PLACEHOLDERS = (
    'front_matter', 'title', 'summary', 'usage', 'inference', 'preprocessing', 'recipe', 'evaluation')
_DATA_KEYS = ('input_size', 'interpolation', 'crop_pct', 'crop_mode', 'mean', 'std')


@dataclass
class CardFacts:
    """Everything a card states about one published model.

    Attributes:
        title: Repository (or folder) name.
        load_name: What to pass to `timm.create_model`: ``hf-hub:org/name`` or ``local-dir:PATH``.
        architecture: The published, registered architecture.
        source_architecture: The architecture that was trained (differs when one branch is exported).
        needs_plugin: Whether loading needs ``import timm_advnorm`` (the architecture is ours, not timm's).
        mixture_bn: Whether the published model has mixture BN.
        branch: The mixture-BN branch exported as a plain model, if any.
        inference_branch: For a mixture-BN model, the branch to route to at inference.
        ema: Whether the weights are the training run's EMA weights.
        num_classes: Classifier size.
        data_config: Preprocessing (input size, interpolation, crop, mean, std).
        args: Training arguments (the recipe).
        epoch: Training epoch of the checkpoint.
        results: Robust evaluation results.
        provenance: For converted third-party weights, where they came from (format, file, checksum).
        tf_same_padding: The weights expect TensorFlow "SAME" padding at strided layers (converted TF models).
        license: SPDX-style license identifier for the front matter.
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
    results: Optional[EvalResults] = None
    provenance: Optional[Dict[str, Any]] = None
    tf_same_padding: bool = False
    license: str = 'other'


def _shown_entries(facts: CardFacts) -> List[AttackResult]:
    """Results of the published model: when one branch is exported and the results name it, that branch only."""
    if facts.results is None:
        return []
    entries = list(facts.results.entries)
    if facts.branch is not None and any(e.variant == facts.branch for e in entries):
        entries = [e for e in entries if e.variant in (facts.branch, None)]
    return entries


def _labelled(entries: List[AttackResult]) -> List[AttackResult]:
    """`entries` with variant labels only where they tell variants apart."""
    if len({e.variant for e in entries}) > 1:
        return entries
    return [replace(e, variant=None) for e in entries]


def _row_name(entry: AttackResult) -> str:
    settings = ', '.join(f'{k}={v}' for k, v in entry.settings.items())
    name = 'clean' if entry.is_clean else entry.name
    return f'{name} ({settings})' if settings else name


def _metric_name(entry: AttackResult) -> str:
    return f'{_row_name(entry)} [{entry.variant}]' if entry.variant else _row_name(entry)


def front_matter(facts: CardFacts) -> str:
    """YAML front matter (without the ``---`` fences): library, license, tags and ``model-index`` metrics."""
    meta: Dict[str, Any] = {
        'library_name': 'timm',
        'license': facts.license,
        'pipeline_tag': 'image-classification',
        'tags': ['image-classification', 'timm', 'timm-advnorm', 'adversarial-training', 'robustness'],
    }
    entries = _shown_entries(facts)
    if entries:
        dataset = facts.results.dataset or 'unspecified'
        meta['model-index'] = [{
            'name': facts.title,
            'results': [{
                'task': {'type': 'image-classification', 'name': 'Image Classification'},
                'dataset': {'type': dataset, 'name': dataset},
                'metrics': [
                    {'type': 'accuracy', 'name': f'{facts.results.protocol}: {_metric_name(e)}',
                     'value': round(e.accuracy, 2)}
                    for e in _labelled(entries)],
            }],
        }]
    return yaml.safe_dump(meta, sort_keys=False).rstrip('\n')


def _summary(facts: CardFacts) -> str:
    lines = [f'- **Architecture:** `{facts.architecture}` ({facts.num_classes} classes)']
    if facts.branch:
        lines.append(f'- **Exported from:** the `{facts.branch}` branch of mixture-BN `{facts.source_architecture}`, '
                     f'as a plain-BN model')
    elif facts.source_architecture != facts.architecture:
        lines.append(f'- **Trained as:** `{facts.source_architecture}`')
    if not facts.provenance:
        lines.append(f'- **Weights:** {"EMA of the training weights" if facts.ema else "training weights"}'
                     + (f', epoch {facts.epoch}' if facts.epoch is not None else ''))
    lines.append(f'- **Loads with:** {"timm + `import timm_advnorm`" if facts.needs_plugin else "stock timm"}')
    if facts.provenance:
        lines.append(f'- **Converted from:** {facts.provenance.get("format", "?")} release '
                     f'`{facts.provenance.get("file", "?")}`')
    return '\n'.join(lines)


def _usage(facts: CardFacts) -> str:
    code = ['import timm']
    if facts.needs_plugin:
        code.append('import timm_advnorm  # registers the architecture with timm')
    code.append('')
    code.append(f"model = timm.create_model('{facts.load_name}', pretrained=True).eval()")
    if facts.mixture_bn and facts.inference_branch:
        code.append(f"timm_advnorm.set_route(model, '{facts.inference_branch}')  # the branch to use at inference")
    code += [
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
        return (f'This model has mixture batch normalization (a clean and an adversarial BN per layer). Route it to '
                f'the **`{facts.inference_branch}`** branch at inference, as in the snippet above; '
                f'`timm_advnorm.export_branch(model, "{facts.inference_branch}")` turns it into a plain timm model.')
    if facts.branch:
        return (f'This is the **`{facts.branch}`** branch of a mixture-BN model, exported as a plain '
                f'`{facts.architecture}`: it has one BN per layer and needs no routing.')
    return 'This model has a single set of normalization statistics: no branch to choose.'


def _preprocessing(facts: CardFacts) -> str:
    shown = {k: facts.data_config[k] for k in _DATA_KEYS if facts.data_config.get(k) is not None}
    rows = '\n'.join(f'| {k} | {json.dumps(list(v) if isinstance(v, tuple) else v)} |' for k, v in shown.items())
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


# Entries train_adv.py adds to its arguments at run time (not options: `train_adv.py -c` would reject them).
_RUNTIME_ARGS = ('distributed', 'local_rank', 'rank', 'world_size', MODEL_CONFIG_ARG)


def _recipe(facts: CardFacts) -> str:
    parts = []
    if facts.provenance:
        parts.append('Converted from the authors\' released weights:\n\n```yaml\n'
                     + yaml.safe_dump(_plain(facts.provenance), sort_keys=True) + '```')
    if facts.args:
        recipe = {k: v for k, v in facts.args.items() if k not in _RUNTIME_ARGS}
        parts.append('Trained with `train_adv.py` and these arguments (as a YAML file they can be passed back with '
                     '`train_adv.py -c`):\n\n```yaml\n' + yaml.safe_dump(_plain(recipe), sort_keys=True) + '```')
    return '\n\n'.join(parts) or 'No training arguments were recorded with these weights.'


def results_table(entries: List[AttackResult]) -> str:
    """Markdown table: one row per attack (clean first), one accuracy column per evaluated variant."""
    variants = list(dict.fromkeys(e.variant for e in entries))
    names = list(dict.fromkeys(_row_name(e) for e in entries))
    cells = {
        (_row_name(e), e.variant):
            f'{e.accuracy:.2f}' + (f' (success {e.success_rate:.1f})' if e.success_rate is not None else '')
        for e in entries}
    header = ['attack'] + [f'accuracy % [{v}]' if v else 'accuracy %' for v in variants]
    lines = ['| ' + ' | '.join(header) + ' |', '|' + '---|' * len(header)]
    for name in names:
        lines.append('| ' + ' | '.join([name] + [cells.get((name, v), '') for v in variants]) + ' |')
    return '\n'.join(lines)


def _evaluation(facts: CardFacts) -> str:
    results = facts.results
    if results is None:
        return 'Not evaluated yet.'
    entries = _shown_entries(facts)
    about = ['Top-1 accuracies (%) from `validate_adv.py`, the model in eval mode.', '',
             f'- **Protocol:** `{results.protocol}` (`validate_adv.py --protocol {results.protocol}`)']
    if results.dataset:
        about.append(f'- **Data:** {results.dataset}' + (f', {results.num_samples} images' if results.num_samples
                                                          else ''))
    variants = list(dict.fromkeys(e.variant for e in entries))
    for variant in variants:
        robust, strongest = results.robust_accuracy(variant), results.strongest(variant)
        if robust is None:
            continue
        label = f' on `{variant}`' if variant and len(variants) > 1 else ''
        if variant in results.headlines:
            how = "the protocol's headline"
            if strongest is not None and strongest.accuracy < robust:
                how += f'; {strongest.name} leaves {strongest.accuracy:.2f}%'
        else:
            how = f'strongest attack: {strongest.name}'
        about.append(f'- **Robust accuracy{label}:** {robust:.2f}% ({how})')
    return '\n'.join(about) + '\n\n' + results_table(_labelled(entries))


def render_model_card(template: str, facts: CardFacts) -> str:
    """Fill a card template's placeholders (``$front_matter``, ``$title``, ``$summary``, ``$usage``,
    ``$inference``, ``$preprocessing``, ``$recipe``, ``$evaluation``) from `facts`.

    Raises:
        ValueError: The template uses a placeholder this module does not provide.
    """
    sections = dict(
        front_matter=front_matter(facts), title=facts.title, summary=_summary(facts), usage=_usage(facts),
        inference=_inference(facts), preprocessing=_preprocessing(facts), recipe=_recipe(facts),
        evaluation=_evaluation(facts))
    try:
        return Template(template).substitute(sections)
    except (KeyError, ValueError) as e:
        raise ValueError(f'Model card template: unknown or malformed placeholder {e}; '
                         f'available: {", ".join(PLACEHOLDERS)}.') from None
