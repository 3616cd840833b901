"""The results a model card states: per variant, the clean accuracy, each attack's and the worst case, read from
``timm-advnorm-validate``'s results file or from a flat file of results from elsewhere.

The results schema is the evaluation's (`timm_advnorm.eval.schema`); `CardResults` is not another one but the card's
view of it. ``timm-advnorm-validate``'s own layout is read by that schema (`timm_advnorm.eval.schema.EvalResults`,
whose reader names what is missing or malformed), and the card keeps of it its rows (`CardEntry`), the protocol's
headline robust accuracy per variant, what ran (data, split, images, seed, preprocessing, precision, reduced budgets,
aggregation) and which sanity checks failed. A file is read in that layout when its ``variants`` is a list of objects
that each have an ``attacks`` list.

A flat layout is read for results from elsewhere (fields not listed are ignored):

* top level: ``model`` (str); ``protocol`` (str, or an object with ``name`` and optionally ``headline``, ``reduced``,
  ``aggregation`` and ``reference``); a list of per-attack objects under ``results`` or ``attacks``; optionally
  ``dataset`` or ``data``, ``split``, ``num_samples``, ``n_samples`` or ``samples``, ``seed``, ``checkpoint``,
  ``weights_digest`` (`timm_advnorm.weights.digest.state_dict_digest` of the evaluated weights),
  ``data_config``, ``amp``, ``sanity_passed``, ``clean_accuracy``, ``clean_acc`` or ``clean_top1``, and
  ``accuracy_unit`` (``percent`` or ``fraction``; without it, accuracies that are all at most 1 are read as
  fractions);
* per entry: a name (``label``, ``name``, ``attack`` or ``stage``: the attack as it ran; entries named ``clean`` or
  ``none`` are clean accuracies) and an accuracy (``accuracy``, ``robust_accuracy``, ``acc``, ``top1`` or ``acc1``);
  optionally ``variant``, ``attack_success_rate``, ``success_rate`` or ``asr``, and, describing the threat model,
  ``protocol_label``, ``attack`` (registered name), ``threat`` (``white-box``, ``black-box`` or ``noise``), ``norm``,
  ``eps`` or ``epsilon`` (on the 0-255 pixel scale), ``steps`` or ``iterations`` (iterations, or queries of a
  query-based attack), ``targeted``, ``noise`` and ``sigma`` (random noise instead of an adversary), ``kwargs`` (the
  attack's arguments), ``restarts`` and ``queries``.

Accuracies are kept in percent.
"""
import json
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple, Union

from ..eval import schema
from ..messages import read_utf8

__all__ = ['CardEntry', 'CardResults', 'parse_eval_results', 'read_eval_results', 'WORST_CASE']

#: The name of a row that is a clean accuracy, and of the per-sample worst case over the attacks.
_CLEAN_NAMES = ('clean', 'none')
WORST_CASE = 'worst case'
#: Keys of the flat layout, each tuple in order of preference.
_LIST_KEYS = ('results', 'attacks')
_NAME_KEYS = ('label', 'name', 'attack', 'stage')
_ACCURACY_KEYS = ('accuracy', 'robust_accuracy', 'acc', 'top1', 'acc1')
_SUCCESS_KEYS = ('attack_success_rate', 'success_rate', 'asr')
_CLEAN_KEYS = ('clean_accuracy', 'clean_acc', 'clean_top1')
_SAMPLES_KEYS = ('num_samples', 'n_samples', 'samples')
_DATASET_KEYS = ('dataset', 'data')
_EPS_KEYS = ('eps', 'epsilon')
_STEPS_KEYS = ('steps', 'iterations')
_SETTING_KEYS = ('restarts', 'queries')


