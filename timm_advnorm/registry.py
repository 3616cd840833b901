"""Things found by name (attacks, training methods, evaluation protocols, out-of-distribution sets, subsets), as
timm's model registry finds models: one `Registry` per kind, so that every one checks names, refuses a name taken
twice and answers an unknown name the same way.
"""
import re
from types import MappingProxyType
from typing import Dict, Generic, Iterator, List, Mapping, Optional, TypeVar

__all__ = ['Registry']

T = TypeVar('T')


class Registry(Generic[T]):
    """Entries of one kind by name, in registration order.

    Args:
        kind: What an entry is, as error messages name it (``attack``, ``method``, ``protocol``).
        name_pattern: Regular expression every name must match in full; None accepts any non-empty string.
        name_rule: The pattern in words, for the error refusing a name (``lower case letters and digits``).
        sort_names: Whether `names` and error messages list the names sorted rather than in registration order.
    """

    def __init__(self, kind: str, name_pattern: Optional[str] = None, name_rule: str = '', sort_names: bool = False):
        self.kind = kind
        self._name_pattern = re.compile(name_pattern) if name_pattern else None
        self._name_rule = name_rule or (f'a name matching {name_pattern}' if name_pattern else 'a non-empty name')
        self._sort_names = sort_names
        self._entries: Dict[str, T] = {}
        #: A read-only view of the entries that follows the registry.
        self.entries: Mapping[str, T] = MappingProxyType(self._entries)

    def register(self, name: str, entry: T) -> T:
        """Add `entry` as `name`; returns `entry` (so a decorator can return it).

        Raises:
            ValueError: `name` does not match the registry's pattern, or is taken.
        """
        self.check_new_name(name)
        self._entries[name] = entry
        return entry

    def check_new_name(self, name: str) -> None:
        """Refuse `name` unless `register` would take it (for registries that check more before registering).

        Raises:
            ValueError: `name` does not match the registry's pattern, or is taken.
        """
        if not name or (self._name_pattern is not None and not self._name_pattern.fullmatch(name)):
            raise ValueError(f'{self.kind.capitalize()} name {name!r}: use {self._name_rule}.')
        if name in self._entries:
            raise ValueError(f'{self.kind.capitalize()} {name!r} is registered twice.')

    def unregister(self, name: str) -> T:
        """Remove `name`; returns its entry.

        Raises:
            ValueError: `name` is not registered.
        """
        self.get(name)
        return self._entries.pop(name)

    def get(self, name: str) -> T:
        """The entry registered as `name`.

        Raises:
            ValueError: `name` is not registered; the message lists the names that are.
        """
        if name not in self._entries:
            raise ValueError(f'Unknown {self.kind} {name!r}; available: {", ".join(self.names())}.')
        return self._entries[name]

    def names(self) -> List[str]:
        """The registered names (sorted, or in registration order, as the registry was made)."""
        return sorted(self._entries) if self._sort_names else list(self._entries)

    def __contains__(self, name: object) -> bool:
        return name in self._entries

    def __iter__(self) -> Iterator[str]:
        return iter(self.names())

    def __len__(self) -> int:
        return len(self._entries)
