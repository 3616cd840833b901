"""Training is built from typed options (`timm_advnorm.train.options`), converted once from the parsed arguments:
building a run changes neither the options nor the arguments, and returns what it resolved in new objects; the
built-in datasets' class count and image size come from one place (`timm_advnorm.data`)."""
import copy
import dataclasses
from pathlib import Path

import pytest
import yaml

from tiny_runs import tiny_digits, tiny_train_argv
from timm_advnorm.data import dataset_img_size, dataset_num_classes
from timm_advnorm.recipes import recipe_path
from timm_advnorm.commands.train import parse_args, train_options
from timm_advnorm.train.build import build_training


def test_the_conversion_fills_each_group_from_the_arguments_it_keeps_unchanged():
    args, _ = parse_args(['-c', 'digits_demo_mbn', '--lr-base', '0.3', '--val-attack-eps', '2', '--aa', 'v0',
                          '--checkpoint-hist', '4'])
    before = copy.deepcopy(vars(args))
    options = train_options(args)
    assert vars(args) == before and options.recorded == vars(args) and options.recorded is not vars(args)
    assert (options.method, options.model.model, options.data.dataset) == (args.method, args.model, 'digits')
    assert (options.optimizer.lr, options.optimizer.lr_base, options.schedule.epochs) == (0.05, 0.3, args.epochs)
    assert (options.augment.aa, options.output.checkpoint_hist, options.runtime.seed) == ('v0', 4, args.seed)
    # the robust validation's attack: its own ε, the training attack's step where no --val-attack-step is given
    assert (options.validation.attack_eps, options.validation.attack_step) == (2.0, args.attack_step)
    with pytest.raises(dataclasses.FrozenInstanceError):
        options.optimizer.lr = 0.1


def test_building_a_run_resolves_into_new_objects_and_changes_neither_input(digits_dir, tmp_path: Path):
    recipe = yaml.safe_load(recipe_path('digits_demo_mbn').read_text())
    del recipe['img_size'], recipe['lr']  # resolved: the built-in dataset's size, the base rate scaled by the batch
    (tmp_path / 'recipe.yaml').write_text(yaml.safe_dump(recipe))
    argv = tiny_train_argv(tiny_digits(digits_dir, tmp_path / 'tiny'), tmp_path / 'runs', '--dataset', 'digits',
                           '--data-dir', str(digits_dir), '--device', 'cpu')
    args, text = parse_args(['-c', str(tmp_path / 'recipe.yaml'), *argv[2:]])
    options = train_options(args)
    args_before, options_before = copy.deepcopy(vars(args)), copy.deepcopy(options)
    run = build_training(options, text)
    assert vars(args) == args_before and options == options_before
    assert args.lr is None and args.img_size is None and args.eval_metric is None and not hasattr(args, 'rank')
    resolved = run.options
    assert resolved.optimizer.lr == pytest.approx(args.lr_base * args.batch_size / args.lr_base_size)
    assert (resolved.data.img_size, resolved.runtime.device, resolved.runtime.world_size) == (32, 'cpu', 1)
    assert resolved.validation.eval_metric == 'adv_branch_robust_top1'  # mixture BN's own
    recorded = run.recorded  # what the checkpoints save: the parsed arguments with the resolved values
    assert recorded is not options.recorded and options.recorded == vars(args)
    assert (recorded['lr'], recorded['img_size'], recorded['eval_metric'], recorded['rank']) == (
        resolved.optimizer.lr, 32, resolved.validation.eval_metric, 0)


def test_the_built_in_datasets_class_count_and_image_size_are_their_defaults():
    assert (dataset_num_classes('digits', None), dataset_num_classes('mnist5k', None)) == (10, 10)
    assert dataset_num_classes('digits', 3) == 3 and dataset_num_classes('imagenet', 1000) == 1000
    with pytest.raises(ValueError, match=r'^--num-classes is required for datasets other than the built-in digits, '
                                         r'mnist5k and mnist\.$'):
        dataset_num_classes('imagenet', None)
    assert dataset_img_size('digits', None) == 32 and dataset_img_size('digits', 16) == 16
    assert dataset_img_size('imagenet', None) is None  # the model's own
