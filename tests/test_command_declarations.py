"""The small commands' options are declared once, on the fields of the typed options they fill, as the training and
evaluation commands' are (tests/test_train_declarations.py, tests/test_validate_declarations.py): each parser is
generated from these declarations and its parsed values fill the options by name."""
import dataclasses

import pytest

from timm_advnorm.augment.options import DeepAugmentOptions
from timm_advnorm.commands import convert, deepaugment, demo, publish
from timm_advnorm.commands.demo_options import DemoOptions
from timm_advnorm.commands.options import declarations_of
from timm_advnorm.convert.options import FORMATS, FastAdvPropOptions
from timm_advnorm.hub.publish_options import (
    OPTIONS_CLASSES as PUBLISH_CLASSES, CardOptions, ExportOptions, PublishOptions)
from timm_advnorm.option_fields import declared_fields, option, option_dest


def _declaring(options_classes):
    """The option names of the fields of `options_classes`, each declared once; every field declares one but those
    given by no option (a conversion's format, its sub-command)."""
    names = [option_dest(field) for options_class in options_classes for field in declared_fields(options_class)]
    assert len(names) == len(set(names))
    fields = [field.name for options_class in options_classes for field in dataclasses.fields(options_class)]
    assert len(names) == len(fields) - fields.count('format')
    return set(names) | {'format'} & set(fields)


def test_publish_parser_options_are_the_declared_fields_each_shown_once():
    parser = publish.get_args_parser()
    assert set(parser.dest_actions) - {'help'} == _declaring(PUBLISH_CLASSES) == set(publish.declarations())
    assert sorted(publish._HELP_ORDER) == sorted(publish.declarations())


def test_publish_defaults_are_the_fields_and_every_flag_fills_its_field():
    parse = publish.get_args_parser().parse_args
    assert publish.publish_options(parse(['ckpt'])) == PublishOptions(ExportOptions('ckpt'))
    options = publish.publish_options(parse(['ckpt', '--ema', '--branch', 'adv', '--card-template', 'card.md',
                                             '--allow-other-results', '--dry-run', '--commit-message', 'm']))
    assert options.export == ExportOptions('ckpt', ema=True, branch='adv')
    assert options.card == CardOptions(template='card.md', allow_other_results=True)
    assert options.target.dry_run and options.target.commit_message == 'm'


def test_each_convert_format_takes_the_options_its_class_declares():
    parser = convert.get_args_parser()
    subcommands = parser.dest_actions['format'].choices
    assert list(subcommands) == list(FORMATS)
    for name, source_format in FORMATS.items():
        sub = subcommands[name]
        assert set(sub.dest_actions) - {'help'} == _declaring([source_format.options_class]) - {'format'}
        assert sub.dest_actions['src'].help == source_format.source
        assert convert.convert_options(parser.parse_args([name, 'a.pth', 'out'])) == source_format.options_class(
            name, 'a.pth', 'out')
    options = convert.convert_options(parser.parse_args(['fast-advprop', 'a', 'b', '--branch', 'adv', '--overwrite']))
    assert options == FastAdvPropOptions('fast-advprop', 'a', 'b', branch='adv', overwrite=True)


def test_deepaugment_options_are_its_fields_its_seed_and_input_size_its_own():
    parser = deepaugment.get_args_parser()
    assert set(parser.dest_actions) - {'help'} == _declaring([DeepAugmentOptions]) == {
        'src', 'dst', 'net', 'weights', 'seed', 'input_size', 'device', 'allow_random_weights', 'no_progress'}
    # --seed and --input-size are not the shared ones (a seed of 42 checked by seed_int; C H W): own type and default
    assert parser.option_actions['--seed'].type is int and parser.option_actions['--input-size'].nargs is None
    options = deepaugment.deepaugment_options(parser.parse_args(['a', 'b', '--net', 'cae']))
    assert options == DeepAugmentOptions('a', 'b', 'cae') and options.seed == 0 and options.progress
    options = deepaugment.deepaugment_options(parser.parse_args(['a', 'b', '--net', 'edsr', '--no-progress',
                                                                '--input-size', '64', '--seed', '3']))
    assert options == DeepAugmentOptions('a', 'b', 'edsr', seed=3, input_size=64, progress=False)


def test_a_field_that_declares_a_shared_flag_otherwise_is_refused_unless_its_own():
    @dataclasses.dataclass(frozen=True)
    class Clash:
        seed: int = option(0, 'seed', type=int)

    with pytest.raises(ValueError, match=r'^seed declares --seed unlike the shared option: default, type$'):
        declarations_of([Clash])


def test_demo_options_are_its_fields():
    parser = demo.get_args_parser()
    assert set(parser.dest_actions) - {'help'} == _declaring([DemoOptions]) == {'output', 'data_dir', 'smoke'}
    assert demo.demo_options(parser.parse_args([])) == DemoOptions()
    assert demo.demo_options(parser.parse_args(['--output', 'o', '--data-dir', 'd', '--smoke'])) == DemoOptions(
        'o', 'd', True)
