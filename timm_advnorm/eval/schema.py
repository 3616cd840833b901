"""The results of a robust evaluation as typed data: one schema, built once by the run, written and read back here.

``validate_adv.py`` builds one `EvalResults` (`assemble.assemble_results`); `EvalResults.to_dict` is the layout of
its JSON file and `EvalResults.from_dict` / `read_results` read such a file back. The CSV writer
(`results.csv_rows`), the plots, the console summary (`report`) and the model card (`timm_advnorm.hub.results`) all
read these fields, never the JSON keys.

Every class lists its fields in the order of its JSON keys, and `to_dict` writes them in that order: results files
are read by people and by older tools, so the layout does not change. A few keys are written only when they apply:
an attack's size fields (a norm and ε, or what its noise is), its ``success_rate`` (only when the protocol asks for
it), its ``max_perturbation`` (not for noise), a protocol's ``dataset`` and ``ood`` (only when it reads
out-of-distribution sets), the BN statistics' ``file``, the results' ``plots`` and a mixture-BN model's
``branch_weights_digests``, and the last-iterate numbers
(``accuracy_last_iterate``, ``success_rate_last_iterate``, ``robust_last_iterate``, ``robust_top1_last_iterate`` and
the ``conventions`` that name them) only for protocols that score the last PGD iterate (``xie2020``, ``nofrost``).

Best and last iterate: every accuracy under an attack is on the best iterate (per sample, the first iterate that
fools the model: the stronger attack). The papers report the last PGD iterate; the ``*_last_iterate`` numbers are
that, from the same run and start: the papers' convention, the ones to compare with their tables.

Reading accepts older and trimmed files: the names that identify something (model, protocol, variant, attack) must
be strings and the reported accuracies numbers, or the read fails naming the field; any other field that is missing
or of another type reads as not recorded (None, False or empty), so a hand-edited file still yields what it holds.
"""
import json
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, Dict, List, Mapping, Optional, Sequence, Union

from ..messages import read_utf8
from .protocols.describe import describe_attack, eps_rule_note, standardized_phrase

__all__ = ['EvalResults', 'VariantResult', 'AttackResult', 'ProtocolInfo', 'SanityResult', 'SanityCheck',
           'SanityProbe', 'EpsPoint', 'OODAccuracy', 'AmpCheck', 'AmpComparison', 'BNStats', 'read_results',
           'ITERATE_CONVENTIONS', 'SANITY_STATUSES', 'sanity_status', 'combined_sanity_status', 'passed_flag',
           'sanity_text']

#: What the robust numbers of results that score the last iterate are (`EvalResults.conventions`).
ITERATE_CONVENTIONS = {
    'robust_top1': 'best iterate: per sample, the first attack iterate that fools the model (the headline; at or '
                   'below the papers\' numbers)',
    'robust_top1_last_iterate': 'last PGD iterate of the same run: the papers\' convention (compare with their '
                                'tables)',
}

#: The verdict of an evaluation's sanity checks: ``passed`` only when every check ran and passed, ``partial`` when
#: some did not run and those that ran passed, ``not run`` when the sanity probes did not run, ``failed`` when any
#: check failed.
SANITY_STATUSES = ('passed', 'partial', 'not run', 'failed')


def sanity_status(statuses: Sequence[str], probes_ran: bool) -> str:
    """The verdict (`SANITY_STATUSES`) of checks of these statuses (``pass``, ``fail``, ``skip``), when the sanity
    probes ran or not: a failure is a failure even without probes (a check on the protocol's own attacks)."""
    if 'fail' in statuses:
        return 'failed'
    if not probes_ran:
        return 'not run'
    return 'passed' if statuses and all(status == 'pass' for status in statuses) else 'partial'


def combined_sanity_status(statuses: Sequence[Optional[str]]) -> Optional[str]:
    """The verdict of several variants: ``failed`` if any failed, ``passed`` or ``not run`` if all are, else
    ``partial``; None when none is recorded."""
    known = [status for status in statuses if status is not None]
    if not known:
        return None
    if 'failed' in known:
        return 'failed'
    for status in ('passed', 'not run'):
        if all(s == status for s in known):
            return status
    return 'partial'


def passed_flag(status: Optional[str]) -> Optional[bool]:
    """The older ``passed`` flag of a verdict: true only when passed, false when failed, null otherwise."""
    return {'passed': True, 'failed': False}.get(status)


#: Field metadata: the key is written only when the value is not None.
_UNLESS_NONE = {'written': 'unless none'}
#: Field metadata: not a key of the JSON layout.
_NOT_WRITTEN = {'written': 'never'}


def _plain(value: Any) -> Any:
    """`value` as JSON data: records as their `to_dict`, containers copied."""
    if isinstance(value, _Record):
        return value.to_dict()
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    return value


class _Record:
    """A dataclass that writes its fields as JSON keys, in field order (see the field metadata above)."""

    def to_dict(self) -> Dict[str, Any]:
        """The JSON layout of this record."""
        data = {}
        for f in fields(self):
            value, written = getattr(self, f.name), f.metadata.get('written')
            if written == 'never' or (written == 'unless none' and value is None):
                continue
            data[f.name] = _plain(value)
        return data


