"""Publishing: the folder it writes (weights, config, card), atomic writes, refusals, uploads, results parsing."""
import argparse
import fnmatch
import json
import os
import subprocess
import sys
from contextlib import nullcontext
from pathlib import Path

import pytest
import timm
import torch
import yaml

from timm_advnorm.commands.publish import get_args_parser, publish_options
from timm_advnorm.commands.publish import run as run_publish
from timm_advnorm.hub import parse_eval_results
from timm_advnorm.hub import publish as publish_module
from timm_advnorm.hub import read_eval_results
from timm_advnorm.hub.publish_options import CardOptions, ExportOptions, PublishOptions, TargetOptions
from timm_advnorm.layers import MixtureBatchNorm2d, has_mixture_bn, route
from timm_advnorm.weights.digest import branch_digests, state_dict_digest
from timm_advnorm.write_guard import EXPORT_MANIFEST

REPO = Path(__file__).resolve().parents[1]
NUM_CLASSES = 5
def _attack(label, steps, accuracy, success=None):
    return dict(label=label, attack='pgd', threat='white-box', norm='linf', eps=16.0, steps=steps, targeted=True,
                accuracy=accuracy, success_rate=success)


# The layout validate_adv.py writes (accuracies in percent; unrelated fields trimmed).
RESULTS = {
    'model': 'test_mbn_resnet', 'checkpoint': 'last.pth.tar', 'dataset': 'digits', 'num_samples': 64,
    'protocol': {'name': 'xie2020', 'headline': 'pgd-100', 'attacks': []}, 'primary_variant': 'adv',
    'variants': [
        dict(name='clean', kind='clean', gamma=0.0, samples=64, clean=75.0, attacks=[_attack('pgd-10', 10, 12.5)],
             worst_case=None, robust=12.5),
        dict(name='adv', kind='adv', gamma=1.0, samples=64, clean=62.5,
             attacks=[_attack('pgd-10', 10, 50.0, 25.0), _attack('pgd-100', 100, 37.5)], worst_case=31.25,
             robust=37.5),
    ],
}


def _mbn_model(seed: int) -> torch.nn.Module:
    torch.manual_seed(seed)
    model = timm.create_model('test_mbn_resnet', num_classes=NUM_CLASSES)
    with torch.no_grad():
        for module in model.modules():
            if isinstance(module, MixtureBatchNorm2d):
                module.adv_bn.running_mean.normal_(0, 0.2)
                module.adv_bn.weight.uniform_(0.5, 1.5)
    return model.eval()


@pytest.fixture(scope='module')
def run(tmp_path_factory):
    """A training checkpoint (with distinct EMA weights) and a results file, as train/validate_adv.py write them."""
    folder = tmp_path_factory.mktemp('run')
    model, ema = _mbn_model(0), _mbn_model(1)
    args = argparse.Namespace(model='test_mbn_resnet', num_classes=NUM_CLASSES, mean=[0.5] * 3, std=[0.5] * 3,
                              interpolation='', method='mbn', epochs=3, rank=0, world_size=1, local_rank=0,
                              distributed=False)  # the last four: run-time entries train_adv adds
    torch.save(dict(epoch=2, arch='test_mbn_resnet', state_dict=model.state_dict(), args=args,
                    state_dict_ema=ema.state_dict()), folder / 'last.pth.tar')
    (folder / 'results.json').write_text(json.dumps(_of_weights(RESULTS, model)))
    (folder / 'results-ema.json').write_text(json.dumps(_of_weights(RESULTS, ema)))
    return argparse.Namespace(checkpoint=folder / 'last.pth.tar', results=folder / 'results.json',
                              results_ema=folder / 'results-ema.json', model=model, ema=ema)


def _of_weights(results: dict, model: torch.nn.Module) -> dict:
    """`results` recording the digests of `model`'s weights, as validate_adv.py records those it evaluated."""
    return dict(results, weights_digest=state_dict_digest(model.state_dict()),
                branch_weights_digests=branch_digests(model))


def _publish(*argv) -> int:
    return run_publish(argv=[str(a) for a in argv])


def _front_matter(readme: str) -> dict:
    _, meta, _ = readme.split('---\n', 2)
    return yaml.safe_load(meta)


