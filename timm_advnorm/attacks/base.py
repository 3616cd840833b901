"""What configured attacks share: the `Attack` base class and the geometry of L∞ and L2 threat models.

Attacks perturb timm's normalized inputs ``(pixel - mean) / std``. The helpers below take budgets already converted
to the units they act in, so an attack converts once per call, not once per iteration:

* L∞: a per-channel radius in normalized units, ``space.linf_budget(eps, like=x)`` shaped (1, C, 1, 1);
* L2: a radius on the [0, 1] pixel scale, ``eps / PIXEL_SCALE`` (`space.py`), with norms taken on the pixel perturbation
  ``delta * std`` (so the budget means the same thing whatever the model's normalization).

Random draws come from an optional `torch.Generator` (on any device; the draw is moved to the input's device), so a
seeded attack is reproducible on CPU and GPU alike.
"""
import inspect
import logging
import math
import typing
from dataclasses import KW_ONLY, MISSING, Field, dataclass, field, fields, make_dataclass, replace
from typing import (
    Any, Callable, ClassVar, Dict, Iterable, Mapping, NamedTuple, Optional, Sequence, Tuple, TypeVar, Union)

import torch
import torch.nn as nn

from .core import BN_STATS, LossFn, attack_context, input_gradient, random_targets
from .fold_bn import BatchNormFolder
from .space import InputSpace, check_budget_scale

__all__ = [
    'Attack', 'AttackConfig', 'attack_dataclass', 'BOUND_OPTIONS', 'DEFAULT_EPS', 'NORMS', 'STEP_DIRECTIONS',
    'pixel_l2_norm', 'project_linf', 'project_l2', 'project', 'random_linf_start', 'random_linf_surface',
    'random_l2_start', 'l2_direction', 'uniform', 'normal', 'bernoulli', 'hard_labels', 'num_classes_of',
    'forward_logits', 'evaluate_iterate', 'AttackInputs', 'attack_inputs',
]

_logger = logging.getLogger(__name__)

NORMS = ('linf', 'l2')
#: The budget of an attack built without one (`Attack.eps`) and of an attack list (`protocol_from_attacks`,
#: ``--attacks``), on the 0-255 scale: 16/255, the ε of Xie & Yuille (2020), whose evaluation PGD the attacks'
#: defaults follow (`PGD`).
DEFAULT_EPS = 16.0
#: The direction of a gradient step in each norm, as `Attack.step_description` names it.
STEP_DIRECTIONS = {'linf': 'sign step', 'l2': 'L2 step'}

T = TypeVar('T')


def uniform(shape: Sequence[int], like: torch.Tensor, generator: Optional[torch.Generator] = None) -> torch.Tensor:
    """U[0, 1) samples of `shape` with `like`'s device and dtype, drawn from `generator` (any device) if given."""
    if generator is None:
        return torch.rand(shape, device=like.device, dtype=like.dtype)
    return torch.rand(shape, generator=generator, device=generator.device).to(like.device, like.dtype)


def normal(shape: Sequence[int], like: torch.Tensor, generator: Optional[torch.Generator] = None) -> torch.Tensor:
    """Standard normal samples of `shape` with `like`'s device and dtype, drawn from `generator` if given."""
    if generator is None:
        return torch.randn(shape, device=like.device, dtype=like.dtype)
    return torch.randn(shape, generator=generator, device=generator.device).to(like.device, like.dtype)


def bernoulli(n: int, p: float, like: torch.Tensor, generator: Optional[torch.Generator] = None) -> torch.Tensor:
    """Boolean mask of `n` independent draws that are True with probability `p`, on `like`'s device."""
    return uniform((n,), like, generator) < p


def pixel_l2_norm(delta: torch.Tensor, std: torch.Tensor) -> torch.Tensor:
    """Per-sample L2 norm (B,) of a normalized perturbation measured on the [0, 1] pixel scale."""
    return (delta * std).flatten(1).norm(p=2, dim=1)


def project_linf(delta: torch.Tensor, radius: Union[torch.Tensor, float]) -> torch.Tensor:
    """Clip a normalized perturbation into the L∞ box of per-channel `radius` (1, C, 1, 1), or of one radius for
    every channel (a number: the same result, without broadcasting the channels)."""
    if isinstance(radius, float):
        return delta.clamp(-radius, radius)
    return torch.maximum(torch.minimum(delta, radius), -radius)


