"""The evaluation command's options are declared once, on the fields of the typed options they fill
(`timm_advnorm.eval.options`), as the training command's are (tests/test_train_declarations.py): its parser is
generated from these declarations, its parsed values fill the options by name, and a study writes a cell's options as
arguments from them."""
import dataclasses

import pytest

from timm_advnorm.commands import study_cells, validate
from timm_advnorm.commands.validate import declarations, eval_options, get_args_parser, parse_args
from timm_advnorm.eval.options import OPTIONS_CLASSES, AttackOptions, CheckOptions, EvalOptions, EvalRuntimeOptions
from timm_advnorm.eval.protocols.ood import OOD_DATASETS
from timm_advnorm.task.method_options import declared_fields, option_dest

#: Fields that hold no option of their own: what the command sets from several (`eval_options`).
_NOT_OPTIONS = {'ood_folders', 'record'}
#: The parser's arguments that fill no options field: ``--help``, the positional data root and the folders of the
#: out-of-distribution sets (both set `EvalDataOptions` fields by the command).
_COMMAND_OWN = {'help', 'data', *(dataset.option[2:].replace('-', '_') for dataset in OOD_DATASETS.values())}


@pytest.fixture(scope='module')
def parser():
    return get_args_parser()


def test_every_parser_option_fills_exactly_one_declaring_field_and_every_field_an_option(parser):
    dests = set(parser.dest_actions) - _COMMAND_OWN
    declaring = [option_dest(field) for options_class in OPTIONS_CLASSES for field in declared_fields(options_class)]
    assert len(declaring) == len(set(declaring)) and dests == set(declaring) == set(declarations())
    for options_class in OPTIONS_CLASSES:
        for field in dataclasses.fields(options_class):
            if options_class is EvalOptions and field.type in OPTIONS_CLASSES:
                continue  # the groups (`EvalOptions.model` is `EvalModelOptions`, not ``--model``)
            assert (option_dest(field) in dests) == (field.name not in _NOT_OPTIONS), field.name


def test_the_help_layout_shows_every_declared_option_once():
    shown = [name for _, names in validate._HELP_GROUPS for name in names]
    assert sorted(set(shown) - {'data', 'ood_folders'}) == sorted(declarations()) and len(shown) == len(set(shown))


def test_the_parser_defaults_are_the_fields_defaults():
    """Each default is the field's: the options of a command line that gives only what it must are the classes'
    defaults, but for what the command resolves (device, workers, sanity mode)."""
    options = eval_options(parse_args(['--model', 'test_mbn_resnet', '--dataset', 'digits']))
    assert options.attacks == AttackOptions() and options.attacks.attacks == () and options.attacks.steps == ()
    assert options.checks == CheckOptions(sanity='budget') and options.checks.sanity_pinned == {}
    assert options.runtime == dataclasses.replace(EvalRuntimeOptions(), device=options.runtime.device,
                                                  workers=options.runtime.workers)
    for group in ('preprocessing', 'variants', 'outputs'):
        given = getattr(options, group)
        assert given == type(given)(), group
    assert not options.plan_only and options.runtime.fold_bn and options.attacks.share_budgets


def test_off_switches_and_pinned_probes_fill_their_fields():
    options = eval_options(parse_args(['--model', 'test_mbn_resnet', '--dataset', 'digits', '--no-fold-bn',
                                       '--separate-budgets', '--sanity-samples', '4', '--amp', '--strict-sanity',
                                       '--attacks', 'pgd', '--steps', '2', '3']))
    assert not options.runtime.fold_bn and not options.attacks.share_budgets and options.checks.strict_sanity
    assert options.checks.sanity_pinned == {'samples': 4} and options.runtime.autocast == 'bfloat16'
    assert options.attacks.attacks == ('pgd',) and options.attacks.steps == (2, 3)


def test_a_cells_options_become_arguments_as_the_declarations_take_them():
    argv = study_cells.validate_argv(dict(dataset='digits', no_fold_bn=True, separate_budgets=False, attack_eps=8,
                                          attack_steps=[2, 3], sanity_samples=16, eps=4, num_samples=None,
                                          imagenet_r_dir='/r', model_kwargs={'drop_rate': 0.1}))
    assert argv == ['--dataset', 'digits', '--no-fold-bn', '--attack-eps', '8', '--attack-steps', '2', '3',
                    '--sanity-samples', '16', '--eps', '4', '--imagenet-r-dir', '/r', '--model-kwargs',
                    'drop_rate=0.1']
    with pytest.raises(ValueError, match=r"^timm-advnorm-validate has no option --no-such \(study option "
                                         r"'no_such'\)\.$"):
        study_cells.validate_argv({'no_such': 1})


def test_a_cells_options_build_the_typed_options_their_arguments_parse_into(tmp_path):
    """Built from the options by name (`validate.options_of`), as parsing them written as arguments: a hidden
    alias, a single count of a sweep, the device, workers and sanity probes resolved; a checkpoint not yet trained
    is not read."""
    values = dict(checkpoint=str(tmp_path / 'last.pth.tar'), dataset='digits', attacks=['pgd'], attack_eps=8,
                  steps=2, sanity_samples=0, no_fold_bn=True, overwrite=False, num_samples=None)
    argv = study_cells.validate_argv(values)
    options = validate.options_of(values)
    assert options == eval_options(parse_args(argv))
    assert options.attacks.steps == (2,) and options.checks.sanity == 'off' and not options.runtime.fold_bn
