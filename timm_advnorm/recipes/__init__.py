"""Training recipes shipped with the package: YAML files of `train_adv.py` argument defaults.

``timm-advnorm-train -c NAME`` (or ``train_adv.py -c NAME``) takes a packaged recipe by name as well as any YAML
file by path; ``--list-recipes`` lists them. Each file's leading comment says what it reproduces and from where.
"""
from pathlib import Path
from typing import List

from ..messages import read_utf8
from ..strict_yaml import YAML_SUFFIX, load_yaml, yaml_files

__all__ = ['list_recipes', 'recipe_path', 'describe_recipe', 'resolve_config']

_FOLDER = Path(__file__).resolve().parent


def list_recipes() -> List[str]:
    """Names of the packaged recipes, sorted."""
    return list(yaml_files(_FOLDER))


def recipe_path(name: str) -> Path:
    """The file of the packaged recipe `name` (with or without ``.yaml``).

    Raises:
        ValueError: No packaged recipe has that name.
    """
    stem = name[:-len(YAML_SUFFIX)] if name.endswith(YAML_SUFFIX) else name
    recipes = yaml_files(_FOLDER)
    if stem not in recipes:
        raise ValueError(f'config {name!r} is neither a file nor a packaged recipe ({", ".join(recipes)}; '
                         f'--list-recipes describes them)')
    return recipes[stem]


def resolve_config(name_or_path: str) -> Path:
    """A ``-c`` value as a file: an existing path wins, else a packaged recipe name.

    Raises:
        ValueError: Neither a file nor a packaged recipe.
    """
    path = Path(name_or_path).expanduser()
    return path if path.is_file() else recipe_path(name_or_path)


def describe_recipe(name: str) -> str:
    """One line saying what the packaged recipe `name` trains: model, method, data set and epochs."""
    path = recipe_path(name)
    config = load_yaml(read_utf8(path, f'recipe {path}'), f'recipe {path}') or {}
    data = config.get('dataset') or 'image folder (--data-dir)'
    return (f"--model {config.get('model')} --method {config.get('method')}, {data}, {config.get('epochs')} epochs, "
            f"batch {config.get('batch_size')} per process")
