"""Training methods by name, as timm's model registry: ``@register_task('mbn')`` on a task class makes it a
``--method`` of the training command, with its own options (`AdversarialClassificationTask.add_args`).

A method is one module: the class, decorated. Importing `timm_advnorm` (or `timm_advnorm.task`) registers the
built-in ones; a plug-in registers its own by being imported before the command parses its arguments.
"""
from typing import Callable, List, Mapping, Type, TypeVar

from ..registry import Registry
from .adversarial import AdversarialClassificationTask

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
        ValueError: `name` is not lower case letters, digits and underscores, or is taken.
        TypeError: The class is not an `AdversarialClassificationTask`.
    """
    def _register(cls: T) -> T:
        if not (isinstance(cls, type) and issubclass(cls, AdversarialClassificationTask)):
            raise TypeError(f'Method {name!r}: {cls!r} is not an AdversarialClassificationTask subclass.')
        _TASKS.register(name, cls)
        cls.method = name
        return cls
    return _register


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
