"""The wording shared by the package's one-line errors: lists of names cut to a few (`counted_names`), tensor
shapes (`shape_text`), and a text file an option names, read or refused in one line (`read_text_file`).

It imports nothing of the package, so that every floor, from the data to the Hub loading, says these things alike.
"""
from pathlib import Path
from typing import Iterable, Sequence, Union

__all__ = ['counted_names', 'read_text_file', 'shape_text', 'some_names']


def some_names(names: Iterable[str], shown: int = 3) -> str:
    """A list of names for a one-line message, its first `shown` and a count of the rest: ``layer1.0.conv1.weight,
    layer1.0.bn1.weight, layer1.0.bn1.bias and 409 more``. State dicts hold hundreds of keys: listing them all made
    "one line" errors of thousands of characters."""
    names = list(names)
    return ', '.join(names[:shown]) + (f' and {len(names) - shown} more' if len(names) > shown else '')


def counted_names(names: Iterable[str], noun: str, shown: int = 3) -> str:
    """`some_names` with their count and what they are: ``412 unexpected keys (layer1.0.conv1.weight, ... and 409
    more)``, ``1 missing key (fc.bias)``, ``no missing keys``."""
    names = list(names)
    if not names:
        return f'no {noun}s'
    return f'{len(names)} {noun}{"s" if len(names) > 1 else ""} ({some_names(names, shown)})'


def shape_text(shape: Sequence[int]) -> str:
    """A tensor shape for a message inside a list of names: ``16x128x5x5``, without the parentheses of a tuple."""
    return 'x'.join(map(str, shape)) or 'scalar'


def read_text_file(path: Union[str, Path], option: str, expected: str) -> str:
    """The text of the file an option names, or one line naming the option, the file and what is wrong with it: a
    binary file otherwise fails with Python's "'utf-8' codec can't decode byte 0x98", naming neither.

    Args:
        path: The file.
        option: The option that names it (``--card-template``).
        expected: What the option takes, for the message (``a Markdown file``).

    Raises:
        FileNotFoundError: No such file.
        ValueError: A folder, or not UTF-8 text.
    """
    path = Path(path)
    if path.is_dir():
        raise ValueError(f'{option} {path}: a folder, not a file; give {expected}')
    if not path.exists():
        raise FileNotFoundError(f'{option} {path}: no such file; give {expected}')
    try:
        return path.read_text(encoding='utf-8')
    except UnicodeDecodeError as e:
        raise ValueError(f'{option} {path}: not UTF-8 text (byte {e.start} is {e.object[e.start]:#04x}); give '
                         f'{expected}') from None
