"""A study's grid expanded into cells: each an ordinary ``timm-advnorm-train`` run and its ``timm-advnorm-validate``
evaluation.

A cell is one point of a grid block's axes product at one seed. Its training arguments are the scale's recipe and
options, the block's options and the axis values' options, in that order (later ones win), then the seed and the
cell's run folder (``<study folder>/cells/<cell id>``); its evaluation reads that folder's ``last.pth.tar`` and
writes ``results.json`` beside it. A cell keeps these options by name (`Cell.train_values`, `Cell.validate_values`),
which the commands build into their typed options (`CellCommands.train_options`, `CellCommands.validate_options`),
and writes them as the commands' own argument lists, for what runs a command in a process of its own (and so that a
cell can be rerun by hand).
"""
import itertools
import shlex
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

from .options import CellCommands
from .spec import ScaleSpec, StudySpec

__all__ = ['Cell', 'expand_cells', 'select_cells', 'CHECKPOINT', 'RESULTS_FILE']

CHECKPOINT = 'last.pth.tar'
RESULTS_FILE = 'results.json'
_EVAL_STATE = 'eval_state.jsonl'


@dataclass(frozen=True)
class Cell:
    """One run of a study.

    Attributes:
        id: Unique name in the study, also its run folder's name (``family-bn_clean_ratio-0.5_seed-1``).
        labels: The axis values of the cell.
        seed: Its training seed.
        run_dir: Its run folder (training outputs, evaluation results).
        train_argv: ``timm-advnorm-train`` arguments (a resumed run adds ``--resume``): `train_values` written.
        validate_argv: ``timm-advnorm-validate`` arguments: `validate_values` written.
        train_values: Its training options by name (``config``: the ``-c`` recipe), as the typed options are built
            from (`CellCommands.train_options`).
        validate_values: Its evaluation options by name (`CellCommands.validate_options`).
    """

    id: str
    labels: Mapping[str, Any]
    seed: int
    run_dir: Path
    train_argv: Tuple[str, ...]
    validate_argv: Tuple[str, ...]
    train_values: Mapping[str, Any] = field(default_factory=dict)
    validate_values: Mapping[str, Any] = field(default_factory=dict)

    @property
    def checkpoint(self) -> Path:
        return self.run_dir / CHECKPOINT

    @property
    def results_file(self) -> Path:
        return self.run_dir / RESULTS_FILE

    def commands(self, train_prog: str = 'timm-advnorm-train',
                 validate_prog: str = 'timm-advnorm-validate') -> List[str]:
        """The cell's two commands as shell lines, with the console commands a ``pip install`` provides."""
        return [shlex.join([train_prog, *self.train_argv]), shlex.join([validate_prog, *self.validate_argv])]


def _cell_id(labels: Mapping[str, Any], seed: int) -> str:
    parts = [f'{axis}-{value}' for axis, value in labels.items()]
    return '_'.join([*parts, f'seed-{seed}']).replace('/', '-').replace(' ', '-')


def _train_options(scale: ScaleSpec, block_train: Mapping[str, Any], labels: Mapping[str, Any]) -> Dict[str, Any]:
    options = {**scale.train, **block_train}
    for axis, value in labels.items():
        options.update(scale.options_for(axis, value))
    return options


def expand_cells(spec: StudySpec, scale_name: str, study_dir: Path, commands: CellCommands,
                 data_dir: Optional[str] = None, device: Optional[str] = None) -> List[Cell]:
    """Every cell of `spec` at scale `scale_name`, run under `study_dir`.

    Args:
        commands: The commands whose arguments the cells' options are written as (`CellCommands.train_argv`,
            `CellCommands.validate_argv`).
        data_dir: Dataset root for both commands (ImageNet scale); None for the built-in digits.
        device: ``--device`` of both commands (default: theirs).

    Raises:
        ValueError: An option the commands do not have, an axis value the scale does not define, or two cells
            with one id.
    """
    scale = spec.scale(scale_name)
    cells_dir = Path(study_dir) / 'cells'
    common = {'data_dir': data_dir, 'device': device}
    cells: List[Cell] = []
    # seed by seed, so that a run cut short (--max-cells, a deadline) has whole grids of the first seeds
    for seed in scale.seeds:
        for block in spec.grid:
            for values in itertools.product(*block.axes.values()):
                labels = dict(zip(block.axes, values))
                cell_id = _cell_id(labels, seed)
                run_dir = cells_dir / cell_id
                recipe = {'config': scale.recipe} if scale.recipe else {}
                train = {**recipe, **_train_options(scale, block.train, labels), **common, 'seed': seed,
                         'output': str(cells_dir), 'experiment': cell_id}
                validate = {**scale.validate, **common, 'checkpoint': str(run_dir / CHECKPOINT),
                            'results_file': str(run_dir / RESULTS_FILE), 'resume_state': str(run_dir / _EVAL_STATE)}
                cells.append(Cell(id=cell_id, labels=labels, seed=seed, run_dir=run_dir,
                                  train_argv=tuple(commands.train_argv(train)),
                                  validate_argv=tuple(commands.validate_argv(validate)), train_values=train,
                                  validate_values=validate))
    ids = [cell.id for cell in cells]
    duplicates = sorted({i for i in ids if ids.count(i) > 1})
    if duplicates:
        raise ValueError(f'study {spec.name}: cells {", ".join(duplicates)} appear in more than one grid block.')
    return cells


def select_cells(cells: Sequence[Cell], selector: Mapping[str, Any]) -> List[Cell]:
    """The cells whose labels match every axis value of `selector`."""
    return [cell for cell in cells if all(cell.labels.get(axis) == value for axis, value in selector.items())]