def _same_weights(folder: Path, model: torch.nn.Module, branch: str = 'clean') -> bool:
    """Whether the export in `folder` computes what `model` does on `branch`."""
    loaded = timm.create_model(f'local-dir:{folder}', pretrained=True).eval()
    x = torch.randn(2, 3, 32, 32, generator=torch.Generator().manual_seed(0))
    with torch.no_grad(), route(model, branch):
        expected = model(x)
    with torch.no_grad(), route(loaded, branch) if has_mixture_bn(loaded) else nullcontext():
        return torch.allclose(loaded(x), expected)


def test_local_export_holds_weights_config_and_card(tmp_path, run):
    out = tmp_path / 'export'
    assert _publish(run.checkpoint, '--inference-branch', 'adv', '--results', run.results, '--local-dir', out,
                    '--repo-id', 'org/test-mbn', '--dry-run') == 0
    assert sorted(p.name for p in out.iterdir()) == [EXPORT_MANIFEST, 'README.md', 'config.json', 'model.safetensors']
    config = json.loads((out / 'config.json').read_text())
    assert config['architecture'] == 'test_mbn_resnet' and config['pretrained_cfg']['mean'] == [0.5] * 3
    readme = (out / 'README.md').read_text()
    meta = _front_matter(readme)
    metrics = {m['name']: m['value'] for m in meta['model-index'][0]['results'][0]['metrics']}
    assert metrics['xie2020: pgd-100 (white-box, L∞ ε = 16/255, targeted, random target class; 100 iterations) '
                   '[adv]'] == 37.5
    assert metrics['xie2020: clean [clean]'] == 75.0
    assert "timm.create_model('hf-hub:org/test-mbn', pretrained=True)" in readme
    assert "set_route(model, 'adv')" in readme
    assert 'method: mbn' in readme and 'world_size' not in readme  # the recipe: options train_adv -c takes
    assert "Robust accuracy on `adv`:** 37.50% (the protocol's headline; worst case leaves 31.25%)" in readme
    assert _same_weights(out, run.model, 'adv')


def test_branch_export_is_the_plain_twin_and_ema_is_selectable(tmp_path, run):
    out = tmp_path / 'plain'
    assert _publish(run.checkpoint, '--branch', 'adv', '--ema', '--results', run.results_ema, '--local-dir', out) == 0
    config = json.loads((out / 'config.json').read_text())
    assert config['architecture'] == 'test_resnet'
    readme = (out / 'README.md').read_text()
    assert 'import timm_advnorm' not in readme and 'EMA' in readme
    values = [m['value'] for m in _front_matter(readme)['model-index'][0]['results'][0]['metrics']]
    assert values == [37.5, 62.5]  # only the exported branch's headline and clean accuracy (the body has the rest)
    assert '| worst case | per sample, the worst of the attacks above |  | 31.25 |' in readme
    assert _same_weights(out, run.ema, 'adv')
    assert not _same_weights(out, run.model, 'adv')


@pytest.mark.parametrize('branch', [None, 'clean'])
def test_export_records_the_creation_arguments_that_shape_the_model(tmp_path, branch):
    """A model trained with ``--gp max`` and ``--model-kwargs`` loads from its export with them, through stock timm
    (whole, or as the plain twin of one branch)."""
    torch.manual_seed(0)
    model = timm.create_model('test_mbn_resnet', num_classes=NUM_CLASSES, global_pool='max', drop_rate=0.0).eval()
    args = dict(model='test_mbn_resnet', num_classes=NUM_CLASSES, model_kwargs=dict(drop_rate=0.0),
                model_config=dict(architecture='test_mbn_resnet', model_args=dict(global_pool='max')))
    torch.save(dict(epoch=0, arch='test_mbn_resnet', state_dict=model.state_dict(), args=args),
               tmp_path / 'last.pth.tar')
    out = tmp_path / 'export'
    which = ['--branch', branch] if branch else ['--inference-branch', 'clean']
    assert _publish(tmp_path / 'last.pth.tar', '--local-dir', out, *which) == 0
    config = json.loads((out / 'config.json').read_text())
    assert config['model_args']['global_pool'] == 'max' and config['model_args']['drop_rate'] == 0.0
    loaded = timm.create_model(f'local-dir:{out}', pretrained=True)
    assert loaded.global_pool.pool_type == 'max'
    assert _same_weights(out, model, 'clean')