def _object(value: Any, what: str) -> Mapping[str, Any]:
    """`value`, which must be a JSON object."""
    if not isinstance(value, Mapping):
        raise ValueError(f'{what} must be a JSON object, got {value!r}.')
    return value


def _name(data: Mapping[str, Any], key: str, what: str) -> str:
    """The required string `data[key]`."""
    value = data.get(key)
    if not isinstance(value, str):
        raise ValueError(f'The "{key}" of {what} must be a string, got {value!r}.')
    return value


def _accuracy(data: Mapping[str, Any], key: str, what: str) -> Optional[float]:
    """The reported number `data[key]` (None when missing or null); anything else is an error naming it."""
    value = data.get(key)
    if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float))):
        raise ValueError(f'{what} must be a number, got {value!r}.')
    return value


def _required_accuracy(data: Mapping[str, Any], key: str, what: str) -> float:
    """The reported number `data[key]`, which must be there."""
    value = _accuracy(data, key, what)
    if value is None:
        raise ValueError(f'{what} is missing (no "{key}").')
    return value


def _text(data: Mapping[str, Any], key: str) -> Optional[str]:
    """The optional string `data[key]` (None when missing or not a string); so are the readers below, by type."""
    value = data.get(key)
    return value if isinstance(value, str) else None


def _integer(data: Mapping[str, Any], key: str) -> Optional[int]:
    value = data.get(key)
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _real(data: Mapping[str, Any], key: str) -> Optional[float]:
    value = data.get(key)
    return value if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def _flag(data: Mapping[str, Any], key: str) -> Optional[bool]:
    value = data.get(key)
    return value if isinstance(value, bool) else None


def _dict(data: Mapping[str, Any], key: str) -> Dict[str, Any]:
    """A copy of the optional object `data[key]` (empty when missing or not an object); `_list` likewise."""
    value = data.get(key)
    return dict(value) if isinstance(value, Mapping) else {}


def _list(data: Mapping[str, Any], key: str) -> List[Any]:
    value = data.get(key)
    return list(value) if isinstance(value, list) else []


def _objects(data: Mapping[str, Any], key: str) -> List[Mapping[str, Any]]:
    """The JSON objects of the list `data[key]` (other entries are not records of anything)."""
    return [entry for entry in _list(data, key) if isinstance(entry, Mapping)]


@dataclass(kw_only=True)
class ProtocolInfo(_Record):
    """The protocol that ran, as `Protocol.to_dict` describes it.

    Attributes:
        name: Protocol name (``xie2020``, ``custom`` for an attack list).
        description: What it runs.
        reference: Where it comes from.
        aggregation: ``independent`` (every attack sees every image) or ``cascade``.
        worst_case: Whether a per-sample worst case over the attacks is reported.
        headline: What the robust accuracy is: an attack's protocol label, ``worst-case``, ``mean``, ``last`` or
            ``clean``.
        metrics: Robustness metrics it computes.
        reduced: Whether its budgets were shrunk for a smoke test (``--reduced``, ``--max-steps``, ...).
        attacks: Each attack's description (`AttackSpec.to_dict`), as recorded.
        dataset: The out-of-distribution set it runs on instead of the evaluation data, if any.
        ood: The further out-of-distribution sets it scores; None (and `dataset` not written) for a protocol that
            reads none, whose description stays as it was before such sets existed.
    """

    name: str
    description: Optional[str]
    reference: Optional[str]
    aggregation: Optional[str]
    worst_case: bool
    headline: Optional[str]
    metrics: List[str]
    reduced: bool
    attacks: List[Dict[str, Any]]
    dataset: Optional[str] = None
    ood: Optional[List[str]] = None

    def to_dict(self) -> Dict[str, Any]:
        data = super().to_dict()
        if self.ood is None:
            del data['dataset'], data['ood']
        return data

    @classmethod
    def from_dict(cls, data: Any) -> 'ProtocolInfo':
        data = _object(data, 'The "protocol"')
        ood = data.get('ood')
        return cls(name=_name(data, 'name', 'the protocol'), description=_text(data, 'description'),
                   reference=_text(data, 'reference'), aggregation=_text(data, 'aggregation'),
                   worst_case=_flag(data, 'worst_case') is True, headline=_text(data, 'headline'),
                   metrics=_list(data, 'metrics'), reduced=_flag(data, 'reduced') is True,
                   attacks=[dict(a) for a in _objects(data, 'attacks')], dataset=_text(data, 'dataset'),
                   ood=list(ood) if isinstance(ood, list) else None)


