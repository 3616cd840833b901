"""Options declared on the fields of frozen dataclasses: each command's typed options (`timm_advnorm.train.options`,
`timm_advnorm.eval.options`, `timm_advnorm.hub.publish_options`, `timm_advnorm.convert.options`,
`timm_advnorm.augment.options`, `timm_advnorm.commands.demo_options`) and each training method's own
(`timm_advnorm.task.method_options`).

Each field is one option (``--clean-ratio`` for ``clean_ratio``): its type, its default and, in its metadata
(`option`), the flag's help and parser arguments, as plain data that a command turns into its parser
(`parser_arguments`, `option_flags`), and fills from its parsed values (`options_from_values`). A field that holds an
option declared on another field (another method's, or the seed that the schedule reads too) is declared with
`shared_option`: the flag is made once, where it is declared. This module sits just above `arg_types`, so that the
packages below the training methods (`convert`, `augment`) declare their options too.
"""
import dataclasses
import functools
from typing import Any, Dict, Iterator, Mapping, Optional, Sequence, Tuple, Type, TypeVar

from .arg_types import BooleanOptionalAction

__all__ = ['declaration', 'declared_fields', 'hidden_aliases', 'is_own', 'is_shared', 'long_flag', 'option',
           'option_dest', 'option_flag', 'option_flags', 'options_from_values', 'parser_arguments', 'shared_option']

T = TypeVar('T')

# Metadata key of a field declaring another method's option (`shared_option`): that method's name.
_SHARED_FROM = 'shared_from'
# Metadata keys that say where an option goes on the command line, not how the parser takes it (`option`).
_FLAGS, _DEST, _ALIASES, _OFF_SWITCH, _OWN = 'flags', 'dest', 'aliases', 'off_switch', 'own'
_PLACEMENT = (_SHARED_FROM, _FLAGS, _DEST, _ALIASES, _OFF_SWITCH, _OWN)
# Parser arguments that may be given as a function of nothing, called when the parser is built: a help or choices
# that name what a registry holds then (the registered methods, the training attacks).
_BUILT_LATE = ('help', 'choices')


def option(default: Any, help: Any, *, flags: Optional[Sequence[str]] = None, dest: Optional[str] = None,
           aliases: Sequence[str] = (), off_switch: bool = False, own: bool = False, **parser_arguments: Any) -> Any:
    """A field that is a command-line option: its default, the flag's help and its other parser arguments (``type``,
    ``choices``, ``nargs``, ``metavar``, ``const``, ``action``). A ``bool`` field is an on/off flag:
    ``--name``/``--no-name`` when on by default, ``--name`` alone when off. Give a sequence as a tuple (an options
    object is immutable); the parser gets a list, but for an empty default of an option that takes one or more values
    (``nargs='+'``, never given empty) None, argparse's value of an option not given (``--help`` shows no default, and
    a ``-c`` file may write null). A mapping default is copied for each options object. A positional argument is a
    field whose `flags` name it (``('checkpoint',)``), without a default (``dataclasses.MISSING``) where it is
    required.

    Args:
        help: The help, or a function of nothing returning it when the parser is built (as may be ``choices``).
        flags: The option strings, when not ``--name`` alone (``-b``, ``--batch-size``; ``--world-size``; ``--model``,
            ``-m``), in the order ``--help`` shows them; or the one name of a positional argument (``checkpoint``).
        dest: The option's name on the command line and in the run's record, when not the field's
            (``val_attack_eps`` for `ValidationOptions.attack_eps`).
        aliases: Older spellings, accepted but not listed in ``--help``.
        off_switch: The option is a switch that turns the ``bool`` field, on by default, off: ``--no-fold-bn`` (its
            `dest`, ``no_fold_bn``, is then False unless given) for ``fold_bn``.
        own: The option is its command's own, not the option of the same flag that several commands share
            (`timm_advnorm.commands.options`): ``timm-advnorm-deepaugment``'s ``--seed`` and ``--input-size``.
    """
    placement = {key: value for key, value in ((_FLAGS, tuple(flags) if flags else None), (_DEST, dest),
                                               (_ALIASES, tuple(aliases)), (_OFF_SWITCH, off_switch), (_OWN, own))
                 if value}
    metadata = {'help': help, **parser_arguments, **placement}
    if isinstance(default, Mapping):
        return dataclasses.field(default_factory=functools.partial(dict, default), metadata=metadata)
    return dataclasses.field(default=default, metadata=metadata)


