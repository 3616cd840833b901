"""The training command's options are declared once, on the fields of the typed options they fill
(`timm_advnorm.train.options`, `TrainingAttackOptions`, each method's options): its parser is generated from these
declarations, its parsed values fill the options by name, and a study writes a cell's options as arguments from
them."""
import dataclasses
import pytest

from timm_advnorm.commands import study_cells, train
from timm_advnorm.commands.train import declarations, get_args_parser, option_dests, parse_args, train_options
from timm_advnorm.task import TASKS, TrainingAttackOptions, option, options_from_values
from timm_advnorm.task.method_options import declared_fields, is_shared, option_dest
from timm_advnorm.train.options import OPTIONS_CLASSES, TrainOptions

#: Fields that hold no option: what the build resolves or the command adds.
_NOT_OPTIONS = {'rank', 'world_size', 'local_rank', 'distributed', 'option_names', 'dataset_chosen_by'}
#: The parser's options that fill no options field: the command's own actions and its config file.
_COMMAND_OWN = {'help', 'list_recipes', 'config'}


@pytest.fixture(scope='module')
def parser():
    return get_args_parser()


def test_every_parser_option_fills_exactly_one_declaring_field_and_every_field_an_option(parser):
    dests = {action.dest for action in parser.option_actions.values()} - _COMMAND_OWN
    # a method that keeps its parent's options class declares the same options (the parser adds them once)
    method_classes = {task.options_class: None for task in TASKS.values()}
    declaring = [option_dest(field) for options_class in (*OPTIONS_CLASSES, *method_classes)
                 for field in declared_fields(options_class)]
    assert len(declaring) == len(set(declaring)) and dests == set(declaring) == option_dests() - {'config'}
    for options_class in OPTIONS_CLASSES:
        for field in dataclasses.fields(options_class):
            if options_class is TrainOptions and field.name not in {'method', 'plan', 'plan_world_size'}:
                continue  # the groups (`TrainOptions.model` is `ModelOptions`, not ``--model``) and the record
            held = option_dest(field) in dests  # declared here, or a shared option declared elsewhere
            assert held == (field.name not in _NOT_OPTIONS), field.name
            assert not is_shared(field) or field.default is dataclasses.MISSING, field.name


def test_the_help_layout_shows_every_declared_option_once():
    shown = [name for _, names in train._HELP_GROUPS for name in names]
    assert sorted(shown) == sorted(declarations())


def test_the_parser_defaults_are_the_fields_defaults():
    """Each default is the field's: the options of a command line that gives nothing are the classes' defaults."""
    args, _ = parse_args([])
    values = vars(args)
    assert options_from_values(TrainingAttackOptions, values) == TrainingAttackOptions()
    options = train_options(args)
    for group in ('model', 'augment', 'optimizer', 'output', 'tracking'):
        given = getattr(options, group)
        assert given == type(given)(), group
    assert (options.method, options.plan, options.plan_world_size) == ('mbn', False, None)
    # the robust validation's attack falls back to the training attack's
    assert (options.validation.attack_eps, options.validation.attack_steps) == (16.0, 10)
    assert options.recorded == values and options.schedule.seed == options.runtime.seed == 42


def test_an_option_declared_twice_or_unlike_its_shared_settings_is_refused(monkeypatch):
    @dataclasses.dataclass(frozen=True)
    class Twice:
        epochs: int = option(3, 'Epochs again.')

    monkeypatch.setattr(train, 'OPTIONS_CLASSES', (*OPTIONS_CLASSES, Twice))
    with pytest.raises(ValueError, match=r'^Twice\.epochs declares --epochs again\.$'):
        declarations()

    @dataclasses.dataclass(frozen=True)
    class Unlike:
        seed: int = option(7, 'Another seed default.')

    monkeypatch.setattr(train, 'OPTIONS_CLASSES', (Unlike,))
    with pytest.raises(ValueError, match=r'^seed declares --seed unlike the shared option: default$'):
        declarations()


def test_a_cells_options_become_arguments_as_the_declarations_take_them():
    argv = study_cells.train_argv(dict(method='nofrost', attack_targeted=False, pretrained=True, sync_bn=False,
                                       model_kwargs={'zero_init_last': False}, scale=[0.5, 1.0], lr=None,
                                       val_samples=8, shuffle_bn=False, batch_size=4))
    assert argv == ['--method', 'nofrost', '--no-attack-targeted', '--pretrained', '--model-kwargs',
                    'zero_init_last=False', '--scale', '0.5', '1.0', '--val-samples', '8', '--no-shuffle-bn',
                    '--batch-size', '4']
    with pytest.raises(ValueError, match=r"^timm-advnorm-train has no option --no-such \(study option 'no_such'\)\.$"):
        study_cells.train_argv({'no_such': 1})
    assert study_cells.validate_argv(dict(attack_eps=8, num_samples=None, attacks=['pgd', 'fgsm'])) == [
        '--attack-eps', '8', '--attacks', 'pgd', 'fgsm']


def test_a_cells_options_build_the_typed_options_their_arguments_parse_into():
    """Built from the options by name (`train.options_of`), as parsing them written as arguments: the ``-c`` recipe
    under them, a hidden alias, a None and an unset switch left at their defaults, AGC's clip resolved."""
    values = dict(config='digits_demo_mbn', method='nofrost', val_samples=8, pretrained=False, lr=None,
                  clip_mode='agc', attack_targeted=False, workers=0)
    argv = study_cells.train_argv(values)
    assert argv == ['-c', 'digits_demo_mbn', '--method', 'nofrost', '--val-samples', '8', '--clip-mode', 'agc',
                    '--no-attack-targeted', '--workers', '0']
    options = train.options_of(values)
    assert options == train_options(parse_args(argv)[0])
    assert options.recorded['config'] == 'digits_demo_mbn' and options.recorded['num_samples'] == 8
    assert options.optimizer.clip_grad == train.AGC_CLIP_FACTOR
