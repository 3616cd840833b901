"""The small commands' options are declared once, on the fields of the typed options they fill, as the training and
evaluation commands' are (tests/test_train_declarations.py, tests/test_validate_declarations.py): each parser is
generated from these declarations and its parsed values fill the options by name."""
import dataclasses

from timm_advnorm.commands import publish
from timm_advnorm.hub.publish_options import OPTIONS_CLASSES as PUBLISH_CLASSES, CardOptions, ExportOptions, \
    PublishOptions
from timm_advnorm.task.method_options import declared_fields, option_dest


def _declaring(options_classes):
    """The option names the fields of `options_classes` declare, once each; every field declares one."""
    names = [option_dest(field) for options_class in options_classes for field in declared_fields(options_class)]
    assert len(names) == len(set(names))
    assert len(names) == sum(len(dataclasses.fields(options_class)) for options_class in options_classes)
    return set(names)


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