def shared_option(owner: str, default: Any = dataclasses.MISSING) -> Any:
    """A field for an option declared elsewhere that this options class holds too: another method's (`owner` names
    it), declared here with its type (the annotation) and default, which must agree with that method's
    (`register_task` checks), its flag and help being that method's (in its group of the training command); or one
    of the training command's other options classes (`owner`), filled from the same parsed value, without a default
    of its own."""
    return dataclasses.field(default=default, metadata={_SHARED_FROM: owner})


def is_shared(field: dataclasses.Field) -> bool:
    """Whether `field` declares another method's option (`shared_option`)."""
    return _SHARED_FROM in field.metadata


def is_own(field: dataclasses.Field) -> bool:
    """Whether `field` declares its command's own option, not the shared one of the same flag (`option`)."""
    return bool(field.metadata.get(_OWN))


def option_flag(name: str) -> str:
    """The command-line flag of option `name`: ``--clean-ratio`` for ``clean_ratio``."""
    return '--' + name.replace('_', '-')


def option_dest(field: dataclasses.Field) -> str:
    """The name of the option `field` declares or holds: on the command line, in a ``-c`` file and in the record."""
    return field.metadata.get(_DEST, field.name)


def option_flags(field: dataclasses.Field) -> Tuple[str, ...]:
    """The option strings of the option `field` declares: ``('--clean-ratio',)``, ``('-b', '--batch-size')``."""
    return field.metadata.get(_FLAGS) or (option_flag(option_dest(field)),)


def long_flag(flags: Sequence[str]) -> str:
    """The long one of an option's strings (the first ``--``, from which argparse names its destination): what a
    ``-c`` key or a study option stands for."""
    return next((flag for flag in flags if flag.startswith('--')), flags[0])


def hidden_aliases(field: dataclasses.Field) -> Tuple[str, ...]:
    """The older spellings of the option `field` declares, accepted but not shown (``--val-samples``)."""
    return field.metadata.get(_ALIASES, ())


def declared_fields(options_class: Any) -> Iterator[dataclasses.Field]:
    """The fields of `options_class` that declare an option: each with a help, none holding another's option."""
    return (field for field in dataclasses.fields(options_class) if 'help' in field.metadata and not is_shared(field))


def parser_arguments(field: dataclasses.Field) -> Dict[str, Any]:
    """The keyword arguments of the parser's ``add_argument`` declaring `field`: its metadata's parser arguments
    (a help or choices given as a function, called), its default (a tuple as a list, what the parser itself gives,
    so that the recorded arguments stay plain YAML; None for an option of one or more values left empty), its
    ``dest`` where its long flag does not name it, and, for a ``bool`` without an action of its own, the on/off
    action (or the off switch's). A required positional argument has no default, and a positional no ``dest`` (its
    name is its destination)."""
    arguments = {key: value() if key in _BUILT_LATE and callable(value) else value
                 for key, value in field.metadata.items() if key not in _PLACEMENT}
    if field.default is not dataclasses.MISSING or field.default_factory is not dataclasses.MISSING:
        default = field.default_factory() if field.default is dataclasses.MISSING else field.default
        arguments['default'] = None if _unset(field) else list(default) if isinstance(default, tuple) else default
    dest, flags = option_dest(field), option_flags(field)
    if flags[0].startswith('-') and long_flag(flags) != option_flag(dest):
        arguments['dest'] = dest
    if field.metadata.get(_OFF_SWITCH):
        arguments.update(action='store_true', default=not field.default)
    elif field.type is bool and 'action' not in arguments:
        arguments['action'] = BooleanOptionalAction if field.default else 'store_true'
    return arguments


def declaration(field: dataclasses.Field) -> Tuple[Any, Any]:
    """What two declarations of one option must agree on: its type and its default."""
    return field.type, field.default


def options_from_values(options_class: Type[T], values: Mapping[str, Any], **overrides: Any) -> T:
    """An options object from values by option name (`option_dest`; a run's parsed or recorded arguments), then
    `overrides` by field name: lists become tuples, an off switch given turns its field off, and an option missing
    from `values` (a record older than the option) keeps its default, as does an option of one or more values not
    given (None)."""
    taken = {field.name: _field_value(field, values[option_dest(field)]) for field in dataclasses.fields(options_class)
             if option_dest(field) in values}
    return options_class(**{**taken, **overrides})


def _unset(field: dataclasses.Field) -> bool:
    """Whether `field` is an option of one or more values whose default is none (the parser's None: not given)."""
    return field.metadata.get('nargs') == '+' and field.default == ()


def _field_value(field: dataclasses.Field, value: Any) -> Any:
    """The value of `field` from its option's parsed `value`."""
    if field.metadata.get(_OFF_SWITCH):
        return not value
    if value is None and _unset(field):
        return field.default
    return tuple(value) if isinstance(value, list) else value
