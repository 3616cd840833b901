"""A paper study as data: the declarative grid of a seed paper's comparison, loaded from a YAML file and checked.

A study file (``timm_advnorm/studies/<name>.yaml``, or any path) holds:

* ``title``, ``paper``: what it reproduces and from where.
* ``scales``: per scale (``digits``, ``mnist``, ``paper``: a seed paper's own data and length on a CPU, ``imagenet``)
  the base of every cell: a packaged training ``recipe`` (``-c``), further ``train`` options, the ``validate`` options
  of the evaluation, the ``seeds`` each cell is trained with, and ``values``: what an axis value means at this scale
  when it is more than one option (``family: {bn: {model: tiny_bn_resnet}}``). Option names are the commands' long
  options with underscores.
* ``grid``: blocks, each the product of its ``axes`` (name: list of values) with fixed ``train`` options. An axis
  value sets the training option of the axis's name unless the scale's ``values`` say otherwise.
* ``metric_variant``: the evaluated variant whose numbers a cell reports (``clean``: a mixture-BN model's clean
  branch); by default the evaluation's primary variant.
* ``findings``: the paper's claims, each a comparison of the cells matching ``higher`` with those matching
  ``lower`` on a ``metric`` (``clean``, ``robust``, ``attack:<label>`` or a loss), or a single table cell (``at``),
  with the paper's numbers as it prints them (``paper``), where in the paper (``source``), and optionally the
  paper's value of the measure with its standard error (``expect: {gap | ratio | value: V, se: S}``), a relative
  ``tolerance`` for its size, and ``direction: false`` for a claim of no difference
  (`timm_advnorm.study.findings`).
* ``spread``: what ± means in the tables: ``std`` (standard deviation over seeds, the default) or ``se`` (standard
  error of the mean, as Galloway et al. report).
* ``min_clean``: clean accuracy (%) below which a cell did not train: a finding reading it is not testable.
* ``ratios``: tables of the paper's that give each grid point's numbers as a ratio to a baseline grid point's
  (Galloway et al.'s Tables 11 and 12): per table a ``title``, the ``baseline`` (axis values of one grid point), the
  grid points it shows (``rows``: axis values, a list for several) and its ``metrics``; each ratio is taken seed by
  seed.
* ``metrics``: further metrics the table of cells shows (it always shows ``clean``, ``robust`` and those the findings,
  ratio tables and plot read).
* ``plot``: the paper-style figure (`timm_advnorm.study.plot`).
"""
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Mapping, Optional, Tuple, Union

from ..messages import read_utf8
from ..strict_yaml import load_yaml, yaml_files

__all__ = [
    'MEASURES', 'SCALES', 'Expected', 'Finding', 'GridBlock', 'PlotSpec', 'RatioTable', 'ScaleSpec', 'StudySpec',
    'list_studies', 'load_study', 'check_metric']

SCALES = ('digits', 'mnist', 'paper', 'imagenet')
PLOT_KINDS = ('line', 'tradeoff', 'bar')
_FOLDER = Path(__file__).resolve().parent.parent / 'studies'

Options = Dict[str, Any]


def check_metric(metric: str) -> str:
    """`metric` if a cell reports it: the accuracies ``clean``, ``robust`` or ``attack:<label>``, or a mean loss
    ``loss:clean`` or ``loss:<label>`` (of a protocol that records the loss)."""
    prefix = next((p for p in ('attack:', 'loss:') if metric.startswith(p)), None)
    if metric in ('clean', 'robust') or (prefix is not None and len(metric) > len(prefix)):
        return metric
    raise ValueError(f'metric {metric!r}: use clean, robust, attack:<label>, loss:clean or loss:<label>.')


@dataclass(frozen=True)
class ScaleSpec:
    """What every cell of a study shares at one scale.

    Attributes:
        recipe: Packaged training recipe (``-c``), or None.
        train: Training options over the recipe.
        validate: Evaluation options (the checkpoint and results file are the cell's).
        seeds: Training seeds; each cell trains once per seed.
        values: Per axis, the options an axis value stands for at this scale.
    """

    recipe: Optional[str]
    train: Options
    validate: Options
    seeds: Tuple[int, ...]
    values: Mapping[str, Mapping[Any, Options]]

    def options_for(self, axis: str, value: Any) -> Options:
        """The training options axis value `value` sets at this scale."""
        table = self.values.get(axis)
        if table is None:
            return {axis: value}
        if value not in table:
            known = ', '.join(map(str, table))
            raise ValueError(f'axis {axis!r} has no value {value!r} at this scale (known: {known}).')
        return dict(table[value])


@dataclass(frozen=True)
class GridBlock:
    """A product of axes with fixed options: ``axes`` maps each axis name to its values, in order."""

    axes: Mapping[str, Tuple[Any, ...]]
    train: Options = field(default_factory=dict)


