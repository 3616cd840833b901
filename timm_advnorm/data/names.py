"""Dataset names, resolved strictly: a name that is none of the known kinds is refused with the close matches.

timm reads every name it does not recognize as an image folder, so a typo (``--dataset digts``) or an unknown name
ran on whatever folder ``--data-dir`` held, or asked for a ``--data-dir`` without a word about the name.
"""
import difflib
from pathlib import Path
from typing import Collection

__all__ = ['TIMM_DATASET_PREFIXES', 'check_dataset_name']

#: The prefixes of timm's `create_dataset` (``timm.data.dataset_factory``, ``readers.reader_factory``): torchvision,
#: Hugging Face (map-style and iterable), TensorFlow and WebDataset readers, each ``PREFIX/NAME``.
TIMM_DATASET_PREFIXES = ('torch/', 'hfds/', 'hfids/', 'tfds/', 'wds/')


def check_dataset_name(name: str, builtin: Collection[str], option: str = '--dataset') -> None:
    """Refuse a dataset `name` that is none of: ``''`` (an image folder, given by ``--data-dir``), a built-in dataset
    (`builtin`), a name under a timm prefix (`TIMM_DATASET_PREFIXES`, case-insensitive as in timm), or an existing
    folder.

    Raises:
        ValueError: One line naming `option`, the close matches, and the names it takes.
    """
    if (not name or name in builtin or name.lower().startswith(TIMM_DATASET_PREFIXES)
            or Path(name).expanduser().is_dir()):
        return
    if '/' in name:  # a mistyped prefix (tfsd/mnist)
        prefix, rest = name.split('/', 1)
        close = [p + rest for p in difflib.get_close_matches(prefix.lower() + '/', TIMM_DATASET_PREFIXES, n=2)]
    else:
        close = difflib.get_close_matches(name.lower(), list(builtin), n=2)
    hint = f'; did you mean {" or ".join(close)}?' if close else ''
    timm_names = ', '.join(f'{p}NAME' for p in TIMM_DATASET_PREFIXES)
    raise ValueError(f"{option} {name}: unknown dataset{hint or '.'} {option} takes {', '.join(builtin)} (built in), "
                     f"a timm dataset ({timm_names}), or '' for an image folder (--data-dir)")
