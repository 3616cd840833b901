"""The method plug-in contract: a training method is one registered task class that declares its own options and
builds itself from them; the training command and its loop name no method, and the training attack is a choice
from the attack registry."""
import argparse
import csv
import importlib
import inspect
from dataclasses import dataclass
from pathlib import Path

import pytest
import timm
import torch
import yaml

import timm_advnorm  # noqa: F401  (registers the built-in methods)
from timm_advnorm.attacks import FGSM, PGD, InputSpace
from timm_advnorm.task import (
    TASKS, AdversarialClassificationTask, FastAdvPropTask, MethodOptions, MixedTask, VanillaTask, get_task_class,
    list_tasks, option, register_task, unregister_task)
from timm_advnorm.commands import train as script
from timm_advnorm.train import build, loop, runner
from timm_advnorm.commands.train import get_args_parser, parse_args, train_options
from timm_advnorm.train.build import create_run_task

REPO = Path(__file__).resolve().parents[1]
BUILT_IN = ['vanilla', 'madry', 'mixed', 'alp', 'mbn', 'fast_advprop', 'nofrost', 'nofrost_star']
FAST = ['--epochs', '1', '--attack-steps', '2', '--attack-step', '4', '--val-attack-steps', '2', '--num-samples', '32',
        '-b', '64', '--workers', '0', '--hflip', '0', '--log-interval', '0']


@pytest.fixture
def scaled_vanilla():
    """A method of its own, registered by this file alone (and removed after the test): vanilla training whose loss
    is scaled by its own option, ``--loss-scale``; the unscaled loss is logged beside it."""

    @dataclass(frozen=True)
    class ScaledVanillaOptions(MethodOptions):
        loss_scale: float = option(1.0, type=float, help='Factor of the loss.')

    @register_task('scaled_vanilla')
    class ScaledVanillaTask(VanillaTask):
        options_class = ScaledVanillaOptions

        def __init__(self, model, loss_scale: float = 1.0, **kwargs):
            super().__init__(model, **kwargs)
            self.loss_scale = loss_scale

        def forward(self, input, target):
            result = super().forward(input, target)
            return {**result, 'loss': self.loss_scale * result['loss'],
                    **self.loss_parts(loss_unscaled=result['loss'])}

    yield ScaledVanillaTask
    unregister_task('scaled_vanilla')


def _groups(parser: argparse.ArgumentParser):
    """Option strings by argument group title."""
    return {g.title: [s for a in g._group_actions for s in a.option_strings] for g in parser._action_groups}


def test_a_method_of_one_file_trains_through_the_real_command(scaled_vanilla, tmp_path, digits_dir):
    parser = get_args_parser()
    assert '--loss-scale' in _groups(parser)['Method scaled_vanilla']
    assert 'scaled_vanilla' in parser._option_string_actions['--method'].choices
    out = tmp_path / 'runs'
    assert script.main(['--data-dir', str(digits_dir), '--output', str(out), '--experiment', 'run', *FAST,
                        '--method', 'scaled_vanilla', '--loss-scale', '2']) == 0
    with open(out / 'run' / 'summary.csv') as f:
        row, = list(csv.DictReader(f))
    assert float(row['train_loss']) == pytest.approx(2 * float(row['train_loss_unscaled']))
    assert float(row['train_passes_per_image']) == 1.0
    saved = yaml.safe_load((out / 'run' / 'args.yaml').read_text())
    assert saved['method'] == 'scaled_vanilla' and saved['loss_scale'] == 2.0 and saved['eval_metric'] == 'top1'


def test_a_removed_method_and_its_options_leave_the_command(scaled_vanilla):
    unregister_task('scaled_vanilla')
    parser = get_args_parser()
    assert 'scaled_vanilla' not in parser._option_string_actions['--method'].choices
    assert '--loss-scale' not in parser._option_string_actions
    register_task('scaled_vanilla')(scaled_vanilla)  # for the fixture to remove


def test_the_built_in_methods_are_registered_in_the_papers_order():
    assert list_tasks()[:len(BUILT_IN)] == BUILT_IN
    assert list(TASKS) == list_tasks()
    for name in BUILT_IN:
        assert get_task_class(name).method == name
    with pytest.raises(TypeError):
        TASKS['other'] = VanillaTask  # a read-only view of the registry
    with pytest.raises(ValueError, match="Unknown method 'free_lunch'; available: vanilla, madry"):
        get_task_class('free_lunch')


