"""The one YAML reader of the files users give or the package ships: ``-c`` configs of training and evaluation, the
packaged recipes, study specs, and the run files the commands read back (`load_yaml`).

PyYAML's `yaml.safe_load` reads loosely what a person did not mean: a key given twice silently takes its second
value (``epochs: 90`` above ``epochs: 1`` trains one epoch), and an anchor that refers to itself
(``a: &x [*x]``) builds a structure without end, which fails far away ("Circular reference detected"). Here both
are errors naming the key, the file and the line, as is every YAML syntax error: one line, ``SOURCE is not valid
YAML: PROBLEM (line L, column C)``.

`yaml_files` lists a folder of them by name, as the packaged recipes and the shipped studies are found.
"""
from pathlib import Path
from typing import Any, Dict, List, Union

import yaml

__all__ = ['YAML_SUFFIX', 'YAMLFileError', 'load_yaml', 'yaml_files']

#: The suffix of the YAML files the package ships (recipes, studies).
YAML_SUFFIX = '.yaml'


class YAMLFileError(ValueError):
    """A YAML text that is not valid or not strict, as one line naming its source, the problem and where."""


def _where(mark: Any) -> str:
    return f' (line {mark.line + 1}, column {mark.column + 1})' if mark is not None else ''


def _key_text(node: yaml.Node) -> str:
    return repr(node.value) if isinstance(node, yaml.ScalarNode) else f'<{node.id} key>'


class _StrictLoader(yaml.SafeLoader):
    """`yaml.SafeLoader` that refuses a mapping key given twice (merge keys ``<<`` keep their meaning: a key given
    beside a merge overrides the merged one)."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> Dict[Any, Any]:
        seen: Dict[Any, yaml.Node] = {}
        for key_node, _ in node.value:
            if key_node.tag == 'tag:yaml.org,2002:merge':
                continue
            key = self.construct_object(key_node, deep=True)
            try:
                first = seen.setdefault(key, key_node)
            except TypeError:  # an unhashable key: SafeConstructor says so below
                continue
            if first is not key_node:
                raise yaml.constructor.ConstructorError(
                    None, None, f'key {_key_text(key_node)} appears twice (first on line {first.start_mark.line + 1}); '
                                f'give each key once', key_node.start_mark)
        return super().construct_mapping(node, deep=deep)


def _check_acyclic(root: yaml.Node) -> None:
    """Refuse an alias to a collection that contains it (``a: &x [*x]``), naming the key under which it refers back.

    Raises:
        yaml.composer.ComposerError: The first such alias found.
    """
    open_nodes: List[yaml.Node] = []
    done = set()

    def visit(node: yaml.Node, key_node: Union[yaml.Node, None]) -> None:
        if any(node is n for n in open_nodes):
            where = f'under key {_key_text(key_node)}' if key_node is not None else 'at the top'
            raise yaml.composer.ComposerError(
                None, None, f'an alias {where} refers to a collection that contains it (a recursive anchor); give '
                            f'plain values', key_node.start_mark if key_node is not None else node.start_mark)
        if id(node) in done or isinstance(node, yaml.ScalarNode):
            return
        open_nodes.append(node)
        if isinstance(node, yaml.MappingNode):
            for child_key, child in node.value:
                visit(child_key, key_node)
                visit(child, child_key)
        else:
            for child in node.value:
                visit(child, key_node)
        open_nodes.pop()
        done.add(id(node))

    visit(root, None)


def _problem(error: yaml.YAMLError, text: str) -> str:
    """What is wrong with a YAML text and where: ``<problem> (line L, column C)``."""
    if isinstance(error, yaml.reader.ReaderError):  # a control character: the reader gives an offset, no mark
        line = text.count('\n', 0, error.position) + 1
        column = error.position - text.rfind('\n', 0, error.position)
        return f'{error.reason} (line {line}, column {column})'
    mark = getattr(error, 'problem_mark', None) or getattr(error, 'context_mark', None)
    problem = getattr(error, 'problem', None) or ' '.join(str(error).split())
    return f'{problem}{_where(mark)}'


def load_yaml(text: str, source: str) -> Any:
    """The document in the YAML `text`, read strictly: no key twice in a mapping, no recursive anchor.

    Args:
        text: The YAML text.
        source: What it was read from, for the message (``config file run.yaml``).

    Raises:
        YAMLFileError: ``SOURCE is not valid YAML: PROBLEM (line L, column C)``, one line.
    """
    try:
        loader = _StrictLoader(text)  # the reader checks the characters here
    except yaml.YAMLError as e:
        raise YAMLFileError(f'{source} is not valid YAML: {_problem(e, text)}') from None
    try:
        node = loader.get_single_node()
        if node is None:
            return None
        _check_acyclic(node)
        return loader.construct_document(node)
    except yaml.YAMLError as e:
        raise YAMLFileError(f'{source} is not valid YAML: {_problem(e, text)}') from None
    finally:
        loader.dispose()


def yaml_files(folder: Path) -> Dict[str, Path]:
    """The YAML files (``*.yaml``) directly in `folder` by name (the file name without ``.yaml``), sorted by name."""
    return {path.stem: path for path in sorted(folder.glob(f'*{YAML_SUFFIX}'), key=lambda path: path.stem)}