@dataclass(frozen=True)
class CardEntry:
    """A row of the card: accuracy (percent) under one attack, or on clean images when `is_clean`.

    Attributes:
        name: The attack as it ran (``pgd-t-13`` when a reduced run shrank the protocol's ``pgd-t-2000``).
        accuracy: Accuracy in percent.
        variant: The evaluated variant (``clean``, ``adv``, ``mix@0.5``, ...), if the results name variants.
        success_rate: Targeted attack-success rate in percent.
        protocol_label: The protocol's label for this attack, when the results record it.
        attack: Registered attack name (``pgd``, ``apgd-t``, ``square``, ...).
        threat: ``white-box``, ``black-box`` or ``noise``.
        norm: Threat-model norm (``linf``, ``l2``).
        eps: Budget on the 0-255 pixel scale.
        steps: Iterations that ran, or queries of a query-based attack.
        targeted: Whether the attack aimed at a target class.
        noise: Kind of random noise, for a noise row.
        sigma: Standard deviation of that noise.
        kwargs: The attack's arguments as recorded.
        settings: Other scalar settings as recorded (``restarts``, ``queries``).
        accuracy_last_iterate: Accuracy (percent) on the last PGD iterate of the same run, the papers' convention,
            when the results scored it (`accuracy` is then on the best iterate).
        success_rate_last_iterate: The success rate on that last iterate.
        description: The attack in one line as ``validate_adv.py``'s results name it everywhere
            (`timm_advnorm.eval.schema.AttackResult.describe`: norm, ε, step and rule, iterations or queries, targeted
            or not, which iterate, reduced); None for clean rows, the worst case, noise, results from elsewhere and
            results written before attacks recorded how they stepped (the card then reads their arguments).
    """

    name: str
    accuracy: float
    variant: Optional[str] = None
    success_rate: Optional[float] = None
    protocol_label: Optional[str] = None
    attack: Optional[str] = None
    threat: Optional[str] = None
    norm: Optional[str] = None
    eps: Optional[float] = None
    steps: Optional[int] = None
    targeted: Optional[bool] = None
    noise: Optional[str] = None
    sigma: Optional[float] = None
    kwargs: Dict[str, Any] = field(default_factory=dict)
    settings: Dict[str, Any] = field(default_factory=dict)
    accuracy_last_iterate: Optional[float] = None
    success_rate_last_iterate: Optional[float] = None
    description: Optional[str] = None

    @property
    def is_clean(self) -> bool:
        """Whether this is a clean-image accuracy rather than an attack."""
        return self.name.lower() in _CLEAN_NAMES