@dataclass(frozen=True)
class Expected:
    """The paper's value of a finding's measure and its standard error (0 where the paper gives none)."""

    value: float
    se: float = 0.0


#: What a finding measures: the higher side minus the lower, the higher over the lower, or one side's value.
MEASURES = ('gap', 'ratio', 'value')


@dataclass(frozen=True)
class Finding:
    """A claim of the paper: the cells matching `higher` beat those matching `lower` on `metric`, or (measure
    ``value``) the cells matching `higher` (the YAML's ``at``) score what the paper reports.

    Attributes:
        claim: The claim in words.
        paper: The paper's number(s), as the paper reports them.
        metric: ``clean``, ``robust``, ``attack:<label>`` or a mean loss ``loss:clean``/``loss:<label>``.
        higher: Axis values of the cells expected to score higher (of a value: the cells read).
        lower: Axis values of the cells expected to score lower (empty for a value).
        source: Where the paper states it (``Table 6``, ``§4``).
        measure: ``gap``, ``ratio`` or ``value`` (`MEASURES`).
        expected: The paper's value of the measure, if it gives one: the finding then has a size verdict.
        tolerance: Relative tolerance of the size verdict beside the paper's interval (None: the interval alone).
        direction: Whether the claim has a direction (False: a claim of no difference, judged by size alone).
    """

    claim: str
    paper: str
    metric: str
    higher: Mapping[str, Any]
    lower: Mapping[str, Any]
    source: str = ''
    measure: str = 'gap'
    expected: Optional[Expected] = None
    tolerance: Optional[float] = None
    direction: bool = True


@dataclass(frozen=True)
class RatioTable:
    """A paper table of ratios to a baseline grid point.

    Attributes:
        title: Its heading (``Table 11: the linear model, ratios to √d = 28``).
        baseline: Axis values of the baseline grid point (shown as measured).
        rows: Axis values of the grid points shown as ratios (a tuple of values: any of them).
        metrics: The metrics it shows (`check_metric`).
    """

    title: str
    baseline: Mapping[str, Any]
    rows: Mapping[str, Tuple[Any, ...]]
    metrics: Tuple[str, ...]

    def shows(self, labels: Mapping[str, Any]) -> bool:
        """Whether the grid point with axis values `labels` is one of its rows."""
        return all(labels.get(axis) in values for axis, values in self.rows.items())


@dataclass(frozen=True)
class PlotSpec:
    """The study's figure (see `timm_advnorm.study.plot` for the kinds).

    Attributes:
        kind: ``line`` (a metric over a numeric axis), ``tradeoff`` (robust vs clean accuracy) or ``bar``.
        x: The axis along x (``line``, ``bar``) or labelling the points (``tradeoff``).
        y: The metrics drawn (``line``, ``bar``).
        series: The axis whose values make one line, colour or bar group each (optional).
        select: Axis values of the grid points drawn (default: all).
        title: Figure title.
    """

    kind: str
    x: str
    y: Tuple[str, ...] = ('robust',)
    series: Optional[str] = None
    select: Mapping[str, Any] = field(default_factory=dict)
    title: str = ''


@dataclass(frozen=True)
class StudySpec:
    """A paper's comparison grid (see the module docstring)."""

    name: str
    title: str
    paper: str
    scales: Mapping[str, ScaleSpec]
    grid: Tuple[GridBlock, ...]
    findings: Tuple[Finding, ...]
    plot: PlotSpec
    metric_variant: Optional[str] = None
    ratios: Tuple[RatioTable, ...] = ()
    metrics: Tuple[str, ...] = ()
    spread: str = 'std'
    min_clean: Optional[float] = None

    @property
    def axes(self) -> List[str]:
        """Every axis of the grid, in order of first appearance."""
        names: Dict[str, None] = {}
        for block in self.grid:
            names.update(dict.fromkeys(block.axes))
        return list(names)

    def scale(self, name: str) -> ScaleSpec:
        """The study at scale `name`."""
        if name not in self.scales:
            raise ValueError(f'study {self.name} has no scale {name!r} (it has {", ".join(self.scales)}).')
        return self.scales[name]


def list_studies() -> List[str]:
    """Names of the studies shipped with the package, sorted."""
    return list(yaml_files(_FOLDER))


def _study_path(name_or_path: Union[str, Path]) -> Path:
    path = Path(name_or_path).expanduser()
    if path.is_file():
        return path
    studies = yaml_files(_FOLDER)
    if str(name_or_path) in studies:
        return studies[str(name_or_path)]
    raise ValueError(f'study {str(name_or_path)!r} is neither a file nor a shipped study ({", ".join(studies)}).')


