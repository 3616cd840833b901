"""Documentation tables generated from recorded study results, never typed by hand.

A page marks where a study's recorded results go::

    <!-- study-results: galloway-mnist/mnist -->
    (generated: replaced by `update_document`)
    <!-- /study-results -->

and ``timm-advnorm-study --update-docs README.md`` fills each marked block from ``docs/results/<study>/<scale>/``
(`timm_advnorm.study.record`): where and how the numbers were produced (``provenance.json``), the findings with their
verdicts counted and tabled (``findings.csv``), every grid point (``grid.csv``) and the paper's ratio tables
(``ratios.csv``). A test regenerates every block and fails when a page differs from its files, so a number that
changes is a changed file in a commit.
"""
import csv
import io
import json
import re
from pathlib import Path
from typing import Any, Dict, List, Sequence

from ..durations import duration_text
from ..messages import read_utf8
from ..write_guard import atomic_write
from .findings import format_estimate, format_paper_value, is_loss, number_digits, summarize_verdicts
from .spec import load_study
from .table import SPREADS, metric_title

__all__ = ['BLOCK', 'PARTS', 'record_folder', 'render_record', 'update_document']

#: A marked block: its study and scale, and what it holds now.
BLOCK = re.compile(r'(<!-- study-results: (?P<study>[\w-]+)/(?P<scale>[\w-]+) -->\n)(?P<body>.*?)'
                   r'(<!-- /study-results -->)', re.S)
#: What a record's Markdown holds, in order: ``findings`` (provenance, verdicts, the findings table) and ``results``
#: (every grid point, the paper's ratio tables). The documentation site shows either part where it fits.
PARTS = ('findings', 'results')


def _rows(path: Path) -> List[Dict[str, str]]:
    return list(csv.DictReader(io.StringIO(read_utf8(path))))


def _markdown(header: Sequence[str], rows: Sequence[Sequence[str]]) -> List[str]:
    return ['| ' + ' | '.join(header) + ' |', '|' + ' --- |' * len(header),
            *('| ' + ' | '.join(row) + ' |' for row in rows)]


def _number(text: str, digits: int) -> str:
    return '—' if text == '' else f'{float(text):.{digits}f}'


def _cell_computing(invocations: Sequence[Dict[str, Any]], machine: Dict[str, Any]) -> str:
    """How the cells computed: how many ran at once and on how many torch threads each, every way the invocations
    used (records older than ``--jobs`` ran one cell at a time on the process's own threads)."""
    ways = dict.fromkeys((i.get('jobs', 1), i.get('cell_threads', i.get('machine', machine)['threads']))
                         for i in invocations)
    texts = []
    for jobs, threads in ways:
        on_threads = f'{threads} torch thread{"s" if threads > 1 else ""}'
        texts.append(f'one at a time on {on_threads}' if jobs == 1 else f'{jobs} at a time on {on_threads} each')
    return ' or '.join(texts)


def _provenance(record: Path) -> str:
    """Who recorded the results: the command, its invocations, their wall time, commits and machine; and how many of
    the recorded cells no invocation it lists ran (entries lost, or cells run elsewhere)."""
    provenance = json.loads(read_utf8(record / 'provenance.json'))
    machine, invocations = provenance['machine'], provenance['invocations']
    commits = list(dict.fromkeys(i['commit'][:12] for i in invocations))
    text = (f'Recorded by `{provenance["command"]}` in {len(invocations)} invocation(s) from '
            f'{provenance["started"]}, {duration_text(provenance["wall_s"])} of wall time in all, at commit(s) '
            f'{", ".join(commits)}, on {machine["cpu"]} ({machine["cores"]} cores; cells '
            f'{_cell_computing(invocations, machine)}), torch {machine["torch"]}, timm {machine["timm"]}.')
    ran = {cell for invocation in invocations for cell in invocation.get('cells_run', ())}
    results = record / 'results.csv'
    cells = [row['cell'] for row in _rows(results)] if results.is_file() else []
    unlisted = [cell for cell in cells if cell not in ran]
    if unlisted:
        text += (f' {len(unlisted)} of its {len(cells)} cells ran in invocations it does not list (their time and '
                 f'commits are not counted above).')
    return text


def record_folder(record_root: Path, study: str, scale: str) -> Path:
    """The recorded result folder of `study` at `scale` under `record_root`.

    Raises:
        ValueError: Nothing is recorded there (the message names the folder and the command that records it).
    """
    record = record_root / study / scale
    if not (record / 'findings.csv').is_file():
        raise ValueError(f'{study}/{scale} has no recorded results in {record} (run timm-advnorm-study {study} '
                         f'--scale {scale} --record {record_root})')
    return record


