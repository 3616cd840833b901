"""What a training run shows a person watching: one line per epoch (epoch, loss, lr, time, validation), a bar over
the validation, log lines and warnings that go around an open bar, and a ``--plan`` that projects validation too."""
import csv
import io
import logging
import re
import sys
import warnings
from contextlib import contextmanager
from types import SimpleNamespace

import pytest
import timm
import torch

import timm_advnorm  # noqa: F401  (registers the models)
from timm_advnorm import progress, timing
from timm_advnorm.attacks import InputSpace, create_attack
from timm_advnorm.train import budget as budget_module
from timm_advnorm.train import loop
from timm_advnorm.train.budget import RunBudget, plan_validation, validation_batches
from timm_advnorm.train.console import attack_label, epoch_line
from timm_advnorm.commands.train import main
from tiny_runs import tiny_digits, tiny_train_argv

pytestmark = pytest.mark.usefixtures('one_thread')

SPACE = InputSpace()
CPU = torch.device('cpu')


def _attack(steps: int, **kwargs):
    return create_attack('pgd', space=SPACE, eps=16.0, step=4.0, steps=steps, seed=0, **kwargs)


def _batches(images: int, batch_size: int, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    x = SPACE.from_pixels(torch.rand(images, 3, 32, 32, generator=g))
    y = torch.randint(0, 10, (images,), generator=g)
    return list(zip(x.split(batch_size), y.split(batch_size)))


def _model():
    torch.manual_seed(0)
    return timm.create_model('test_mbn_resnet', num_classes=10).eval()


# The epoch line ------------------------------------------------------------------------------------------------------

_EPOCH_LINE = re.compile(
    r'Epoch (?P<epoch>\d+) \((?P<n>\d+)/(?P<of>\d+)\)  Loss: (?P<loss>\S+) \(clean (?P<clean>\S+), adv (?P<adv>\S+)\)  '
    r'LR: (?P<lr>\d\.\d{3}e[-+]\d\d)  Time: (?P<seconds>[\d.]+)s, (?P<rate>[\d.]+)/s  Val: (?P<val>[\d.]+)s  '
    r'top1: (?P<top1>[\d.]+)  robust_top1: (?P<robust_top1>[\d.]+)  adv_branch_top1: (?P<adv_top1>[\d.]+)  '
    r'adv_branch_robust_top1: (?P<adv_robust_top1>[\d.]+)  \(robust: pgd1 ε=16/255, 8 images\)')


def test_a_tiny_run_logs_one_line_per_epoch_with_its_loss_lr_time_and_validation(digits_dir, tmp_path, caplog):
    """Each epoch's line carries the numbers its ``summary.csv`` row records, rounded as shown."""
    caplog.set_level(logging.INFO, logger='train_adv')
    data = tiny_digits(digits_dir, tmp_path / 'tiny')
    assert main(tiny_train_argv(data, tmp_path / 'runs', '--epochs', '2')) == 0
    lines = [record.getMessage() for record in caplog.records if record.getMessage().startswith('Epoch ')]
    with open(tmp_path / 'runs' / 'run' / 'summary.csv', newline='') as f:
        rows = list(csv.DictReader(f))
    assert len(lines) == len(rows) == 2
    for epoch, (line, row) in enumerate(zip(lines, rows)):
        fields = _EPOCH_LINE.fullmatch(line)
        assert fields is not None, line
        assert (int(fields['epoch']), int(fields['n']), int(fields['of'])) == (epoch, epoch + 1, 2)
        assert float(fields['loss']) == pytest.approx(float(row['train_loss']), rel=6e-3)
        assert float(fields['clean']) == pytest.approx(float(row['train_loss_clean']), rel=6e-3)
        assert float(fields['adv']) == pytest.approx(float(row['train_loss_adv']), rel=6e-3)
        assert float(fields['lr']) == pytest.approx(float(row['lr']), rel=1e-3)
        assert float(fields['seconds']) == pytest.approx(float(row['train_seconds']), abs=0.051)
        assert float(fields['rate']) > 0 and float(fields['val']) > 0
        for name, column in (('top1', 'eval_top1'), ('robust_top1', 'eval_robust_top1'),
                             ('adv_top1', 'eval_adv_branch_top1'), ('adv_robust_top1', 'eval_adv_branch_robust_top1')):
            assert float(fields[name]) == pytest.approx(float(row[column]), abs=0.0051)
    assert not [r for r in caplog.records if r.getMessage().startswith('Validation:')], 'one line per epoch'


def test_the_epoch_line_names_the_ema_metrics_and_a_single_loss():
    line = epoch_line(3, 10, {'loss': 0.123456, 'seconds': 12.34, 'images_per_sec': 98.76}, 0.05,
                      {'top1': 97.5, 'robust_top1': 40.0, 'ema_top1': 96.25, 'ema_robust_top1': 41.0}, 5.55,
                      _attack(10), 359)
    assert line == ('Epoch 3 (4/10)  Loss: 0.123  LR: 5.000e-02  Time: 12.3s, 98.8/s  Val: 5.5s  top1: 97.50  '
                    'robust_top1: 40.00  ema_top1: 96.25  ema_robust_top1: 41.00  (robust: pgd10 ε=16/255, 359 images)')


def test_the_attack_label_names_iterations_norm_targeting_and_eps():
    assert attack_label(_attack(10)) == 'pgd10 ε=16/255'
    assert attack_label(_attack(3, norm='l2', targeted=True)) == 'pgd3-l2 targeted ε=16/255'


# The validation bar --------------------------------------------------------------------------------------------------

def test_the_validation_bar_counts_every_pass_and_ends_full(monkeypatch):
    """One pass per clean batch, the attack's iterations and a final forward per attacked batch, for each branch; the
    bar reaches its total exactly when the validation is done."""
    seen = {}

    @contextmanager
    def shown_bar(iterable=None, *, show, **kwargs):
        assert show, 'validate(progress=True) shows its bar'
        with progress.progress_bar(iterable, show=True, file=io.StringIO(), **kwargs) as bar:
            yield bar
            seen.update(total=bar.total, n=bar.n, desc=bar.desc)

    monkeypatch.setattr(loop, 'progress_bar', shown_bar)
    loop.validate(_model(), _batches(12, 5), CPU, _attack(3), robust_loader=_batches(4, 2, seed=1),
                  branches=('clean', 'adv'), progress=True, desc='validate 7')
    assert seen == {'total': 2 * (3 + 2 * (3 + 1)), 'n': 22, 'desc': 'validate 7'}


class _RecordingBar:
    """Stands in for the validation bar: records, in order, what it is advanced by and the postfixes it shows."""

    def __init__(self):
        self.events = []

    def update(self, n):
        self.events.append(n)

    def set_postfix_str(self, text, refresh=True):
        self.events.append(text)


def test_a_long_attack_advances_the_validation_bar_at_each_iteration(monkeypatch):
    """Inside an attacked batch the bar moves one pass per PGD iteration, its postfix saying where the attack is, and
    the final forward completes the batch's iterations + 1; without a bar the attack reports to nothing."""
    bars = []

    @contextmanager
    def recording_bar(iterable=None, *, show, **kwargs):
        bars.append(_RecordingBar())
        yield bars[-1]

    monkeypatch.setattr(loop, 'progress_bar', recording_bar)
    attack = _attack(3, best_iterate=False)  # the last iterate: every image attacked for all iterations
    loop.validate(_model(), _batches(2, 2), CPU, attack, robust_loader=_batches(2, 2, seed=1), progress=True)
    assert bars[0].events == ['clean', 1, 'attacked', 'attacked | pgd, 0/3 it', 1, 'attacked | pgd, 1/3 it',
                              1, 'attacked | pgd, 2/3 it', 1, 'attacked | pgd, 3/3 it', 1]
    assert attack.progress is None, "the run's own attack is left as it is"
    loop.validate(_model(), _batches(2, 2), CPU, attack, robust_loader=_batches(2, 2, seed=1), progress=False)
    assert bars[1].events == ['clean', 1, 'attacked', 4], 'no report without a bar: the batch at once'


# Console output around an open bar -----------------------------------------------------------------------------------

def _console_logger() -> logging.Handler:
    """A root console handler on the (captured) stderr, as timm's `setup_default_logging` installs one."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter('%(message)s'))
    logging.root.handlers[:] = [handler]
    logging.root.setLevel(logging.INFO)
    return handler


def _print_warning(message, category, filename, lineno, file=None, line=None) -> None:
    """Python's way of showing a warning (pytest records them instead)."""
    (file or sys.stderr).write(warnings.formatwarning(message, category, filename, lineno, line))


def test_log_lines_and_warnings_start_on_a_cleared_line_while_a_bar_is_open(capsys):
    handler = _console_logger()
    with warnings.catch_warnings():
        warnings.simplefilter('always')
        warnings.showwarning = show_warning = _print_warning
        with progress.progress_bar(range(3), show=True, desc='train 0', mininterval=0) as bar:
            for step in bar:
                logging.getLogger('train_adv').info(f'Train: 0 [{step + 1}/3]')
                if step == 1:
                    warnings.warn('a warning in the middle of an epoch')
        restored = warnings.showwarning is show_warning
    err = capsys.readouterr().err
    for text in ('Train: 0 [1/3]\n', 'Train: 0 [2/3]\n', 'Train: 0 [3/3]\n', f'{__file__}:'):  # the warning's first line
        before = err[:err.index(text)]
        assert before.endswith('\r'), f'{text!r} was written into the bar: {before[-80:]!r}'
    assert logging.root.handlers == [handler] and restored, 'restored after the bar'


def test_without_the_routing_a_log_line_lands_in_the_bar(capsys):
    """The check above can fail: a plain handler writes right after the bar's text."""
    _console_logger()
    with progress.tqdm(range(2), desc='train 0', mininterval=0) as bar:
        for _ in bar:
            logging.getLogger('train_adv').info('Train: 0 [1/2]')
    err = capsys.readouterr().err
    assert not err[:err.index('Train: 0 [1/2]')].endswith('\r')


def test_a_bar_is_closed_when_its_block_is_interrupted(capsys):
    """So that the one line of an interrupted command starts on a line of its own."""
    with pytest.raises(KeyboardInterrupt):
        with progress.progress_bar(range(5), show=True, leave=False, mininterval=0) as bar:
            for step in bar:
                if step == 2:
                    raise KeyboardInterrupt
    assert bar not in progress.tqdm._instances
    assert capsys.readouterr().err.endswith('\r'), 'the bar cleared its line'


# --plan ---------------------------------------------------------------------------------------------------------------

def _budget(world_size: int = 1) -> RunBudget:
    return RunBudget(method='mbn', model='test_mbn_resnet', device='cpu', world_size=world_size, batch_size=8,
                     input_size=(3, 32, 32), train_images=64, epochs=3, passes_per_image=3.0, flops_per_pass=1e6,
                     step_seconds=0.5)


def _plan_validation(budget: RunBudget, attack, **kwargs) -> RunBudget:
    clean, robust = _batches(8, 8)[0], _batches(8, 8, seed=1)[0]
    return plan_validation(budget, _model(), attack, clean, robust, batch_size=8, val_images=40, robust_images=16,
                           branches=('clean', 'adv'), **kwargs)


def test_the_plan_projects_validation_beside_training():
    budget = _plan_validation(_budget(), _attack(1))
    assert budget.validation_epoch_seconds > 0
    assert budget.projected_validation_seconds == pytest.approx(3 * budget.validation_epoch_seconds)
    assert budget.projected_total_seconds == pytest.approx(budget.projected_run_seconds
                                                           + budget.projected_validation_seconds)
    assert budget.validation == '5 clean + 2 attacked batches of 8 per process, pgd1 ε=16/255, 2 branch(es)'
    text = budget.format()
    for name in ('training time', 'validation time', 'total time'):
        assert re.search(rf'^  {name} +\S+ (s|min) \(projection', text, re.MULTILINE), text
    record = budget.to_dict()
    assert record['projected_total_seconds'] == budget.projected_total_seconds


def test_the_projection_times_a_clean_batch_and_one_attack_iteration_and_runs_no_attack(monkeypatch):
    """On a clock that a clean batch advances by 1 per branch and an attack iteration (a forward and a backward to the
    input over the 8 rows) by 1: an attacked batch is K + 1 forwards and K backwards per image on each branch, every
    image attacked to the end (the projection is an upper bound), and an epoch is the models x (clean time x clean
    batches + attacked time x attacked batches); the validation attack itself never runs."""
    clock = [0.0]

    def timed_validate(model, loader, device, attack, robust_loader, branches, **kwargs):
        assert not robust_loader, 'no attacked batch is validated'
        clock[0] += len(branches) * len(loader)

    def timed_iteration(*args):
        clock[0] += 1

    monkeypatch.setattr(budget_module, 'validate', timed_validate)
    monkeypatch.setattr(budget_module, 'input_gradient', timed_iteration)
    monkeypatch.setattr(timing, 'time', SimpleNamespace(perf_counter=lambda: clock[0]))
    attack = _attack(10)
    monkeypatch.setattr(attack, 'perturb', lambda *args: pytest.fail('the validation attack ran'))
    budget = _plan_validation(_budget(), attack, models=2)
    assert budget.validation_pass_seconds == 1 / (2 * 8) and budget.validation_timed_passes == 16
    assert budget.validation_epoch_seconds == 2 * (2 * 1 * 5 + 2 * (10 + 1 + 10) * 8 / 16 * 2)
    assert 'attacked batches from 16 measured passes of an attack iteration, 62.5 ms per pass' in budget.format()


def test_the_validation_of_an_ema_and_more_processes_is_projected_as_the_run_shards_it():
    assert [validation_batches(359, 64, world) for world in (1, 2, 8)] == [6, 3, 1]
    sharded = _plan_validation(_budget(world_size=4), _attack(1), models=2)
    assert sharded.validation.startswith('2 clean + 1 attacked batches of 8 per process')
    assert sharded.validation.endswith(', model and EMA')


def test_a_budget_without_a_measured_validation_projects_no_total():
    budget = _budget()
    assert budget.projected_validation_seconds is None and budget.projected_total_seconds is None
    assert 'total time' not in budget.format() and 'training time' in budget.format()


def test_plan_on_the_digits_prints_training_validation_and_total(digits_dir, tmp_path, capsys):
    data = tiny_digits(digits_dir, tmp_path / 'tiny')
    assert main(tiny_train_argv(data, tmp_path / 'runs', '--epochs', '2', '--plan')) == 0
    printed = capsys.readouterr().out
    times = {name: value for name, value in re.findall(r'^  (\w+ time) +([\d.]+) s', printed, re.MULTILINE)}
    assert set(times) >= {'training time', 'validation time', 'total time'}, printed
    assert float(times['total time']) == pytest.approx(float(times['training time']) + float(times['validation time']),
                                                       abs=0.11)
    assert '2 clean + 1 attacked batches of 16 per process, pgd1 ε=16/255, 2 branch(es)' in printed
    assert not (tmp_path / 'runs').exists()


@pytest.mark.parametrize('flag', ['--attack-steps', '--val-attack-steps'])
def test_plan_of_a_huge_attack_runs_it_for_a_few_iterations_at_most(digits_dir, tmp_path, capsys, flag):
    """--plan of PGD-100000 (training or validation attack) costs a handful of the model's forward calls, not the
    attack's 100,000 iterations: the step and the validation are projected from timed passes."""
    forwards = []

    def count_stem(module, args):
        if isinstance(module, torch.nn.Conv2d) and module.in_channels == 3:
            forwards.append(args[0].shape[0])

    data = tiny_digits(digits_dir, tmp_path / 'tiny')
    hook = torch.nn.modules.module.register_module_forward_pre_hook(count_stem)
    try:
        assert main(tiny_train_argv(data, tmp_path / 'runs', '--epochs', '2', flag, '100000', '--plan')) == 0
    finally:
        hook.remove()
    assert 0 < len(forwards) <= 40, forwards
    printed = capsys.readouterr().out
    assert ('pgd100000 ε=16/255' in printed) == (flag == '--val-attack-steps')
    assert ('passes per image  100002 ' in printed) == (flag == '--attack-steps'), printed
