"""Directives that insert recorded numbers into a page when the site is built, so that no page types them.

``.. study-results:: galloway/digits`` inserts the tables of the committed study result folder
``docs/results/galloway/digits/``: exactly what ``timm-advnorm-study --update-docs`` writes into a README block
(`timm_advnorm.study.document.render_record`), rendered as tables. ``:part: findings`` keeps the provenance, the
verdicts and the findings table; ``:part: results`` every grid point and the paper's ratio tables.

``.. recorded-table:: demo/report.md`` inserts a committed Markdown file under ``docs/results/`` (``:tables-only:``
keeps its tables and drops its prose).

A folder or file that is not recorded is an error naming it, so a page cannot quote results that are not committed.
"""
from pathlib import Path
from typing import Dict, List

from docutils import nodes
from docutils.parsers.rst import directives
from sphinx.application import Sphinx
from sphinx.util.docutils import SphinxDirective

from markdown_nodes import MarkdownError, markdown_nodes
from timm_advnorm.messages import read_utf8
from timm_advnorm.study.document import PARTS, record_folder, render_record

__all__ = ['RecordedTable', 'StudyResults', 'setup']


class _RecordedDirective(SphinxDirective):
    """What both directives share: the folder of recorded results, and errors that name the page's line."""
    required_arguments = 1
    has_content = False

    @property
    def results_root(self) -> Path:
        """The folder of recorded results (``recorded_results_root``, relative to the pages' folder)."""
        return Path(self.env.srcdir) / self.config.recorded_results_root

    def nodes_of(self, markdown: str, source: Path) -> List[nodes.Node]:
        self.env.note_dependency(str(source))
        try:
            return markdown_nodes(markdown, str(source))
        except MarkdownError as error:
            raise self.error(f'{self.name}: {error}') from None


class StudyResults(_RecordedDirective):
    """``.. study-results:: STUDY/SCALE``: the recorded tables of a study, as ``--update-docs`` writes them."""
    option_spec = {'part': lambda value: directives.choice(value, PARTS)}

    def run(self) -> List[nodes.Node]:
        study, _, scale = self.arguments[0].partition('/')
        if not study or not scale:
            raise self.error(f'{self.name}: expected STUDY/SCALE (e.g. galloway/digits), got {self.arguments[0]!r}')
        parts = (self.options['part'],) if 'part' in self.options else PARTS
        try:
            record = record_folder(self.results_root, study, scale)
            markdown = render_record(record, study, parts)
        except (ValueError, OSError, KeyError) as error:
            raise self.error(f'{self.name}: {error}') from None
        for name in ('provenance.json', 'findings.csv', 'grid.csv', 'ratios.csv'):
            if (record / name).is_file():
                self.env.note_dependency(str(record / name))
        return self.nodes_of(markdown, record)


class RecordedTable(_RecordedDirective):
    """``.. recorded-table:: PATH``: a committed Markdown file under the recorded results (its tables, by
    ``:tables-only:``)."""
    option_spec = {'tables-only': directives.flag}

    def run(self) -> List[nodes.Node]:
        root = self.results_root.resolve()
        path = (root / self.arguments[0]).resolve()
        if not path.is_relative_to(root):
            raise self.error(f'{self.name}: {self.arguments[0]} is outside the recorded results ({root})')
        if not path.is_file():
            raise self.error(f'{self.name}: no recorded file {path}')
        try:
            markdown = read_utf8(path)
        except (ValueError, OSError) as error:
            raise self.error(f'{self.name}: {error}') from None
        found = self.nodes_of(markdown, path)
        if 'tables-only' in self.options:
            found = [node for node in found if isinstance(node, nodes.table)]
            if not found:
                raise self.error(f'{self.name}: {path} holds no table')
        return found


def setup(app: Sphinx) -> Dict[str, object]:
    app.add_config_value('recorded_results_root', 'results', 'env', types=[str])
    app.add_directive('study-results', StudyResults)
    app.add_directive('recorded-table', RecordedTable)
    return {'version': '1', 'parallel_read_safe': True, 'parallel_write_safe': True}
