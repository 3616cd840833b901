"""The API reference documents every public name: a build check, and constants' doc comments where they are defined.

A module of the package that the reference documents (``.. automodule:: timm_advnorm.layers``) declares its public
names in ``__all__``. When every page has been read, each of those names must be in the reference, and each
documented object must have a docstring; otherwise the build warns (an error with ``-W``), naming the module and
the name. Autodoc leaves out a member without a docstring, so a missing docstring shows as a missing name.

A package re-exports constants defined in its submodules (``timm_advnorm.layers.ROUTES`` is defined in
``timm_advnorm.layers.mixture_bn``), where their ``#:`` doc comment is; autodoc reads comments only in the module
it documents, so this extension looks the comment up in the submodule that defines the constant (the page names
the constant with ``.. autodata::``: autodoc's ``:members:`` leaves out a re-exported constant).

A type hint names a class where it is defined (``timm_advnorm.attacks.space.InputSpace``), the reference where it
is public (``timm_advnorm.attacks.InputSpace``): such a reference resolves to the public name of the same object.

Napoleon reads the first line of a property's or constant's docstring as ``type: description``; the project's
start with a sentence (``Results key: ``model``, ``clean``...``), whose words before the colon are no type. Such a
docstring is read as any other Google-style docstring instead.
"""
import importlib
import re
import sys
from typing import Any, Dict, List, Optional, Set

from docutils import nodes

from sphinx.application import Sphinx
from sphinx.environment import BuildEnvironment
from sphinx.ext.napoleon.docstring import GoogleDocstring
from sphinx.pycode import ModuleAnalyzer
from sphinx.util import logging

__all__ = ['constant_comment', 'public_name', 'setup']

_logger = logging.getLogger(__name__)
_UNDOCUMENTED = 'api_coverage_undocumented'
_PROSE = 'api_coverage:prose'
# A first line whose words before the first colon hold a space: prose, not a type (``Results key: ...``).
_PROSE_FIRST_LINE = re.compile(r'[^:`]*\s[^:`]*:(\s|$)')
_ATTRIBUTE_KINDS = ('attribute', 'data', 'property')


def constant_comment(package: str, name: str, value: Any) -> Optional[List[str]]:
    """The ``#:`` doc comment of constant `name` (whose value is `value`), read in the loaded module of `package`
    that defines it (the one with that object under that name and a comment for it); None when there is none."""
    for module_name in sorted(m for m in sys.modules if m == package or m.startswith(package + '.')):
        if getattr(sys.modules[module_name], name, None) is not value:
            continue
        try:
            comment = ModuleAnalyzer.for_module(module_name).find_attr_docs().get(('', name))
        except Exception:  # noqa: BLE001  (a module without source, e.g. compiled: no comment to read)
            continue
        if comment:
            return list(comment)
    return None


def public_name(target: str, documented: Set[str]) -> Optional[str]:
    """The documented name (in `documented`) of the object that `target` names where it is defined: the same
    object under a shorter module path (``a.b.c.Name`` -> ``a.b.Name`` or ``a.Name``); None when there is none."""
    module_name, _, name = target.rpartition('.')
    module = sys.modules.get(module_name)
    if module is None or not hasattr(module, name):
        return None
    parts = module_name.split('.')
    for length in range(len(parts) - 1, 0, -1):
        candidate = '.'.join(parts[:length])
        if (f'{candidate}.{name}' in documented and candidate in sys.modules
                and getattr(sys.modules[candidate], name, None) is getattr(module, name)):
            return f'{candidate}.{name}'
    return None


def _resolve_public(app: Sphinx, env: BuildEnvironment, node: nodes.Element, contnode: nodes.Element
                    ) -> Optional[nodes.Element]:
    if node.get('refdomain') != 'py' or not node.get('reftarget', '').startswith(app.config.api_coverage_package):
        return None
    domain = env.get_domain('py')
    name = public_name(node['reftarget'], set(domain.objects))
    if name is None:
        return None
    return domain.resolve_xref(env, node['refdoc'], app.builder, node['reftype'], name, node, contnode)


