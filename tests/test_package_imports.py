"""What importing the package loads: ``import timm_advnorm`` registers the models and attacks and loads nothing of
training, evaluation, Hub loading or studies; the public names outside that load on first use."""
import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
#: Packages and modules above the models, layers and attacks.
UPPER = ('train', 'eval', 'hub', 'study', 'task', 'commands', 'usage')


def _loaded_after(code: str) -> dict:
    """Run `code` in a fresh interpreter; the `timm_advnorm` modules it loaded, and what `code` put in ``out``."""
    script = (f'import json, sys\nout = None\n{code}\n'
              "print(json.dumps(dict(modules=sorted(m for m in sys.modules if m.startswith('timm_advnorm')), "
              'out=out)))')
    result = subprocess.run([sys.executable, '-c', script], cwd=REPO, capture_output=True, text=True, timeout=300,
                            check=True)
    return json.loads(result.stdout.splitlines()[-1])


def _upper(modules) -> list:
    return [m for m in modules if m.split('.')[1:2] and m.split('.')[1] in UPPER]


def test_import_registers_models_and_attacks_without_the_upper_floors():
    result = _loaded_after(
        'import timm, timm_advnorm\n'
        "out = dict(models=timm.list_models(module='mbn_resnet'), attacks=timm_advnorm.list_attacks())")
    assert _upper(result['modules']) == []
    assert 'mbn_resnet50' in result['out']['models']
    assert {'pgd', 'fgsm', 'apgd-ce', 'square'} <= set(result['out']['attacks'])


def test_every_public_name_resolves_and_loads_its_module():
    result = _loaded_after(
        'import timm_advnorm\n'
        'missing = [n for n in timm_advnorm.__all__ if getattr(timm_advnorm, n, None) is None]\n'
        "out = dict(missing=missing, listed=sorted(set(timm_advnorm.__all__) - set(dir(timm_advnorm))), "
        "tasks=timm_advnorm.list_tasks())")
    assert result['out']['missing'] == [] and result['out']['listed'] == []
    assert result['out']['tasks'][:2] == ['vanilla', 'madry']
    assert 'timm_advnorm.task' in result['modules'] and 'timm_advnorm.weights.loading' in result['modules']
    assert not any(m.startswith(('timm_advnorm.train', 'timm_advnorm.eval', 'timm_advnorm.hub'))
                   for m in result['modules'])


def test_an_unknown_name_is_an_attribute_error():
    import timm_advnorm
    with pytest.raises(AttributeError, match="module 'timm_advnorm' has no attribute 'load_weight'"):
        timm_advnorm.load_weight


def test_a_subpackage_loads_on_first_use_after_a_plain_import():
    result = _loaded_after('import timm_advnorm\n'
                           'out = [timm_advnorm.hub.CardFacts.__module__, timm_advnorm.study.load_study.__name__]')
    assert result['out'] == ['timm_advnorm.hub.card', 'load_study']
    assert 'timm_advnorm.hub' in result['modules'] and 'timm_advnorm.commands' not in result['modules']


def test_weights_load_nothing_above_the_models():
    result = _loaded_after('import timm_advnorm.weights')
    assert _upper(result['modules']) == []


def test_hub_is_publishing_over_evaluation_and_re_exports_the_weights():
    result = _loaded_after('import timm_advnorm.hub\n'
                           'out = [timm_advnorm.hub.CardFacts.__module__, timm_advnorm.hub.load_weights.__module__]')
    assert result['out'] == ['timm_advnorm.hub.card', 'timm_advnorm.weights.loading']
    assert 'timm_advnorm.eval.schema' in result['modules']
    assert not [m for m in result['modules'] if m.startswith(('timm_advnorm.commands', 'timm_advnorm.study'))]


def test_a_plug_in_method_registered_through_the_package_is_a_training_method():
    result = _loaded_after(
        'import timm_advnorm\n'
        'from timm_advnorm.task import VanillaTask\n'
        "timm_advnorm.register_task('plugin_method')(type('PluginTask', (VanillaTask,), {}))\n"
        'from timm_advnorm.commands.train import get_args_parser\n'
        "out = get_args_parser()._option_string_actions['--method'].choices")
    assert result['out'][:2] == ['vanilla', 'madry'] and result['out'][-1] == 'plugin_method'
