"""Named, fixed evaluation protocols: which attacks, at which budgets, reported how.

A protocol is data, not code: a tuple of `AttackSpec` (a registered attack's frozen, typed configuration, its
``Config``, and its budget) and how the suite is reported, as AutoAttack holds its configured components; the input
space is bound when the attack runs, from the model (`create_spec_attack`). The budgets are the papers'; tests shrink
them with `reduce_protocol`, users override them with `override_protocol` (both `dataclasses.replace`), and both
record what actually ran: the spec's configuration holds the budget that runs, and a
label that names another budget (``pgd-t-2000`` reduced to 13 iterations) is kept as the stage key while
`AttackSpec.run_label` (``pgd-t-13``) names what ran in results.

* ``xie2020``: Xie & Yuille, *Intriguing properties of adversarial training at scale* (ICLR 2020), §3: targeted PGD,
  L∞ ε=16, step 1 with their code's ``max(step, ε/N)`` rule, random start, N = 10, 20, 100, 500, 2000 (Table 7);
  accuracy and targeted attack-success rate, on the best iterate and, as the paper reports them, the last one.
* ``robustbench``: AutoAttack "standard" (Croce & Hein, ICML 2020) at L∞ ε=4/255, RobustBench's ImageNet budget:
  APGD-CE (100 iterations, 1 restart), APGD-T (100 iterations, 9 target classes), FAB-T (9 target classes), Square
  (5000 queries), run as a cascade on the points still robust; the last stage is the AutoAttack accuracy.
* ``nofrost``: Wang et al., *Removing batch normalization boosts adversarial training* (ICML 2022), §4.1: L∞ ε=8,
  20 iterations for every white-box attack with their code's step ``min(1.25ε, ε+4)/N``, 400 queries for Square;
  PGD, APGD-CE, APGD-DLR, MI-FGSM, CW-L∞ (confidence 50), Square; reported per attack and as the per-sample worst
  case, plus the §4.3 robustness metrics; PGD also on its last iterate, as the paper reports it.
* ``galloway``: Galloway et al., *Batch normalization is a cause of adversarial vulnerability* (2019), §3: additive
  Gaussian noise of variance 1/4 on the standardized input, BIM-L∞ with ε∞=0.03 and BIM-L2 with ε2 = ε∞·√d, 20
  iterations of step ε/20; budgets in units of the standardized input, as the noise (the paper normalizes every data
  set to zero mean and unit variance): ε∞ = 0.03 × the model's std (1.73/255 with ImageNet's std).
* ``galloway-mnist``: Galloway et al.'s MNIST models (§4, Tables 6, 7, 11 and 12): Gaussian noise of the clean
  digits' std (σ = 1 on the standardized input), drawn on the 28×28 digit, one value per pixel, upscaled by nearest
  neighbour to the input's side (footnote 5) and not clipped; BIM-L∞ with ε∞ = 0.1 and 0.05, 100 iterations of step
  1e-3; FGSM (one step of ε, no random start: the optimal L∞ attack of a linear model, Table 11) at ε∞ = 0.05 and
  0.1. The budgets and steps are read on the [-1, 1] input scale (`GALLOWAY_MNIST_UNIT`: ε∞ = 0.1 is 12.75/255): the
  paper names no scale for them, and on the standardized input (ε∞ = 0.1 is 7.857/255) even the optimal attack on
  its linear model leaves far more digits classified than Table 11 reports, while its models are reproduced
  (clean accuracy and loss, noise accuracy) by its own recipe.
* ``corruptions``: the 15 ImageNet-C corruptions (Hendrycks & Dietterich, ICLR 2019) at severities 1-5, applied on
  the fly; reported per corruption and as the mean corruption accuracy.
* ``imagenet-r``, ``imagenet-a``, ``imagenet-sketch``: clean accuracy on that out-of-distribution set, read from its
  own folder (`ood`); an ImageNet model is scored on the 200 classes of ImageNet-R and ImageNet-A only.
* ``nofrost-star``: Wang et al.'s NoFrost* evaluation (ICML 2022, §4.4, Figures 3 and 4): clean accuracy on the
  evaluation data (ImageNet's validation set), the mean accuracy under the ImageNet-C corruptions (applied on the
  fly, as ``corruptions``), clean accuracy on ImageNet-R and ImageNet-Sketch, and PGD and Square at ``nofrost``'s
  budgets (§4.1: L∞ ε=8, 20 iterations, 400 queries); its headline is the PGD accuracy (the paper names none).

A protocol spans data sets through `Protocol.dataset` and `Protocol.ood`: its clean pass and attacks run on the
evaluation data, or on the out-of-distribution set `dataset` names, and every set of `ood` adds its clean accuracy,
each read from its own folder.

Best and last iterate: every evaluation PGD reports, per sample, the first iterate that fools the model (the best
iterate: the stronger attack, so our accuracies are at or below the papers'). The papers' released code reports the
last iterate; an `AttackSpec` with ``last_iterate`` scores it too, from the same run and start, so that the numbers
compare with the papers' tables. That run attacks every sample to its last iteration (a best-iterate run stops
attacking the samples it fooled): on a robust model, where few samples are fooled, it costs about the same.

Budgets are on the 0-255 pixel scale (`timm_advnorm.attacks.space`): ε = k means k/255 on the [0, 1] scale, for L∞
and L2 alike (an L2 budget is the Euclidean norm of the perturbation in 0-255 units, the [0, 1]-scale norm times 255;
Galloway's ε2 = ε∞·√d is that too once `resolve_eps` applied the rule).

Budgets in units of the standardized input (`AttackSpec.eps_rule` ``std`` and ``std_sqrt_dim``, Galloway et al.'s):
a spec declares ε and its step as multiples of the model's input std, and `resolve_protocol` turns them into 0-255
budgets from the evaluated model's own normalization, once, before anything reads them (the evaluation does it as it
builds the protocol, before the overrides: ``--eps`` and ``--step`` stay on the 0-255 scale). The unit is one
number, `scalar_std` × 255: the attacks take one ε for every channel, so a model whose channels have different stds
(ImageNet's 0.229, 0.224, 0.225) gets the budget of their mean, 0.226 (ε∞ = 0.03: 1.73/255); a model whose channels
share one std (MNIST's grey digits, 0.3081) gets exactly ε × std (ε∞ = 0.1: 7.857/255).
"""
import math
from dataclasses import dataclass, replace
from typing import Any, Dict, List, Mapping, NamedTuple, Optional, Sequence, Tuple

