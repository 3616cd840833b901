"""Sphinx configuration of the timm-advnorm documentation site.

Build it from the setup's environment (``bash scripts/setup.sh`` installs the ``docs`` extra) with warnings as
errors, as the tests do (``tests/test_docs.py``)::

    python -m sphinx -W --keep-going -b html docs docs/_build/html

Numbers about runs are never typed into a page: the ``study-results`` and ``recorded-table`` directives insert them
from the committed files under ``docs/results/`` when the site is built, and ``command-help`` inserts each command's
``--help`` from its parser.
"""
import sys
from pathlib import Path

DOCS = Path(__file__).resolve().parent
# The checkout's package (not an installed copy) is the one documented; the site's own extensions live in _ext/.
sys.path[:0] = [str(DOCS.parent), str(DOCS / '_ext')]

import timm_advnorm  # noqa: E402  (after the path above)

project = 'timm-advnorm'
author = 'the timm-advnorm authors'
copyright = 'the timm-advnorm authors; Apache-2.0'  # noqa: A001  (Sphinx's name)
# One version, the package's own (pyproject.toml reads the same attribute).
release = timm_advnorm.__version__
version = release

extensions = [
    'sphinx.ext.autodoc',
    'sphinx.ext.napoleon',
    'recorded_results',
    'command_help',
    'api_coverage',
]

root_doc = 'index'
source_suffix = {'.rst': 'restructuredtext'}
# results/ holds the committed study results the directives read, not pages.
exclude_patterns = ['_build', 'results', 'Thumbs.db', '.DS_Store']
templates_path = []

# Every cross-reference must resolve, but for the ones listed here: names outside this project that no inventory
# resolves offline (intersphinx would download one), and the project's types that signatures name but no public
# module exports (each named, so that a new unresolved reference fails the build).
nitpicky = True
nitpick_ignore_regex = [
    ('py:(class|exc|obj)', r'(torch|timm|numpy|np|nn|tqdm|argparse|pathlib|dataclasses|collections\.abc|typing|enum|os'
                           r'|concurrent)\..*'),
    ('py:class', r'(Tensor|Module|Path|Namespace|Enum)'),
    # type variables of generic helpers
    ('py:class', r'timm_advnorm\.[\w.]+\.T'),
    # each attack's configuration class, which `attack_dataclass` derives from its fields (documented by AttackConfig)
    ('py:class', r'timm_advnorm\.attacks\.[\w.]+\.Config'),
]
_INTERNAL_TYPES = {
    'attacks': ['apgd._APGD', 'bim._BIM', 'eval_attack.NoiseAttack', 'pgd.BestAndLast'],
    'eval': ['plan.stage_plan.SanityBudget', 'plan.stage_plan.SanityPlan', 'plan.stages.Stage', 'schema.AmpCheck',
             'schema.BNStats', 'schema.ProtocolInfo', 'schema.VariantResult', 'schema._Record'],
    'hub': ['model_stats.ModelStats'],
    'task': ['alp.AlpOptions', 'fast_advprop.FastAdvPropOptions', 'mbn.MbnOptions', 'mixed.MixedOptions',
             'nofrost.NofrostOptions'],
}
nitpick_ignore = [('py:class', f'timm_advnorm.{package}.{name}')
                  for package, names in _INTERNAL_TYPES.items() for name in names]
nitpick_ignore += [('py:exc', 'WriteError')]  # timm_advnorm.write_guard's, named in Raises sections

napoleon_google_docstring = True
napoleon_numpy_docstring = False
napoleon_use_rtype = False
# A class's Attributes section as fields of the class: autodoc documents the attributes themselves too.
napoleon_use_ivar = True
autodoc_default_options = {'members': True, 'show-inheritance': True}
autodoc_member_order = 'bysource'
autodoc_typehints = 'description'

# The committed results the recorded-results directives read (an absolute path: a test builds single pages from a
# folder of their own with this configuration).
recorded_results_root = str(DOCS / 'results')

html_theme = 'alabaster'
html_title = f'timm-advnorm {release}'
html_theme_options = {
    'description': 'Normalization-aware adversarial training and robust evaluation for timm',
    'fixed_sidebar': True,
    'page_width': '1200px',
    'sidebar_width': '240px',
}
html_static_path = []
