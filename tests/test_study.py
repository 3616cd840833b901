"""timm-advnorm-study: a two-cell study on the digits end to end (table, plot, resumability), every shipped
study's grid parsed by the training and evaluation commands, and the study package given its options and commands
(it parses nothing itself)."""
import ast
import copy
import csv
import dataclasses
import json
import pickle
import re
import shutil
from pathlib import Path

import pytest
import yaml

from timm_advnorm.commands.validate import eval_options, parse_args as parse_validate_args
from timm_advnorm.study import cell_state, expand_cells, list_studies, load_study
from timm_advnorm.study.plot import figure_study
from timm_advnorm.study.runner import CellError, InProcessCommands, SubmititLauncher, run_cell
from timm_advnorm.commands.study import get_args_parser, main, study_options
from timm_advnorm.commands.study_cells import CELL_COMMANDS
from timm_advnorm.study.launch import run_study
from timm_advnorm.study.spec import PlotSpec
from timm_advnorm.study.table import CellResult, GroupResult, read_cell
from timm_advnorm.commands.train import parse_args as parse_train_args, train_options

# Two cells, clean (vanilla) and adversarial (madry) training: 1 epoch (PGD-1) at 16 px, PGD-2 on 48 digits.
_TRAIN = dict(model='tiny_bn_resnet', img_size=16, epochs=1, batch_size=64, workers=0, hflip=0.0,
              attack_steps=1, attack_step=8.0, attack_eps=8.0, val_attack_steps=1, num_samples=16, log_interval=0,
              no_progress=True)
_VALIDATE = dict(dataset='digits', attacks=['pgd'], attack_eps=8.0, attack_step=4.0, attack_steps=[2], num_samples=48,
                 workers=0, batch_size=48, sanity_samples=0, no_progress=True)


def _study(tmp_path: Path, digits_dir: Path, epochs: int = 1) -> Path:
    spec = dict(
        title='Two cells', paper='test',
        scales=dict(digits=dict(train=dict(_TRAIN, epochs=epochs, data_dir=str(digits_dir)),
                                validate=dict(_VALIDATE, data_dir=str(digits_dir)), seeds=[3])),
        grid=[dict(axes=dict(method=['vanilla', 'madry']))],
        findings=[dict(claim='Adversarial training raises robustness', paper='0 vs 40', metric='robust',
                       higher=dict(method='madry'), lower=dict(method='vanilla'))],
        plot=dict(kind='bar', x='method', y=['robust', 'clean'], title='robust and clean accuracy'))
    path = tmp_path / 'two_cells.yaml'
    path.write_text(yaml.safe_dump(spec))
    return path


def test_a_run_whose_record_it_could_not_keep_whole_is_refused_before_its_first_cell(tmp_path, digits_dir):
    target = tmp_path / 'docs' / 'two_cells' / 'digits'
    target.mkdir(parents=True)
    (target / 'results.csv').write_text('method,seed,cell,clean\nvanilla,7,method-vanilla_seed-7,97\n')  # --seeds 7
    with pytest.raises(ValueError, match=r'holds 1 evaluated cell\(s\) this study would not record'):
        main([str(_study(tmp_path, digits_dir)), '--output', str(tmp_path / 'out'), '--record', str(tmp_path / 'docs')])
    assert not (tmp_path / 'out').exists()


def _mtimes(run_dir: Path):
    return {p.name: p.stat().st_mtime_ns for p in run_dir.iterdir()}