from ...attacks.apgd import APGDCE, APGDDLR, APGDT
from ...attacks.base import DEFAULT_EPS, Attack, AttackConfig
from ...attacks.bim import GALLOWAY_EPS, BIML2, BIMLinf, galloway_l2_eps
from ...attacks.corruptions import IMAGENET_C_CORRUPTIONS, SEVERITIES, Corruption
from ...attacks.cw import CWLinf
from ...attacks.fab import FABT
from ...attacks.fgsm import FGSM
from ...attacks.mifgsm import MIFGSM
from ...attacks.noise import GaussianNoise
from ...attacks.pgd import PGD
from ...attacks.registry import attack_class, attack_config, list_attacks
from ...attacks.space import PIXEL_SCALE, InputSpace, PixelBudget, check_budget_scale
from ...attacks.square import Square
from ...registry import Registry
from .ood import OOD_DATASETS, get_ood_dataset

__all__ = [
    'AttackSpec', 'Protocol', 'PROTOCOLS', 'AGGREGATIONS', 'THREATS', 'get_protocol', 'list_protocols',
    'register_protocol', 'unregister_protocol',
    'protocol_from_attacks', 'override_protocol', 'reduce_protocol', 'resolve_eps', 'HEADLINES', 'budget_label',
    'Stepping', 'stepping', 'resolve_protocol', 'EPS_RULES', 'GALLOWAY_MNIST_UNIT',
    'STANDARDIZED_RULES', 'SQRT_DIM_RULES', 'check_resolved', 'scalar_std', 'with_paper_budgets', 'create_spec_attack',
]

AGGREGATIONS = ('independent', 'cascade')
THREATS = ('white-box', 'black-box', 'noise')
STEP_KEYS = ('steps',)
QUERY_KEYS = ('n_queries',)
EPS_RULES = ('fixed', 'sqrt_dim', 'std', 'std_sqrt_dim')
#: Rules whose ε (and step) a spec declares in units of the standardized input (`resolve_protocol`).
STANDARDIZED_RULES = ('std', 'std_sqrt_dim')
#: Rules that scale ε by √d when the attack is built (`resolve_eps`).
SQRT_DIM_RULES = ('sqrt_dim', 'std_sqrt_dim')
#: The rule a spec keeps when an override states its ε on the 0-255 scale.
_PIXEL_RULES = {'std': 'fixed', 'std_sqrt_dim': 'sqrt_dim'}

HEADLINES = ('worst-case', 'last', 'mean', 'clean')
#: One unit of the ``galloway-mnist`` budgets on the 0-255 scale: Galloway et al.'s MNIST ε and steps read on the
#: [-1, 1] input scale (half the pixel range), where their linear model's Table 11 accuracy under the optimal attack
#: is reached (see the module docstring).
GALLOWAY_MNIST_UNIT = PIXEL_SCALE / 2


def budget_label(name: str, budget: int) -> str:
    """The label of attack `name` run with `budget` iterations or queries: ``name-N`` (``pgd-t-2000``, ``pgd-20``).

    The one convention for labels that carry a budget: the papers' sweeps (`xie2020`), ``--steps`` sweeps of an
    attack list, and `AttackSpec.run_label` after a budget changed.
    """
    return f'{name}-{budget}'