@dataclass(kw_only=True)
class AttackResult(_Record):
    """Accuracy under one attack (or noise, or a corruption) of one variant, named and sized by what ran.

    An attack has a norm and ε (`eps_scale` ``0-255``, `eps_rule` ``fixed``, ``sqrt_dim``, or ``std`` and
    ``std_sqrt_dim`` with the ε declared in units of the standardized input, `eps_standardized`, and the model's input
    std it was resolved with, `input_std`), its step (`step`, `step_rule`) and the iterate it is scored on
    (`iterate`); noise has instead a `noise` model: ``gaussian`` with
    `sigma` on `sigma_scale` and `clipped`, or ``imagenet-c`` with `corruption` and `severity`. Size fields that do not
    apply are None and not written. `describe` names the attack in one line, for every output.

    Attributes:
        label: The attack as it ran (``pgd-t-13`` when a reduced run shrank the protocol's ``pgd-t-2000``).
        protocol_label: The protocol's label for it.
        attack: Registered attack name.
        threat: ``white-box``, ``black-box`` or ``noise``.
        step: The size of every step on the 0-255 scale, after any rule (None: the attack has no fixed size, or
            results written before steps were recorded).
        step_rule: How it steps (`Attack.step_description`: ``sign step, max(1/255, ε/N)``, ``L2 step, ε/N``,
            ``adaptive step (from 2ε, halved at checkpoints)``); None in results written before it was recorded.
        iterate: ``best`` (per sample the first iterate that fools the model) or ``last``: what `accuracy` is on.
        steps: Iterations that ran (None for query-based attacks and noise).
        queries: Queries that ran, for a query-based attack.
        targeted: Whether it aimed at a target class.
        kwargs: The attack's arguments.
        samples: Samples scored.
        attacked: Samples attacked (the others were already broken).
        accuracy: Accuracy after the attack, in percent (in a cascade, the cumulative robust accuracy); for an
            iterative attack, on the best iterate (per sample the first iterate that fools the model).
        success_rate: Targeted attack-success rate over the attacked samples, in percent; None when none was.
        accuracy_last_iterate: Accuracy on the last iterate of the same run, the papers' convention (at or above
            `accuracy`); None unless the protocol scores it (`AttackSpec.last_iterate`).
        success_rate_last_iterate: The success rate on that last iterate, when both are reported.
        max_perturbation: Largest perturbation used, in the attack's norm on the 0-255 scale (not for noise).
        loss: Mean cross-entropy loss at the attack's results over every sample, all of them attacked; None unless
            the protocol records the loss (`Protocol.loss`).
        reports_success_rate: Whether the protocol asks for the success rate (only then is it written).
    """

    label: str
    protocol_label: Optional[str]
    attack: Optional[str]
    threat: Optional[str]
    norm: Optional[str] = field(default=None, metadata=_UNLESS_NONE)
    eps: Optional[float] = field(default=None, metadata=_UNLESS_NONE)
    eps_scale: Optional[str] = field(default=None, metadata=_UNLESS_NONE)
    eps_rule: Optional[str] = field(default=None, metadata=_UNLESS_NONE)
    eps_standardized: Optional[float] = field(default=None, metadata=_UNLESS_NONE)
    input_std: Optional[float] = field(default=None, metadata=_UNLESS_NONE)
    step: Optional[float] = field(default=None, metadata=_UNLESS_NONE)
    step_rule: Optional[str] = field(default=None, metadata=_UNLESS_NONE)
    iterate: Optional[str] = field(default=None, metadata=_UNLESS_NONE)
    noise: Optional[str] = field(default=None, metadata=_UNLESS_NONE)
    sigma: Optional[float] = field(default=None, metadata=_UNLESS_NONE)
    sigma_scale: Optional[str] = field(default=None, metadata=_UNLESS_NONE)
    clipped: Optional[bool] = field(default=None, metadata=_UNLESS_NONE)
    corruption: Optional[str] = field(default=None, metadata=_UNLESS_NONE)
    severity: Optional[int] = field(default=None, metadata=_UNLESS_NONE)
    steps: Optional[int]
    queries: Optional[int]
    targeted: Optional[bool]
    kwargs: Dict[str, Any]
    samples: Optional[int]
    attacked: Optional[int]
    accuracy: float
    success_rate: Optional[float] = None
    accuracy_last_iterate: Optional[float] = field(default=None, metadata=_UNLESS_NONE)
    success_rate_last_iterate: Optional[float] = field(default=None, metadata=_UNLESS_NONE)
    max_perturbation: Optional[float] = field(default=None, metadata=_UNLESS_NONE)
    loss: Optional[float] = field(default=None, metadata=_UNLESS_NONE)
    reports_success_rate: bool = field(default=False, metadata=_NOT_WRITTEN)

    def to_dict(self) -> Dict[str, Any]:
        data = super().to_dict()
        if not self.reports_success_rate:
            del data['success_rate']
        return data

    def describe(self, reduced: bool = False) -> str:
        """The attack as it ran, in one line (`describe.describe_attack`): ``PGD-20 L∞, ε = 8/255, α = 2/255 (sign
        step), untargeted, best iterate``, and ``reduced`` when the protocol was (`reduced`); noise as what it is
        (``gaussian noise, σ = 0.5 on the normalized scale``, ``imagenet-c fog, severity 3``)."""
        if self.threat == 'noise':
            if self.sigma is not None:
                what = f'{self.noise} noise, σ = {self.sigma:g}' + (f' on the {self.sigma_scale} scale'
                                                                    if self.sigma_scale else '')
            elif self.corruption is not None:
                what = f'{self.noise} {self.corruption}, severity {self.severity}'
            else:
                what = self.attack or self.label
            return what + (', reduced' if reduced else '')
        targeted = True if 'n_target_classes' in self.kwargs else self.targeted  # APGD-T, FAB-T
        return describe_attack(
            attack=self.attack, label=self.label, norm=self.norm, eps=self.eps, step=self.step,
            step_rule=self.step_rule, iterations=self.steps, queries=self.queries, targeted=targeted,
            iterate=self.iterate, reduced=reduced,
            eps_note=eps_rule_note(self.eps_rule),
            standardized=standardized_phrase(self.eps_rule, self.eps_standardized, self.input_std),
            random_start=False if self.kwargs.get('random_start') is False else None)

    @classmethod
    def from_dict(cls, data: Any, variant: str = '') -> 'AttackResult':
        where = f' of variant {variant}' if variant else ''
        data = _object(data, f'An attack{where}')
        label = _name(data, 'label', f'an attack{where}')
        return cls(label=label, protocol_label=_text(data, 'protocol_label'), attack=_text(data, 'attack'),
                   threat=_text(data, 'threat'), norm=_text(data, 'norm'), eps=_real(data, 'eps'),
                   eps_scale=_text(data, 'eps_scale'), eps_rule=_text(data, 'eps_rule'),
                   eps_standardized=_real(data, 'eps_standardized'), input_std=_real(data, 'input_std'),
                   step=_real(data, 'step'),
                   step_rule=_text(data, 'step_rule'), iterate=_text(data, 'iterate'), noise=_text(data, 'noise'),
                   sigma=_real(data, 'sigma'), sigma_scale=_text(data, 'sigma_scale'), clipped=_flag(data, 'clipped'),
                   corruption=_text(data, 'corruption'), severity=_integer(data, 'severity'),
                   steps=_integer(data, 'steps'), queries=_integer(data, 'queries'), targeted=_flag(data, 'targeted'),
                   kwargs=_dict(data, 'kwargs'), samples=_integer(data, 'samples'),
                   attacked=_integer(data, 'attacked'),
                   accuracy=_required_accuracy(data, 'accuracy', f'The accuracy of {label}{where}'),
                   success_rate=_accuracy(data, 'success_rate', f'The success rate of {label}{where}'),
                   accuracy_last_iterate=_accuracy(data, 'accuracy_last_iterate',
                                                   f'The last-iterate accuracy of {label}{where}'),
                   success_rate_last_iterate=_accuracy(data, 'success_rate_last_iterate',
                                                       f'The last-iterate success rate of {label}{where}'),
                   max_perturbation=_real(data, 'max_perturbation'), loss=_real(data, 'loss'),
                   reports_success_rate='success_rate' in data)