def test_two_cell_study_runs_resumes_and_writes_table_and_plot(tmp_path, digits_dir):
    study = _study(tmp_path, digits_dir)
    out = tmp_path / 'out'
    cells = expand_cells(load_study(study), 'digits', out / 'two_cells-digits', CELL_COMMANDS)
    assert main([str(study), '--output', str(out), '--max-cells', '0']) == 0  # the table alone
    assert [cell_state(c) for c in cells] == ['new', 'new']
    assert main([str(study), '--output', str(out), '--max-cells', '1']) == 0
    assert [cell_state(c) for c in cells] == ['evaluated', 'new']
    first = _mtimes(cells[0].run_dir)
    table = (out / 'two_cells-digits' / 'results.md').read_text()
    assert 'not run' in table  # the finding needs both cells
    assert '1 of 2 cells evaluated; seeds 3; seeds planned: 3;' in table  # a partial table says what it pools

    assert main([str(study), '--output', str(out)]) == 0
    assert [cell_state(c) for c in cells] == ['evaluated', 'evaluated']
    assert _mtimes(cells[0].run_dir) == first, 'the evaluated cell was run again'
    study_dir = out / 'two_cells-digits'
    header = (study_dir / 'results.md').read_text()
    assert '2 of 2 cells evaluated; seeds 3; this invocation ran' in header
    assert re.search(r'min, the study 3 invocations, [\d.]+ s in all \(`provenance.json`\)', header)
    with open(study_dir / 'grid.csv') as f:
        rows = list(csv.DictReader(f))
    assert [row['method'] for row in rows] == ['vanilla', 'madry']
    with open(study_dir / 'results.csv') as f:
        per_cell = list(csv.DictReader(f))
    assert [(row['method'], row['seed'], row['cell']) for row in per_cell] == [('vanilla', '3', cells[0].id),
                                                                             ('madry', '3', cells[1].id)]
    for row, cell_row, cell, passes in zip(rows, per_cell, cells, (1.0, 2.0)):  # madry: PGD-1 and the adversarial pass
        results = json.loads(cell.results_file.read_text())
        assert float(row['robust_mean']) == pytest.approx(results['robust_top1']) == float(cell_row['robust'])
        assert float(row['clean_mean']) == pytest.approx(results['top1']) == float(cell_row['clean'])
        assert float(row['vanilla_epochs']) == passes == float(cell_row['vanilla_epochs'])  # one epoch
        assert float(row['train_seconds_median']) == float(cell_row['train_seconds']) > 0  # one seed
    with open(study_dir / 'findings.csv') as f:
        (finding,) = list(csv.DictReader(f))
    gap = float(rows[1]['robust_mean']) - float(rows[0]['robust_mean'])
    assert finding['finding'] == 'Adversarial training raises robustness' and finding['measure'] == 'gap'
    assert float(finding['ours']) == pytest.approx(gap) and finding['n'] == '1'
    assert finding['held_direction'].startswith('yes' if gap > 0 else 'no') and finding['held_size'] == '—'
    provenance = json.loads((study_dir / 'provenance.json').read_text())
    assert [len(i['cells_run']) for i in provenance['invocations']] == [0, 1, 1]  # the table alone, then a cell each
    assert [i['outcome'] for i in provenance['invocations']] == ['finished'] * 3
    assert provenance['wall_s'] == pytest.approx(sum(i['wall_s'] for i in provenance['invocations']), abs=0.2)
    assert provenance['command'] == f'timm-advnorm-study {study} --scale digits'
    assert {'cpu', 'threads', 'torch', 'timm'} <= set(provenance['machine']) and provenance['commit']
    assert (study_dir / 'study.png').read_bytes()[:8] == b'\x89PNG\r\n\x1a\n'
    robust = read_cell(cells[0]).robust  # what the plot names: the attack as every output describes it
    assert robust.startswith('pgd (PGD-2 L∞, ε = ') and 'α = 4/255 (sign step' in robust and 'untargeted' in robust


def _group(ratio, *accuracies):
    results = tuple(CellResult(cell=None, metrics=dict(robust=a, clean=a + 20), samples=359, robust='pgd-20 (...)',
                               vanilla_epochs=None, train_seconds=None) for a in accuracies)
    return GroupResult(labels=dict(clean_ratio=ratio), results=results, cells=2)


def test_a_grid_points_training_time_is_the_median_over_its_seeds():
    group = GroupResult(labels={}, results=(), cells=3)
    assert group.median_of([600.0, 610.0, 3900.0]) == 610.0  # one seed's run disturbed by other work
    assert group.median_of([None, 5.0]) == 5.0 and group.median_of([None]) is None