def project_l2(delta: torch.Tensor, radius: float, std: torch.Tensor) -> torch.Tensor:
    """Scale each sample's normalized perturbation back onto the L2 ball of `radius` ([0, 1] pixel scale)."""
    norm = pixel_l2_norm(delta, std).view(-1, *([1] * (delta.dim() - 1)))
    return delta * torch.clamp(radius / norm.clamp_min(1e-12), max=1.0)


def project(
        x_adv: torch.Tensor,
        x: torch.Tensor,
        space: InputSpace,
        radius: Union[float, torch.Tensor],
        norm: str = 'linf',
) -> torch.Tensor:
    """Project `x_adv` onto the threat model around `x`, then clip it to valid pixels.

    Clipping to the image box after the ε-projection keeps the perturbation inside the ball: the box contains `x`,
    so clipping only shrinks each coordinate of the perturbation.

    Args:
        x_adv: Candidate adversarial inputs (normalized).
        x: Clean inputs (normalized).
        space: The models' input normalization.
        radius: L∞: per-channel normalized radius (1, C, 1, 1); L2: radius on the [0, 1] pixel scale.
        norm: ``linf`` or ``l2``.
    """
    delta = x_adv - x
    if norm == 'linf':
        delta = project_linf(delta, radius)
    else:
        delta = project_l2(delta, radius, space.std_like(x))
    return space.clamp(x + delta)


def random_linf_start(
        x: torch.Tensor,
        radius: Union[torch.Tensor, float],
        generator: Optional[torch.Generator] = None,
) -> torch.Tensor:
    """A perturbation drawn uniformly from the L∞ box of per-channel `radius`, independently per sample and pixel."""
    return (2.0 * uniform(x.shape, x, generator) - 1.0) * radius


def random_linf_surface(like: torch.Tensor, generator: Optional[torch.Generator] = None) -> torch.Tensor:
    """A random point on the surface of the unit L∞ ball per sample, shaped like `like`.

    Uniform in the box, then rescaled so its largest coordinate is ±1: the random start of AutoAttack's APGD and FAB
    (Croce & Hein, ICML 2020).
    """
    t = 2.0 * uniform(like.shape, like, generator) - 1.0
    return t / t.abs().flatten(1).amax(dim=1).clamp_min(1e-12).view(-1, *([1] * (like.dim() - 1)))


def random_l2_start(
        x: torch.Tensor,
        radius: float,
        std: torch.Tensor,
        generator: Optional[torch.Generator] = None,
) -> torch.Tensor:
    """A normalized perturbation drawn uniformly from the pixel-scale L2 ball of `radius`, per sample.

    Direction: a normalized Gaussian; length: ``radius * u ** (1 / d)`` for uniform volume in d dimensions.
    """
    gauss = normal(x.shape, x, generator)
    dims = math.prod(x.shape[1:])
    direction = gauss / gauss.flatten(1).norm(dim=1).clamp_min(1e-12).view(-1, *([1] * (x.dim() - 1)))
    length = radius * uniform((x.shape[0],), x, generator) ** (1.0 / dims)
    return direction * length.view(-1, *([1] * (x.dim() - 1))) / std


def l2_direction(grad: torch.Tensor, std: torch.Tensor) -> torch.Tensor:
    """Steepest-ascent direction of unit pixel-scale L2 norm, returned in normalized units.

    With ``pixel = x * std + mean``, the gradient with respect to pixels is ``grad / std``; a step of pixel length
    ``s`` along it is ``s * (grad / std) / ||grad / std||`` in pixels, i.e. that divided by ``std`` in normalized
    units.
    """
    pixel_grad = grad / std
    norm = pixel_grad.flatten(1).norm(dim=1).clamp_min(1e-12).view(-1, *([1] * (grad.dim() - 1)))
    return pixel_grad / norm / std


def hard_labels(y: torch.Tensor) -> torch.Tensor:
    """Class indices (B,) from hard labels (B,) or soft targets (B, C) (their argmax)."""
    return y.argmax(dim=1) if y.dim() == 2 else y


def num_classes_of(model: nn.Module, x: torch.Tensor, y: torch.Tensor) -> int:
    """Number of classes: from soft targets, the model's `num_classes` (timm models), or one forward on a sample."""
    if y.dim() == 2:
        return y.shape[1]
    num_classes = getattr(model, 'num_classes', None)
    if isinstance(num_classes, int) and num_classes > 0:
        return num_classes
    with torch.no_grad():
        return model(x[:1]).shape[1]