@dataclass(kw_only=True)
class OODAccuracy(_Record):
    """Clean accuracy (percent) on a further out-of-distribution set of the protocol, and its sample count."""

    accuracy: Optional[float]
    samples: Optional[int]

    @classmethod
    def from_dict(cls, data: Any) -> 'OODAccuracy':
        data = _object(data, 'An out-of-distribution accuracy')
        return cls(accuracy=_real(data, 'accuracy'), samples=_integer(data, 'samples'))


@dataclass(kw_only=True)
class EpsPoint(_Record):
    """Accuracy (percent) of the sanity probe's PGD at one ε (0-255 scale; 0: the clean accuracy of its samples)."""

    eps: Optional[float]
    accuracy: Optional[float]

    @classmethod
    def from_dict(cls, data: Any) -> 'EpsPoint':
        data = _object(data, 'A point of the eps sweep')
        return cls(eps=_real(data, 'eps'), accuracy=_real(data, 'accuracy'))


@dataclass(kw_only=True)
class SanityProbe(_Record):
    """What the sanity probes ran (`plan.SanityPlan`).

    Attributes:
        samples: Samples they ran on (the subset's first).
        attack: The probe's attack (``pgd``).
        norm: Its norm (``linf``).
        random_start: Whether it starts at a random point (no: from the clean image).
        steps: Iterations of the ε-sweep.
        more_steps: Iterations of the iteration check.
        eps: The budget the probes center on (0-255 scale).
        sweep_eps: The ε of the sweep.
        blackbox_queries: Queries of the black-box probe, when one ran.
        reduced: Whether the probes were shrunk for a smoke test.
        step: The sweep's step at `eps` (0-255 scale); at every ε it is `step_rule`'s (None in older results).
        step_rule: How the probes step (``sign step, 2.5ε/N``).
        mode: How they were sized: ``budget`` (at most a share of the attacks' cost) or ``full``; None in older files.
        not_run: The probes the budget could not fit (``blackbox``, ``iterations``, ...).
    """

    samples: Optional[int]
    attack: Optional[str]
    norm: Optional[str]
    random_start: Optional[bool]
    steps: Optional[int]
    more_steps: Optional[int]
    eps: Optional[float]
    sweep_eps: List[float]
    blackbox_queries: Optional[int]
    reduced: bool
    step: Optional[float] = field(default=None, metadata=_UNLESS_NONE)
    step_rule: Optional[str] = field(default=None, metadata=_UNLESS_NONE)
    mode: Optional[str] = None
    not_run: List[str] = field(default_factory=list)

    def describe(self) -> str:
        """The ε-sweep's attack in one line (`describe.describe_attack`): ``PGD-10 L∞, ε = 8/255, α = 2/255 (sign
        step, 2.5ε/N), from the clean input, untargeted, best iterate``, ε being the one the probes center on."""
        return describe_attack(attack=self.attack, label='sanity probe', norm=self.norm, eps=self.eps, step=self.step,
                               step_rule=self.step_rule, iterations=self.steps, targeted=False, iterate='best',
                               reduced=self.reduced, random_start=self.random_start)

    @classmethod
    def from_dict(cls, data: Any) -> 'SanityProbe':
        data = _object(data, 'The "sanity_probe"')
        return cls(samples=_integer(data, 'samples'), attack=_text(data, 'attack'), norm=_text(data, 'norm'),
                   random_start=_flag(data, 'random_start'), steps=_integer(data, 'steps'),
                   more_steps=_integer(data, 'more_steps'), eps=_real(data, 'eps'), sweep_eps=_list(data, 'sweep_eps'),
                   blackbox_queries=_integer(data, 'blackbox_queries'), reduced=_flag(data, 'reduced') is True,
                   step=_real(data, 'step'), step_rule=_text(data, 'step_rule'), mode=_text(data, 'mode'),
                   not_run=[str(name) for name in _list(data, 'not_run')])


