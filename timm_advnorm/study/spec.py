"""A paper study as data: the declarative grid of a seed paper's comparison, loaded from a YAML file and checked.

A study file (``timm_advnorm/studies/<name>.yaml``, or any path) holds:

* ``title``, ``paper``: what it reproduces and from where.
* ``scales``: per scale (``digits``, ``mnist``, ``imagenet``) the base of every cell: a packaged training ``recipe`` (``-c``),
  further ``train`` options, the ``validate`` options of the evaluation, the ``seeds`` each cell is trained with,
  and ``values``: what an axis value means at this scale when it is more than one option
  (``family: {bn: {model: tiny_bn_resnet}}``). Option names are the commands' long options with underscores.
* ``grid``: blocks, each the product of its ``axes`` (name: list of values) with fixed ``train`` options. An axis
  value sets the training option of the axis's name unless the scale's ``values`` say otherwise.
* ``metric_variant``: the evaluated variant whose numbers a cell reports (``clean``: a mixture-BN model's clean
  branch); by default the evaluation's primary variant.
* ``findings``: the paper's claims, each a comparison of the cells matching ``higher`` with those matching
  ``lower`` on a ``metric`` (``clean``, ``robust`` or ``attack:<label>``), with the paper's number.
* ``ratios``: tables of the paper's that give each grid point's numbers as a ratio to a baseline grid point's
  (Galloway et al.'s Tables 11 and 12): per table a ``title``, the ``baseline`` (axis values of one grid point), the
  grid points it shows (``rows``: axis values, a list for several) and its ``metrics``; each ratio is taken seed by seed.
* ``metrics``: further metrics the table of cells shows (it always shows ``clean``, ``robust`` and those the findings,
  ratio tables and plot read).
* ``plot``: the paper-style figure (`timm_advnorm.study.plot`).
"""
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Mapping, Optional, Tuple, Union

from ..strict_yaml import load_yaml

__all__ = [
    'SCALES', 'Finding', 'GridBlock', 'PlotSpec', 'RatioTable', 'ScaleSpec', 'StudySpec', 'list_studies',
    'load_study', 'check_metric']

SCALES = ('digits', 'mnist', 'imagenet')
PLOT_KINDS = ('line', 'tradeoff', 'bar')
_FOLDER = Path(__file__).resolve().parent.parent / 'studies'
_SUFFIX = '.yaml'

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
class Finding:
    """A claim of the paper: the cells matching `higher` beat those matching `lower` on `metric`.

    Attributes:
        claim: The claim in words.
        paper: The paper's number(s), as the paper reports them.
        metric: ``clean``, ``robust``, ``attack:<label>`` or a mean loss ``loss:clean``/``loss:<label>``.
        higher: Axis values of the cells expected to score higher.
        lower: Axis values of the cells expected to score lower.
    """

    claim: str
    paper: str
    metric: str
    higher: Mapping[str, Any]
    lower: Mapping[str, Any]


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
    return sorted(path.stem for path in _FOLDER.glob(f'*{_SUFFIX}'))


def _study_path(name_or_path: Union[str, Path]) -> Path:
    path = Path(name_or_path).expanduser()
    if path.is_file():
        return path
    if str(name_or_path) in list_studies():
        return _FOLDER / f'{name_or_path}{_SUFFIX}'
    raise ValueError(f'study {str(name_or_path)!r} is neither a file nor a shipped study '
                     f'({", ".join(list_studies())}).')


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


def _finding(index: int, raw: Any, axes: List[str]) -> Finding:
    raw = _mapping(raw, f'findings[{index}]')
    missing = {'claim', 'paper', 'metric', 'higher', 'lower'} - set(raw)
    if missing:
        raise ValueError(f'findings[{index}] lacks {", ".join(sorted(missing))}.')
    higher = _mapping(raw['higher'], f'findings[{index}].higher')
    lower = _mapping(raw['lower'], f'findings[{index}].lower')
    unknown = (set(higher) | set(lower)) - set(axes)
    if unknown:
        raise ValueError(f'findings[{index}] selects on {", ".join(sorted(unknown))}, not axes of the grid.')
    return Finding(claim=str(raw['claim']), paper=str(raw['paper']), metric=check_metric(str(raw['metric'])),
                   higher=higher, lower=lower)


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
    raw = load_yaml(path.read_text(), f'study {path}')
    raw = _mapping(raw, str(path))
    unknown = set(raw) - {'title', 'paper', 'scales', 'grid', 'findings', 'plot', 'metric_variant', 'ratios',
                          'metrics'}
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
    return StudySpec(name=path.stem, title=str(raw.get('title', path.stem)), paper=str(raw.get('paper', '')),
                     scales=scales, grid=blocks, findings=findings, plot=_plot(raw.get('plot'), axes),
                     metric_variant=raw.get('metric_variant'), ratios=ratios,
                     metrics=tuple(check_metric(str(m)) for m in metrics))