def test_refuses_to_overwrite_and_leaves_nothing_half_written(tmp_path, run, capsys):
    out = tmp_path / 'export'
    out.mkdir()
    (out / 'keep.txt').write_text('mine')
    assert _publish(run.checkpoint, '--inference-branch', 'clean', '--local-dir', out) == 2
    assert 'pass --overwrite' in capsys.readouterr().err
    assert _publish(run.checkpoint, '--inference-branch', 'clean', '--local-dir', out, '--overwrite') == 2
    assert 'was not exported by timm-advnorm' in capsys.readouterr().err  # a folder of the user's is never replaced
    assert [p.name for p in out.iterdir()] == ['keep.txt']

    (out / 'keep.txt').unlink()
    assert _publish(run.checkpoint, '--inference-branch', 'clean', '--local-dir', out) == 0
    exported = {p.name: p.read_bytes() for p in out.iterdir()}
    bad_template = tmp_path / 'bad.md'
    bad_template.write_text('$front_matter $no_such_section')
    assert _publish(run.checkpoint, '--inference-branch', 'clean', '--local-dir', out, '--overwrite',
                    '--card-template', bad_template) == 2
    assert {p.name: p.read_bytes() for p in out.iterdir()} == exported
    assert sorted(p.name for p in tmp_path.iterdir()) == ['bad.md', 'export']  # no staging folder left behind

    assert _publish(run.checkpoint, '--inference-branch', 'clean', '--local-dir', out, '--overwrite') == 0
    assert sorted(p.name for p in out.iterdir()) == [EXPORT_MANIFEST, 'README.md', 'config.json', 'model.safetensors']


@pytest.mark.parametrize('extra, message', [
    ([], '--inference-branch'),
    (['--branch', 'adv', '--inference-branch', 'clean'], 'cannot be another'),
    (['--model', 'no_such_model'], 'Unknown architecture'),
    (['--results', 'missing.json'], 'Results file not found'),
    (['--dry-run', '--repo-id', 'org/x', '--local-dir', ''], '--dry-run'),
])
def test_bad_input_is_one_line_error(tmp_path, run, capsys, extra, message):
    argv = [run.checkpoint, '--local-dir', tmp_path / 'out', *extra]
    assert _publish(*argv) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and '\n' not in err
    assert not (tmp_path / 'out').exists()


def test_bare_state_dict_needs_a_model_name(tmp_path, run, capsys):
    torch.save(run.model.state_dict(), tmp_path / 'bare.pth')
    assert _publish(tmp_path / 'bare.pth', '--branch', 'clean', '--local-dir', tmp_path / 'a') == 2
    assert '--model' in capsys.readouterr().err
    assert _publish(tmp_path / 'bare.pth', '--model', 'test_mbn_resnet', '--branch', 'clean',
                    '--local-dir', tmp_path / 'a') == 0


def test_weights_of_another_architecture_are_a_one_line_error(tmp_path, run, capsys):
    torch.save(run.model.state_dict(), tmp_path / 'bare.pth')
    assert _publish(tmp_path / 'bare.pth', '--model', 'mbn_resnet18', '--inference-branch', 'adv',
                    '--local-dir', tmp_path / 'a') == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and 'does not fit mbn_resnet18' in err[0] and 'Traceback' not in err[0]
    assert not (tmp_path / 'a').exists()


class FakeHfApi:
    """Records what an upload would do; `existing` plays the files already in the repository."""

    calls = []
    existing = []

    def __init__(self, token=None):
        self.calls.append(('init', token))

    def repo_exists(self, repo_id):
        return bool(self.existing)

    def list_repo_files(self, repo_id, revision=None):
        return ['.gitattributes'] + list(self.existing)

    def create_repo(self, repo_id, private=False, exist_ok=False):
        self.calls.append(('create_repo', repo_id, private))

    def create_branch(self, repo_id, branch, exist_ok=False):
        self.calls.append(('create_branch', branch))

    def upload_folder(self, repo_id, folder_path, revision=None, commit_message=None, delete_patterns=None,
                      ignore_patterns=None):
        files = sorted(p.name for p in Path(folder_path).iterdir()
                       if not (ignore_patterns and fnmatch.fnmatch(p.name, ignore_patterns)))
        self.calls.append(('upload_folder', repo_id, files, delete_patterns))
        self.calls.append(('commit', revision, commit_message))
        return argparse.Namespace(commit_url=f'https://huggingface.co/{repo_id}/commit/0')


@pytest.fixture
def hub(monkeypatch):
    FakeHfApi.calls, FakeHfApi.existing = [], []
    monkeypatch.setattr(publish_module, 'HfApi', FakeHfApi)
    monkeypatch.setenv('HF_TOKEN', 'hf_test')
    return FakeHfApi