def _mapping(value: Any, where: str) -> Dict[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise ValueError(f'{where} must be a mapping, got {value!r}.')
    return dict(value)


def _scale(name: str, raw: Any) -> ScaleSpec:
    raw = _mapping(raw, f'scales.{name}')
    unknown = set(raw) - {'recipe', 'train', 'validate', 'seeds', 'values'}
    if unknown:
        raise ValueError(f'scales.{name}: unknown keys {", ".join(sorted(unknown))}.')
    seeds = raw.get('seeds', [42])
    if not isinstance(seeds, list) or not seeds or not all(isinstance(s, int) for s in seeds):
        raise ValueError(f'scales.{name}.seeds must be a non-empty list of integers, got {seeds!r}.')
    values = {axis: {value: _mapping(options, f'scales.{name}.values.{axis}.{value}')
                     for value, options in _mapping(table, f'scales.{name}.values.{axis}').items()}
              for axis, table in _mapping(raw.get('values'), f'scales.{name}.values').items()}
    return ScaleSpec(recipe=raw.get('recipe'), train=_mapping(raw.get('train'), f'scales.{name}.train'),
                     validate=_mapping(raw.get('validate'), f'scales.{name}.validate'), seeds=tuple(seeds),
                     values=values)


def _block(index: int, raw: Any) -> GridBlock:
    raw = _mapping(raw, f'grid[{index}]')
    axes = _mapping(raw.get('axes'), f'grid[{index}].axes')
    if not axes:
        raise ValueError(f'grid[{index}] has no axes.')
    for axis, values in axes.items():
        if not isinstance(values, list) or not values:
            raise ValueError(f'grid[{index}].axes.{axis} must be a non-empty list, got {values!r}.')
    return GridBlock(axes={axis: tuple(values) for axis, values in axes.items()},
                     train=_mapping(raw.get('train'), f'grid[{index}].train'))


def _number(value: Any, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError(f'{where} must be a number, got {value!r}.')
    return float(value)


def _expected(raw: Any, where: str) -> Tuple[str, Expected]:
    """The measure and the paper's value of a finding's ``expect: {gap | ratio | value: V, se: S}``."""
    raw = _mapping(raw, where)
    measures = [m for m in MEASURES if m in raw]
    unknown = set(raw) - {*MEASURES, 'se'}
    if len(measures) != 1 or unknown:
        raise ValueError(f'{where} must give one of {", ".join(MEASURES)} and optionally se, got '
                         f'{", ".join(sorted(raw)) or "nothing"}.')
    measure = measures[0]
    return measure, Expected(_number(raw[measure], f'{where}.{measure}'), _number(raw.get('se', 0.0), f'{where}.se'))


def _finding(index: int, raw: Any, axes: List[str]) -> Finding:
    where = f'findings[{index}]'
    raw = _mapping(raw, where)
    unknown = set(raw) - {'claim', 'paper', 'metric', 'higher', 'lower', 'at', 'source', 'expect', 'tolerance',
                          'direction'}
    if unknown:
        raise ValueError(f'{where}: unknown keys {", ".join(sorted(unknown))}.')
    sides = ('at',) if 'at' in raw else ('higher', 'lower')
    missing = {'claim', 'paper', 'metric', *sides} - set(raw)
    if missing:
        raise ValueError(f'{where} lacks {", ".join(sorted(missing))}.')
    if 'at' in raw and {'higher', 'lower'} & set(raw):
        raise ValueError(f'{where}: give either at (one table cell) or higher and lower, not both.')
    selectors = [_mapping(raw[side], f'{where}.{side}') for side in sides]
    unknown = set().union(*selectors) - set(axes)
    if unknown:
        raise ValueError(f'{where} selects on {", ".join(sorted(unknown))}, not axes of the grid.')
    measure, expected = _expected(raw['expect'], f'{where}.expect') if 'expect' in raw else ('gap', None)
    if (measure == 'value') != ('at' in raw):
        raise ValueError(f'{where}: a value (expect: {{value: ...}}) reads one table cell (at), a gap or ratio two '
                         f'sides (higher, lower).')
    tolerance = raw.get('tolerance')
    if tolerance is not None and not _number(tolerance, f'{where}.tolerance') > 0:
        raise ValueError(f'{where}.tolerance must be a positive fraction, got {tolerance!r}.')
    direction = raw.get('direction', True)
    if not isinstance(direction, bool):
        raise ValueError(f'{where}.direction must be true or false, got {direction!r}.')
    return Finding(claim=str(raw['claim']), paper=str(raw['paper']), metric=check_metric(str(raw['metric'])),
                   higher=selectors[0], lower=selectors[1] if len(selectors) > 1 else {},
                   source=str(raw.get('source', '')), measure=measure, expected=expected,
                   tolerance=None if tolerance is None else float(tolerance), direction=direction)


def _ratio_table(index: int, raw: Any, axes: List[str]) -> RatioTable:
    where = f'ratios[{index}]'
    raw = _mapping(raw, where)
    missing = {'title', 'baseline', 'rows', 'metrics'} - set(raw)
    if missing:
        raise ValueError(f'{where} lacks {", ".join(sorted(missing))}.')
    baseline, rows = _mapping(raw['baseline'], f'{where}.baseline'), _mapping(raw['rows'], f'{where}.rows')
    unknown = (set(baseline) | set(rows)) - set(axes)
    if unknown:
        raise ValueError(f'{where} selects on {", ".join(sorted(unknown))}, not axes of the grid.')
    metrics = raw['metrics']
    if not isinstance(metrics, list) or not metrics:
        raise ValueError(f'{where}.metrics must be a non-empty list, got {metrics!r}.')
    return RatioTable(title=str(raw['title']), baseline=baseline,
                      rows={axis: tuple(v if isinstance(v, list) else [v]) for axis, v in rows.items()},
                      metrics=tuple(check_metric(str(m)) for m in metrics))


def _plot(raw: Any, axes: List[str]) -> PlotSpec:
    raw = _mapping(raw, 'plot')
    kind = raw.get('kind')
    if kind not in PLOT_KINDS:
        raise ValueError(f'plot.kind must be one of {", ".join(PLOT_KINDS)}, got {kind!r}.')
    y = raw.get('y', ['robust'])
    y = tuple(check_metric(m) for m in (y if isinstance(y, list) else [y]))
    for key in ('x', 'series'):
        if raw.get(key) is not None and raw[key] not in axes:
            raise ValueError(f'plot.{key} {raw[key]!r} is not an axis of the grid ({", ".join(axes)}).')
    if raw.get('x') is None:
        raise ValueError('plot.x is required.')
    select = _mapping(raw.get('select'), 'plot.select')
    if set(select) - set(axes):
        raise ValueError(f'plot.select names {", ".join(sorted(set(select) - set(axes)))}, not axes of the grid.')
    return PlotSpec(kind=kind, x=raw['x'], y=y, series=raw.get('series'), select=select,
                    title=str(raw.get('title', '')))


def load_study(name_or_path: Union[str, Path]) -> StudySpec:
    """The study `name_or_path` names: a shipped study's name or a YAML file.

    Raises:
        ValueError: Unknown study, or a file that does not describe one (the message says what is wrong).
    """
    path = _study_path(name_or_path)
    raw = load_yaml(read_utf8(path, f'study {path}'), f'study {path}')
    raw = _mapping(raw, str(path))
    unknown = set(raw) - {'title', 'paper', 'scales', 'grid', 'findings', 'plot', 'metric_variant', 'ratios',
                          'metrics', 'spread', 'min_clean'}
    if unknown:
        raise ValueError(f'{path}: unknown keys {", ".join(sorted(unknown))}.')
    scales = {name: _scale(name, value) for name, value in _mapping(raw.get('scales'), 'scales').items()}
    if not scales or set(scales) - set(SCALES):
        raise ValueError(f'{path}: scales must be some of {", ".join(SCALES)}, got {", ".join(scales) or "none"}.')
    grid = raw.get('grid')
    if not isinstance(grid, list) or not grid:
        raise ValueError(f'{path}: grid must be a non-empty list of blocks.')
    blocks = tuple(_block(i, block) for i, block in enumerate(grid))
    axes = list(dict.fromkeys(axis for block in blocks for axis in block.axes))
    findings = tuple(_finding(i, f, axes) for i, f in enumerate(raw.get('findings') or []))
    ratios = tuple(_ratio_table(i, r, axes) for i, r in enumerate(raw.get('ratios') or []))
    metrics = raw.get('metrics') or []
    if not isinstance(metrics, list):
        raise ValueError(f'{path}: metrics must be a list, got {metrics!r}.')
    spread = raw.get('spread', 'std')
    if spread not in ('std', 'se'):
        raise ValueError(f'{path}: spread must be std or se, got {spread!r}.')
    min_clean = raw.get('min_clean')
    return StudySpec(name=path.stem, title=str(raw.get('title', path.stem)), paper=str(raw.get('paper', '')),
                     scales=scales, grid=blocks, findings=findings, plot=_plot(raw.get('plot'), axes),
                     metric_variant=raw.get('metric_variant'), ratios=ratios,
                     metrics=tuple(check_metric(str(m)) for m in metrics), spread=spread,
                     min_clean=None if min_clean is None else _number(min_clean, f'{path}: min_clean'))