def render_record(record: Path, study: str, parts: Sequence[str] = PARTS) -> str:
    """The Markdown of a recorded study result folder `record` (of study `study`).

    Args:
        parts: Which of `PARTS` to render (both, as a README block holds them, by default).
    """
    spec = load_study(study)
    spread = spec.spread
    findings = _rows(record / 'findings.csv')
    verdicts = [(f['held_direction'], f['held_size']) for f in findings]
    found = [_provenance(record), '', summarize_verdicts(verdicts), '']

    def digits(row: Dict[str, str]) -> int:
        return number_digits(row['metric'], row['measure'], float(row['paper_se'] or 0))

    def ours(row: Dict[str, str]) -> str:
        if row['ours'] == '':
            return '—'
        return format_estimate(float(row['ours']), float(row['ours_se']), int(row['n']), digits(row))

    def paper(row: Dict[str, str]) -> str:
        if row['paper'] == '':
            return row['paper_printed']
        tolerance = float(row['tolerance']) if row.get('tolerance') else None
        value = format_paper_value(float(row['paper']), float(row['paper_se']), tolerance, digits(row))
        return f'{row["measure"]} {value}'

    found += _markdown(['finding', 'source', 'paper', 'ours (± standard error)', 'direction held', 'size held'],
                       [[f['finding'], f['source'] or '—', paper(f), ours(f), f['held_direction'], f['held_size']]
                        for f in findings])
    grid = _rows(record / 'grid.csv')
    axes = spec.axes
    metrics = [m for m in ('clean', *spec.plot.y, *spec.metrics, *(f.metric for f in spec.findings))
               if f'{m}_mean' in (grid[0] if grid else {})]
    metrics = list(dict.fromkeys(metrics))
    column = 'se' if spread == 'se' else 'std'
    lines = [f'Every grid point (mean ± {SPREADS[spread]}):', '']
    lines += _markdown([*axes, 'seeds', *(metric_title(m) for m in metrics)],
                       [[*(row[a] for a in axes), row['seeds_done'],
                         *(f'{_number(row[f"{m}_mean"], 3 if is_loss(m) else 1)} ± '
                           f'{_number(row[f"{m}_{column}"], 3 if is_loss(m) else 1)}' for m in metrics)]
                        for row in grid])
    ratios_file = record / 'ratios.csv'
    if ratios_file.is_file():
        ratio_rows = _rows(ratios_file)
        for table in spec.ratios:
            rows = [r for r in ratio_rows if r['table'] == table.title]
            points = list(dict.fromkeys(tuple(r[a] for a in axes) + (r['shown_as'],) for r in rows))
            values = {(tuple(r[a] for a in axes) + (r['shown_as'],), r['metric']): r for r in rows}
            body = []
            for point in points:
                cells = []
                for metric in table.metrics:
                    r = values.get((point, metric))
                    digits = number_digits(metric, point[-1])
                    cells.append('—' if r is None or r['mean'] == '' else
                                 f'{float(r["mean"]):.{digits}f} ± {float(r[column]):.{digits}f}')
                body.append([*point[:-1], 'measured' if point[-1] == 'measured' else 'ratio', *cells])
            lines += ['', f'{table.title} (ratios taken seed by seed; ± {SPREADS[spread]}):', '']
            lines += _markdown([*axes, 'shown as', *(metric_title(m) for m in table.metrics)], body)
    rendered = {'findings': found, 'results': lines}
    return '\n\n'.join('\n'.join(rendered[part]) for part in PARTS if part in parts) + '\n'


def update_document(path: Path, record_root: Path, check: bool = False) -> List[str]:
    """Regenerate every marked block of `path` from `record_root`; the blocks that changed (``study/scale``).

    Args:
        check: Only compare: leave `path` as it is.

    Raises:
        ValueError: A block names a study or scale with no record under `record_root`.
    """
    text = read_utf8(path)
    changed: List[str] = []

    def fill(match: re.Match) -> str:
        name = f'{match["study"]}/{match["scale"]}'
        try:
            record = record_folder(record_root, match['study'], match['scale'])
        except ValueError as error:
            raise ValueError(f'{path}: the block for {error}') from None
        body = render_record(record, match['study'])
        if body != match['body']:
            changed.append(name)
        return match.group(1) + body + match.group(5)

    updated = BLOCK.sub(fill, text)
    if changed and not check:
        atomic_write(path, lambda tmp: tmp.write_text(updated))
    return changed