@dataclass(frozen=True)
class AttackSpec:
    """One attack of a protocol: a registered attack's configuration and its budget.

    Args:
        label: Unique name of the attack in the results (``pgd-t-2000``).
        config: The attack's frozen configuration (``PGD.Config.of(steps=20, step=1.0)``, or by registered name
            `attacks.registry.attack_config`): its options, but the input space and budget, which are bound when it
            runs; the options it states are recorded in results (``kwargs``).
        eps: Budget on the 0-255 scale (L2: pixel-scale norm times 255); with ``eps_rule='sqrt_dim'`` the L∞-like
            budget that `resolve_eps` scales by √d. With a standardized rule (``std``, ``std_sqrt_dim``), in units of
            the standardized input until `resolve_protocol` resolved it, on the 0-255 scale after.
        threat: ``white-box`` (gradient-based), ``black-box`` (queries only) or ``noise`` (no adversary); sanity
            checks compare them. None (the default): the attack's own (`Attack.threat`), which a spec states only
            where it differs.
        eps_rule: How ε is set (`EPS_RULES`): ``fixed``; ``sqrt_dim`` (Galloway et al.: ε2 = ε∞·√d, d the input
            dimension); ``std``: ε and the configured ``step`` in units of the standardized input, resolved from the
            evaluated model's std (`resolve_protocol`); ``std_sqrt_dim``: both, ε∞ in standardized units.
        step_rule: Optional rule recomputing the configured ``step`` from ε and ``steps`` whenever they change
            (see `STEP_RULES`); ``None`` keeps the given step.
        success_rate: Report the targeted attack-success rate (fraction classified as the target).
        label_budget: The iterations or queries `label` stands for, set by `reduce_protocol` and `override_protocol`
            when the budget that runs differs (``None``: the label names the budget that runs); see `run_label`.
        last_iterate: Also score the last iterate of the same run (an attack that can: `Attack.scores_last_iterate`,
            PGD and FGSM), the papers' convention, beside the best iterate every evaluation attack reports.
        eps_standardized: The ε a standardized rule declared (in units of the standardized input; ε∞ for
            ``std_sqrt_dim``), set by `resolve_protocol` with `input_std`; None before, and for the other rules.
        input_std: The model's input std the budget was resolved with (`scalar_std`: the std its channels share,
            else their mean, on the [0, 1] scale); None while unresolved, and for the other rules.
    """

    label: str
    config: AttackConfig
    eps: float
    threat: Optional[str] = None
    eps_rule: str = 'fixed'
    step_rule: Optional[str] = None
    success_rate: bool = False
    label_budget: Optional[int] = None
    last_iterate: bool = False
    eps_standardized: Optional[float] = None
    input_std: Optional[float] = None

    def __post_init__(self):
        if not isinstance(self.config, AttackConfig) or self.config.attack_class.name is None:
            raise TypeError(f'{self.label}: config must be the configuration of a registered attack '
                            f"(PGD.Config.of(steps=10), attack_config('pgd', steps=10)), got {self.config!r}.")
        if self.threat is None:
            object.__setattr__(self, 'threat', self.config.attack_class.threat)
        if self.threat not in THREATS:
            raise ValueError(f'threat must be one of {THREATS}, got {self.threat!r}.')
        if self.eps_rule not in EPS_RULES:
            raise ValueError(f'eps_rule must be one of {EPS_RULES}, got {self.eps_rule!r}.')
        if self.step_rule is not None and self.step_rule not in STEP_RULES:
            raise ValueError(f'step_rule must be one of {tuple(STEP_RULES)}, got {self.step_rule!r}.')
        _check_finite(f'{self.label}: eps', self.eps)
        if self.eps < 0:
            raise ValueError(f'{self.label}: eps must be >= 0, got {self.eps}.')
        step = getattr(self.config, 'step', None)
        if isinstance(step, (int, float)):
            _check_finite(f'{self.label}: step', step)
        if self.last_iterate and not self.config.attack_class.scores_last_iterate:
            able = (name for name in list_attacks() if attack_class(name).scores_last_iterate)
            raise ValueError(f'{self.label}: only {", ".join(able)} can score its last iterate, not {self.attack}.')
        if (self.input_std is None) != (self.eps_standardized is None):
            raise ValueError(f'{self.label}: a resolved budget has both eps_standardized and input_std, got '
                             f'{self.eps_standardized} and {self.input_std}.')
        if self.input_std is not None and self.eps_rule not in STANDARDIZED_RULES:
            raise ValueError(f'{self.label}: input_std is for budgets in standardized units (eps_rule '
                             f'{" or ".join(STANDARDIZED_RULES)}), not eps_rule={self.eps_rule!r}.')
        if self.input_std is not None and not (math.isfinite(self.input_std) and self.input_std > 0):
            raise ValueError(f'{self.label}: input_std must be a positive number, got {self.input_std}.')

    @property
    def attack(self) -> str:
        """The registered name of the attack it configures."""
        return self.config.attack_class.name

    @property
    def resolved(self) -> bool:
        """Whether its budget is on the 0-255 scale: always, but for a standardized rule before `resolve_protocol`."""
        return self.eps_rule not in STANDARDIZED_RULES or self.input_std is not None

    @property
    def targeted(self) -> bool:
        """Whether the attack aims at a target class."""
        return bool(getattr(self.config, 'targeted', False))

    @property
    def steps(self) -> Optional[int]:
        """Iterations (or queries for query-based attacks), when the attack has such a knob."""
        return next((int(getattr(self.config, key)) for key in STEP_KEYS + QUERY_KEYS if key in self.config.stated),
                    None)

    @property
    def iterations(self) -> Optional[int]:
        """Iterations of an iterative attack (``None`` for query-based attacks, noise and one-step attacks)."""
        return next((int(getattr(self.config, key)) for key in STEP_KEYS if key in self.config.stated), None)

    @property
    def queries(self) -> Optional[int]:
        """Queries of a query-based (black-box) attack, ``None`` otherwise."""
        return next((int(getattr(self.config, key)) for key in QUERY_KEYS if key in self.config.stated), None)

    @property
    def run_label(self) -> str:
        """A label naming the budget that runs: `label`, unless a reduction or override changed its budget.

        Then the label's budget is replaced by the one that runs, or appended when the label names none
        (`budget_label`): ``pgd-t-2000`` reduced to 13 iterations is ``pgd-t-13``, ``nofrost``'s ``pgd`` capped
        at 3 is ``pgd-3``.
        """
        if self.label_budget is None or self.label_budget == self.steps:
            return self.label
        claimed = budget_label('', self.label_budget)
        base = self.label[:-len(claimed)] if self.label.endswith(claimed) else self.label
        return budget_label(base, self.steps)

    def to_dict(self) -> Dict[str, Any]:
        """JSON-serialisable description, as recorded in results and state files.

        A spec whose budget was changed also records `label_budget` and `run_label`, and one that scores its last
        iterate `last_iterate`, and one resolved from standardized units `eps_standardized` and `input_std` (only
        then, so that the description of an unchanged protocol, and with it the state files of evaluations under way,
        stays the same).
        """
        changed = {} if self.run_label == self.label else dict(label_budget=self.label_budget,
                                                                run_label=self.run_label)
        if self.last_iterate:
            changed['last_iterate'] = True
        if self.input_std is not None:
            changed.update(eps_standardized=self.eps_standardized, input_std=self.input_std)
        return dict(label=self.label, attack=self.attack, eps=self.eps, eps_rule=self.eps_rule, threat=self.threat,
                    step_rule=self.step_rule, success_rate=self.success_rate, kwargs=self.config.recorded(), **changed)

    def with_budget(self, key: str, budget: int) -> 'AttackSpec':
        """This spec running `budget` of option `key` (iterations or queries), its label's budget remembered."""
        label_budget = self.steps if self.label_budget is None else self.label_budget
        return replace(self, config=self.config.stating(**{key: budget}), label_budget=label_budget)


def _check_finite(name: str, value: float) -> None:
    """Reject NaN and infinite budgets: every comparison with NaN is False, so it would pass the range checks."""
    if not math.isfinite(value):
        raise ValueError(f'{name} must be a finite number, got {value}.')