def test_registration_refuses_taken_and_malformed_names_and_other_classes():
    other = type('Other', (VanillaTask,), {})
    with pytest.raises(ValueError, match="Method 'mbn' is registered twice"):
        register_task('mbn')(other)
    assert other.method == 'vanilla'  # a refused class is left as it was
    with pytest.raises(ValueError, match=r"Method name 'Fast-AdvProp': use lower case letters, digits and "
                                         r"underscores, starting with a letter\."):
        register_task('Fast-AdvProp')(type('FastAdvProp', (VanillaTask,), {}))
    with pytest.raises(TypeError, match='not an AdversarialClassificationTask'):
        register_task('plain')(torch.nn.Module)
    assert 'plain' not in TASKS and 'Fast-AdvProp' not in TASKS and TASKS['mbn'].__name__ == 'MbnTask'


def test_each_method_declares_its_options_in_its_own_group_with_their_old_names_and_defaults():
    groups = _groups(get_args_parser())
    assert groups['Method mixed'] == ['--alpha', '--clean-ratio']
    assert groups['Method alp'] == ['--pairing-weight']
    assert groups['Method nofrost'] == ['--adv-weight']
    assert groups['Method fast_advprop'] == ['--p-adv', '--noise-weight', '--shuffle-bn', '--no-shuffle-bn',
                                             '--rescale-grads', '--no-rescale-grads']
    assert {'--method', '--attack', '--attack-eps', '--same-budget'} <= set(groups['Adversarial training'])
    args, _ = parse_args([])
    assert (args.method, args.attack, args.alpha, args.clean_ratio, args.pairing_weight, args.adv_weight, args.p_adv,
            args.noise_weight, args.shuffle_bn, args.rescale_grads) == (
        'mbn', 'pgd', 0.5, 1.0, None, 0.5, 0.2, 0.5, True, True)
    # another method's option is accepted, as it always was
    assert parse_args(['--method', 'madry', '--p-adv', '0.3'])[0].p_adv == 0.3


@pytest.fixture
def derived_methods():
    """Register the classes a test builds; remove them after it."""
    names = []

    def register(name, cls):
        names.append(name)
        return register_task(name)(cls)
    yield register
    for name in names:
        unregister_task(name)


def test_an_inherited_declaration_is_made_once_and_a_conflicting_one_is_refused(derived_methods):
    derived_methods('mixed_again', type('MixedAgain', (MixedTask,), {}))  # inherits mixed's options
    groups = _groups(get_args_parser())
    assert groups['Method mixed'] == ['--alpha', '--clean-ratio'] and groups['Method mixed_again'] == []

    @dataclass(frozen=True)
    class OtherOptions(MethodOptions):
        alpha: float = option(0.3, type=float, help='Another clean-loss weight.')
    with pytest.raises(ValueError, match='Method mixed_other declares --alpha unlike method mixed'):
        register_task('mixed_other')(type('MixedOther', (MixedTask,), {'options_class': OtherOptions}))
    assert 'mixed_other' not in TASKS
    get_args_parser()  # the refused method left the command as it was


def _built(argv, model_name='test_mbn_resnet'):
    """The task the command would build for `argv` (one process)."""
    args, _ = parse_args(argv)
    args.rank, args.distributed = 0, False
    torch.manual_seed(0)
    model = timm.create_model(model_name, num_classes=10)
    return create_run_task(train_options(args), model, InputSpace(), num_classes=10, verbose=False)


def test_the_training_attack_is_a_choice_from_the_attack_registry():
    pgd = _built(['--method', 'madry', '--attack-steps', '3', '--attack-eps', '8', '--attack-step', '2'])
    assert type(pgd.attack) is PGD and pgd.attack.steps == 3 and pgd.attack.targeted and not pgd.attack.best_iterate
    assert pgd.attack.step_size == pytest.approx(8 / 3)  # the max(step, eps / N) rule by default
    assert pgd.passes_per_image == 4
    fgsm = _built(['--method', 'mbn', '--attack', 'fgsm', '--attack-eps', '8', '--attack-step', '10',
                   '--no-attack-targeted', '--attack-bn-stats', 'batch'])
    assert type(fgsm.attack) is FGSM and fgsm.attack.step_size == 10 and fgsm.attack.bn_stats == 'batch'
    assert not fgsm.attack.best_iterate and not fgsm.attack.targeted
    assert fgsm.passes_per_image == 3  # one step, then the clean and the adversarial pass
    assert _built(['--method', 'vanilla', '--attack', 'fgsm']).attack is None