def test_upload_sends_the_folder_and_respects_existing_files(tmp_path, run, hub, capsys):
    assert _publish(run.checkpoint, '--inference-branch', 'adv', '--repo-id', 'org/m', '--private') == 0
    assert ('init', 'hf_test') in hub.calls and ('create_repo', 'org/m', True) in hub.calls
    upload = [c for c in hub.calls if c[0] == 'upload_folder']
    assert upload == [('upload_folder', 'org/m', ['README.md', 'config.json', 'model.safetensors'], None)]

    hub.calls, hub.existing = [], ['model.safetensors']
    assert _publish(run.checkpoint, '--inference-branch', 'adv', '--repo-id', 'org/m') == 2
    assert 'pass --overwrite' in capsys.readouterr().err
    assert not [c for c in hub.calls if c[0] == 'upload_folder']
    assert _publish(run.checkpoint, '--inference-branch', 'adv', '--repo-id', 'org/m', '--overwrite') == 0
    assert [c[3] for c in hub.calls if c[0] == 'upload_folder'] == ['*']


def test_upload_goes_to_the_revision_with_the_commit_message(tmp_path, run, hub):
    assert _publish(run.checkpoint, '--inference-branch', 'adv', '--repo-id', 'org/m', '--revision', 'v1',
                    '--commit-message', 'Retrained') == 0
    assert ('create_branch', 'v1') in hub.calls and ('commit', 'v1', 'Retrained') in hub.calls
    hub.calls = []
    assert _publish(run.checkpoint, '--inference-branch', 'adv', '--repo-id', 'org/m', '--overwrite') == 0
    assert not [c for c in hub.calls if c[0] == 'create_branch']
    assert ('commit', None, 'Add timm-advnorm model') in hub.calls


def test_dry_run_and_missing_token_upload_nothing(tmp_path, run, hub, monkeypatch, capsys):
    assert _publish(run.checkpoint, '--inference-branch', 'adv', '--repo-id', 'org/m', '--dry-run',
                    '--local-dir', tmp_path / 'dry') == 0
    assert hub.calls == []
    monkeypatch.delenv('HF_TOKEN')
    assert _publish(run.checkpoint, '--inference-branch', 'adv', '--repo-id', 'org/m') == 2
    assert 'HF_TOKEN' in capsys.readouterr().err


def test_an_upload_that_cannot_happen_writes_no_folder(tmp_path, run, hub, monkeypatch, capsys):
    """--local-dir with --repo-id: the token and the Hub repository are checked before the folder is written, so
    the command can be retried as it is once they are fixed (it used to fail then on a non-empty folder)."""
    out = tmp_path / 'exports' / 'model'
    argv = [run.checkpoint, '--inference-branch', 'adv', '--repo-id', 'org/m', '--local-dir', out]
    monkeypatch.delenv('HF_TOKEN')
    assert _publish(*argv) == 2
    assert 'HF_TOKEN' in capsys.readouterr().err and hub.calls == []
    assert list(tmp_path.iterdir()) == []
    monkeypatch.setenv('HF_TOKEN', 'hf_test')
    hub.existing = ['model.safetensors']
    assert _publish(*argv) == 2
    assert 'already holds 1 files: pass --overwrite' in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == [] and not [c for c in hub.calls if c[0] == 'upload_folder']
    hub.existing = []
    assert _publish(*argv) == 0
    assert sorted(p.name for p in out.iterdir()) == [EXPORT_MANIFEST, 'README.md', 'config.json', 'model.safetensors']
    assert [c[2] for c in hub.calls if c[0] == 'upload_folder'] == [['README.md', 'config.json', 'model.safetensors']]


def test_a_failed_publish_leaves_no_folder_behind(tmp_path, run, capsys):
    bad_template = tmp_path / 'bad.md'
    bad_template.write_text('$front_matter $no_such_section')
    assert _publish(run.checkpoint, '--inference-branch', 'clean', '--local-dir', tmp_path / 'a' / 'b' / 'export',
                    '--card-template', bad_template) == 2
    assert [p.name for p in tmp_path.iterdir()] == ['bad.md']  # neither the export nor its missing parents


@pytest.mark.parametrize('extra, message', [
    (['--private'], '--private and --revision apply to the Hub repository'),
    (['--revision', 'v1'], '--private and --revision apply to the Hub repository'),
    (['--repo-id', 'no-org'], 'org/name'),
])
def test_options_that_do_not_fit_are_refused_before_anything(tmp_path, run, capsys, extra, message):
    assert _publish(run.checkpoint, '--inference-branch', 'adv', '--local-dir', tmp_path / 'out', '--dry-run',
                    *extra) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and message in err[0], err
    assert list(tmp_path.iterdir()) == []