@torch.no_grad()
def forward_logits(model: nn.Module, x: torch.Tensor, autocast_dtype: Optional[torch.dtype] = None) -> torch.Tensor:
    """Logits (fp32 or wider) of one forward pass without gradients, under autocast at `autocast_dtype` if given."""
    with torch.autocast(x.device.type, dtype=autocast_dtype, enabled=autocast_dtype is not None):
        logits = model(x)
    return logits.to(torch.promote_types(logits.dtype, torch.float32))


def evaluate_iterate(
        model: nn.Module,
        x: torch.Tensor,
        target: torch.Tensor,
        loss_fn: LossFn,
        autocast_dtype: Optional[torch.dtype] = None,
        gradient: bool = True,
) -> Tuple[Optional[torch.Tensor], torch.Tensor, torch.Tensor]:
    """``(grad, logits, per-sample loss)`` at `x`, as `core.input_gradient` returns them; without `gradient`, from one
    forward without gradients and with ``grad`` None: the last iterate of a loop, scored but never stepped from."""
    if gradient:
        return input_gradient(model, x, target, loss_fn, autocast_dtype)
    logits = forward_logits(model, x, autocast_dtype)
    return None, logits, loss_fn(logits, target)


class AttackInputs(NamedTuple):
    """The inputs of an attack's functional core as its iterations use them (`attack_inputs`).

    Attributes:
        x: The clean inputs, detached and in fp32 at least (fp64 stays fp64), so that perturbations, projections and
            losses keep their precision whatever the caller's dtype.
        labels: Class indices (B,): the labels, or the argmax of soft targets.
        dtype: The caller's dtype, the dtype of what the attack returns.
    """

    x: torch.Tensor
    labels: torch.Tensor
    dtype: torch.dtype


def attack_inputs(x: torch.Tensor, y: torch.Tensor) -> AttackInputs:
    """`AttackInputs` of inputs `x` and labels or soft targets `y`: what every attack core starts from."""
    x_in = x.detach()
    return AttackInputs(x_in.to(torch.promote_types(x_in.dtype, torch.float32)), hard_labels(y), x_in.dtype)


#: The options of an attack bound when it runs, not configured: the model's input space, the budget (a protocol states
#: it with its rule, `protocols.resolve_eps`), and how the evaluation runs (autocast, seed, BN folding).
BOUND_OPTIONS = ('space', 'eps', 'autocast_dtype', 'seed', 'fold_bn')


@dataclass(frozen=True, kw_only=True)
class AttackConfig:
    """A configured attack without its input space and budget, as a protocol holds it: frozen, typed, built into the
    attack when it runs (`build`). Every attack class has one, ``Cls.Config``, whose fields are the attack's options
    (its dataclass fields less `BOUND_OPTIONS`) with the attack's defaults, so each default is written once.

    A protocol changes a configuration with `dataclasses.replace`; `stated` names the options it states, in the order
    it stated them: results record those (`recorded`), the budgets that run included, and not every default.

    Attributes:
        attack_class: The attack class it configures (class attribute).
        stated: The options the configuration states (`of`, `stating`).
    """

    attack_class: ClassVar[type]
    stated: Tuple[str, ...] = field(default=(), repr=False)

    @classmethod
    def option_names(cls) -> Tuple[str, ...]:
        """The attack's configured options, in declaration order."""
        return tuple(option.name for option in fields(cls) if option.name != 'stated')

    @classmethod
    def of(cls, **options: Any) -> 'AttackConfig':
        """The configuration stating `options` (the others at the attack's defaults).

        Raises:
            TypeError: An option the attack does not have.
        """
        return cls(**options, stated=tuple(options))

    def stating(self, **options: Any) -> 'AttackConfig':
        """This configuration with `options` set and stated (`dataclasses.replace`; the order of `stated` kept)."""
        return replace(self, **options, stated=self.stated + tuple(name for name in options if name not in self.stated))

    def options(self) -> Dict[str, Any]:
        """Every option by name, the attack's defaults included."""
        return {name: getattr(self, name) for name in self.option_names()}

    def recorded(self) -> Dict[str, Any]:
        """The stated options by name, as results and state files record them (``kwargs``)."""
        return {name: getattr(self, name) for name in self.stated}

    def build(self, space: InputSpace, eps: float, **bound: Any) -> 'Attack':
        """The attack of this configuration for a model whose inputs `space` normalizes, at budget `eps` (0-255
        scale), with the other `BOUND_OPTIONS` given in `bound`."""
        return self.attack_class(space, eps=eps, **self.options(), **bound)