@dataclass
class SanityCheck(_Record):
    """Outcome of one sanity check (`sanity.run_sanity_checks`).

    Attributes:
        name: The check (``accuracy_falls_to_zero``, ...).
        status: ``pass``, ``fail`` or ``skip`` (not run: its message says why).
        message: What it found, for a reader.
        details: Its numbers.
        samples: Samples it judged (the fewest of its comparisons); None when it did not run.
    """

    name: str
    status: str
    message: str
    details: Dict[str, Any] = field(default_factory=dict)
    samples: Optional[int] = field(default=None, metadata=_UNLESS_NONE)

    @classmethod
    def from_dict(cls, data: Any) -> 'SanityCheck':
        data = _object(data, 'A sanity check')
        return cls(name=_name(data, 'name', 'a sanity check'), status=_text(data, 'status') or '',
                   message=_text(data, 'message') or '', details=_dict(data, 'details'),
                   samples=_integer(data, 'samples'))


@dataclass(kw_only=True)
class SanityResult(_Record):
    """The sanity checks of one variant and their verdict.

    Attributes:
        status: The verdict (`SANITY_STATUSES`).
        passed: True when every check ran and passed, False when one failed, None otherwise (older files: whether
            none failed; their `status` is read off their checks).
        failed: Names of the failed checks.
        masked_gradients_suspected: Whether a failed check points at gradient masking (`sanity.MASKING_CHECKS`).
        checks: Every check.
    """

    status: Optional[str] = None
    passed: Optional[bool]
    failed: List[str]
    masked_gradients_suspected: Optional[bool]
    checks: List[SanityCheck]

    @classmethod
    def from_dict(cls, data: Any, probes_ran: bool = True) -> 'SanityResult':
        """Read a variant's ``sanity``; `probes_ran` (whether the variant records a ``sanity_probe``) gives the
        status of an older file that recorded none."""
        data = _object(data, 'A variant\'s "sanity"')
        checks = [SanityCheck.from_dict(check) for check in _objects(data, 'checks')]
        status = _text(data, 'status')
        if status not in SANITY_STATUSES:
            status = sanity_status([check.status for check in checks], probes_ran) if checks else None
        return cls(status=status, passed=passed_flag(status) if status else _flag(data, 'passed'),
                   failed=[str(name) for name in _list(data, 'failed')],
                   masked_gradients_suspected=_flag(data, 'masked_gradients_suspected'), checks=checks)