def _with_budget(spec: AttackSpec) -> AttackSpec:
    """State the iterations and queries the attack runs with by default in the spec's configuration, where unset.

    Results then state the budget that actually ran, and caps (`reduce_protocol`) find a budget to cap.
    """
    config = spec.config
    missing = {key: getattr(config, key) for key in STEP_KEYS + QUERY_KEYS
               if key in config.option_names() and key not in config.stated}
    return replace(spec, config=config.stating(**missing)) if missing else spec


def _nofrost_step(eps: float, steps: int) -> float:
    """Step of the NoFrost evaluation code: ``min(1.25 ε, ε + 4) / N`` (0-255 scale)."""
    return min(1.25 * eps, eps + 4.0) / max(steps, 1)


def _fraction_step(eps: float, steps: int) -> float:
    """Galloway et al.'s BIM step ``ε / N``: the last iteration can reach the ball's surface."""
    return eps / max(steps, 1)


STEP_RULES = {'nofrost': _nofrost_step, 'fraction': _fraction_step}
#: How each step rule sets the step, in words (`stepping`).
STEP_RULE_TEXT = {'nofrost': 'min(1.25ε, ε+4)/N', 'fraction': 'ε/N'}


def _with_step(spec: AttackSpec) -> AttackSpec:
    """Recompute the configured ``step`` from the spec's step rule (no-op without one)."""
    if spec.step_rule is None:
        return spec
    return replace(spec, config=spec.config.stating(step=STEP_RULES[spec.step_rule](spec.eps, int(spec.config.steps))))


@dataclass(frozen=True)
class Protocol:
    """A fixed attack suite and how it is reported.

    Args:
        name: Registry name (``xie2020``).
        description: One line for logs and results.
        reference: The paper (and section) the budgets come from.
        attacks: The suite.
        aggregation: ``independent``: every attack sees every correctly classified sample (targeted attacks, noise
            and corruptions: every sample, for the success rate and the corrupted-image accuracy). ``cascade``: each
            attack only sees the samples the previous ones did not break, as AutoAttack does; an attack's accuracy
            is then the cumulative robust accuracy.
        worst_case: Also report the per-sample worst case over the suite (robust only if no attack succeeds).
        headline: The protocol's single robust number: ``worst-case``, ``last`` (the last attack, e.g. PGD-2000),
            ``mean`` (mean accuracy over the suite, e.g. the mean corruption accuracy), ``clean`` (the clean
            accuracy: a protocol without attacks, measuring a shift of the data) or an attack label.
        metrics: Robustness metrics computed by default (see `timm_advnorm.eval.plan.metrics`).
        reduced: Whether budgets were shrunk by `reduce_protocol` (results are then not the paper's protocol).
        dataset: The out-of-distribution set (`ood.OOD_DATASETS`) the clean pass and the attacks run on, read from
            its own folder; ``None``: the evaluation data.
        ood: Further out-of-distribution sets whose clean accuracy the protocol reports, each from its own folder.
        loss: Also report the mean cross-entropy loss, clean and under each attack, over every evaluated image
            (Galloway et al.'s loss columns). Every image is then attacked, the misclassified ones too, as the loss is
            a mean over the whole set; an image still counts as robust only when it is correct clean and after the
            attack, so the accuracies are those of a protocol without the loss. Needs ``independent`` aggregation.
    """

    name: str
    description: str
    reference: str
    attacks: Tuple[AttackSpec, ...]
    aggregation: str = 'independent'
    worst_case: bool = False
    headline: str = 'last'
    metrics: Tuple[str, ...] = ()
    reduced: bool = False
    dataset: Optional[str] = None
    ood: Tuple[str, ...] = ()
    loss: bool = False

    def __post_init__(self):
        if self.aggregation not in AGGREGATIONS:
            raise ValueError(f'aggregation must be one of {AGGREGATIONS}, got {self.aggregation!r}.')
        if self.loss and self.aggregation != 'independent':
            raise ValueError(f'Protocol {self.name!r}: the loss is a mean over every image, which a cascade does not '
                             'attack; use independent aggregation.')
        labels = [spec.label for spec in self.attacks]
        if self.headline not in HEADLINES + tuple(labels):
            raise ValueError(f'headline must be one of {HEADLINES} or an attack label, got {self.headline!r}.')
        if self.headline == 'worst-case' and not self.worst_case:
            raise ValueError('A worst-case headline needs worst_case=True.')
        if len(set(labels)) != len(labels):
            raise ValueError(f'Protocol {self.name!r} has duplicate attack labels: {labels}.')
        sets = self.datasets
        for name in sets:
            try:
                get_ood_dataset(name)
            except ValueError as e:
                raise ValueError(f'Protocol {self.name!r}: {e}') from None
        if len(set(sets)) != len(sets):
            raise ValueError(f'Protocol {self.name!r} reads a data set twice: {list(sets)}.')
        if not self.attacks and not sets:
            raise ValueError(f'Protocol {self.name!r} has no attacks.')
        if not self.attacks and self.headline != 'clean':
            raise ValueError(f'Protocol {self.name!r} has no attacks: its headline is the clean accuracy (\'clean\').')

    @property
    def datasets(self) -> Tuple[str, ...]:
        """Every out-of-distribution set it reads: `dataset` (when set), then `ood`."""
        return ((self.dataset,) if self.dataset else ()) + tuple(self.ood)

    def to_dict(self) -> Dict[str, Any]:
        """JSON-serialisable description; `dataset`, `ood` and `loss` only when set (the description of a protocol
        without them, and with it the state files of evaluations under way, stays as it was)."""
        sets = dict(dataset=self.dataset, ood=list(self.ood)) if self.datasets else {}
        if self.loss:
            sets['loss'] = True
        return dict(name=self.name, description=self.description, reference=self.reference,
                    aggregation=self.aggregation, worst_case=self.worst_case, headline=self.headline,
                    metrics=list(self.metrics),
                    reduced=self.reduced, attacks=[spec.to_dict() for spec in self.attacks], **sets)