@dataclass(frozen=True)
class CardResults:
    """Results as a card states them; `entries` are in file order, a flat file's top-level clean accuracy first.

    Attributes:
        model: The evaluated architecture.
        protocol: Protocol name.
        entries: Clean and per-attack accuracies.
        dataset: Data set name.
        split: Data set split.
        num_samples: Images evaluated.
        seed: Seed of the image subset, targets and random starts.
        checkpoint: The evaluated weights, as given to ``timm-advnorm-validate`` (a path on the evaluating machine).
        weights_digest: Digest of the evaluated weights (`timm_advnorm.weights.digest`), when the results record it.
        branch_weights_digests: Digest of each mixture-BN branch as a plain-BN model, when recorded.
        headlines: The protocol's headline robust accuracy per variant.
        headline_labels: What each variant's headline is, as it ran (an attack's label, ``worst-case``, ``mean``).
        headline: The protocol's headline rule or attack label (``pgd-t-2000``, ``worst-case``, ``last``, ``mean``).
        reduced: Whether the protocol's budgets were shrunk for a smoke test (``timm-advnorm-validate --reduced``).
        aggregation: ``independent`` (every attack sees every image) or ``cascade`` (each attack only the images
            the ones before it left correct, so its accuracy is cumulative).
        reference: Where the protocol comes from.
        data_config: The preprocessing the evaluation used.
        precision: ``float32`` or the autocast dtype the forwards ran in, when recorded.
        sanity_passed: Whether every sanity check passed, when recorded.
        sanity_failed: Names of the failed sanity checks, per variant.
        primary_variant: The variant of the model as it was loaded, when recorded.
        sanity_status: The verdict of the sanity checks (``passed``, ``partial``, ``not run``, ``failed``), when
            recorded.
        sanity_text: The verdict with which checks ran on what and which did not
            (`timm_advnorm.eval.schema.sanity_text`), from ``validate_adv.py`` results.
    """

    model: str
    protocol: str
    entries: Tuple[CardEntry, ...]
    dataset: Optional[str] = None
    split: Optional[str] = None
    num_samples: Optional[int] = None
    seed: Optional[int] = None
    checkpoint: Optional[str] = None
    weights_digest: Optional[str] = None
    branch_weights_digests: Dict[str, str] = field(default_factory=dict)
    headlines: Dict[Optional[str], float] = field(default_factory=dict)
    headline_labels: Dict[Optional[str], str] = field(default_factory=dict)
    headline: Optional[str] = None
    reduced: bool = False
    aggregation: Optional[str] = None
    reference: Optional[str] = None
    data_config: Dict[str, Any] = field(default_factory=dict)
    precision: Optional[str] = None
    sanity_passed: Optional[bool] = None
    sanity_failed: Dict[Optional[str], Tuple[str, ...]] = field(default_factory=dict)
    primary_variant: Optional[str] = None
    sanity_status: Optional[str] = None
    sanity_text: Optional[str] = None

    @property
    def variants(self) -> List[Optional[str]]:
        """Evaluated variants in first-seen order (``[None]`` when the file names none)."""
        return list(dict.fromkeys(e.variant for e in self.entries))

    def clean_accuracy(self, variant: Optional[str] = None) -> Optional[float]:
        """Clean accuracy of `variant`, falling back to a variant-less clean accuracy."""
        clean = {e.variant: e.accuracy for e in self.entries if e.is_clean}
        return clean.get(variant, clean.get(None))

    def strongest(self, variant: Optional[str] = None) -> Optional[CardEntry]:
        """The attack (or per-sample worst case) leaving the lowest accuracy on `variant`."""
        attacks = [e for e in self.entries if not e.is_clean and e.variant == variant]
        return min(attacks, key=lambda e: e.accuracy) if attacks else None

    def describes(self, digest: str) -> Optional[bool]:
        """Whether these results evaluated the weights of `digest` (`timm_advnorm.weights.digest.state_dict_digest`):
        the whole model, or one mixture-BN branch as a plain-BN model; None when they record no digest."""
        if self.weights_digest is None:
            return None
        return digest in (self.weights_digest, *self.branch_weights_digests.values())

    def robust_accuracy(self, variant: Optional[str] = None) -> Optional[float]:
        """The protocol's headline robust accuracy of `variant` when recorded, else the strongest attack's."""
        if variant in self.headlines:
            return self.headlines[variant]
        strongest = self.strongest(variant)
        return None if strongest is None else strongest.accuracy


def _precision(amp: Any, recorded: bool) -> Optional[str]:
    """``float32``, or the autocast dtype of ``timm-advnorm-validate --amp``; None when the results do not record it."""
    if not recorded:
        return None
    return f'{amp} autocast' if amp else 'float32'


def _row(attack: schema.AttackResult, variant: str, reduced: bool) -> CardEntry:
    """One attack of a variant, as a row of the card (`reduced`: the protocol's budgets were)."""
    return CardEntry(
        name=attack.label, accuracy=float(attack.accuracy), variant=variant,
        success_rate=None if attack.success_rate is None else float(attack.success_rate),
        protocol_label=attack.protocol_label, attack=attack.attack, threat=attack.threat, norm=attack.norm,
        eps=attack.eps, steps=attack.steps, targeted=attack.targeted, noise=attack.noise, sigma=attack.sigma,
        kwargs=dict(attack.kwargs), settings={} if attack.queries is None else dict(queries=attack.queries),
        accuracy_last_iterate=attack.accuracy_last_iterate, success_rate_last_iterate=attack.success_rate_last_iterate,
        description=attack.describe(reduced) if attack.iterate is not None else None)


