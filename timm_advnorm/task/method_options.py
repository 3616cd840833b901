"""A training method's own options: a frozen `MethodOptions` dataclass whose fields declare them
(`timm_advnorm.option_fields.option`, re-exported here with the rest of that module's names, as the training command
reads them).

The training command declares the fields of every registered method (`AdversarialClassificationTask.add_args`) and
builds each run's options objects from its parsed values (`options_from_values`); a method reads only the options
its dataclass declares. A field that holds another method's option is declared with `shared_option`, checked at
registration (`check_options_class`, `declaration`).
"""
import dataclasses
from typing import Any, Optional

from ..option_fields import (
    declaration, declared_fields, hidden_aliases, is_shared, long_flag, option, option_dest, option_flag, option_flags,
    options_from_values, parser_arguments, shared_option)

__all__ = ['MethodOptions', 'check_options_class', 'declaration', 'declared_fields', 'hidden_aliases', 'is_shared',
           'long_flag', 'option', 'option_dest', 'option_flag', 'option_flags', 'options_from_values',
           'parser_arguments', 'shared_option']


@dataclasses.dataclass(frozen=True)
class MethodOptions:
    """Base of a method's options dataclass; a method without options of its own keeps this empty one."""


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