def test_the_command_line_becomes_one_typed_options_object():
    """Each flag lands in its group (what is exported, where it goes, what the card states), and the groups'
    defaults are the command's, so the library publishes from options built without a command line."""
    parser = get_args_parser()
    assert publish_options(parser.parse_args(['run.pth', '--local-dir', 'out'])) == PublishOptions(
        ExportOptions('run.pth'), TargetOptions(local_dir='out'))
    argv = ['run.pth', '--model', 'test_mbn_resnet', '--use-ema', '--branch', 'adv', '--inference-branch', 'adv',
            '--repo-id', 'org/m', '--local-dir', 'out', '--dry-run', '--overwrite', '--private', '--revision', 'v1',
            '--commit-message', 'Retrained', '--results', 'r.json', '--allow-reduced-results',
            '--allow-other-results', '--card-template', 'card.md', '--license', 'mit']
    assert publish_options(parser.parse_args(argv)) == PublishOptions(
        export=ExportOptions('run.pth', model='test_mbn_resnet', ema=True, branch='adv', inference_branch='adv'),
        target=TargetOptions(repo_id='org/m', local_dir='out', dry_run=True, overwrite=True, private=True,
                             revision='v1', commit_message='Retrained'),
        card=CardOptions(results='r.json', allow_reduced_results=True, allow_other_results=True,
                         template='card.md', license='mit'))


@pytest.mark.parametrize('target, upload', [
    (TargetOptions(repo_id='org/m'), True),
    (TargetOptions(repo_id='org/m', local_dir='out'), True),
    (TargetOptions(repo_id='org/m', local_dir='out', dry_run=True), False),
    (TargetOptions(local_dir='out'), False),
])
def test_only_a_repository_without_dry_run_is_uploaded_to(target, upload):
    assert target.upload is upload


def test_publish_script_runs_from_the_repository(tmp_path, run):
    env = {k: v for k, v in os.environ.items() if k not in ('PYTHONPATH', 'HF_TOKEN')}
    result = subprocess.run(
        [sys.executable, str(REPO / 'hub' / 'publish.py'), str(run.checkpoint), '--branch', 'clean',
         '--local-dir', str(tmp_path / 'out')], env=env, cwd=tmp_path, capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert (tmp_path / 'out' / 'README.md').is_file()


def test_results_read_validate_adv_layout():
    results = parse_eval_results(RESULTS)
    assert results.protocol == 'xie2020' and results.variants == ['clean', 'adv']
    assert results.clean_accuracy('clean') == 75.0 and results.clean_accuracy('adv') == 62.5
    assert results.robust_accuracy('adv') == 37.5 and results.strongest('adv').accuracy == 31.25
    assert results.num_samples == 64 and results.dataset == 'digits'


def test_results_read_flat_layouts_in_fractions_or_percent():
    flat = parse_eval_results(dict(model='m', protocol='p', results=[
        dict(variant='adv', name='clean', accuracy=0.625), dict(variant='adv', attack='pgd', acc=0.5, asr=0.25)]))
    assert flat.clean_accuracy('adv') == 62.5 and flat.robust_accuracy('adv') == 50.0
    assert flat.strongest('adv').success_rate == 25.0
    percent = parse_eval_results(dict(model='m', protocol='p', clean_accuracy=70.0,
                                      attacks=[dict(attack='apgd-ce', robust_accuracy=30.5)]))
    assert percent.clean_accuracy() == 70.0 and percent.strongest().accuracy == 30.5
    fraction = parse_eval_results(dict(model='m', protocol='p', accuracy_unit='fraction',
                                       results=[dict(name='pgd', acc=0.9)]))
    assert fraction.strongest().accuracy == 90.0


@pytest.mark.parametrize('data, message', [
    ({'protocol': 'p', 'results': []}, '"model"'),
    ({'model': 'm', 'protocol': 'p'}, 'list of per-attack'),
    ({'model': 'm', 'protocol': 'p', 'results': [{'name': 'pgd'}]}, 'accuracy'),
    ({'model': 'm', 'protocol': 'p', 'results': [{'name': 'pgd', 'accuracy': 'high'}]}, 'number'),
])
def test_results_errors_name_the_problem(tmp_path, data, message):
    path = tmp_path / 'r.json'
    path.write_text(json.dumps(data))
    with pytest.raises(ValueError, match=message):
        read_eval_results(path)
