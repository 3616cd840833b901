"""Training methods by name, as timm's model registry: ``@register_task('mbn')`` on a task class makes it a
``--method`` of the training command, with its own options (`AdversarialClassificationTask.options_class`).

A method is one module: the class, decorated. Importing `timm_advnorm` (or `timm_advnorm.task`) registers the
built-in ones; a plug-in registers its own by being imported before the command parses its arguments.
"""
import dataclasses
from typing import Callable, List, Mapping, Type, TypeVar

from ..registry import Registry
from .adversarial import AdversarialClassificationTask
from .method_options import check_options_class, declaration, option_flag

__all__ = ['TASKS', 'get_task_class', 'list_tasks', 'register_task', 'unregister_task']

T = TypeVar('T', bound=Type[AdversarialClassificationTask])

# Method names go into option values, argument group titles and run folder names.
_TASKS: Registry[Type[AdversarialClassificationTask]] = Registry(
    'method', name_pattern=r'[a-z][a-z0-9_]*',
    name_rule='lower case letters, digits and underscores, starting with a letter')

#: The registered task classes by method name, in registration order: a read-only view that follows the registry.
TASKS: Mapping[str, Type[AdversarialClassificationTask]] = _TASKS.entries


def register_task(name: str) -> Callable[[T], T]:
    """Class decorator registering an `AdversarialClassificationTask` subclass as training method `name`.

    Sets the class's ``method`` to `name`.

    Raises:
        ValueError: `name` is not lower case letters, digits and underscores, or is taken; or the class declares an
            option a registered method declares differently (one option, one flag: the same type, default and help).
        TypeError: The class is not an `AdversarialClassificationTask`, or its `options_class` is not a frozen
            `MethodOptions` dataclass of options with defaults and helps.
    """
    def _register(cls: T) -> T:
        if not (isinstance(cls, type) and issubclass(cls, AdversarialClassificationTask)):
            raise TypeError(f'Method {name!r}: {cls!r} is not an AdversarialClassificationTask subclass.')
        _TASKS.check_new_name(name)
        problem = check_options_class(cls.options_class)
        if problem:
            raise TypeError(f'Method {name!r}: {problem}.')
        _check_declarations_agree(name, cls)
        _TASKS.register(name, cls)
        cls.method = name
        return cls
    return _register


def _check_declarations_agree(name: str, cls: Type[AdversarialClassificationTask]) -> None:
    """Refuse an option of `cls` that a registered method declares differently: the command makes one flag of it."""
    for field in dataclasses.fields(cls.options_class):
        for other_name, other in TASKS.items():
            other_fields = {f.name: f for f in dataclasses.fields(other.options_class)}
            if field.name in other_fields and declaration(other_fields[field.name]) != declaration(field):
                raise ValueError(f'Method {name} declares {option_flag(field.name)} unlike method {other_name}.')


def unregister_task(name: str) -> Type[AdversarialClassificationTask]:
    """Remove method `name` from the registry (to replace it, or after a test's throw-away method); returns its class.

    Raises:
        ValueError: No method is registered as `name`.
    """
    return _TASKS.unregister(name)


def get_task_class(name: str) -> Type[AdversarialClassificationTask]:
    """The task class registered as method `name`.

    Raises:
        ValueError: No method is registered as `name`; the message lists those that are.
    """
    return _TASKS.get(name)


def list_tasks() -> List[str]:
    """Names of the registered methods, in registration order (the built-in ones in the order of the papers)."""
    return _TASKS.names()
