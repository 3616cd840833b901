"""Every packaged recipe parses by name, names a registered model and method, and builds its model (meta device);
each ImageNet recipe reproduces the setup of its authors' released code (batch-derived learning rate, warm-up,
smoothing, dropout, optimizer, weight-decay filter, init, colour jitter, attack step and clean starts); ``-c`` takes
a path or a packaged name, and ``--list-recipes`` shows them."""
from dataclasses import replace
from typing import Any, Dict, NamedTuple

import pytest
import timm
import torch
import yaml

import timm_advnorm  # noqa: F401
from timm_advnorm.attacks import InputSpace
from timm_advnorm.commands.train import parse_args, train_options
from timm_advnorm.recipes import list_recipes, recipe_path, resolve_config
from timm_advnorm.strict_yaml import yaml_files
from timm_advnorm.study import list_studies
from timm_advnorm.task import TASKS
from timm_advnorm.train.build import create_run_task
from timm_advnorm.train.optimization import (
    create_run_optimizer, create_run_scheduler, epoch_schedule, run_learning_rate)

RECIPES = list_recipes()


class Released(NamedTuple):
    """What a recipe must reproduce of its released code.

    Attributes:
        repository: The released code, named in the recipe's header.
        processes: Processes of the released global batch (with the recipe's ``batch_size`` per process).
        lr: The released learning rate at that global batch.
        nesterov: Whether the released SGD is Nesterov's.
        decay_all: Whether the released weight decay covers every parameter (else weights only, timm's filter).
        settings: Further arguments and their released values.
    """
    repository: str
    processes: int
    lr: float
    nesterov: bool
    decay_all: bool
    settings: Dict[str, Any]


_XIE_CODE = dict(
    batch_size=32, warmup_epochs=5, warmup_lr=0.1, sched_on_updates=True, sched='multistep', epochs=110,
    decay_milestones=[35, 70, 95], smoothing=0.1, drop=0.0, drop_path=None, model_kwargs={}, weight_decay=1e-4,
    color_jitter=0.4, mean=[0.5] * 3, std=[0.5] * 3, crop_pct=0.875, interpolation='bicubic',
    train_interpolation='bilinear', attack_eps=16.0, attack_step=1.0, attack_steps=30, attack_targeted=True,
    attack_bn_stats='running', attack_clean_start_prob=0.2, attack_clean_start_mode='per_batch', clip_grad=None)
_FAST_ADVPROP_CODE = dict(
    batch_size=64, warmup_epochs=0, sched='multistep', sched_on_updates=True, smoothing=0.0, drop=0.0, drop_path=None,
    model_kwargs={'zero_init_last': False}, weight_decay=1e-4, color_jitter=0.0, mean=[0.5] * 3, std=[0.5] * 3,
    crop_pct=0.875, interpolation='bilinear', train_interpolation='bilinear', attack_eps=1.0, attack_step=1.0,
    attack_steps=1, attack_targeted=False, attack_clean_start_mode='per_batch_randn', clip_grad=None)
_NOFROST_CODE = dict(
    warmup_epochs=0, sched='cosine', min_lr=0.0, smoothing=0.1, drop=0.25, drop_path=0.1, model_kwargs={},
    weight_decay=5e-5, color_jitter=0.0, mean=None, std=None, crop_pct=0.875, interpolation='bilinear',
    train_interpolation='bilinear', attack_eps=8.0, attack_step=1.0, attack_step_rule='fixed', attack_steps=10,
    attack_targeted=False, attack_clean_start_prob=0.0, clip_grad=None, clip_mode='norm')
_XIE = 'facebookresearch/ImageNet-Adversarial-Training'
_FAST_ADVPROP = 'meijieru/fast_advprop'
_NOFROST = 'amazon-science/normalizer-free-robust-training'