def test_a_plot_of_attack_accuracies_names_those_attacks_not_the_robust_one():
    pytest.importorskip('matplotlib')
    noise = 'gaussian-noise (gaussian noise, σ = 1 on the normalized input scale)'
    results = tuple(CellResult(cell=None, metrics={'attack:gaussian-noise': 90.0, 'robust': 10.0}, samples=100,
                               robust='bim-linf (PGD-100 L∞, ...)', vanilla_epochs=None, train_seconds=None,
                               attacks={'attack:gaussian-noise': noise}) for _ in range(2))
    groups = [GroupResult(labels=dict(family='mlp'), results=results, cells=2)]
    spec = PlotSpec(kind='bar', x='family', y=('attack:gaussian-noise',), title='t')
    title = figure_study(spec, groups).axes[0].get_title().replace('\n', ' ')
    assert 'σ = 1 on the normalized input scale); 100 images per cell' in title and 'robust:' not in title


@pytest.mark.parametrize('ratios', [(0.0,), (0.0, 0.25, 0.5, 1.0)], ids=['one', 'four'])
def test_the_study_plots_x_axis_is_the_grid(ratios):
    pytest.importorskip('matplotlib')
    groups = [_group(r, *((30.0, 32.0) if r != 0.25 else ())) for r in ratios]  # 0.25 not evaluated yet
    spec = PlotSpec(kind='line', x='clean_ratio', y=('robust', 'clean'), title='t')
    (ax,) = figure_study(spec, groups, 'digits scale').axes
    assert list(ax.get_xticks()) == list(ratios)  # every grid value and nothing between them
    low, high = ax.get_xlim()
    assert low < min(ratios) and high > max(ratios)
    assert high - low <= 1.1 * (max(ratios) - min(ratios)) or (len(ratios) == 1 and high - low <= 0.2)
    assert 'robust: pgd-20 (...); 359 images per cell' in ax.get_title() and 'digits scale' in ax.get_title()


def test_interrupted_cell_resumes_from_its_checkpoint_and_trained_cell_only_evaluates(tmp_path, digits_dir):
    spec = load_study(_study(tmp_path, digits_dir, epochs=2))
    cell = expand_cells(spec, 'digits', tmp_path / 'study', CELL_COMMANDS)[0]
    from timm_advnorm.commands.train import main as train_main
    assert train_main(list(cell.train_argv)) == 0
    assert cell_state(cell) == 'trained'
    # as if killed after the first epoch: its checkpoint is the last, its summary row the only one
    shutil.copy(cell.run_dir / 'checkpoint-0.pth.tar', cell.checkpoint)
    summary = (cell.run_dir / 'summary.csv').read_text().splitlines()
    (cell.run_dir / 'summary.csv').write_text('\n'.join(summary[:2]) + '\n')
    assert cell_state(cell) == 'interrupted'

    assert run_cell(cell, InProcessCommands(CELL_COMMANDS)) == 'interrupted'
    assert cell_state(cell) == 'evaluated'
    assert (cell.run_dir / 'args-resumed-epoch1.yaml').is_file()  # resumed in its own folder, at epoch 1
    with open(cell.run_dir / 'summary.csv') as f:
        epochs = list(csv.DictReader(f))
    assert [row['epoch'] for row in epochs] == ['0', '1']
    # its training time counts the epoch the killed attempt finished as well as the resumed one's
    assert read_cell(cell).train_seconds == pytest.approx(sum(float(row['train_seconds']) for row in epochs))

    for name in ('results.json', 'results.csv', 'eval_state.jsonl'):  # as if never evaluated
        (cell.run_dir / name).unlink()
    trained = _mtimes(cell.run_dir)
    assert run_cell(cell, InProcessCommands(CELL_COMMANDS)) == 'trained'
    assert cell.results_file.is_file()
    assert (cell.run_dir / 'last.pth.tar').stat().st_mtime_ns == trained['last.pth.tar'], 'retrained'