def _xie2020() -> Protocol:
    # Xie & Yuille's evaluation (§3, Table 7): L∞ ε = 16 on the 0-255 scale, step 1, 10 to 2000 iterations. The
    # paper's numbers, stated as such: the attacks' `DEFAULT_EPS` is also 16 because PGD's defaults follow this paper.
    eps, step, budgets = 16.0, 1.0, (10, 20, 100, 500, 2000)
    attacks = tuple(
        AttackSpec(budget_label('pgd-t', n), PGD.Config.of(steps=n, step=step, step_rule='max', targeted=True,
                                                          random_start=True),
                   eps=eps, success_rate=True, last_iterate=True)
        for n in budgets)
    return Protocol(
        'xie2020', f'Targeted PGD, Linf eps={eps:g}, step {step:g}, {budgets[0]} to {budgets[-1]} iterations; '
        'accuracy and attack-success rate.', 'Xie & Yuille, ICLR 2020, Sec. 3 and Table 7', attacks,
        headline=budget_label('pgd-t', budgets[-1]))


def _robustbench() -> Protocol:
    eps, steps, restarts, targets, queries = 4.0, 100, 1, 9, 5000  # AutoAttack's standard version, RobustBench's ε
    attacks = (
        AttackSpec('apgd-ce', APGDCE.Config.of(steps=steps, n_restarts=restarts), eps),
        AttackSpec('apgd-t', APGDT.Config.of(steps=steps, n_restarts=restarts, n_target_classes=targets), eps),
        AttackSpec('fab-t', FABT.Config.of(steps=steps, n_restarts=restarts, n_target_classes=targets), eps),
        AttackSpec('square', Square.Config.of(n_queries=queries, n_restarts=restarts), eps),
    )
    return Protocol(
        'robustbench', f'AutoAttack standard (APGD-CE, APGD-T, FAB-T, Square) at Linf eps={eps:g}/255, as a cascade.',
        'Croce & Hein, ICML 2020; RobustBench ImageNet Linf', attacks, aggregation='cascade', worst_case=True,
        headline='worst-case')


def _nofrost() -> Protocol:
    eps, steps, queries = 8.0, 20, 400
    attacks = tuple(_with_step(spec) for spec in (
        AttackSpec('pgd', PGD.Config.of(steps=steps, step_rule='fixed', random_start=True), eps, step_rule='nofrost',
                   last_iterate=True),
        AttackSpec('apgd-ce', APGDCE.Config.of(steps=steps), eps),
        AttackSpec('apgd-dlr', APGDDLR.Config.of(steps=steps), eps),
        AttackSpec('mifgsm', MIFGSM.Config.of(steps=steps, decay=1.0), eps, step_rule='nofrost'),
        AttackSpec('cw-linf', CWLinf.Config.of(steps=steps, confidence=50.0), eps, step_rule='nofrost'),
        AttackSpec('square', Square.Config.of(n_queries=queries), eps),
    ))
    return Protocol(
        'nofrost', f'Linf eps={eps:g} suite: PGD, APGD-CE, APGD-DLR, MI-FGSM, CW-Linf ({steps} iterations), Square '
        f'({queries} queries).',
        'Wang et al., ICML 2022, Sec. 4.1 and 4.3', attacks, worst_case=True, headline='worst-case',
        metrics=('margin', 'thickness', 'smoothness'))


# Galloway et al. normalize every data set to zero mean and unit variance (§3) and state the noise, ε and the BIM
# step on that standardized input (the MNIST noise has "the same first two moments as the clean images"): their
# budgets are in units of the model's input std, which `resolve_protocol` reads off the evaluated model.

def _galloway() -> Protocol:
    eps_inf, steps = GALLOWAY_EPS, 20  # ε∞ of the standardized input
    attacks = tuple(_with_step(spec) for spec in (
        AttackSpec('gaussian-noise', GaussianNoise.Config.of(std=0.5), 0.0),
        AttackSpec('bim-linf', BIMLinf.Config.of(steps=steps), eps_inf, eps_rule='std', step_rule='fraction'),
        # No step rule: it would take ε/20 of the L∞-sized ε before √d scaling; BIM-L2 steps its resolved ε/20.
        AttackSpec('bim-l2', BIML2.Config.of(steps=steps), eps_inf, eps_rule='std_sqrt_dim'),
    ))
    return Protocol(
        'galloway', f'Gaussian noise (variance 1/4), BIM-Linf eps={eps_inf:g} and BIM-L2 eps={eps_inf:g}*sqrt(d), '
        f"{steps} iterations, budgets in units of the standardized input (times the model's std).",
        'Galloway et al., 2019, Sec. 3', attacks, headline='bim-linf')


def _galloway_mnist() -> Protocol:
    def unit(value: float) -> float:
        return value * GALLOWAY_MNIST_UNIT

    attacks = (
        AttackSpec('gaussian-noise', GaussianNoise.Config.of(std=1.0, size=28, grey=True, clip=False), 0.0),
        # BIM as PGD from the clean input, so that it also scores its last iterate: the loss is the paper's, at the
        # attack's final point over every digit (a best iterate stops at the first fooling one, just past the boundary)
        *(AttackSpec(label, PGD.Config.of(steps=100, step=unit(1e-3), step_rule='fixed', random_start=False),
                     unit(eps), last_iterate=True)
          for label, eps in (('bim-linf', 0.1), ('bim-linf-0.05', 0.05))),
        *(AttackSpec(f'fgsm-{eps:g}', FGSM.Config.of(step=unit(eps), random_start=False), unit(eps), last_iterate=True)
          for eps in (0.05, 0.1)),
    )
    return Protocol(
        'galloway-mnist', 'Gaussian noise (sigma = 1 on the standardized input, drawn at 28 px), BIM-Linf eps=0.1 and '
        '0.05 (100 iterations of step 1e-3 from the clean input), FGSM eps=0.05 and 0.1, the budgets and steps on the '
        f'[-1, 1] input scale (eps=0.1 is {unit(0.1):.4g}/255); accuracy (best and last iterate) and mean '
        'cross-entropy loss (last iterate).',
        'Galloway et al., 2019, Sec. 4 and App. B, Tables 6, 7, 11 and 12', attacks, headline='bim-linf', loss=True)


