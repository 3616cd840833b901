"""Attacks by name, so scripts and protocols build them from strings (``--attack pgd``).

Training takes its attack from the same registry, among the attacks that can make training examples
(`training_attacks`): the evaluation attacks keep best iterates and drop fooled samples, which is no training batch.
"""
import inspect
from dataclasses import MISSING, Field, fields
from typing import Any, Callable, Dict, List

from ..registry import Registry

__all__ = ['register_attack', 'create_attack', 'list_attacks', 'attack_arguments', 'attack_threat', 'training_attacks',
           'check_training_attack', 'create_training_attack', 'attack_class', 'attack_config', 'attack_title']

_ATTACKS: Registry[Callable] = Registry('attack', sort_names=True)


def register_attack(name: str) -> Callable:
    """Class decorator registering a configured attack class under `name` (lower case, dashes), which becomes its
    ``name``."""
    def _register(cls: Callable) -> Callable:
        _ATTACKS.register(name, cls)
        cls.name = name
        return cls
    return _register


def create_attack(name: str, **kwargs):
    """Instantiate the attack registered as `name` with its configuration keyword arguments."""
    return _ATTACKS.get(name)(**kwargs)


def attack_class(name: str) -> type:
    """The attack class registered as `name`.

    Raises:
        ValueError: Unknown name; the message lists the registered ones.
    """
    return _ATTACKS.get(name)


def attack_config(name: str, **options: Any):
    """The frozen configuration (``Config``, `base.AttackConfig`) of attack `name` stating `options`.

    Raises:
        ValueError: Unknown name.
        TypeError: An option the attack does not have.
    """
    return _ATTACKS.get(name).Config.of(**options)


def attack_title(name: str) -> str:
    """How attack `name` is written in prose (its class's ``title``: ``PGD``, ``CW-L∞``); an attack without one, or
    a name this install does not know (an older results file's), as it is written."""
    return getattr(_ATTACKS.entries.get(name), 'title', None) or name


def list_attacks() -> List[str]:
    """Names of every registered attack."""
    return _ATTACKS.names()


def _default(option: Field) -> Any:
    """The default of attack option `option`: its value, what its factory makes, or `inspect.Parameter.empty`."""
    if option.default is not MISSING:
        return option.default
    return inspect.Parameter.empty if option.default_factory is MISSING else option.default_factory()


def attack_arguments(name: str) -> Dict[str, Any]:
    """The keyword arguments the attack `name` takes and their defaults (`inspect.Parameter.empty` if required).

    Protocols read it to give an attack only the options it has and to record the budget (``steps``,
    ``n_queries``) it runs with when none is given. These are the fields of the attack's dataclass
    (`base.attack_dataclass`) that its constructor takes, in their order: the input space, the options bound when it
    runs (`base.BOUND_OPTIONS`) and those of its configuration (``Config``).
    """
    return {option.name: _default(option) for option in fields(_ATTACKS.get(name)) if option.init}


def attack_threat(name: str) -> str:
    """``white-box`` (gradients), ``black-box`` (output queries only) or ``noise`` (no adversary) for attack `name`
    (its class's ``threat``, `base.Attack.threat`)."""
    return _ATTACKS.get(name).threat


def training_attacks() -> List[str]:
    """Names of the registered attacks that can make training examples (their class's ``trains``)."""
    return [name for name in _ATTACKS.names() if getattr(_ATTACKS.get(name), 'trains', False)]


def check_training_attack(name: str) -> str:
    """`name`, if it names an attack that can make training examples.

    Raises:
        ValueError: `name` is unknown, or an evaluation attack; the message names the training attacks.
    """
    if name not in training_attacks():
        what = 'an evaluation attack (best iterate, fooled samples dropped, running statistics), not a training ' \
               'attack' if name in _ATTACKS else 'not a registered attack'
        raise ValueError(f'{name!r} is {what}; training attacks: {", ".join(training_attacks())}')
    return name


def create_training_attack(name: str, **options: Any):
    """The training attack `name` configured from `options`, of which it takes those it has (`attack_arguments`).

    Training describes its attack once for every attack (budget, step, iterations, ...); an option an attack has no
    use for is left out: FGSM is one step by definition, so it takes no ``steps``.

    Raises:
        ValueError: `name` is not a training attack (`check_training_attack`).
    """
    arguments = attack_arguments(check_training_attack(name))
    return create_attack(name, **{key: value for key, value in options.items() if key in arguments})
