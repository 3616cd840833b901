"""The subpackages of ``timm_advnorm`` form a DAG: no import cycle between them, function-level imports included.

Read from the source (every ``import`` statement, wherever it sits), so a cycle that only closes inside a function
fails here before it fails a user. Imports under ``if TYPE_CHECKING:`` and the ``__main__`` entry points (which
only forward to the commands) are not runtime dependencies of the package and are left out.
"""
import ast
from collections import defaultdict
from pathlib import Path
from typing import Dict, List, Set, Tuple

PACKAGE = Path(__file__).resolve().parents[1] / 'timm_advnorm'
Edges = Dict[str, Dict[str, Set[str]]]


def _unit(module: str) -> str:
    """The top-level subpackage or module of ``timm_advnorm`` a dotted name lies in ('' for the package itself)."""
    parts = module.split('.')
    return parts[1] if len(parts) > 1 and parts[0] == 'timm_advnorm' else ''


def _imported(tree: ast.Module, package: str) -> List[str]:
    """The absolute names every runtime import of `tree` reaches (``from a import b`` reaches ``a`` and ``a.b``)."""
    checked_only = {id(node) for branch in ast.walk(tree) if isinstance(branch, ast.If)
                    and 'TYPE_CHECKING' in ast.dump(branch.test) for node in ast.walk(branch)}
    names = []
    for node in ast.walk(tree):
        if id(node) in checked_only:
            continue
        if isinstance(node, ast.Import):
            names += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = package.split('.')[:len(package.split('.')) - node.level + 1] if node.level else []
            module = '.'.join(base + [node.module] if node.module else base)
            names += [module] + [f'{module}.{alias.name}' for alias in node.names]
    return names


def package_edges() -> Edges:
    """``{unit: {imported unit: files}}`` over the package's source."""
    units = {path.stem for path in PACKAGE.iterdir() if path.suffix == '.py' or (path / '__init__.py').exists()}
    edges: Edges = defaultdict(lambda: defaultdict(set))
    for path in PACKAGE.rglob('*.py'):
        if path.name == '__main__.py':
            continue
        module = '.'.join(path.relative_to(PACKAGE.parent).with_suffix('').parts)
        package = module.rsplit('.', 1)[0]  # the package a relative import starts from (also for __init__)
        source = _unit(module)
        for name in _imported(ast.parse(path.read_text(encoding='utf-8')), package):
            target = _unit(name)
            if source and target in units and target != source:
                edges[source][target].add(str(path.relative_to(PACKAGE.parent)))
    return edges


def cycles(edges: Edges) -> List[List[str]]:
    """The strongly connected components of more than one unit (Tarjan's algorithm), each sorted."""
    index: Dict[str, int] = {}
    low: Dict[str, int] = {}
    stack: List[str] = []
    found = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for target in edges.get(node, {}):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while not component or component[-1] != node:
                component.append(stack.pop())
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(edges):
        if node not in index:
            visit(node)
    return found


def _cycle_edges(edges: Edges, component: List[str]) -> List[Tuple[str, str, List[str]]]:
    return [(source, target, sorted(files)) for source in component for target, files in sorted(edges[source].items())
            if target in component]


def test_subpackages_import_without_cycles():
    edges = package_edges()
    found = cycles(edges)
    assert found == [], '\n'.join(f'{source} -> {target}: {", ".join(files)}' for component in found
                                  for source, target, files in _cycle_edges(edges, component))


def test_the_check_finds_a_cycle_and_the_floors_it_relies_on():
    assert cycles({'a': {'b': set()}, 'b': {'c': set()}, 'c': {'a': set()}, 'd': {'a': set()}}) == [['a', 'b', 'c']]
    edges = package_edges()
    assert 'eval' in edges['hub'] and 'weights' in edges['eval'] and 'weights' in edges['train']
    assert not {'eval', 'hub', 'train', 'task', 'study', 'commands'} & set(edges['weights'])