def _corruptions() -> Protocol:
    attacks = tuple(
        AttackSpec(f'{name}-{severity}', Corruption.Config.of(corruption=name, severity=severity), 0.0)
        for name in IMAGENET_C_CORRUPTIONS for severity in SEVERITIES)
    return Protocol(
        'corruptions', 'The 15 ImageNet-C corruptions at severities 1-5, applied on the fly.',
        'Hendrycks & Dietterich, ICLR 2019', attacks, headline='mean')


def _ood(name: str) -> Protocol:
    dataset = OOD_DATASETS[name]
    restricted = f', scored on its {dataset.num_classes} classes' if dataset.wnids_file else ''
    return Protocol(name, f'Clean accuracy on {dataset.title}{restricted}.', dataset.reference, (), headline='clean',
                    dataset=name)


def _nofrost_star() -> Protocol:
    adversarial = tuple(spec for spec in _nofrost().attacks if spec.label in ('pgd', 'square'))
    return Protocol(
        'nofrost-star', 'Clean, ImageNet-C (mean accuracy), ImageNet-R, ImageNet-Sketch, and PGD (20 iterations) and '
        'Square (400 queries) at Linf eps=8.', 'Wang et al., ICML 2022, Sec. 4.4 (Figures 3 and 4) and Sec. 4.1',
        _corruptions().attacks + adversarial, headline='pgd', ood=('imagenet-r', 'imagenet-sketch'))


_PROTOCOLS: Registry[Protocol] = Registry('protocol')

#: The registered protocols by name, in registration order: a read-only view that follows the registry.
PROTOCOLS: Mapping[str, Protocol] = _PROTOCOLS.entries


def register_protocol(protocol: Protocol) -> Protocol:
    """Make `protocol` a ``--protocol`` of the evaluation command, under its name; returns it.

    A plug-in registers its protocols by being imported before the command parses its arguments.

    Raises:
        ValueError: Its name is taken.
    """
    return _PROTOCOLS.register(protocol.name, protocol)


def unregister_protocol(name: str) -> Protocol:
    """Remove protocol `name` (to replace it, or after a test's throw-away protocol); returns it.

    Raises:
        ValueError: No protocol is registered as `name`.
    """
    return _PROTOCOLS.unregister(name)


for _protocol in (_xie2020(), _robustbench(), _nofrost(), _galloway(), _galloway_mnist(), _corruptions(),
                  *(_ood(name) for name in OOD_DATASETS), _nofrost_star()):
    register_protocol(_protocol)


def list_protocols() -> Tuple[str, ...]:
    """Names of the registered protocols, in registration order (the built-in ones first)."""
    return tuple(_PROTOCOLS.names())


def get_protocol(name: str) -> Protocol:
    """The protocol registered as `name`.

    Raises:
        ValueError: Unknown name; the message lists the registered ones.
    """
    return _PROTOCOLS.get(name)


def _list_specs(name: str, eps: float, options: Mapping[str, Any], counts: Sequence[int]) -> List[AttackSpec]:
    """The specs of attack `name` in an attack list: the options it takes, its own threat, and its budget recorded.

    Noise has no ε (as in `galloway`). With several iteration counts, an attack that has iterations gets one spec
    per count, labelled ``name-N``; the others run once.
    """
    config = attack_config(name)
    config = config.stating(**{key: value for key, value in options.items() if key in config.option_names()})
    spec = AttackSpec(name, config, 0.0 if config.attack_class.threat == 'noise' else eps,
                      success_rate=bool(getattr(config, 'targeted', False)))
    if not counts or 'steps' not in config.option_names():
        return [_with_budget(spec)]
    return [_with_budget(replace(spec, label=name if len(counts) == 1 else budget_label(name, n),
                                 config=config.stating(steps=n))) for n in counts]


def protocol_from_attacks(
        attacks: Sequence[str],
        eps: float = DEFAULT_EPS,
        attack_kwargs: Optional[Mapping[str, Any]] = None,
        aggregation: str = 'independent',
        steps: Sequence[int] = (),
) -> Protocol:
    """An ad-hoc protocol from registered attack names, all at budget `eps`, each with the options it takes.

    An option goes to the attacks that have it (``steps`` to PGD and APGD, not to Square) and is recorded in
    their specs; one that no attack of the list takes is an error, as ignoring it would run something else than
    asked. Every spec also records the iterations or queries its attack runs with by default.

    Args:
        attacks: Registered attack names; repeating a name is an error (give one spec per configuration).
        eps: Budget on the 0-255 scale (noise has none); one in (0, 1) warns (`check_budget_scale`) unless it is a
            `PixelBudget`.
        attack_kwargs: Constructor arguments (``step``, ``norm``, ``targeted``, ...) for the attacks that take them.
        aggregation: See `Protocol`.
        steps: Iterations of the attacks that have iterations: one count, or several for a sweep, one spec per
            attack and count labelled ``name-N`` (PGD budgets of a sweep then share one run, see `plan`).

    Raises:
        ValueError: Unknown attack, non-finite `eps` or step, repeated counts, or an option no attack takes.
    """
    _check_finite('eps', eps)
    check_budget_scale(eps)
    options = dict(attack_kwargs or {})
    counts = [int(n) for n in steps]
    if len(set(counts)) != len(counts):
        raise ValueError(f'Iteration counts must differ, got {list(steps)}.')
    specs = tuple(spec for name in attacks for spec in _list_specs(name, float(eps), options, counts))
    for key, value in dict(options, **({'steps': counts} if counts else {})).items():
        if not any(key in spec.config.stated for spec in specs):
            raise ValueError(f'{key}={value!r} rejected: none of the attacks {", ".join(attacks)} takes {key!r}.')
    several = len(specs) > 1
    return Protocol('custom', f'Attacks {", ".join(attacks)} at eps={eps:g}.', 'command line', specs,
                    aggregation=aggregation, worst_case=several, headline='worst-case' if several else 'last')


