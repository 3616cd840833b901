"""timm-advnorm-study --plan: each grid point timed once on synthetic batches, its cells' time projected from the
counted steps and passes, and the cells that already ran scaling the projection by what they took."""
import json
import re
from pathlib import Path

import pytest
import yaml

import timm_advnorm.study.projection as projection
import timm_advnorm.train.budget as budget
from timm_advnorm.commands.study import main
from timm_advnorm.commands.study_cells import CELL_COMMANDS
from timm_advnorm.study import expand_cells, load_study
from timm_advnorm.study.projection import CellTime, measured_factor
from timm_advnorm.study.runner import TIMING_FILE

_TIMED_SECONDS = 0.5
_PASS_SECONDS = 1e-3
_STEP_SECONDS = 5e-4


def _study(tmp_path: Path, digits_dir: Path) -> Path:
    """One vanilla cell: 1 epoch at 16 px, then PGD-2 on 48 digits without sanity probes."""
    train = dict(model='tiny_bn_resnet', img_size=16, epochs=1, batch_size=64, workers=0, hflip=0.0,
                 val_attack_steps=1, num_samples=16, log_interval=0, no_progress=True,
                 data_dir=str(digits_dir))
    validate = dict(dataset='digits', attacks=['pgd'], attack_eps=8.0, attack_step=4.0, attack_steps=[2],
                    num_samples=48, workers=0, batch_size=48, sanity_samples=0, no_progress=True,
                    data_dir=str(digits_dir))
    spec = dict(title='One cell', paper='test', scales=dict(digits=dict(train=train, validate=validate, seeds=[0])),
                grid=[dict(axes=dict(method=['vanilla']))],
                plot=dict(kind='bar', x='method', y=['robust', 'clean'], title='accuracy'))
    path = tmp_path / 'one_cell.yaml'
    path.write_text(yaml.safe_dump(spec))
    return path


@pytest.fixture
def fixed_timings(monkeypatch):
    """Everything the training plan times (a training pass over a batch, an optimizer update, a clean validation
    call, an attack iteration over a batch) at `_TIMED_SECONDS`, every evaluation pass at `_PASS_SECONDS`, every
    attack update of an image at `_STEP_SECONDS`."""
    monkeypatch.setattr(budget, 'timed_seconds', lambda work, device, warmup=0, repeat=1: _TIMED_SECONDS)
    monkeypatch.setattr(projection, 'time_passes', lambda model, x, y, **kwargs: (_PASS_SECONDS, 2 * x.shape[0]))
    monkeypatch.setattr(projection, 'time_input_step', lambda x, repeat=1: _STEP_SECONDS)


def test_plan_projects_each_cell_from_its_steps_and_passes(tmp_path, digits_dir, capsys, fixed_timings):
    out = tmp_path / 'out'
    assert main([str(_study(tmp_path, digits_dir)), '--output', str(out), '--plan']) == 0
    text = capsys.readouterr().out
    # 1,408 training digits in 22 batches of 64, one epoch, each step a timed pass over the batch (vanilla: 1 pass
    # per image) and a timed update; validation: one clean call per batch (359 digits in 6 batches of 64) and 16
    # robust images in 1 batch projected from a timed attack iteration (2 passes per row of the 64): 2 forwards and
    # 1 backward per image (PGD-1, scored); PGD-2 on 48 digits: 1 clean pass + (3 forward + 2 backward) attack passes
    # per digit = 288 passes, and an attack update after each of the 96 backward passes
    assert '  time: 22.0 s training, 3.75 s validation, 0.34 s evaluation (projected here, compute only)' in text
    assert re.search(r'Projected time of the cell not yet evaluated: 26.1 s of compute on this machine \(cpu, \d+ '
                     r'threads?\)', text)
    assert 'no cell has run here yet to measure them' in text
    assert not out.exists()  # a plan trains and writes nothing