def _from_schema(results: schema.EvalResults, precision_recorded: bool) -> CardResults:
    """The card's view of ``timm-advnorm-validate`` results: per variant its clean accuracy, attacks and worst case."""
    entries, headlines, labels, failed = [], {}, {}, {}
    for variant in results.variants:
        if variant.clean is not None:
            entries.append(CardEntry('clean', float(variant.clean), variant.name))
        entries += [_row(attack, variant.name, results.protocol.reduced) for attack in variant.attacks]
        if variant.worst_case is not None:
            entries.append(CardEntry(WORST_CASE, float(variant.worst_case), variant.name))
        if variant.robust is not None:
            headlines[variant.name] = float(variant.robust)
            if variant.robust_label is not None:
                labels[variant.name] = variant.robust_label
        if variant.sanity is not None and variant.sanity.failed:
            failed[variant.name] = tuple(variant.sanity.failed)
    protocol = results.protocol
    return CardResults(
        model=results.model, protocol=protocol.name, entries=tuple(entries), dataset=results.dataset,
        split=results.split, num_samples=results.num_samples, seed=results.seed, checkpoint=results.checkpoint,
        weights_digest=results.weights_digest, branch_weights_digests=dict(results.branch_weights_digests or {}),
        headlines=headlines, headline_labels=labels, headline=protocol.headline, reduced=protocol.reduced,
        aggregation=protocol.aggregation, reference=protocol.reference, data_config=dict(results.data_config),
        precision=_precision(results.amp, precision_recorded), sanity_passed=results.sanity_passed,
        sanity_failed=failed, primary_variant=results.primary_variant, sanity_status=results.sanity_status,
        sanity_text=schema.sanity_text(results))


def _first(entry: Mapping[str, Any], keys: Sequence[str]) -> Any:
    return next((entry[k] for k in keys if entry.get(k) is not None), None)