def with_paper_budgets(protocol: Protocol) -> Protocol:
    """An attack list's protocol (`protocol_from_attacks`, no ε given) with BIM at the budget of the ``galloway``
    protocol, whose attacks they are: ε∞ = 0.03 of the standardized input (BIM-L2: times √d), to resolve from the
    model's std (`resolve_protocol`), and not the list's one 0-255 budget. Stand-alone, ``--attacks bim-linf`` ran
    at that budget (16/255), neither Galloway's reading nor the protocol's."""
    paper = {spec.attack: spec for spec in get_protocol('galloway').attacks if spec.threat != 'noise'}
    specs = tuple(replace(spec, eps=paper[spec.attack].eps, eps_rule=paper[spec.attack].eps_rule)
                  if spec.attack in paper else spec for spec in protocol.attacks)
    if specs == protocol.attacks:
        return protocol
    names = ', '.join(spec.label for spec in specs if spec.attack in paper)
    kept = [spec for spec in specs if spec.attack not in paper and spec.threat != 'noise']
    budgets = [f'{", ".join(spec.label for spec in kept)} at eps={kept[0].eps:g}.'] if kept else []
    description = ' '.join([f'Attacks {", ".join(spec.label for spec in specs)}.', *budgets,
                            f"{names}: eps={GALLOWAY_EPS:g} of the standardized input (Galloway et al.'s, as in "
                            'galloway).'])
    return replace(protocol, attacks=specs, description=description)


def _takes(spec: AttackSpec, option: str) -> bool:
    """Whether override `option` applies to `spec`: ε to every attack but noise, the rest where the spec sets them."""
    return spec.threat != 'noise' if option == 'eps' else option in spec.config.stated


def override_protocol(
        protocol: Protocol,
        eps: Optional[float] = None,
        step: Optional[float] = None,
        steps: Optional[int] = None,
        norm: Optional[str] = None,
) -> Protocol:
    """Change budgets of every attack that has the knob; the protocol keeps its name but no longer its paper's budget.

    ε applies to every attack with a budget; `step`, `steps` and `norm` only where the attack's configuration has
    them (an explicit `step` also disables the spec's step rule, otherwise the rule recomputes the step); an `eps` in
    (0, 1) warns as `protocol_from_attacks` does. Labels
    stay; a spec whose iterations change remembers its label's budget, so that `AttackSpec.run_label` names the
    one that runs. `eps` and `step` are on the 0-255 scale: the protocol's budgets must be so too (`resolve_protocol`
    first), and a spec whose ε was in standardized units takes the given ε as it is (``std`` becomes ``fixed``,
    ``std_sqrt_dim`` ``sqrt_dim``).

    Raises:
        ValueError: A non-finite `eps` or `step`, an option that would change no attack of the protocol (``norm``
            with ``xie2020``, whose PGD is configured L∞ only): ignoring it would run something else than asked; or
            a budget still in standardized units.
    """
    given = (('eps', eps, float), ('step', step, float), ('steps', steps, int), ('norm', norm, str))
    options = {option: convert(value) for option, value, convert in given if value is not None}
    for option in ('eps', 'step'):
        if option in options:
            _check_finite(option, options[option])
    check_resolved(protocol)
    if eps is not None:
        check_budget_scale(eps)
    for option, value in options.items():
        if not any(_takes(spec, option) for spec in protocol.attacks):
            names = ', '.join(dict.fromkeys(spec.attack for spec in protocol.attacks))
            raise ValueError(f'{option}={value!r} would change no attack of protocol {protocol.name!r}: none of its '
                             f'attacks ({names}) has {"a budget" if option == "eps" else repr(option)} to override.')
    specs = []
    for spec in protocol.attacks:
        changes = {option: value for option, value in options.items() if _takes(spec, option)}
        if 'eps' in changes and spec.eps_rule in _PIXEL_RULES:  # the given ε is on the 0-255 scale
            spec = replace(spec, eps_rule=_PIXEL_RULES[spec.eps_rule], eps_standardized=None, input_std=None)
        new_eps = changes.pop('eps', spec.eps)
        step_rule = None if 'step' in changes else spec.step_rule
        if 'steps' in changes:
            spec = spec.with_budget('steps', changes.pop('steps'))
        config = replace(spec.config, **changes)
        specs.append(_with_step(replace(spec, eps=new_eps, config=config, step_rule=step_rule)))
    return replace(protocol, attacks=tuple(specs))


def reduce_protocol(
        protocol: Protocol,
        max_steps: Optional[int] = None,
        max_queries: Optional[int] = None,
        root: Optional[int] = None,
) -> Protocol:
    """Shrink a protocol for smoke tests: take a root of every budget, then cap iterations and queries.

    A root keeps the order of a sweep (cube roots of 10, 20, 100, 500, 2000 iterations are 2, 3, 5, 8, 13), so
    plots and checks that compare budgets still see distinct points. Attacks left at their default budget are
    reduced from it. Attack labels are kept (they are the stage keys and the headline's name), the budgets that
    actually run are recorded in each spec with the budget its label stands for (`AttackSpec.run_label` names what
    ran: ``pgd-t-2000`` is reported as ``pgd-t-13``), and the protocol is marked ``reduced``.

    Args:
        protocol: The protocol.
        max_steps: Cap on iterations.
        max_queries: Cap on queries.
        root: Replace every budget n by ``max(1, round(n ** (1 / root)))``.

    Raises:
        ValueError: A cap that no attack of the protocol has a budget for (``max_queries`` without a query attack).
    """
    full = [_with_budget(spec) for spec in protocol.attacks]
    caps = ((STEP_KEYS, 'max_steps', max_steps), (QUERY_KEYS, 'max_queries', max_queries))
    for keys, option, cap in caps:
        if cap is not None and not any(key in spec.config.stated for spec in full for key in keys):
            names = ', '.join(dict.fromkeys(spec.attack for spec in full))
            raise ValueError(f'{option}={cap} would cap no attack of protocol {protocol.name!r}: none of its attacks '
                             f'({names}) has {" or ".join(keys)}.')
    specs = []
    for spec in full:
        for keys, _, cap in caps:
            for key in keys:
                if key not in spec.config.stated:
                    continue
                budget = int(getattr(spec.config, key))
                if root is not None:
                    budget = max(1, round(budget ** (1.0 / root)))
                spec = spec.with_budget(key, budget if cap is None else min(budget, cap))
        specs.append(_with_step(spec))
    return replace(protocol, attacks=tuple(specs), reduced=True)


