"""Public names a package loads on first use (PEP 562), as timm and torch load their heavy parts: the package stays
cheap to import, and ``from package import name`` still works. Its subpackages load on first use too, so that
``package.sub.name`` works after a plain ``import package``, as ``import package.sub`` would give."""
import importlib
import importlib.util
from typing import Any, Callable, Dict, List, Mapping, MutableMapping, Tuple

__all__ = ['lazy_names']


def lazy_names(
        namespace: MutableMapping[str, Any],
        modules: Mapping[str, str],
) -> Tuple[Callable[[str], Any], Callable[[], List[str]]]:
    """The module-level ``__getattr__`` and ``__dir__`` of a package whose `modules` (public name -> submodule that
    defines it, relative to the package) and whose submodules (``package.hub``) load on first use.

    Args:
        namespace: The package's ``globals()``; a name, once loaded, is kept there so later lookups skip the hook.
        modules: Each lazily loaded public name, by the submodule that defines it (``'load_weights': 'hub'``).
    """
    package = namespace['__name__']
    names: Dict[str, str] = dict(modules)

    def __getattr__(name: str) -> Any:
        if name in names:
            value = getattr(importlib.import_module(f'.{names[name]}', package), name)
        elif not name.startswith('_') and importlib.util.find_spec(f'{package}.{name}') is not None:
            value = importlib.import_module(f'.{name}', package)
        else:
            raise AttributeError(f'module {package!r} has no attribute {name!r}')
        namespace[name] = value
        return value

    def __dir__() -> List[str]:
        return sorted(set(namespace) | set(names))

    return __getattr__, __dir__
