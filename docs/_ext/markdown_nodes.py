"""The small Markdown the project's recorded files are written in, as docutils nodes.

The committed results (``docs/results/``) and the study tables (`timm_advnorm.study.document`) are Markdown:
headings, paragraphs, bullet lists and pipe tables, with ``code``, ``**strong**`` and ``*emphasis*`` inline. No
Markdown parser is installed (MyST is not available offline), so this reads exactly that subset and refuses anything
else with its line number, rather than rendering it wrong.
"""
import re
from typing import List, Sequence

from docutils import nodes

__all__ = ['MarkdownError', 'markdown_nodes']

_INLINE = re.compile(r'`(?P<code>[^`]+)`|\*\*(?P<strong>.+?)\*\*|\*(?P<emphasis>[^*\s][^*]*?)\*')
_HEADING = re.compile(r'(#{1,6})\s+(.*)')
_SEPARATOR = re.compile(r':?-{3,}:?')
_BULLET = re.compile(r'[-*]\s+')
_UNSUPPORTED = (('```', 'a code fence'), ('![', 'an image'), ('>', 'a block quote'), ('<', 'HTML'))


class MarkdownError(ValueError):
    """Markdown outside the supported subset, or a malformed table; the message names the line."""


def _inline(text: str) -> List[nodes.Node]:
    """Text with its ``code``, strong and emphasized spans."""
    result: List[nodes.Node] = []
    position = 0
    for match in _INLINE.finditer(text):
        if match.start() > position:
            result.append(nodes.Text(text[position:match.start()]))
        if match['code'] is not None:
            result.append(nodes.literal(match['code'], match['code']))
        elif match['strong'] is not None:
            result.append(nodes.strong('', '', *_inline(match['strong'])))
        else:
            result.append(nodes.emphasis('', '', *_inline(match['emphasis'])))
        position = match.end()
    if position < len(text):
        result.append(nodes.Text(text[position:]))
    return result


def _cells(line: str) -> List[str]:
    return [cell.strip() for cell in line.strip().strip('|').split('|')]


def _table(lines: Sequence[str], first: int, source: str) -> nodes.table:
    """A pipe table: a header row, a separator row (``---``, ``:---:``), then the body rows."""
    header = _cells(lines[0])
    if len(lines) < 2 or not all(_SEPARATOR.fullmatch(cell) for cell in _cells(lines[1])):
        raise MarkdownError(f'{source}:{first + 2}: a table needs a separator row (| --- |) under its header')
    rows = [_cells(line) for line in lines[2:]]
    for number, row in enumerate(rows, start=first + 3):
        if len(row) != len(header):
            raise MarkdownError(f'{source}:{number}: a table row has {len(row)} cells, its header {len(header)}')
    group = nodes.tgroup(cols=len(header))
    group += [nodes.colspec(colwidth=1) for _ in header]

    def row_node(cells: Sequence[str]) -> nodes.row:
        return nodes.row('', *(nodes.entry('', nodes.paragraph('', '', *_inline(cell))) for cell in cells))

    group += nodes.thead('', row_node(header))
    group += nodes.tbody('', *(row_node(row) for row in rows))
    return nodes.table('', group)


def markdown_nodes(text: str, source: str) -> List[nodes.Node]:
    """The nodes of Markdown `text` (read from `source`, named in errors); a heading becomes a rubric, since a
    directive's content cannot open a section of the page it is in.

    Raises:
        MarkdownError: `text` uses Markdown outside the subset, or a table is malformed.
    """
    lines = text.splitlines()
    for number, line in enumerate(lines, start=1):
        for start, what in _UNSUPPORTED:
            if line.strip().startswith(start):
                raise MarkdownError(f'{source}:{number}: {what} is not supported in a recorded file')
    result: List[nodes.Node] = []
    index = 0
    while index < len(lines):
        line = lines[index]
        stripped = line.strip()
        if not stripped:
            index += 1
            continue
        end = index + 1
        if stripped.startswith('|'):
            while end < len(lines) and lines[end].strip().startswith('|'):
                end += 1
            result.append(_table(lines[index:end], index, source))
        elif _HEADING.fullmatch(stripped):
            result.append(nodes.rubric('', '', *_inline(_HEADING.fullmatch(stripped)[2])))
        elif _BULLET.match(stripped):
            items: List[List[str]] = []
            end = index
            while end < len(lines) and lines[end].strip():
                if _BULLET.match(lines[end].strip()):
                    items.append([_BULLET.sub('', lines[end].strip(), count=1)])
                else:  # a continuation line of the item above
                    items[-1].append(lines[end].strip())
                end += 1
            result.append(nodes.bullet_list('', *(nodes.list_item('', nodes.paragraph('', '', *_inline(' '.join(i))))
                                                  for i in items), bullet='-'))
        else:
            while end < len(lines) and lines[end].strip() and not lines[end].strip().startswith('|'):
                end += 1
            result.append(nodes.paragraph('', '', *_inline(' '.join(part.strip() for part in lines[index:end]))))
        index = end
    return result