def scalar_std(space: InputSpace) -> float:
    """The std of a model's inputs as one number, on the [0, 1] scale: the one its channels share (MNIST's 0.3081,
    exactly), else their mean (ImageNet's 0.229, 0.224, 0.225: 0.226). One unit of the standardized input is that
    times 255 on the 0-255 scale (78.57 and 57.63): the attacks take one ε for every channel."""
    stds = tuple(float(std) for std in space.std)
    return stds[0] if len(set(stds)) == 1 else math.fsum(stds) / len(stds)


def _standardized(spec: AttackSpec, std: float) -> AttackSpec:
    """`spec`'s ε and explicit step, declared in units of the standardized input, on the 0-255 scale for a model of
    input std `std`; a step rule then recomputes the step from the resolved ε."""
    unit = std * PIXEL_SCALE
    config = spec.config
    if 'step' in config.stated and isinstance(config.step, (int, float)):
        config = replace(config, step=config.step * unit)
    return _with_step(replace(spec, eps=spec.eps * unit, config=config, eps_standardized=spec.eps, input_std=std))


def resolve_protocol(protocol: Protocol, space: InputSpace) -> Protocol:
    """`protocol` with every budget declared in units of the standardized input (``eps_rule`` ``std``,
    ``std_sqrt_dim``) on the 0-255 scale, for a model whose inputs `space` normalizes.

    The one place such budgets are resolved: ε and an explicit step are multiplied by `scalar_std` × 255 (a step
    rule recomputes the step from the resolved ε), and the spec records the declared ε and the std
    (`AttackSpec.eps_standardized`, `AttackSpec.input_std`); ``std_sqrt_dim`` keeps its √d for `resolve_eps`.
    Every later reader (the attacks, the plan and its cost, the sanity probes, the results and their descriptions)
    sees the 0-255 budgets. Specs of other rules, and ones already resolved, are kept.
    """
    if all(spec.resolved for spec in protocol.attacks):
        return protocol
    std = scalar_std(space)
    return replace(protocol, attacks=tuple(spec if spec.resolved else _standardized(spec, std)
                                           for spec in protocol.attacks))


def _unresolved_error(where: str, labels: Sequence[str]) -> ValueError:
    return ValueError(f'{where}: {", ".join(labels)} state{"s" if len(labels) == 1 else ""} a budget in units of the '
                      "standardized input, not resolved from the model's input std (resolve_protocol).")


def check_resolved(protocol: Protocol) -> None:
    """Refuse a protocol with a budget still in units of the standardized input (see `resolve_protocol`): read as a
    0-255 budget, ε = 0.03 would be next to no attack."""
    pending = [spec.label for spec in protocol.attacks if not spec.resolved]
    if pending:
        raise _unresolved_error(f'Protocol {protocol.name!r}', pending)


def resolve_eps(spec: AttackSpec, input_size: Sequence[int]) -> float:
    """The budget an attack is built with: `spec.eps`, times √d for the ``sqrt_dim`` rules (d = C·H·W).

    Raises:
        ValueError: The spec's budget is still in units of the standardized input (`resolve_protocol`).
    """
    if not spec.resolved:
        raise _unresolved_error('Attack', [spec.label])
    if spec.eps_rule in SQRT_DIM_RULES:
        return galloway_l2_eps(spec.eps, input_size)
    return spec.eps


class Stepping(NamedTuple):
    """How the attack of a spec steps, for results (`schema.AttackResult`).

    Attributes:
        step: The size of every step on the 0-255 scale, after any rule (None: no fixed size).
        rule: How it steps, in words (`Attack.step_description`, with the spec's step rule when it set the step).
        iterate: ``best`` or ``last``: the iterate the attack returns.
    """

    step: Optional[float]
    rule: Optional[str]
    iterate: Optional[str]


def stepping(spec: AttackSpec, input_size: Sequence[int]) -> Stepping:
    """How the attack of `spec` steps, read off the configured attack itself (its defaults and rules included: the
    step of ``--attacks pgd`` is PGD's ``max(1/255, ε/N)``, BIM-L2's its ε/20); all None for noise.

    Raises:
        ValueError, TypeError: The registry does not know the attack or it rejects the spec's arguments.
    """
    if spec.threat == 'noise':
        return Stepping(None, None, None)
    attack = create_spec_attack(spec, InputSpace(), input_size)
    rule = attack.step_description
    if rule is not None and spec.step_rule is not None:
        rule += f', {STEP_RULE_TEXT[spec.step_rule]}'
    return Stepping(attack.step_size, rule, 'best' if attack.best_iterate else 'last')


def create_spec_attack(spec: AttackSpec, space: InputSpace, input_size: Sequence[int], **bound: Any) -> Attack:
    """The attack `spec` configures, for a model whose inputs `space` normalizes and are shaped `input_size`: its
    configuration built at the budget it runs with (`resolve_eps`, on the 0-255 scale by the spec's contract, a
    `PixelBudget`: the sanity sweep's half of ε = 1 is 0.5 on purpose), with the other bound options (`bound`:
    ``seed``, ``autocast_dtype``, ``fold_bn``) as given.

    Raises:
        ValueError: The spec's budget is still in units of the standardized input, or the attack refuses its options.
    """
    return spec.config.build(space, PixelBudget(resolve_eps(spec, input_size)), **bound)