def test_cells_that_ran_scale_the_projection_by_what_they_took(tmp_path, digits_dir):
    cells = expand_cells(load_study(_study(tmp_path, digits_dir)), 'digits', tmp_path / 'study', CELL_COMMANDS)
    projected = {cells[0].id: CellTime(training=4.0, validation=1.0, evaluation=1.0)}
    assert measured_factor(cells, projected) is None  # nothing ran yet
    cells[0].run_dir.mkdir(parents=True)
    timing = cells[0].run_dir / TIMING_FILE
    timing.write_text(json.dumps({'train_seconds': 15.0}))  # interrupted before its evaluation: not a whole cell
    assert measured_factor(cells, projected) is None
    timing.write_text('{"train_seconds": 15')  # damaged
    assert measured_factor(cells, projected) is None
    timing.write_text(json.dumps({'train_seconds': 15.0, 'validate_seconds': 3.0}))
    assert measured_factor(cells, projected) == (3.0, 1)


def test_plan_says_how_much_the_cells_that_ran_took_against_their_projection(tmp_path, digits_dir, capsys,
                                                                             fixed_timings):
    study, out = _study(tmp_path, digits_dir), tmp_path / 'out'
    cell = expand_cells(load_study(study), 'digits', out / 'one_cell-digits', CELL_COMMANDS)[0]
    cell.run_dir.mkdir(parents=True)
    (cell.run_dir / TIMING_FILE).write_text(json.dumps({'train_seconds': 40.0, 'validate_seconds': 12.172}))
    assert main([str(study), '--output', str(out), '--plan']) == 0
    assert ('the cell run here took 2.00x its projection (data, checkpoints, start-up), so 52.2 s in all.'
            in capsys.readouterr().out)


def test_plan_with_record_is_refused(tmp_path, digits_dir, capsys):
    with pytest.raises(SystemExit) as exit_info:
        main([str(_study(tmp_path, digits_dir)), '--plan', '--record', str(tmp_path / 'docs')])
    assert exit_info.value.code == 2
    assert capsys.readouterr().err.strip().splitlines()[-1].endswith(
        'error: --record copies the results of a run: --plan runs nothing (see --help)')


def test_plan_projects_each_process_of_a_distributed_cell(tmp_path, digits_dir, capsys, fixed_timings):
    assert main([str(_study(tmp_path, digits_dir)), '--output', str(tmp_path / 'out'), '--plan',
                 '--world-size', '2']) == 0
    # 11 of the 22 steps per process; 3 of the 6 clean validation batches, the one robust batch; half the 288
    # evaluation passes and updates
    assert '  time: 11.0 s training, 2.25 s validation, 0.17 s evaluation' in capsys.readouterr().out


@pytest.mark.parametrize('mode', ['--plan', '--dry-run'])
@pytest.mark.parametrize('flags, named', [(['--max-cells', '2'], '--max-cells'),
                                          (['--launcher', 'subprocess'], '--launcher')])
def test_a_plan_refuses_the_options_of_a_run(tmp_path, digits_dir, capsys, mode, flags, named):
    with pytest.raises(SystemExit) as exit_info:
        main([str(_study(tmp_path, digits_dir)), '--output', str(tmp_path / 'out'), mode, *flags])
    assert exit_info.value.code == 2
    assert f'error: {mode} runs no cell: {named} would not be used' in capsys.readouterr().err
    assert not (tmp_path / 'out').exists()


def test_a_built_in_split_is_counted_at_the_datasets_own_side_whatever_the_cells_ask(tmp_path, monkeypatch):
    """A plan counts a built-in dataset's images where it is rendered at its own side: one rendering for a grid of
    several sides (each would otherwise be rendered by a dry run), the same counts."""
    from timm_advnorm.data.builtin import BuiltinDataset
    from timm_advnorm.study import plan
    prepared = []

    def prepare(img_size):
        prepared.append(img_size)
        for split, count in (('train', 3), ('validation', 2)):
            for i in range(count):
                (tmp_path / split / '0').mkdir(parents=True, exist_ok=True)
                (tmp_path / split / '0' / f'{i}.png').touch()
        return tmp_path

    mnist = BuiltinDataset(10, 28, prepare)
    monkeypatch.setattr(plan, 'builtin_dataset', lambda name: mnist if name == 'mnist' else None)
    assert (plan.split_images('mnist'), plan.split_images('mnist', 'validation')) == (3, 2)
    assert prepared == [28, 28]
    assert plan.split_images('imagenet', 'validation') == 50_000