@dataclass(kw_only=True)
class VariantResult(_Record):
    """The reported numbers of one evaluated variant (`summary.summarize_variant`); accuracies in percent.

    Attributes:
        name: ``model``, ``clean``, ``adv``, ``mix@0.5``, ``logits@0.5``.
        kind: ``model``, ``clean``, ``adv``, ``mix`` or ``logits``.
        gamma: Weight of the adversarial branch (None for a model without mixture BN).
        samples: Samples evaluated.
        clean: Clean accuracy.
        clean_loss: Mean clean cross-entropy loss, when the protocol records the loss (`Protocol.loss`).
        attacks: Per attack, in protocol order.
        worst_case: Per-sample worst case over the attacks, when the protocol reports it.
        robust: The protocol's headline robust accuracy (best iterates).
        robust_label: What `robust` is, as it ran (``worst-case``, ``mean``, or an attack's label).
        robust_last_iterate: The headline with the last PGD iterate in place of the best wherever the protocol
            scores it: the papers' convention; None (not written) for protocols that do not.
        ood: Clean accuracy on each further out-of-distribution set of the protocol.
        scores: The protocol's accuracies side by side, as the papers' tables give them.
        metrics: Mean, median, standard deviation and sample count of each per-sample robustness metric.
        eps_sweep: The sanity probe's accuracy over ε, from ε = 0.
        sanity_probe: What the sanity probes ran (None when disabled).
        corruption_errors: CE per ImageNet-C corruption and mCE (``ce``, ``mce``, ``baseline``) with the full suite.
        sanity: Its sanity checks (None until checked).
    """

    name: str
    kind: Optional[str]
    gamma: Optional[float]
    samples: Optional[int]
    clean: Optional[float]
    clean_loss: Optional[float] = field(default=None, metadata=_UNLESS_NONE)
    attacks: List[AttackResult]
    worst_case: Optional[float]
    robust: Optional[float]
    robust_label: Optional[str]
    robust_last_iterate: Optional[float] = field(default=None, metadata=_UNLESS_NONE)
    ood: Dict[str, OODAccuracy]
    scores: Dict[str, Optional[float]]
    metrics: Dict[str, Dict[str, float]]
    eps_sweep: List[EpsPoint]
    sanity_probe: Optional[SanityProbe]
    corruption_errors: Optional[Dict[str, Any]]
    sanity: Optional[SanityResult] = None

    @classmethod
    def from_dict(cls, data: Any) -> 'VariantResult':
        data = _object(data, 'A variant')
        name = _name(data, 'name', 'a variant')
        ood, probe, sanity = _dict(data, 'ood'), data.get('sanity_probe'), data.get('sanity')
        return cls(name=name, kind=_text(data, 'kind'), gamma=_real(data, 'gamma'), samples=_integer(data, 'samples'),
                   clean=_accuracy(data, 'clean', f'The clean accuracy of {name}'),
                   clean_loss=_real(data, 'clean_loss'),
                   attacks=[AttackResult.from_dict(attack, name) for attack in _list(data, 'attacks')],
                   worst_case=_accuracy(data, 'worst_case', f'The worst case of {name}'),
                   robust=_accuracy(data, 'robust', f'The robust accuracy of {name}'),
                   robust_label=_text(data, 'robust_label'),
                   robust_last_iterate=_accuracy(data, 'robust_last_iterate',
                                                 f'The last-iterate robust accuracy of {name}'),
                   ood={set_name: OODAccuracy.from_dict(entry) for set_name, entry in ood.items()},
                   scores=_dict(data, 'scores'), metrics=_dict(data, 'metrics'),
                   eps_sweep=[EpsPoint.from_dict(point) for point in _objects(data, 'eps_sweep')],
                   sanity_probe=SanityProbe.from_dict(probe) if isinstance(probe, Mapping) else None,
                   corruption_errors=_dict(data, 'corruption_errors') or None,
                   sanity=SanityResult.from_dict(sanity, isinstance(probe, Mapping))
                   if isinstance(sanity, Mapping) else None)


@dataclass(kw_only=True)
class AmpComparison(_Record):
    """One stage of the AMP check: low precision against fp32 on the same samples (percent)."""

    stage: str
    label: Optional[str]
    accuracy_low: Optional[float]
    accuracy_fp32: Optional[float]
    prediction_agreement: Optional[float]
    ok: Optional[bool]

    @classmethod
    def from_dict(cls, data: Any) -> 'AmpComparison':
        data = _object(data, 'An AMP comparison')
        return cls(stage=_name(data, 'stage', 'an AMP comparison'), label=_text(data, 'label'),
                   accuracy_low=_real(data, 'accuracy_low'), accuracy_fp32=_real(data, 'accuracy_fp32'),
                   prediction_agreement=_real(data, 'prediction_agreement'), ok=_flag(data, 'ok'))


@dataclass(kw_only=True)
class AmpCheck(_Record):
    """The low-precision evaluation checked against fp32 (``--verify-amp``).

    Attributes:
        samples: Samples compared.
        tolerance: Largest accuracy difference that passes, in points.
        passed: Whether every comparison is within it.
        comparisons: Per checked stage.
    """

    samples: Optional[int]
    tolerance: Optional[float]
    passed: Optional[bool]
    comparisons: List[AmpComparison]

    @classmethod
    def from_dict(cls, data: Any) -> 'AmpCheck':
        data = _object(data, 'The "amp_check"')
        return cls(samples=_integer(data, 'samples'), tolerance=_real(data, 'tolerance'), passed=_flag(data, 'passed'),
                   comparisons=[AmpComparison.from_dict(c) for c in _objects(data, 'comparisons')])


@dataclass(kw_only=True)
class BNStats(_Record):
    """Clean vs adversarial BN statistics of a mixture-BN model.

    Attributes:
        layers: Per layer, how far apart the branches are (`bn_stats.summarize_bn_stats`).
        file: The file holding the per-channel statistics, next to the results (written with them).
    """

    layers: List[Dict[str, Any]]
    file: Optional[str] = field(default=None, metadata=_UNLESS_NONE)

    @classmethod
    def from_dict(cls, data: Any) -> 'BNStats':
        data = _object(data, 'The "bn_stats"')
        return cls(layers=[dict(layer) for layer in _objects(data, 'layers')], file=_text(data, 'file'))