AUDITED = {
    **{name: Released(_XIE, 128, 1.6, nesterov=True, decay_all=False, settings=_XIE_CODE)
       for name in RECIPES if name.startswith('xie2020_')},
    'fast_advprop_mbn_resnet50': Released(_FAST_ADVPROP, 4, 0.1, nesterov=False, decay_all=True, settings=dict(
        _FAST_ADVPROP_CODE, epochs=105, decay_milestones=[30, 60, 90, 100], same_budget=True, p_adv=0.2,
        attack_bn_stats='batch')),
    'advprop_mbn_resnet50': Released(_FAST_ADVPROP, 4, 0.1, nesterov=False, decay_all=True, settings=dict(
        _FAST_ADVPROP_CODE, epochs=105, decay_milestones=[30, 60, 90, 100])),
    'nofrost_nf_resnet50': Released(_NOFROST, 8, 0.1, nesterov=True, decay_all=True, settings=dict(
        _NOFROST_CODE, batch_size=32, epochs=90)),
    'nofrost_star_nf_resnet26': Released(_NOFROST, 8, 0.1 * 255 / 256, nesterov=True, decay_all=True, settings=dict(
        _NOFROST_CODE, batch_size=30, epochs=30)),
}


def test_every_imagenet_recipe_is_audited():
    """A new packaged recipe needs its released setup here; the digits demo is the only one of our own."""
    assert set(RECIPES) == set(AUDITED) | {'digits_demo_mbn'}
    assert len([name for name in AUDITED if name.startswith('xie2020_')]) == 6


@pytest.mark.parametrize('recipe', sorted(AUDITED))
def test_recipe_reproduces_its_released_code(recipe):
    released = AUDITED[recipe]
    # NoFrost*'s recipe names no DeepAugment weights (the authors' EDSR network is a file of the user's)
    weights = ['--deepaugment-random-weights'] if recipe.startswith('nofrost_star') else []
    args, _ = parse_args(['-c', recipe, *weights])
    assert released.repository in recipe_path(recipe).read_text().split("dataset: ''")[0], 'the header names it'
    assert args.lr is None, 'the rate comes from the global batch (lr_base per lr_base_size), right on any GPU count'
    for key, value in released.settings.items():
        assert getattr(args, key) == value, f'{key}: {getattr(args, key)!r}, released {value!r}'
    options = train_options(args).optimizer
    learning_rate = run_learning_rate(options, args.batch_size, world_size=released.processes)
    assert learning_rate.lr == pytest.approx(released.lr)
    groups = create_run_optimizer(timm.create_model('test_resnet', num_classes=10),
                                  replace(options, lr=learning_rate.lr)).param_groups
    assert {group['nesterov'] for group in groups} == {released.nesterov}
    assert {group['weight_decay'] for group in groups} == (
        {args.weight_decay} if released.decay_all else {0.0, args.weight_decay})


def test_the_xie_global_batch_holds_on_fewer_gpus_with_accumulation():
    args, _ = parse_args(['-c', 'xie2020_mbn_resnet152', '--grad-accum-steps', '16'])
    assert run_learning_rate(train_options(args).optimizer, args.batch_size, world_size=8).lr == pytest.approx(1.6)


@pytest.mark.parametrize('epochs, trained', [(105, 88), (104, 87)])
def test_fast_advprop_budget_and_the_released_epoch_count(epochs, trained):
    """As its header says: 105 epochs / 1.2 passes train 88 with decays at 25, 50, 75, 83; ``--epochs 104`` gives the
    released code's 87 with the same decays."""
    args, _ = parse_args(['-c', 'fast_advprop_mbn_resnet50', '--epochs', str(epochs)])
    args.distributed, args.rank, args.world_size = False, 0, 1
    model = timm.create_model('test_mbn_resnet', num_classes=10)
    task = create_run_task(train_options(args), model, InputSpace.from_model(model), num_classes=10, verbose=False)
    assert task.passes_per_image == pytest.approx(1.2)
    schedule = epoch_schedule(train_options(args).schedule, task.passes_per_image)
    assert (schedule.epochs, schedule.decay_milestones) == (trained, (25, 50, 75, 83))


