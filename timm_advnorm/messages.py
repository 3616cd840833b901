"""The wording shared by the package's one-line errors: lists of names cut to a few (`counted_names`), tensor
shapes (`shape_text`), and text files read or refused in one line: any file the package reads as text (`read_utf8`:
a config, a recipe, a study spec, a results file, a run's summary), or one that an option names (`read_text_file`).

It imports nothing of the package, so that every floor, from the data to the Hub loading, says these things alike.
"""
from pathlib import Path
from typing import Iterable, Sequence, Union

__all__ = ['counted_names', 'not_utf8', 'read_text_file', 'read_utf8', 'shape_text', 'some_names']


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


def not_utf8(error: UnicodeDecodeError) -> str:
    """What a UTF-8 decoding error found, in words: ``not UTF-8 text (byte 10 is 0xe9)`` (a Latin-1 "é" at offset
    10), instead of Python's "'utf-8' codec can't decode byte 0xe9 in position 10: invalid continuation byte"."""
    return f'not UTF-8 text (byte {error.start} is {error.object[error.start]:#04x})'


def read_utf8(path: Union[str, Path], source: str = '') -> str:
    """The text of the file at `path`, read as UTF-8 whatever the locale, or one line naming it and the first byte
    that is not UTF-8: a file saved as Latin-1 would otherwise fail with Python's codec text, naming no file.

    Args:
        path: The file.
        source: What it is, for the message (``config file run.yaml``); default: its path.

    Raises:
        OSError: It cannot be read (missing, a folder, no permission).
        ValueError: ``SOURCE: not UTF-8 text (byte N is 0xNN); save it as UTF-8``.
    """
    try:
        return Path(path).read_text(encoding='utf-8')
    except UnicodeDecodeError as e:
        raise ValueError(f'{source or path}: {not_utf8(e)}; save it as UTF-8') from None


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
        raise ValueError(f'{option} {path}: {not_utf8(e)}; give {expected}') from None