@dataclass(kw_only=True)
class EvalResults(_Record):
    """Everything an evaluation reports, as its results file holds it; accuracies in percent.

    Attributes:
        warnings: Failed checks that void the numbers, worst first, for a reader to see before them.
        model: The evaluated architecture.
        checkpoint: The checkpoint as given (empty without one).
        weights_digest: SHA-256 of the evaluated weights (`timm_advnorm.weights.digest`): publishing checks that the
            results describe the weights it exports. None in results written before it was recorded.
        branch_weights_digests: For a mixture-BN model, the digest of each branch as a plain-BN model (what
            ``--branch`` exports); None (not written) for other models.
        dataset: The data set (the out-of-distribution set a protocol runs on, ``digits``, a timm name, ``folder``).
        split: Its split (None for an out-of-distribution set).
        num_samples: Images evaluated.
        subset: The named image list evaluated (``robustbench``), if any.
        skipped_images: Unreadable files skipped, as ``{file, error}``.
        seed: Seed of the subset, targets and attacks.
        ood_data: Each out-of-distribution set read: its description, sample count and skipped images.
        img_size: Input image size.
        data_config: The preprocessing used.
        preprocessing: Where it came from (``source``) and which options overrode it (``overridden``).
        protocol: The protocol that ran.
        amp: The autocast dtype of the forwards; None: float32.
        world_size: Processes the evaluation was sharded over.
        inference_branch: The mixture-BN branch the model loads on, if it has mixture BN.
        primary_variant: The variant of the headline numbers: the model as loaded.
        top1: Its clean accuracy.
        robust_top1: Its robust accuracy (the protocol's headline, on best iterates).
        robust_top1_last_iterate: Its robust accuracy on the last PGD iterate, the papers' convention
            (`VariantResult.robust_last_iterate`); None (not written) for protocols that do not score it.
        conventions: What the robust numbers are, for a reader of the file: written with the last-iterate numbers.
        sanity_passed: True when every check of every variant ran and passed, False when one failed, None otherwise
            (`sanity_status` says which).
        sanity_status: The verdict of every variant's sanity checks (`SANITY_STATUSES`); older files that lack it
            read it off their variants' checks.
        masked_gradients_suspected: Whether any variant is suspected of gradient masking.
        amp_check: The check of low precision against fp32, with ``--verify-amp``.
        variants: Per evaluated variant.
        bn_stats: Clean vs adversarial BN statistics, for a mixture-BN model.
        plan: What the evaluation was to cost before it ran (`cost.EvalCost.to_dict`): each stage's passes and share,
            the sanity probes' share of the attacks' cost, the time projected from the first batch.
        eval_seconds: Seconds spent evaluating.
        units_computed: Units of work computed (not read back from a state file).
        images_per_second: Images times variants per second of evaluation.
        total_seconds: Seconds of the whole run.
        robustbench_model_info: A ``robustbench`` result in the fields of RobustBench's model info (None otherwise).
        plots: The plot files written, with ``--plot-dir``.
    """

    warnings: List[str]
    model: str
    checkpoint: Optional[str]
    weights_digest: Optional[str] = None
    branch_weights_digests: Optional[Dict[str, str]] = field(default=None, metadata=_UNLESS_NONE)
    dataset: Optional[str]
    split: Optional[str]
    num_samples: Optional[int]
    subset: Optional[str]
    skipped_images: List[Dict[str, str]]
    seed: Optional[int]
    ood_data: Dict[str, Dict[str, Any]]
    img_size: Optional[int]
    data_config: Dict[str, Any]
    preprocessing: Dict[str, Any]
    protocol: ProtocolInfo
    amp: Optional[str]
    world_size: Optional[int]
    inference_branch: Optional[str]
    primary_variant: Optional[str]
    top1: Optional[float]
    robust_top1: Optional[float]
    robust_top1_last_iterate: Optional[float] = field(default=None, metadata=_UNLESS_NONE)
    conventions: Optional[Dict[str, str]] = field(default=None, metadata=_UNLESS_NONE)
    sanity_passed: Optional[bool]
    sanity_status: Optional[str] = None
    masked_gradients_suspected: Optional[bool]
    amp_check: Optional[AmpCheck]
    variants: List[VariantResult]
    bn_stats: Optional[BNStats]
    plan: Optional[Dict[str, Any]] = field(default=None, metadata=_UNLESS_NONE)
    eval_seconds: Optional[float]
    units_computed: Optional[int]
    images_per_second: Optional[float]
    total_seconds: Optional[float]
    robustbench_model_info: Optional[Dict[str, Any]]
    plots: Optional[List[str]] = field(default=None, metadata=_UNLESS_NONE)

    @classmethod
    def from_dict(cls, data: Any) -> 'EvalResults':
        """Read a results mapping (see the module docstring for what must be there).

        Raises:
            ValueError: A name or an accuracy is missing or of the wrong type; the message names it.
        """
        data = _object(data, 'Results')
        model = _name(data, 'model', 'the results')
        variants = data.get('variants')
        if not isinstance(variants, list):
            raise ValueError(f'The "variants" of the results must be a list, got {variants!r}.')
        amp_check, bn_stats, info = data.get('amp_check'), data.get('bn_stats'), data.get('robustbench_model_info')
        plots = data.get('plots')
        variants = [VariantResult.from_dict(variant) for variant in variants]
        status = _text(data, 'sanity_status')
        if status not in SANITY_STATUSES:  # an older file: its variants' checks say what ran
            status = combined_sanity_status([v.sanity.status for v in variants if v.sanity is not None])
        return cls(
            warnings=[str(line) for line in _list(data, 'warnings')], model=model,
            checkpoint=_text(data, 'checkpoint'), weights_digest=_text(data, 'weights_digest'),
            branch_weights_digests={str(k): str(v) for k, v in _dict(data, 'branch_weights_digests').items()} or None,
            dataset=_text(data, 'dataset'), split=_text(data, 'split'),
            num_samples=_integer(data, 'num_samples'), subset=_text(data, 'subset'),
            skipped_images=[dict(entry) for entry in _objects(data, 'skipped_images')], seed=_integer(data, 'seed'),
            ood_data=_dict(data, 'ood_data'), img_size=_integer(data, 'img_size'),
            data_config=_dict(data, 'data_config'), preprocessing=_dict(data, 'preprocessing'),
            protocol=ProtocolInfo.from_dict(data.get('protocol')), amp=_text(data, 'amp'),
            world_size=_integer(data, 'world_size'), inference_branch=_text(data, 'inference_branch'),
            primary_variant=_text(data, 'primary_variant'), top1=_accuracy(data, 'top1', 'The "top1"'),
            robust_top1=_accuracy(data, 'robust_top1', 'The "robust_top1"'),
            robust_top1_last_iterate=_accuracy(data, 'robust_top1_last_iterate', 'The "robust_top1_last_iterate"'),
            conventions={str(k): str(v) for k, v in _dict(data, 'conventions').items()} or None,
            sanity_passed=passed_flag(status) if status else _flag(data, 'sanity_passed'), sanity_status=status,
            masked_gradients_suspected=_flag(data, 'masked_gradients_suspected'),
            amp_check=AmpCheck.from_dict(amp_check) if isinstance(amp_check, Mapping) else None,
            variants=variants, bn_stats=BNStats.from_dict(bn_stats) if isinstance(bn_stats, Mapping) else None,
            plan=_dict(data, 'plan') or None,
            eval_seconds=_real(data, 'eval_seconds'), units_computed=_integer(data, 'units_computed'),
            images_per_second=_real(data, 'images_per_second'), total_seconds=_real(data, 'total_seconds'),
            robustbench_model_info=dict(info) if isinstance(info, Mapping) else None,
            plots=[str(name) for name in plots] if isinstance(plots, list) else None)



