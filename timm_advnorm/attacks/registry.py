"""Attacks by name, so scripts and protocols build them from strings (``--attack pgd``)."""
import inspect
from typing import Any, Callable, Dict, List

__all__ = ['register_attack', 'create_attack', 'list_attacks', 'attack_arguments', 'attack_threat']

_ATTACKS: Dict[str, Callable] = {}


def register_attack(name: str) -> Callable:
    """Class decorator registering a configured attack class under `name` (lower case, dashes)."""
    def _register(cls: Callable) -> Callable:
        if name in _ATTACKS:
            raise ValueError(f'Attack {name!r} is registered twice.')
        _ATTACKS[name] = cls
        return cls
    return _register


def _attack_class(name: str) -> Callable:
    """The class registered as `name` (a clear error listing the names otherwise)."""
    if name not in _ATTACKS:
        raise ValueError(f'Unknown attack {name!r}; available: {", ".join(sorted(_ATTACKS))}.')
    return _ATTACKS[name]


def create_attack(name: str, **kwargs):
    """Instantiate the attack registered as `name` with its configuration keyword arguments."""
    return _attack_class(name)(**kwargs)


def list_attacks() -> List[str]:
    """Names of every registered attack."""
    return sorted(_ATTACKS)


def attack_arguments(name: str) -> Dict[str, Any]:
    """The keyword arguments the attack `name` takes and their defaults (`inspect.Parameter.empty` if required).

    Protocols read it to give an attack only the options it has and to record the budget (``steps``,
    ``n_queries``) it runs with when none is given.
    """
    keyword = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
    parameters = inspect.signature(_attack_class(name)).parameters.values()
    return {p.name: p.default for p in parameters if p.kind in keyword}


def attack_threat(name: str) -> str:
    """``white-box`` (gradients), ``black-box`` (output queries only) or ``noise`` (no adversary) for attack `name`
    (its class's ``threat``; attacks registered without one use gradients)."""
    return getattr(_attack_class(name), 'threat', 'white-box')