def _lr_at_each_epoch_start(recipe: str, updates_per_epoch: int = 8) -> Dict[int, float]:
    """The learning rate of the first and of the last update of every epoch (0-based) of `recipe`'s schedule, stepped
    as a training run steps it (``step_update`` after each update, ``step`` after each epoch)."""
    args, _ = parse_args(['-c', recipe])
    options = train_options(args)
    schedule = epoch_schedule(options.schedule, passes_per_image=1.0)
    optimizer = torch.optim.SGD([torch.zeros(1, requires_grad=True)], lr=1.0)
    scheduler, epochs = create_run_scheduler(optimizer, options.schedule, schedule, updates_per_epoch)
    rates, num_updates = {}, 0
    for epoch in range(epochs):
        used = []
        for _ in range(updates_per_epoch):
            used.append(optimizer.param_groups[0]['lr'])
            num_updates += 1
            scheduler.step_update(num_updates=num_updates)
        rates[epoch] = (used[0], used[-1])
        scheduler.step(epoch + 1)
    return rates


@pytest.mark.parametrize('recipe', [name for name in AUDITED if AUDITED[name].settings['sched'] == 'multistep'])
def test_multistep_recipes_decay_after_their_milestone_epochs_as_the_released_code(recipe):
    """The released codes divide the rate at the start of epoch m (0-based) for a milestone m: Fast AdvProp's
    ``if epoch in args.schedule`` before epoch m, tensorpack's setter after m epochs. timm's epoch-stepped multistep
    schedule decays one epoch earlier (it compares milestones with ``epoch + 1``); stepped on updates, only the last
    update before the milestone is early."""
    args, _ = parse_args(['-c', recipe])
    for epoch, (first, last) in _lr_at_each_epoch_start(recipe).items():
        if epoch < args.warmup_epochs:
            continue
        decays = sum(milestone <= epoch for milestone in args.decay_milestones)
        assert first == pytest.approx(args.decay_rate ** decays), f'epoch {epoch}'
        assert last == pytest.approx(args.decay_rate ** (decays + (epoch + 1 in args.decay_milestones)))


@pytest.mark.parametrize('recipe', ['fast_advprop_mbn_resnet50', 'advprop_mbn_resnet50'])
def test_torchvision_init_keeps_the_last_norm_of_each_block(recipe):
    """``zero_init_last=False`` reaches the model: its blocks' last BN starts at 1, as torchvision's ResNet."""
    args, _ = parse_args(['-c', recipe])
    model = timm.create_model('test_mbn_resnet', num_classes=10, **args.model_kwargs)
    assert all(torch.all(block.bn2.weight == 1) for block in model.layer1)


@pytest.mark.parametrize('recipe', RECIPES)
def test_recipe_is_consistent(recipe):
    args, _ = parse_args(['-c', recipe, '--deepaugment-random-weights'])  # NoFrost* needs DeepAugment weights
    assert args.method in TASKS
    assert timm.is_model(args.model), args.model
    with torch.device('meta'):
        model = timm.create_model(args.model, num_classes=args.num_classes or 10, **args.model_kwargs)
    if args.method in ('mbn', 'fast_advprop'):
        assert any('adv_bn' in n for n, _ in model.named_modules())
    if args.method in ('nofrost', 'nofrost_star'):
        assert not any(isinstance(m, torch.nn.modules.batchnorm._BatchNorm) for m in model.modules())
    train_options(args)  # the method takes the recipe's options (clean-start mode included)


def test_unknown_recipe_key_is_rejected(tmp_path):
    bad = tmp_path / 'bad.yaml'
    bad.write_text('modle: resnet50\n')
    with pytest.raises(SystemExit):
        parse_args(['-c', str(bad)])