def test_a_cell_is_trained_only_once_its_cool_down_epochs_are(tmp_path, digits_dir):
    """The run's budget file counts the epochs it trains, cool-down included (``--epochs`` alone does not)."""
    spec = load_study(_study(tmp_path, digits_dir, epochs=1))
    cell = expand_cells(spec, 'digits', tmp_path / 'study', CELL_COMMANDS)[0]
    from timm_advnorm.commands.train import main as train_main
    assert train_main([*cell.train_argv, '--cooldown-epochs', '1']) == 0
    assert yaml.safe_load((cell.run_dir / 'budget.yaml').read_text())['epochs'] == 2
    assert cell_state(cell) == 'trained'
    summary = (cell.run_dir / 'summary.csv').read_text().splitlines()
    (cell.run_dir / 'summary.csv').write_text('\n'.join(summary[:2]) + '\n')  # killed in the cool-down epoch
    assert cell_state(cell) == 'interrupted'


def test_submitit_launcher_runs_the_pending_cells(tmp_path, digits_dir):
    pytest.importorskip('submitit')
    spec = load_study(_study(tmp_path, digits_dir))
    cells = expand_cells(spec, 'digits', tmp_path / 'study', CELL_COMMANDS)
    launcher = SubmititLauncher(tmp_path / 'submitit', cluster='debug')
    assert launcher.run(cells, InProcessCommands(CELL_COMMANDS), max_cells=1) == cells[:1]
    assert [cell_state(c) for c in cells] == ['evaluated', 'new']


def test_dry_run_lists_commands_and_budget_without_training(tmp_path, digits_dir, capsys):
    out = tmp_path / 'out'
    assert main([str(_study(tmp_path, digits_dir)), '--output', str(out), '--dry-run']) == 0
    text = capsys.readouterr().out
    # the commands a wheel installs, never the checkout's scripts
    lines = text.splitlines()
    assert sum(line.startswith('  timm-advnorm-train ') for line in lines) == 2
    assert sum(line.startswith('  timm-advnorm-validate ') for line in lines) == 2
    assert '_adv.py' not in text
    # one epoch of 1438 digits in whole batches of 64 (22 steps): 1 pass per image (vanilla), 2 (madry, PGD-1)
    assert '1 passes/image x 1,408 images x 1 epochs = 1,408 passes' in text
    assert '2 passes/image x 1,408 images x 1 epochs = 2,816 passes' in text
    assert not out.exists()


@pytest.mark.parametrize('name, scale', [(name, scale) for name in list_studies() for scale in load_study(name).scales])
def test_shipped_study_grid_parses_as_train_and_validate_arguments(name, scale, tmp_path):
    spec = load_study(name)
    data_dir = '/data/imagenet' if scale == 'imagenet' else None
    cells = expand_cells(spec, scale, tmp_path, CELL_COMMANDS, data_dir=data_dir)
    assert len({c.id for c in cells}) == len(cells) > 1
    for cell in cells:
        args, _ = parse_train_args(list(cell.train_argv))
        assert args.seed == cell.seed and args.output == str(tmp_path / 'cells') and args.experiment == cell.id
        validate = parse_validate_args(list(cell.validate_argv))
        assert validate.checkpoint == str(cell.checkpoint)
    for finding in spec.findings:  # every finding compares cells of the grid
        assert any(all(c.labels.get(k) == v for k, v in finding.higher.items()) for c in cells), finding.claim
        assert any(all(c.labels.get(k) == v for k, v in finding.lower.items()) for c in cells), finding.claim
    for table in spec.ratios:  # every ratio table has its baseline and rows in the grid
        assert any(all(c.labels.get(k) == v for k, v in table.baseline.items()) for c in cells), table.title
        assert sum(table.shows(c.labels) for c in cells) > len(spec.scale(scale).seeds), table.title