def _number(value: Any, what: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError(f'{what} must be a number, got {value!r}.')
    return float(value)


def _percent_scale(unit: Any, values: List[float]) -> float:
    if unit is None:
        return 100.0 if values and max(values) <= 1.0 else 1.0
    if unit in ('percent', '%'):
        return 1.0
    if unit == 'fraction':
        return 100.0
    raise ValueError(f'accuracy_unit must be "percent" or "fraction", got {unit!r}.')


def _optional(value: Any, kind: Union[type, Tuple[type, ...]]) -> Any:
    """`value` when it is of `kind` (a bool is not a number here), else None: optional fields never fail a read."""
    if isinstance(value, bool) and kind is not bool:
        return None
    return value if isinstance(value, kind) else None


def _entry(entry: Mapping[str, Any], index: int) -> CardEntry:
    """One per-attack object of the flat layout."""
    name, accuracy = _first(entry, _NAME_KEYS), _first(entry, _ACCURACY_KEYS)
    if not isinstance(name, str) or accuracy is None:
        raise ValueError(f'Result {index} needs a name ({"/".join(_NAME_KEYS)}) and an accuracy '
                         f'({"/".join(_ACCURACY_KEYS)}).')
    success, variant = _first(entry, _SUCCESS_KEYS), entry.get('variant')
    kwargs = entry.get('kwargs')
    return CardEntry(
        name=name,
        accuracy=_number(accuracy, f'Accuracy of {name}'),
        variant=None if variant is None else str(variant),
        success_rate=None if success is None else _number(success, f'Success rate of {name}'),
        protocol_label=_optional(entry.get('protocol_label'), str),
        attack=_optional(entry.get('attack'), str),
        threat=_optional(entry.get('threat'), str),
        norm=_optional(entry.get('norm'), str),
        eps=_optional(_first(entry, _EPS_KEYS), (int, float)),
        steps=_optional(_first(entry, _STEPS_KEYS), int),
        targeted=_optional(entry.get('targeted'), bool),
        noise=_optional(entry.get('noise'), str),
        sigma=_optional(entry.get('sigma'), (int, float)),
        kwargs=dict(kwargs) if isinstance(kwargs, Mapping) else {},
        settings={k: entry[k] for k in _SETTING_KEYS if isinstance(entry.get(k), (int, float, str, bool))},
    )


def _scaled(result: CardEntry, scale: float) -> CardEntry:
    success = None if result.success_rate is None else result.success_rate * scale
    return replace(result, accuracy=result.accuracy * scale, success_rate=success)


def _flat_entries(data: Mapping[str, Any]) -> List[CardEntry]:
    raw = _first(data, _LIST_KEYS)
    if not isinstance(raw, list) or not all(isinstance(e, Mapping) for e in raw):
        raise ValueError('Results need a "variants" list (timm-advnorm-validate) or a list of per-attack objects under '
                         f'"{_LIST_KEYS[0]}" or "{_LIST_KEYS[1]}".')
    entries = [_entry(e, i) for i, e in enumerate(raw)]
    clean = _first(data, _CLEAN_KEYS)
    if clean is not None:
        entries.insert(0, CardEntry('clean', _number(clean, 'Clean accuracy')))
    return entries


def _parse_flat(data: Mapping[str, Any]) -> CardResults:
    """Results of the flat layout (see the module docstring)."""
    model, protocol = data.get('model'), data.get('protocol')
    about = protocol if isinstance(protocol, Mapping) else {}
    if isinstance(protocol, Mapping):
        protocol = protocol.get('name')
    if not isinstance(model, str) or not isinstance(protocol, str):
        raise ValueError('Results need a "model" string and a "protocol" (a string or an object with a "name").')
    entries = _flat_entries(data)
    scale = _percent_scale(data.get('accuracy_unit'), [e.accuracy for e in entries])
    data_config = data.get('data_config')
    return CardResults(
        model=model,
        protocol=protocol,
        entries=tuple(_scaled(e, scale) for e in entries),
        dataset=_optional(_first(data, _DATASET_KEYS), str),
        split=_optional(data.get('split'), str),
        num_samples=_optional(_first(data, _SAMPLES_KEYS), int),
        seed=_optional(data.get('seed'), int),
        checkpoint=_optional(data.get('checkpoint'), str),
        weights_digest=_optional(data.get('weights_digest'), str),
        headline=_optional(about.get('headline'), str),
        reduced=about.get('reduced') is True,
        aggregation=_optional(about.get('aggregation'), str),
        reference=_optional(about.get('reference'), str),
        data_config=dict(data_config) if isinstance(data_config, Mapping) else {},
        precision=_precision(data.get('amp'), 'amp' in data),
        sanity_passed=_optional(data.get('sanity_passed'), bool),
        sanity_status={True: 'passed', False: 'failed'}.get(_optional(data.get('sanity_passed'), bool)),
    )


def _is_variant_list(variants: Any) -> bool:
    """Whether `variants` is ``timm-advnorm-validate``'s: a non-empty list of objects that each have an ``attacks``
    list."""
    return isinstance(variants, list) and bool(variants) and all(
        isinstance(v, Mapping) and isinstance(v.get('attacks'), list) for v in variants)


def parse_eval_results(data: Mapping[str, Any]) -> CardResults:
    """Read a results mapping: ``timm-advnorm-validate``'s layout by its schema, or the flat one (module docstring).

    Raises:
        ValueError: A required field is missing or malformed.
    """
    if not isinstance(data, Mapping):
        raise ValueError('Results must be a JSON object.')
    if _is_variant_list(data.get('variants')):
        # results that do not record the precision leave it unsaid on the card (`amp` None is float32)
        return _from_schema(schema.EvalResults.from_dict(data), precision_recorded='amp' in data)
    return _parse_flat(data)


def read_eval_results(path: Union[str, Path]) -> CardResults:
    """Read a results JSON file (``timm-advnorm-validate``'s, or a flat one from elsewhere).

    Raises:
        FileNotFoundError: No such file.
        ValueError: Not JSON, or a required field is missing.
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f'Results file not found: {path}')
    text = read_utf8(path)
    try:
        return parse_eval_results(json.loads(text))
    except json.JSONDecodeError as e:
        raise ValueError(f'{path} is not JSON: {e}') from None
    except ValueError as e:
        raise ValueError(f'{path}: {e}') from None