def test_an_evaluation_attack_is_refused_on_one_line(capsys):
    with pytest.raises(SystemExit):
        parse_args(['--attack', 'mifgsm'])
    line, = capsys.readouterr().err.strip().splitlines()
    assert "argument --attack: 'mifgsm' is an evaluation attack" in line and 'training attacks: fgsm, pgd' in line


@pytest.mark.parametrize('argv, message', [
    (['--attack', 'fgsm'], '--attack fgsm does not apply'),
    (['--attack-norm', 'l2'], '--attack-norm l2 does not apply'),
])
def test_fast_advprop_refuses_another_attack(argv, message):
    with pytest.raises(ValueError, match=message):
        _built(['--method', 'fast_advprop', *argv])


def test_fast_advprop_builds_from_the_shared_budget_and_its_own_options():
    task = _built(['--method', 'fast_advprop', '--attack-eps', '2', '--attack-step', '0.5', '--attack-steps', '2',
                   '--p-adv', '0.25', '--adv-weight', '0.3', '--no-shuffle-bn', '--smoothing', '0.1'])
    assert isinstance(task, FastAdvPropTask) and task.attack is None
    assert (task.eps, task.step, task.steps, task.p_adv, task.adv_weight, task.shuffle_bn, task.label_smoothing,
            task.num_classes) == (2.0, 0.5, 2, 0.25, 0.3, False, 0.1, 10)
    assert task.batch_scale == pytest.approx(4 / 3) and task.passes_per_image == pytest.approx(1.5)


@pytest.mark.parametrize('method', BUILT_IN)
def test_every_built_in_method_builds_from_the_default_options(method):
    extra = ['--deepaugment-random-weights'] if method == 'nofrost_star' else []  # the authors' weights are a file
    task = _built(['--method', method, *extra], 'test_nfr_resnet' if method.startswith('nofrost') else 'test_mbn_resnet')
    assert isinstance(task, AdversarialClassificationTask) and task.method == method
    assert task.passes_per_image >= 1 and task.batch_scale > 0


def test_the_command_and_its_loop_name_no_method():
    """What a method needs from the command is a hook of its task class, never a branch on its name."""
    for code in (script.main, script.train_options, build, runner, loop):  # the command's run, not its parser
        source = inspect.getsource(code)
        for name in BUILT_IN:
            assert f"'{name}'" not in source and f'"{name}"' not in source, (code.__name__, name)
        assert 'getattr(task' not in source and '.method ==' not in source, code.__name__


def test_the_benchmark_builds_every_registered_method_as_the_command_does(monkeypatch):
    monkeypatch.syspath_prepend(str(REPO / 'benchmarks'))
    bench = importlib.import_module('bench_methods')
    args = bench.get_args_parser().parse_args(['--model', 'test_mbn_resnet', '--nf-model', 'test_nfr_resnet'])
    entries = bench._tasks(args, torch.device('cpu'))
    assert [(family, method) for family, method, *_ in entries] == [
        ('mbn', 'vanilla'), ('nf', 'vanilla'), *[('mbn', m) for m in BUILT_IN[1:-2]], ('nf', 'nofrost'),
        ('nf', 'nofrost_star')]
    fast = next(task for _, method, task, *_ in entries if method == 'fast_advprop')
    assert fast.steps == 1 and fast.eps == 1.0  # its paper's PGD-1


def test_the_benchmark_runs_its_steps_under_autocast_in_channels_last(monkeypatch, capsys):
    """What the GPU figures need (``--amp --channels-last``), smoke-run on the CPU with tiny models."""
    monkeypatch.syspath_prepend(str(REPO / 'benchmarks'))
    bench = importlib.import_module('bench_methods')
    bench.main(['--model', 'test_mbn_resnet', '--nf-model', 'test_nfr_resnet', '--img-size', '16', '--batch-size', '8',
                '--methods', 'fast_advprop', '--rounds', '1', '--warmup', '0', '--amp', '--channels-last'])
    out = capsys.readouterr().out
    assert 'bf16 autocast, channels_last' in out
    assert '| fast_advprop | test_mbn_resnet | 1.2 |' in out