@pytest.mark.parametrize('name', list_studies())
def test_a_cells_typed_options_are_those_its_arguments_parse_into(name, tmp_path):
    """The typed options a cell's options are built into (what the dry run plans with) equal those that parsing the
    arguments they are written as gives (what a cell's command runs with), defaults the parser resolves included
    (workers, AGC's clip, the validation attack's budget, the device, the sanity probes); one seed of every scale."""
    spec = load_study(name)
    for scale in spec.scales:
        cells = expand_cells(spec, scale, tmp_path, CELL_COMMANDS, data_dir='/data/imagenet' if scale == 'imagenet'
                             else None)
        for cell in (cell for cell in cells if cell.seed == cells[0].seed):
            assert CELL_COMMANDS.train_options(cell.train_values) == train_options(
                parse_train_args(list(cell.train_argv))[0]), cell.id
            assert CELL_COMMANDS.validate_options(cell.validate_values) == eval_options(
                parse_validate_args(list(cell.validate_argv))), cell.id


@pytest.mark.parametrize('name', ['xie2020', 'fast-advprop', 'nofrost'])
def test_tiny_model_studies_run_their_digits_grid_on_mnist5k_at_28px(name, tmp_path):
    options = study_options(get_args_parser().parse_args([name, '--scale', 'mnist', '--output', str(tmp_path)]))
    assert (options.scale, options.data_dir) == ('mnist', None)
    spec = load_study(name)
    mnist = expand_cells(spec, 'mnist', tmp_path, CELL_COMMANDS)
    digits = expand_cells(spec, 'digits', tmp_path, CELL_COMMANDS)
    assert [(c.labels, c.seed) for c in mnist] == [(c.labels, c.seed) for c in digits]
    for cell, at_digits in zip(mnist, digits):
        args, _ = parse_train_args(list(cell.train_argv))
        assert (args.dataset, args.img_size, args.no_aug, args.workers) == ('mnist5k', 28, True, 0)
        digits_args, _ = parse_train_args(list(at_digits.train_argv))
        assert (args.model, args.method) == (digits_args.model, digits_args.method)  # the same tiny model family
        validate = parse_validate_args(list(cell.validate_argv))
        assert (validate.dataset, validate.num_samples, validate.workers) == ('mnist5k', 1000, 0)

@pytest.mark.parametrize('problem, message', [
    (dict(grid=[]), 'grid must be a non-empty list'),
    (dict(scales=dict(cifar={})), 'scales must be some of'),
    (dict(plot=dict(kind='pie', x='clean_ratio')), 'plot.kind must be one of'),
    (dict(findings=[dict(claim='c', paper='p', metric='robust', higher=dict(depth=1), lower={})]), 'not axes'),
    (dict(findings=[dict(claim='c', paper='p', metric='loss', higher={}, lower={})]), 'use clean, robust, attack'),
    (dict(ratios=[dict(title='t', baseline=dict(depth=1), rows={}, metrics=['clean'])]), 'ratios[0] selects on depth'),
    (dict(ratios=[dict(title='t', baseline={}, rows={})]), 'ratios[0] lacks metrics'),
    (dict(metrics=['loss']), 'use clean, robust, attack'),
])
def test_bad_study_file_is_one_line_error(tmp_path, digits_dir, problem, message, capsys):
    path = _study(tmp_path, digits_dir)
    spec = {**yaml.safe_load(path.read_text()), **problem}
    path.write_text(yaml.safe_dump(spec))
    from timm_advnorm.commands.study import run
    assert run(argv=[str(path), '--dry-run']) == 2
    assert message in capsys.readouterr().err