def _keep_prose(app: Sphinx, what: str, name: str, obj: Any, options: Dict, lines: List[str]) -> None:
    """Before napoleon: note the docstring of a property or constant whose first line is prose with a colon."""
    if what in _ATTRIBUTE_KINDS and lines and _PROSE_FIRST_LINE.match(lines[0].strip()):
        app.env.temp_data[_PROSE] = (name, list(lines))


def _read_prose(app: Sphinx, what: str, name: str, obj: Any, options: Dict, lines: List[str]) -> None:
    """After napoleon: read a noted docstring as a function's (its sections converted, no type taken off)."""
    noted = app.env.temp_data.pop(_PROSE, None)
    if noted is not None and noted[0] == name:
        lines[:] = GoogleDocstring(noted[1], app.config, app, 'function', name, obj, options).lines()


def _fill_docstring(app: Sphinx, what: str, name: str, obj: Any, options: Dict, lines: List[str]) -> None:
    """Give a constant its doc comment from the defining module; note any documented object left without one."""
    if what in ('data', 'attribute') and not any(line.strip() for line in lines):
        lines.extend(constant_comment(app.config.api_coverage_package, name.rpartition('.')[2], obj) or [])
    if not any(line.strip() for line in lines):
        getattr(app.env, _UNDOCUMENTED).setdefault(app.env.docname, set()).add(name)


def _init_env(app: Sphinx, env: BuildEnvironment, docnames: Set[str]) -> None:
    if not hasattr(env, _UNDOCUMENTED):
        setattr(env, _UNDOCUMENTED, {})


def _purge(app: Sphinx, env: BuildEnvironment, docname: str) -> None:
    getattr(env, _UNDOCUMENTED, {}).pop(docname, None)


def _merge(app: Sphinx, env: BuildEnvironment, docnames: Set[str], other: BuildEnvironment) -> None:
    mine = getattr(env, _UNDOCUMENTED)
    for docname, names in getattr(other, _UNDOCUMENTED, {}).items():
        if docname in docnames:
            mine[docname] = names


def _check(app: Sphinx, env: BuildEnvironment) -> None:
    """Every name in a documented module's ``__all__`` is in the reference, with a docstring."""
    domain = env.get_domain('py')
    documented = domain.objects
    prefix = app.config.api_coverage_package + '.'
    for module_name, entry in sorted(domain.modules.items()):
        if not (module_name + '.').startswith(prefix):
            continue
        public = getattr(importlib.import_module(module_name), '__all__', None)
        if public is None:
            _logger.warning('%s is in the API reference but has no __all__: its public names are undefined',
                            module_name, location=entry.docname, type='api', subtype='coverage')
            continue
        for name in public:
            if f'{module_name}.{name}' not in documented:
                _logger.warning('%s.%s is public (in __all__) but not in the API reference (autodoc leaves out a '
                                'name without a docstring)', module_name, name, location=entry.docname,
                                type='api', subtype='coverage')
    for docname, names in sorted(getattr(env, _UNDOCUMENTED, {}).items()):
        for name in sorted(names):
            _logger.warning('%s is in the API reference without a docstring', name, location=docname,
                            type='api', subtype='coverage')


def setup(app: Sphinx) -> Dict[str, object]:
    app.setup_extension('sphinx.ext.autodoc')
    app.add_config_value('api_coverage_package', 'timm_advnorm', 'env', types=[str])
    app.connect('env-before-read-docs', _init_env)
    app.connect('env-purge-doc', _purge)
    app.connect('env-merge-info', _merge)
    app.connect('missing-reference', _resolve_public)
    app.setup_extension('sphinx.ext.napoleon')
    app.connect('autodoc-process-docstring', _keep_prose, priority=400)
    app.connect('autodoc-process-docstring', _read_prose, priority=600)
    app.connect('autodoc-process-docstring', _fill_docstring, priority=700)
    app.connect('env-check-consistency', _check)
    return {'version': '1', 'env_version': 1, 'parallel_read_safe': True, 'parallel_write_safe': True}