def _probe_text(probe: SanityProbe) -> str:
    """What the sanity probes ran, in one clause (``probes (--sanity budget) on 16 samples: PGD-7 ...``)."""
    mode = f' (--sanity {probe.mode})' if probe.mode else ''
    ran = []
    if probe.sweep_eps:
        sweep = ', '.join(f'{eps:g}' for eps in probe.sweep_eps)
        ran.append(f'untargeted PGD-{probe.steps} from the clean image at ε {sweep}/255')
    if probe.more_steps:
        ran.append(f'PGD-{probe.more_steps} at ε {probe.eps:g}/255')
    if probe.blackbox_queries:
        ran.append(f'Square with {probe.blackbox_queries} queries at ε {probe.eps:g}/255')
    return f"probes{mode} on {probe.samples} samples" + (f": {', '.join(ran)}" if ran else '')


def sanity_text(results: EvalResults) -> Optional[str]:
    """The verdict of the sanity checks in one line, for the console and the model card: the status, how many checks
    ran, which failed (on which variant), which did not run and why, and what the probes ran on; None when the
    results record no checks."""
    checked = [v for v in results.variants if v.sanity is not None and v.sanity.checks]
    if not checked:
        return None
    checks = [check for v in checked for check in v.sanity.checks]
    names = list(dict.fromkeys(check.name for check in checks))
    ran = {check.name for check in checks if check.status in ('pass', 'fail')}
    parts = [f'{results.sanity_status}: {len(ran)} of {len(names)} checks ran']
    failed: Dict[str, List[str]] = {}  # the failed checks, and the variants each failed on
    for v in checked:
        for name in v.sanity.failed:
            failed.setdefault(name, []).append(v.name)
    if failed:
        parts.append('failed: ' + '; '.join(f"{name} on {', '.join(variants)}" for name, variants in failed.items()))
    reasons: Dict[str, List[str]] = {}
    for check in checks:
        if check.status not in ('pass', 'fail') and check.name not in ran:
            reason = check.message.removeprefix('not run: ')
            if check.name not in reasons.setdefault(reason, []):
                reasons[reason].append(check.name)
    parts += [f"not run: {', '.join(skipped)} ({reason})" for reason, skipped in reasons.items()]
    probe = next((v.sanity_probe for v in checked if v.sanity_probe is not None), None)
    if probe is not None and probe.samples:
        parts.append(_probe_text(probe))
    return '; '.join(parts)

def read_results(path: Union[str, Path]) -> EvalResults:
    """Read a ``validate_adv.py`` results file.

    Raises:
        FileNotFoundError: No such file.
        ValueError: Not JSON, or not results (the message names the file and the field).
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f'Results file not found: {path}')
    text = read_utf8(path)
    try:
        return EvalResults.from_dict(json.loads(text))
    except json.JSONDecodeError as e:
        raise ValueError(f'{path} is not JSON: {e}') from None
    except ValueError as e:
        raise ValueError(f'{path}: {e}') from None
