"""A training method's own options: a frozen dataclass whose fields are its command-line options.

Each field is one option (``--clean-ratio`` for ``clean_ratio``): its type, its default and, in its metadata
(`option`), the flag's help and parser type. The training command declares the fields of every registered method
(`AdversarialClassificationTask.add_args`) and builds each run's options object from its parsed values
(`options_from_values`); a method reads only the options its dataclass declares. A method that reads another
method's option declares it too, with the same type and default (`shared_option`, checked at registration): the
flag is made once, in the group of the method it comes from.
"""
import dataclasses
from typing import Any, Dict, Mapping, Optional, Tuple, Type, TypeVar

from ..arg_types import BooleanOptionalAction

__all__ = ['MethodOptions', 'check_options_class', 'declaration', 'is_shared', 'option', 'option_flag',
           'options_from_values', 'parser_arguments', 'shared_option']

T = TypeVar('T')

# Metadata key of a field declaring another method's option (`shared_option`): that method's name.
_SHARED_FROM = 'shared_from'


@dataclasses.dataclass(frozen=True)
class MethodOptions:
    """Base of a method's options dataclass; a method without options of its own keeps this empty one."""


def option(default: Any, help: str, **parser_arguments: Any) -> Any:
    """A field of a method's options: its default, the flag's help and its other parser arguments (``type``,
    ``choices``, ``nargs``, ``metavar``). A ``bool`` field is an on/off flag: ``--name``/``--no-name`` when on by
    default, ``--name`` alone when off. Give a sequence as a tuple (an options object is immutable)."""
    return dataclasses.field(default=default, metadata={'help': help, **parser_arguments})


def shared_option(method: str, default: Any) -> Any:
    """A field for an option of another method, `method`, that this method reads too: declared here with its type
    (the annotation) and default, which must agree with that method's (`register_task` checks), its flag and help
    being that method's (in its group of the training command)."""
    return dataclasses.field(default=default, metadata={_SHARED_FROM: method})


def is_shared(field: dataclasses.Field) -> bool:
    """Whether `field` declares another method's option (`shared_option`)."""
    return _SHARED_FROM in field.metadata


def option_flag(name: str) -> str:
    """The command-line flag of option `name`: ``--clean-ratio`` for ``clean_ratio``."""
    return '--' + name.replace('_', '-')


def parser_arguments(field: dataclasses.Field) -> Dict[str, Any]:
    """The keyword arguments of the parser's ``add_argument`` declaring `field`: its metadata, its default (a tuple
    as a list, what the parser itself gives, so that the recorded arguments stay plain YAML) and, for a ``bool``, the
    on/off action."""
    arguments = dict(field.metadata)
    arguments['default'] = list(field.default) if isinstance(field.default, tuple) else field.default
    if field.type is bool:
        arguments['action'] = BooleanOptionalAction if field.default else 'store_true'
    return arguments


def declaration(field: dataclasses.Field) -> Tuple[Any, Any]:
    """What two declarations of one option must agree on: its type and its default."""
    return field.type, field.default


def check_options_class(options_class: Any) -> Optional[str]:
    """Why `options_class` cannot be a method's options (one line), or None: it must be a frozen `MethodOptions`
    dataclass whose every field has a default, and a help unless it is another method's option."""
    if not (isinstance(options_class, type) and issubclass(options_class, MethodOptions)
            and dataclasses.is_dataclass(options_class) and options_class.__dataclass_params__.frozen):
        return f'its options_class {options_class!r} is not a frozen MethodOptions dataclass'
    for field in dataclasses.fields(options_class):
        if field.default is dataclasses.MISSING or not ('help' in field.metadata or is_shared(field)):
            return f'its option {field.name!r} has no default or no help (declare it with option(...))'
    return None


def options_from_values(options_class: Type[T], values: Mapping[str, Any]) -> T:
    """An options object from values by option name (a run's parsed or recorded arguments): lists become tuples, and
    an option missing from `values` (a record older than the option) keeps its default."""
    return options_class(**{field.name: _immutable(values[field.name]) for field in dataclasses.fields(options_class)
                            if field.name in values})


def _immutable(value: Any) -> Any:
    return tuple(value) if isinstance(value, list) else value