def _config_field(option: Field) -> Tuple[str, Any, Field]:
    """The configuration's field of attack option `option`: its name, type and the attack's own default."""
    default = {} if option.default_factory is MISSING else dict(default_factory=option.default_factory)
    if option.default is not MISSING:
        default = dict(default=option.default)
    return option.name, option.type, field(**default)


_attack_fields = dataclass(eq=False, repr=False, kw_only=True)


def attack_dataclass(cls: type) -> type:
    """How an attack class declares its options: as dataclass fields (annotation and default, written once),
    keyword-only after the positional `space`, compared by identity (an attack is a configured object, not a value)
    and shown by `Attack.extra_repr`. It also derives the class's frozen configuration, ``cls.Config``
    (`AttackConfig`). Decorate every registered attack class with it."""
    cls = _attack_fields(cls)
    options = [_config_field(option) for option in fields(cls) if option.init and option.name not in BOUND_OPTIONS]
    cls.Config = make_dataclass(f'{cls.__name__}Config', options, bases=(AttackConfig,), frozen=True, kw_only=True,
                                namespace=dict(attack_class=cls, __module__=cls.__module__))
    cls.Config.__qualname__ = f'{cls.__qualname__}.Config'  # pickled by its path, as a nested class
    return cls


def _number_type(annotation: Any) -> Optional[type]:
    """``int`` or ``float`` for a field declared as that number (or as Optional of it), else None."""
    if annotation in (int, float):
        return annotation
    args = typing.get_args(annotation)
    if typing.get_origin(annotation) is Union and len(args) == 2 and type(None) in args:
        number = args[0] if args[1] is type(None) else args[1]
        return number if number in (int, float) else None
    return None


