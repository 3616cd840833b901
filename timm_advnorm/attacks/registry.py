"""Attacks by name, so scripts and protocols build them from strings (``--attack pgd``)."""
from typing import Callable, Dict, List

__all__ = ['register_attack', 'create_attack', 'list_attacks']

_ATTACKS: Dict[str, Callable] = {}


def register_attack(name: str) -> Callable:
    """Class decorator registering a configured attack class under `name` (lower case, dashes)."""
    def _register(cls: Callable) -> Callable:
        if name in _ATTACKS:
            raise ValueError(f'Attack {name!r} is registered twice.')
        _ATTACKS[name] = cls
        return cls
    return _register


def create_attack(name: str, **kwargs):
    """Instantiate the attack registered as `name` with its configuration keyword arguments."""
    if name not in _ATTACKS:
        raise ValueError(f'Unknown attack {name!r}; available: {", ".join(sorted(_ATTACKS))}.')
    return _ATTACKS[name](**kwargs)


def list_attacks() -> List[str]:
    """Names of every registered attack."""
    return sorted(_ATTACKS)