def test_config_takes_a_path_before_a_packaged_name(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert resolve_config('digits_demo_mbn') == recipe_path('digits_demo_mbn')
    assert resolve_config('digits_demo_mbn.yaml') == recipe_path('digits_demo_mbn')
    (tmp_path / 'digits_demo_mbn').write_text('epochs: 3\n')  # a file of that name in the working folder wins
    args, _ = parse_args(['-c', 'digits_demo_mbn'])
    assert args.epochs == 3 and args.model == 'test_mbn_resnet'  # the file's value, the rest from the defaults
    yaml_text = recipe_path('digits_demo_mbn').read_text()
    args, _ = parse_args(['-c', str(recipe_path('digits_demo_mbn'))])
    assert args.epochs == yaml.safe_load(yaml_text)['epochs']


def test_unknown_config_is_one_line_naming_the_packaged_recipes(capsys):
    with pytest.raises(SystemExit) as exit_info:
        parse_args(['-c', 'no_such_recipe'])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and 'no_such_recipe' in err[0] and 'digits_demo_mbn' in err[0]


def test_recipes_and_studies_are_listed_by_one_yaml_folder_listing(tmp_path):
    for name in ('b.yaml', 'a.yaml', 'c.yml', 'notes.txt'):
        (tmp_path / name).write_text('x: 1\n')
    (tmp_path / 'sub').mkdir()
    (tmp_path / 'sub' / 'd.yaml').write_text('x: 1\n')
    assert yaml_files(tmp_path) == {'a': tmp_path / 'a.yaml', 'b': tmp_path / 'b.yaml'}  # sorted, this folder only
    assert list_recipes() == sorted(list_recipes()) and 'digits_demo_mbn' in list_recipes()
    assert list_studies() == sorted(list_studies()) and recipe_path('digits_demo_mbn.yaml').is_file()


def test_list_recipes_describes_each_and_exits_zero(capsys):
    with pytest.raises(SystemExit) as exit_info:
        parse_args(['--list-recipes'])
    assert exit_info.value.code == 0
    out = capsys.readouterr().out
    for name in RECIPES:
        assert name in out
    assert '--model test_mbn_resnet --method mbn, digits' in out


def test_old_option_spellings_are_hidden_aliases(capsys):
    """``--val-samples`` (and its YAML key) still set ``--num-samples``, but --help shows one name."""
    args, _ = parse_args(['--val-samples', '7'])
    assert args.num_samples == 7
    with pytest.raises(SystemExit):
        parse_args(['--help'])
    help_text = capsys.readouterr().out
    assert '--num-samples' in help_text and '--val-samples' not in help_text


def test_help_shows_defaults_and_the_config_option(capsys):
    with pytest.raises(SystemExit):
        parse_args(['--help'])
    help_text = ' '.join(capsys.readouterr().out.split())
    assert '-c FILE, --config FILE' in help_text
    assert '--attack-steps ATTACK_STEPS Attack iterations (PGD-N). (default: 30)' in help_text
    assert ('--attack-eps ATTACK_EPS Attack budget on the 0-255 scale: 16 means 16/255 (a value in (0, 1) is refused '
            'as one of the [0, 1] scale). (default: 16.0)') in help_text


def test_agc_without_a_threshold_clips_with_timms_default_factor():
    """``--clip-mode agc`` alone used to clip nothing (no --clip-grad); it now gets AGC's usual clip factor."""
    args, args_text = parse_args(['--clip-mode', 'agc'])
    assert args.clip_grad == 0.01 and 'clip_grad: 0.01' in args_text
    assert parse_args(['--clip-mode', 'agc', '--clip-grad', '0.05'])[0].clip_grad == 0.05
    assert parse_args(['--clip-mode', 'norm'])[0].clip_grad is None


def _usage_error(parse, argv, capsys) -> str:
    """The one line a usage error writes (exit status 2, no usage block)."""
    with pytest.raises(SystemExit) as exit_info:
        parse(argv)
    assert exit_info.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and 'usage:' not in err[0], err
    return err[0]


@pytest.mark.parametrize('text, message', [
    ('epochs: 2.5\n', 'key epochs: '),
    ('lr: [0.1, 0.2]\n', 'key lr: expected a single float value, got [0.1, 0.2]'),
    ('lr: [{a: 1}]\n', 'key lr: expected a single float value, got [{"a": 1}]'),
    ('scale: 0.5\n', 'key scale: expected a list of 2 float values, got 0.5'),
    ('scale: [0.1, 0.5, 1.0]\n', 'key scale: expected 2 float values, got 3: [0.1, 0.5, 1.0]'),
    ('method: foo\n', 'key method: invalid choice: "foo" (choose from vanilla, madry'),
    ('pretrained: "yes"\n', 'key pretrained: expected true or false, got "yes"'),
    ('attack_steps: null\n', 'key attack_steps: expected a single int value, got null'),
    ('decay_milestones: []\n', 'key decay_milestones: expected one or more int values, got an empty list'),
    ('val_samples: many\n', 'key val_samples: invalid value "many"'),  # the hidden alias of num_samples
    ('list_recipes: true\n', 'key list_recipes: --list-recipes is an action, not a setting a config can hold'),
    ('- epochs: 1\n- lr: 0.1\n', 'must map argument names to values, got a list'),
    ('just a sentence\n', 'must map argument names to values, got a str'),
    ('epochs: 3\nmodel: \x01\n', 'is not valid YAML: special characters are not allowed (line 2, column 8)'),
])
def test_train_config_values_are_held_to_the_options_types(tmp_path, capsys, text, message):
    path = tmp_path / 'bad.yaml'
    path.write_text(text)
    line = _usage_error(parse_args, ['-c', str(path)], capsys)
    assert line.startswith(f'timm-advnorm-train: error: config file {path}') and message in line, line


@pytest.mark.parametrize('text, message', [
    ('gammas: [a]\n', 'key gammas: invalid float value: "a"'),
    ('sanity_steps: [1, 2]\n', 'key sanity_steps: expected a single int value, got [1, 2]'),
    ('attack_norm: l3\n', 'key attack_norm: invalid choice: "l3" (choose from linf, l2)'),
    ('interpolations: [mix, cubic]\n', 'key interpolations: invalid choice: "cubic" (choose from mix, logits)'),
    ('model_kwargs: [drop_rate=0.1]\n', 'key model_kwargs: expected a mapping of names to values'),
    ('reduced: 1\n', 'key reduced: expected true or false, got 1'),
])
def test_validate_config_values_are_held_to_the_options_types(tmp_path, capsys, text, message):
    from timm_advnorm.commands.validate import parse_args as parse_validate_args
    path = tmp_path / 'bad.yaml'
    path.write_text(text)
    line = _usage_error(parse_validate_args, ['-c', str(path), '--model', 'test_mbn_resnet', '--dataset', 'digits'],
                        capsys)
    assert line.startswith(f'timm-advnorm-validate: error: config file {path}') and message in line, line


def test_config_values_convert_as_the_command_line_would(tmp_path):
    """One value for a list option is a one-element list (as ``--mean 0.5``); PyYAML's string ``1e-4`` is a float;
    the command line still wins over the config."""
    from timm_advnorm.commands.validate import parse_args as parse_validate_args
    path = tmp_path / 'config.yaml'
    path.write_text('lr: 1e-4\nmean: 0.5\ndecay_milestones: 30\nval_attack_targeted: null\n')
    args, _ = parse_args(['-c', str(path)])
    assert args.lr == 1e-4 and args.mean == [0.5] and args.decay_milestones == [30] and args.val_attack_targeted is None
    assert parse_args(['-c', str(path), '--lr', '0.2'])[0].lr == 0.2
    path.write_text('gammas: 0.5\nattack_steps: 10\nmodel_kwargs: {drop_rate: 0.1}\n')
    args = parse_validate_args(['-c', str(path), '--model', 'test_mbn_resnet', '--dataset', 'digits'])
    assert args.gammas == [0.5] and args.attack_steps == [10] and args.model_kwargs == {'drop_rate': 0.1}


def test_the_arguments_a_run_saves_are_a_valid_config(tmp_path):
    """``args.yaml`` of a run (every option, unset ones as null) reproduces the run's arguments through ``-c``."""
    args, args_text = parse_args(['-c', 'digits_demo_mbn', '--mean', '0.5', '0.5', '0.5'])
    (tmp_path / 'args.yaml').write_text(args_text)
    again, _ = parse_args(['-c', str(tmp_path / 'args.yaml')])
    assert {**vars(again), 'config': None} == {**vars(args), 'config': None}


def test_usage_errors_are_one_line_with_a_help_hint(capsys):
    line = _usage_error(parse_args, ['--lr', 'fast'], capsys)
    assert line.startswith('timm-advnorm-train: error: argument --lr: ') and line.endswith('fast (see --help)'), line
    assert _usage_error(parse_args, ['-c'], capsys).endswith('argument -c/--config: expected one argument (see --help)')