@dataclass(eq=False, repr=False)
class Attack:
    """Base of configured attacks: holds the configuration, runs `perturb` under `attack_context`.

    An attack's options are the fields of its dataclass (`attack_dataclass`): written once, they make the constructor,
    the attributes, the keyword arguments of the attack's functional core (`core_kwargs`), the repr and the arguments
    the registry reports (`registry.attack_arguments`). Options declared as numbers are stored as that type (a YAML
    ``10.0`` iterations is 10, a `PixelBudget` a plain float).

    Subclasses implement ``perturb(model, x, y, targets)`` with a functional core (or name it `core`). `__call__` puts
    the model in the requested BN mode (and restores mode, route, ``requires_grad`` and BN statistics after), draws
    targets for a targeted attack when none are given, and with running statistics may hand `perturb` a copy of the
    model with BN folded into the convolutions (same function, fewer layers; see `fold_bn.py`).

    Args:
        space: The model's input normalization (`InputSpace.from_model(model)`).
        eps: Perturbation budget on the 0-255 pixel scale (default `DEFAULT_EPS`, Xie & Yuille 2020's). A budget in
            (0, 1) warns (`space.check_budget_scale`: 8/255 = 0.031 given on the [0, 1] scale) unless given as a
            `PixelBudget`.
        bn_stats: ``running`` (eval mode; standard adversarial training and every evaluation) or ``batch`` (BN uses
            the attacked batch's statistics, Fast AdvProp); running statistics are never changed either way.
        autocast_dtype: Forward under autocast at this dtype (bf16 is safe: loss and perturbation stay fp32).
        seed: Seeds the attack's own CPU generator once, at construction. Random starts, Bernoulli draws and
            random targets come from it, so two attacks built with the same seed produce the same sequence of
            outputs, call after call; the stream advances between calls so successive batches get fresh noise.
            ``None`` uses torch's global RNGs. Give each distributed rank its own seed.
        fold_bn: With ``bn_stats='running'``, attack a copy of the model whose BN layers are folded into the
            preceding convolutions (exact to rounding, cheaper per iteration); layers that cannot be folded safely
            are left as they are.

    Attributes:
        core: The functional core `perturb` calls by default, given as keywords what `core_kwargs` collects.
        targeted: Whether the attack moves toward a target class (random among the other classes if not given).
        accepts_targets: Whether a call may name the target classes (the untargeted evaluation attacks refuse them).
        progress: Where the attack reports its progress from inside (`progress.AttackProgress`: sub-attack, target,
            restart, iteration or query), or None; the evaluator sets it to show the running attack in its bar.
        trains: Whether the attack can make training examples: the last iterate of every sample, on running or batch
            statistics (`EvalAttack` subclasses cannot: they keep best iterates and drop fooled samples).
        best_iterate: Whether it returns per sample the first iterate that fools the model (evaluation) rather than
            the last iterate.
        name: The name it is registered under (`registry.register_attack` sets it).
        title: How it is written in prose (``PGD``, ``CW-L∞``; `eval.describe`); None: as registered.
        forwards_per_step: Forward passes of the model per iteration besides the backward one (FAB's linearization
            adds one), for the cost of an evaluation (`eval.cost`).
        threat: What the attack uses of the model: ``white-box`` (gradients), ``black-box`` (output queries only) or
            ``noise`` (nothing: it perturbs every sample and has no ε budget). Evaluation treats them differently
            (`AttackSpec.threat`).
        scores_last_iterate: Whether an evaluation can score its last iterate beside the best one, from the same run
            (`AttackSpec.last_iterate`): the attack has ``best_and_last`` (PGD and FGSM).
        Config: Its frozen configuration without input space and budget (`AttackConfig`, made by `attack_dataclass`).
    """

    space: InputSpace
    _: KW_ONLY
    eps: float = DEFAULT_EPS
    bn_stats: str = 'running'
    autocast_dtype: Optional[torch.dtype] = None
    seed: Optional[int] = None
    fold_bn: bool = True

    core: ClassVar[Optional[Callable[..., Any]]] = None
    _core_keywords: ClassVar[Tuple[str, ...]] = ()
    targeted = False
    accepts_targets: ClassVar[bool] = True
    progress = None  # an Optional[progress.ProgressFn]; not an option of the attack's configuration
    trains: ClassVar[bool] = True
    best_iterate = False
    name: ClassVar[Optional[str]] = None
    title: ClassVar[Optional[str]] = None
    forwards_per_step: ClassVar[int] = 1
    threat: ClassVar[str] = 'white-box'
    scores_last_iterate: ClassVar[bool] = False

    def __post_init__(self):
        if not isinstance(self.space, InputSpace):
            raise TypeError(f'space must be an InputSpace, got {type(self.space).__name__}.')
        if self.eps < 0:
            raise ValueError(f'eps must be >= 0 (0-255 scale), got {self.eps}.')
        check_budget_scale(self.eps)
        if self.bn_stats not in BN_STATS:
            raise ValueError(f'bn_stats must be one of {BN_STATS}, got {self.bn_stats!r}.')
        if self.autocast_dtype == torch.float16:
            _logger.warning('fp16 autocast: input gradients may underflow to zero and stall the attack; prefer bf16.')
        self.check_options()
        for option in fields(self):
            number, value = _number_type(option.type), getattr(self, option.name)
            if number is not None and value is not None:
                setattr(self, option.name, number(value))
        self.generator = torch.Generator().manual_seed(self.seed) if self.seed is not None else None
        self._fold = BatchNormFolder()

    def check_options(self) -> None:
        """Refuse the attack's own options where they make no attack (ValueError); they are checked as given, before
        numbers are stored as their declared type. Subclasses with options to check implement it."""

    def __init_subclass__(cls, **kwargs: Any):
        super().__init_subclass__(**kwargs)
        if cls.core is not None:  # read the core's keywords once per class
            parameters = inspect.signature(cls.core).parameters.values()
            cls._core_keywords = tuple(p.name for p in parameters if p.kind is inspect.Parameter.KEYWORD_ONLY)

    def options_for(self, names: Iterable[str]) -> Dict[str, Any]:
        """Of `names` (keywords of a functional core), those this attack holds, by name: its options, `space`,
        `generator`, `progress` and class-level settings (APGD's ``loss``, BIM's ``norm``). A keyword it has no
        attribute for is left out, to the core's default (APGD's ``momentum``)."""
        return {name: getattr(self, name) for name in names if hasattr(self, name)}

    def core_kwargs(self, targets: Optional[torch.Tensor] = None) -> Dict[str, Any]:
        """The keyword arguments of `core` (`options_for` its keyword-only parameters), with `targets` where it takes
        them."""
        kwargs = self.options_for(self._core_keywords)
        if 'targets' in self._core_keywords:
            kwargs['targets'] = targets
        return kwargs

    def perturb(
            self,
            model: nn.Module,
            x: torch.Tensor,
            y: torch.Tensor,
            targets: Optional[torch.Tensor],
    ) -> torch.Tensor:
        """Adversarial inputs for `x`; `model` is already in the attack's mode. By default ``core(model, x, y,
        **core_kwargs(targets))``; subclasses without a core of that shape implement it."""
        if self.core is None:
            raise NotImplementedError(f'{type(self).__name__} has no core: implement perturb.')
        return self.core(model, x, y, **self.core_kwargs(targets))

    def __call__(
            self,
            model: nn.Module,
            x: torch.Tensor,
            y: torch.Tensor,
            targets: Optional[torch.Tensor] = None,
    ) -> torch.Tensor:
        """Attack `model` (unwrapped, not DDP) at normalized inputs `x`.

        Args:
            model: The model; its state is restored on exit.
            x: Normalized inputs (B, C, H, W).
            y: Labels (B,) or soft targets (B, C) (Mixup/CutMix; attacked as given, never re-mixed).
            targets: Target classes (B,) for a targeted attack; drawn from the attack's generator when omitted.

        Returns:
            Detached adversarial inputs, normalized, of `x`'s shape.
        """
        return self.call_in_context(model, x, y, targets, self.perturb).detach()

    def call_in_context(
            self,
            model: nn.Module,
            x: torch.Tensor,
            y: torch.Tensor,
            targets: Optional[torch.Tensor],
            perturb: Callable[[nn.Module, torch.Tensor, torch.Tensor, Optional[torch.Tensor]], T],
    ) -> T:
        """Run ``perturb(model, x, y, targets)`` as a call runs `perturb`: inputs checked, the model in the attack's
        BN mode (restored after), targets drawn when needed and BN folded when configured."""
        if targets is not None and not self.accepts_targets:
            raise ValueError(f'{type(self).__name__} is untargeted; use apgd-t, fab-t or pgd for targeted attacks.')
        if x.dim() != 4:
            raise ValueError(f'Expected inputs of shape (B, C, H, W), got {tuple(x.shape)}.')
        if y.shape[0] != x.shape[0]:
            raise ValueError(f'Got {x.shape[0]} inputs but {y.shape[0]} labels.')
        with attack_context(model, self.bn_stats):
            if self.targeted and targets is None:
                targets = random_targets(hard_labels(y), num_classes_of(model, x, y), self.generator)
            if self.fold_bn and self.bn_stats == 'running':
                model = self._fold(model, x)
            return perturb(model, x, y, targets)

    @property
    def step_size(self) -> Optional[float]:
        """The size of every step on the 0-255 scale, after any rule that sets it; None for an attack without a step
        of fixed size (query-based, APGD's adaptive step, noise)."""
        return None

    @property
    def step_description(self) -> Optional[str]:
        """How the attack steps, in words, for results and titles: the direction (``sign step``: along the sign of
        the input gradient, the L∞ step; ``L2 step``: along the unit pixel-scale L2 gradient) and, where the attack
        sets the size itself, how (``sign step, max(1/255, ε/N)``, ``sign step, ε/N``); None for an attack whose
        iterations are not steps of its own (a composite like AutoAttack, noise)."""
        return None

    @classmethod
    def noise_fields(cls, options: Mapping[str, Any]) -> Dict[str, Any]:
        """What results state about the perturbation of an attack evaluated as noise (`threat` ``noise``), in place of
        a norm and ε, from its configured `options` (`AttackConfig.options`): by default its name (``noise``)."""
        return dict(noise=cls.name)

    def option_repr(self, option: Field) -> str:
        """``name=value`` of one of the attack's own options in `extra_repr` (floats as ``%g``)."""
        value = getattr(self, option.name)
        return f'{option.name}={value:g}' if option.type is float else f'{option.name}={value}'

    def options_repr(self) -> str:
        """The attack's own options (those `Attack` does not declare, in declaration order, without those declared
        with ``repr=False``), each followed by a comma and a space."""
        shared = {option.name for option in fields(Attack)}
        return ''.join(self.option_repr(option) + ', ' for option in fields(self)
                       if option.repr and option.name not in shared)

    def extra_repr(self) -> str:
        """Configuration summary for logs: the attack's own options, then those every attack has."""
        return (self.options_repr() + f'eps={self.eps:g}, bn_stats={self.bn_stats}, '
                f'autocast_dtype={self.autocast_dtype}, seed={self.seed}, fold_bn={self.fold_bn}')

    def __repr__(self) -> str:
        return f'{type(self).__name__}({self.extra_repr()})'