def test_the_command_line_becomes_study_options_and_stays_unchanged():
    args = get_args_parser().parse_args(
        ['xie2020', '--scale', 'imagenet', '--data-dir', '/data/imagenet', '--seeds', '0', '1', '--device', 'cuda',
         '--max-cells', '3', '--launcher', 'submitit', '--launch-prefix', 'torchrun --nproc_per_node 8',
         '--submitit-params', 'timeout_min=60', 'gpus_per_node=8'])
    parsed = copy.deepcopy(vars(args))
    options = study_options(args)
    assert vars(args) == parsed
    assert (options.study, options.scale, options.data_dir, options.seeds) == ('xie2020', 'imagenet', '/data/imagenet',
                                                                               (0, 1))
    assert (options.device, options.dry_run, options.world_size, options.max_cells) == ('cuda', False, 1, 3)
    assert options.launch_prefix == 'torchrun --nproc_per_node 8' and options.launcher == 'submitit'
    assert options.submitit_cluster is None and options.submitit_params == {'timeout_min': 60, 'gpus_per_node': 8}
    assert study_options(get_args_parser().parse_args(['nofrost'])).seeds == ()  # the study's own
    with pytest.raises(dataclasses.FrozenInstanceError):
        options.scale = 'digits'


def _imported(node: ast.AST) -> list:
    """The modules an import statement names (a relative one without its leading dots)."""
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    if isinstance(node, ast.ImportFrom):
        module = node.module or ''
        return [module, *(f'{module}.{alias.name}'.lstrip('.') for alias in node.names)]
    return []


def test_the_study_package_imports_neither_the_commands_nor_argparse():
    package = Path(__file__).resolve().parents[1] / 'timm_advnorm' / 'study'
    for path in sorted(package.glob('*.py')):
        if path.name == '__main__.py':  # ``python -m timm_advnorm.study`` runs the command
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            names = _imported(node)
            assert not [n for n in names if n.split('.')[0] in ('commands', 'argparse')
                        or n.startswith('timm_advnorm.commands')], f'{path.name} imports {names}'


def test_a_dry_run_plans_each_grid_point_once_with_the_commands_it_is_given(tmp_path, digits_dir, capsys):
    parsed = []

    def train_options(values):
        parsed.append(dict(values))
        return CELL_COMMANDS.train_options(values)

    commands = dataclasses.replace(CELL_COMMANDS, train_options=train_options)
    args = get_args_parser().parse_args([str(_study(tmp_path, digits_dir)), '--output', str(tmp_path / 'out'),
                                         '--dry-run', '--seeds', '1', '2'])
    run_study(study_options(args), commands, prog='timm-advnorm-study')
    assert [values['method'] for values in parsed] == ['vanilla', 'madry']  # seed 2 costs the same
    assert all(values['seed'] == 1 for values in parsed)
    assert capsys.readouterr().out.count(' [new]\n') == 4  # two grid points at two seeds
    assert not (tmp_path / 'out').exists()


def test_a_cell_command_that_fails_stops_the_cell(tmp_path, digits_dir):
    spec = load_study(_study(tmp_path, digits_dir))
    cell = expand_cells(spec, 'digits', tmp_path / 'study', CELL_COMMANDS)[0]
    failing = InProcessCommands(dataclasses.replace(CELL_COMMANDS, train_main=lambda argv: 3))
    with pytest.raises(CellError, match='timm-advnorm-train exited with status 3'):
        run_cell(cell, failing)
    assert cell_state(cell) == 'new'


def test_a_study_stopped_by_a_failed_cell_says_so_in_its_provenance(tmp_path, digits_dir):
    commands = dataclasses.replace(CELL_COMMANDS, train_main=lambda argv: 3)
    args = get_args_parser().parse_args([str(_study(tmp_path, digits_dir)), '--output', str(tmp_path / 'out'),
                                         '--launcher', 'local'])
    with pytest.raises(CellError, match='exited with status 3'):
        run_study(study_options(args), commands, prog='timm-advnorm-study')
    (invocation,) = json.loads((tmp_path / 'out' / 'two_cells-digits' / 'provenance.json').read_text())['invocations']
    assert invocation['outcome'] == 'failed' and invocation['cells_run'] == []


def test_the_in_process_commands_pickle_for_a_submitit_job():
    runner = pickle.loads(pickle.dumps(InProcessCommands(CELL_COMMANDS)))  # what a Slurm job receives
    assert runner == InProcessCommands(CELL_COMMANDS)
