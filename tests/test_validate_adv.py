"""End to end: validate_adv.py on the built-in digits data, every protocol at reduced size, resumable, sharded."""
import csv
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import timm
import torch
import yaml

from timm_advnorm.commands import validate as validate_adv
from timm_advnorm.commands.validate import eval_options
from timm_advnorm.data import split_folder
from timm_advnorm.eval.protocols.protocol import get_protocol  # importing the package also registers test_mbn_resnet
from timm_advnorm.eval.results import report
from timm_advnorm.eval.run import build, runner
from timm_advnorm.layers import mixture_bn_modules

REPO = Path(__file__).resolve().parents[1]

TIMING_KEYS = ('eval_seconds', 'total_seconds', 'images_per_second', 'units_computed')


def _pop_timings(results: dict) -> dict:
    """`results` without what differs between runs of the same evaluation: the timings, and the plan's time (its
    passes must not differ)."""
    for key in TIMING_KEYS:
        results.pop(key)
    plan = results.pop('plan')
    return dict(total=plan['total_passes'], stages=[(s['name'], s['passes']) for s in plan['stages']])


pytestmark = pytest.mark.usefixtures('one_thread')


def _eval_model(argv) -> torch.nn.Module:
    """The model the evaluation `argv` describe builds."""
    options = eval_options(validate_adv.parse_args(argv))
    return build.create_eval_model(options.model, options.data.dataset)[0]


@pytest.fixture(scope='module')
def checkpoint(digits_dir, tmp_path_factory, one_thread, train_briefly) -> Path:
    """test_mbn_resnet trained for a few seconds on the digits (~95% accurate), saved as a training checkpoint.

    Attacks only run on correctly classified samples: a random-init model would leave them nothing to attack.
    The adversarial branch gets the clean statistics with a larger variance, so the two branches differ.
    """
    from timm.data import create_dataset, create_transform, resolve_data_config

    torch.manual_seed(0)
    model = timm.create_model('test_mbn_resnet', num_classes=10)
    transform = create_transform(**resolve_data_config({}, model=model))
    dataset = create_dataset('', root=str(digits_dir / 'digits-32px'), split='train', transform=transform)
    x = torch.stack([dataset[i][0] for i in range(len(dataset))])
    y = torch.tensor([dataset[i][1] for i in range(len(dataset))])
    train_briefly(model, x, y, steps=60)
    with torch.no_grad():  # exact population statistics, then an adversarial branch that differs
        for module in mixture_bn_modules(model):
            module.reset_running_stats()
            module.momentum = None
        for start in range(0, len(x), 256):
            model(x[start:start + 256])
        for module in mixture_bn_modules(model):
            module.copy_clean_to_adv()
            module.adv_bn.running_var.mul_(1.3)
    path = tmp_path_factory.mktemp('checkpoint') / 'model.pth.tar'
    torch.save({'state_dict': model.state_dict(), 'arch': 'test_mbn_resnet'}, path)
    return path


def _argv(digits_dir, out: Path, *extra):
    argv = ['--dataset', 'digits', '--data-dir', digits_dir, '--num-samples', 8, '--seed', 0, '-b', 8, '-j', 0,
            '--sanity', 'full', '--sanity-samples', 8, '--sanity-steps', 2, '--sanity-queries', 5, '--no-progress',
            '--results-file', out / 'results.json', *extra]
    return [str(a) for a in argv]


def _run(argv):
    return validate_adv.run('validate_adv.py', argv)


def _results(out: Path):
    return json.loads((out / 'results.json').read_text())


@pytest.mark.parametrize('protocol, gammas', [
    ('xie2020', ['0', '0.5', '1']), ('robustbench', ['1']), ('nofrost', ['1']), ('galloway', ['1']),
    ('corruptions', ['1'])])
def test_every_protocol_runs_end_to_end(digits_dir, checkpoint, tmp_path, protocol, gammas):
    plots = tmp_path / 'plots'
    assert _run(_argv(digits_dir, tmp_path, '--checkpoint', checkpoint, '--protocol', protocol, '--reduced',
                      '--metric-samples', '4', '--plot-dir', plots, '--gammas', *gammas)) == 0
    results = _results(tmp_path)
    assert all(v['clean'] >= 50 and v['sanity']['passed'] for v in results['variants']), results['variants']
    assert any(a['attacked'] > 0 for v in results['variants'] for a in v['attacks'])  # the attacks had work
    labels = [spec.label for spec in get_protocol(protocol).attacks]
    assert results['protocol']['name'] == protocol and results['protocol']['reduced']
    for variant in results['variants']:
        assert [a['protocol_label'] for a in variant['attacks']] == labels
        # a reduced run names the budgets that ran, never the protocol's: pgd-t-2000 ran 13 iterations
        assert all(a['label'] != a['protocol_label'] for a in variant['attacks'] if (a.get('steps') or 0) > 1)
        assert variant['samples'] == 8 and 0 <= variant['clean'] <= 100
        assert {c['name'] for c in variant['sanity']['checks']} >= {'outputs_not_random', 'accuracy_falls_to_zero'}
        for attack in variant['attacks']:
            if attack['threat'] != 'noise':
                assert attack['max_perturbation'] <= attack['eps'] + 1e-2
    rows = list(csv.DictReader((tmp_path / 'results.csv').open()))
    assert len(rows) == sum(len(v['attacks']) + 1 + (v['worst_case'] is not None) for v in results['variants'])
    expected = {'accuracy_vs_eps.png', 'bn_stats.png'}
    if protocol == 'xie2020':
        expected |= {'accuracy_vs_iterations.png', 'gamma_tradeoff.png'}
        assert all(a['success_rate'] is not None for v in results['variants'] for a in v['attacks'])
        assert [v['name'] for v in results['variants']] == ['clean', 'mix@0.5', 'logits@0.5', 'adv']
    if protocol == 'galloway':  # ε∞ = 0.03 of the standardized input: times the evaluated model's std
        bim = results['variants'][0]['attacks'][1]
        std = results['data_config']['std']
        assert (bim['eps_rule'], bim['eps_standardized']) == ('std', 0.03) and bim['input_std'] == pytest.approx(
            sum(std) / len(std)) and bim['eps'] == pytest.approx(0.03 * bim['input_std'] * 255)
    if protocol == 'nofrost':
        assert set(results['variants'][0]['metrics']) == {'margin', 'thickness', 'smoothness'}
        assert results['variants'][0]['metrics']['thickness']['samples'] == 4
    for variant in results['variants']:
        errors = variant['corruption_errors']
        assert (errors is not None) == (protocol == 'corruptions')
        if errors is not None:
            assert len(errors['ce']) == 15
            assert errors['mce'] == pytest.approx(sum(errors['ce'].values()) / 15, abs=1e-3)
    assert expected <= set(results['plots']) and expected <= {p.name for p in plots.iterdir()}
    assert (tmp_path / 'results.bn_stats.json').exists()


def test_results_are_not_overwritten_without_the_flag(digits_dir, tmp_path, capsys):
    argv = _argv(digits_dir, tmp_path, '--model', 'test_mbn_resnet', '--attacks', 'fgsm', '--gammas', '1')
    assert _run(argv) == 0
    before = (tmp_path / 'results.json').read_text()
    capsys.readouterr()
    assert _run(argv) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith('validate_adv.py: error:') and '--overwrite' in err and '\n' not in err
    assert (tmp_path / 'results.json').read_text() == before
    assert _run(argv + ['--overwrite']) == 0


@pytest.mark.parametrize('extra, message', [
    (['--model', 'test_mbn_resnet', '--checkpoint', 'missing.pth'], 'not found'),
    (['--model', 'no_such_model_xyz'], 'no_such_model_xyz'),
    (['--model', 'test_mbn_resnet', '--attacks', 'nope'], 'Unknown attack'),
    (['--model', 'test_mbn_resnet', '--attacks', 'pgd', '--attack-kwargs', 'bogus=1'], 'rejected'),
    (['--model', 'test_mbn_resnet', '--gammas', '2'], 'gamma'),
    (['--model', 'test_mbn_resnet', '--data-dir', '/no/such/folder', '--dataset', ''], 'not found'),
    (['--model', 'test_mbn_resnet', '--pretrained'], '--pretrained: test_mbn_resnet has no pretrained weights'),
    (['--model', 'resnet18', '--pretrained'], 'have 1000 classes but the run has 10'),
])
def test_bad_input_is_a_one_line_error(digits_dir, tmp_path, capsys, extra, message):
    assert _run(_argv(digits_dir, tmp_path, *extra)) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith('validate_adv.py: error:') and message in err[0]


@pytest.mark.parametrize('extra', [
    ['--protocol', 'madry'], ['--protocol', 'xie2020', '--attacks', 'pgd'], ['--verify-amp', '4'],
    ['--targeted'], ['--num-samples', '-1'], ['--model', ''], ['--attacks', 'pgd', '--steps', '5', '5'],
    ['--protocol', 'xie2020', '--steps', '5', '10'], ['--sanity-steps', '0'], ['--batch-size', '0']])
def test_bad_arguments_are_a_one_line_usage_error(capsys, extra):
    with pytest.raises(SystemExit) as exit_info:
        validate_adv.parse_args(['--model', 'test_mbn_resnet', *extra])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith('timm-advnorm-validate: error:')


def test_a_checkpoint_names_its_architecture_and_must_fit(digits_dir, tmp_path, capsys):
    torch.manual_seed(1)
    model = timm.create_model('test_mbn_resnet', num_classes=10)
    path = tmp_path / 'checkpoint.pth.tar'
    torch.save({'state_dict': model.state_dict(), 'arch': 'test_mbn_resnet', 'epoch': 3}, path)
    argv = _argv(digits_dir, tmp_path, '--checkpoint', path, '--attacks', 'fgsm', '--gammas', '0')
    assert _run(argv) == 0
    results = _results(tmp_path)
    assert results['model'] == 'test_mbn_resnet' and results['checkpoint'] == str(path)
    with torch.no_grad():
        expected = _eval_model(argv).state_dict()
    torch.testing.assert_close(expected, model.state_dict())
    capsys.readouterr()
    assert _run(argv + ['--num-classes', '5', '--overwrite']) == 2
    assert 'num_classes=5' in capsys.readouterr().err


def test_a_local_dir_export_is_evaluated_like_a_hub_model(digits_dir, tmp_path):
    from timm.models import save_for_hf

    torch.manual_seed(2)
    model = timm.create_model('test_mbn_resnet', num_classes=10)
    save_for_hf(model, tmp_path / 'export')
    argv = _argv(digits_dir, tmp_path, '--model', f'local-dir:{tmp_path / "export"}', '--attacks', 'fgsm',
                 '--gammas', '0')
    assert _run(argv) == 0
    assert _results(tmp_path)['model'] == 'test_mbn_resnet'
    loaded = _eval_model(argv)
    torch.testing.assert_close(loaded.state_dict(), model.state_dict())  # its weights, not a fresh initialization


def test_yaml_config_supplies_defaults_and_rejects_unknown_keys(digits_dir, tmp_path, capsys):
    config = tmp_path / 'eval.yaml'
    config.write_text(yaml.safe_dump(dict(protocol='galloway', reduced=True, gammas=[1.0], model='test_mbn_resnet')))
    assert _run(['-c', str(config)] + _argv(digits_dir, tmp_path)) == 0
    assert _results(tmp_path)['protocol']['name'] == 'galloway'
    config.write_text(yaml.safe_dump(dict(protokol='galloway')))
    with pytest.raises(SystemExit):
        validate_adv.parse_args(['-c', str(config)])
    assert 'protokol' in capsys.readouterr().err


def test_an_interrupted_run_resumes_from_its_state_file(digits_dir, tmp_path):
    state = tmp_path / 'state.jsonl'
    argv = _argv(digits_dir, tmp_path, '--model', 'test_mbn_resnet', '--protocol', 'xie2020', '--reduced',
                 '--gammas', '0', '1', '--num-samples', '16', '--resume-state', state, '--overwrite')
    assert _run(argv) == 0
    full = _results(tmp_path)
    lines = state.read_bytes().split(b'\n')
    state.write_bytes(b'\n'.join(lines[:12]) + b'\n' + lines[12][:20])  # killed mid-append
    assert _run(argv) == 0
    resumed = _results(tmp_path)
    assert 0 < resumed['units_computed'] < full['units_computed']
    assert _pop_timings(resumed) == _pop_timings(full)
    assert resumed == full
    with pytest.raises(ValueError, match='different evaluation'):
        validate_adv.validate(validate_adv.eval_options(validate_adv.parse_args(argv + ['--seed', '1'])))


def test_a_pgd_sweep_runs_once_and_its_accuracy_never_rises_with_iterations(digits_dir, tmp_path, checkpoint):
    """Reduced xie2020 with step 2: PGD-8 and PGD-13 (labels -500 and -2000) both step 2, so one run serves both."""
    state = tmp_path / 'state.jsonl'
    argv = _argv(digits_dir, tmp_path, '--checkpoint', checkpoint, '--protocol', 'xie2020', '--reduced', '--step', '2',
                 '--gammas', '1', '--num-samples', '16', '--resume-state', state)
    assert _run(argv) == 0
    records = [json.loads(line) for line in state.read_text().splitlines()[1:]]
    stages = {r['stage'] for r in records}
    assert {'pgd-t-500', 'pgd-t-2000'} <= stages
    source = [r['columns'] for r in records if r['stage'] == 'pgd-t-2000']
    assert all('success@8' in columns for columns in source), 'PGD-13 did not record the PGD-8 budget on the way'
    success = {label: {p: s for r in records if r['stage'] == label
                       for p, s in zip(r['columns']['position'], r['columns']['success'])}
               for label in ('pgd-t-500', 'pgd-t-2000')}
    assert all(success['pgd-t-2000'][p] for p, hit in success['pgd-t-500'].items() if hit), 'more iterations helped'
    attacks = {a['protocol_label']: a for a in _results(tmp_path)['variants'][0]['attacks']}
    assert attacks['pgd-t-500']['steps'] == 8 and attacks['pgd-t-2000']['steps'] == 13
    assert attacks['pgd-t-500']['label'] == 'pgd-t-8' and attacks['pgd-t-2000']['label'] == 'pgd-t-13'
    assert attacks['pgd-t-500']['success_rate'] <= attacks['pgd-t-2000']['success_rate']
    with pytest.raises(ValueError, match='different evaluation'):
        separate = validate_adv.parse_args(argv + ['--separate-budgets', '--overwrite'])
        validate_adv.validate(validate_adv.eval_options(separate))


def test_steps_sweep_of_an_attack_list(digits_dir, tmp_path, checkpoint):
    plots = tmp_path / 'plots'
    assert _run(_argv(digits_dir, tmp_path, '--checkpoint', checkpoint, '--attacks', 'pgd', '--steps', '1', '4',
                      '--step', '2', '--gammas', '1', '--plot-dir', plots)) == 0
    attacks = _results(tmp_path)['variants'][0]['attacks']
    assert [(a['label'], a['steps']) for a in attacks] == [('pgd-1', 1), ('pgd-4', 4)]
    assert attacks[1]['accuracy'] <= attacks[0]['accuracy']
    assert (plots / 'accuracy_vs_iterations.png').stat().st_size > 0


def test_bf16_evaluation_is_checked_against_fp32(digits_dir, tmp_path):
    assert _run(_argv(digits_dir, tmp_path, '--model', 'test_mbn_resnet', '--protocol', 'xie2020', '--reduced',
                      '--gammas', '1', '--amp', '--verify-amp', '8')) == 0
    check = _results(tmp_path)['amp_check']
    assert check['samples'] == 8
    assert [c['stage'] for c in check['comparisons']] == ['clean', 'pgd-t-10']
    assert all(0 <= c['prediction_agreement'] <= 100 for c in check['comparisons'])


def test_torchrun_shards_match_a_single_process(digits_dir, tmp_path):
    """Two gloo ranks on CPU evaluate disjoint halves; gathered results equal the single-process run."""
    single, sharded = tmp_path / 'single', tmp_path / 'sharded'
    common = ['--model', 'test_mbn_resnet', '--attacks', 'pgd', '--targeted', '--steps', '2',
              '--gammas', '0', '1', '--num-samples', '16', '-b', '4', '--device', 'cpu']
    assert _run(_argv(digits_dir, single, *common)) == 0
    env = dict(os.environ, OMP_NUM_THREADS='1', PYTHONPATH=str(REPO))
    command = [sys.executable, '-m', 'torch.distributed.run', '--standalone', '--nproc_per_node', '2',
               str(REPO / 'validate_adv.py')] + _argv(digits_dir, sharded, *common)
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    one, two = _results(single), _results(sharded)
    assert two['world_size'] == 2 and one['world_size'] == 1
    assert _pop_timings(one) == _pop_timings(two)
    one.pop('world_size'), two.pop('world_size')
    assert one == two


def _status(argv) -> int:
    """main's exit status, usage errors (argparse's SystemExit) included."""
    try:
        return _run(argv)
    except SystemExit as e:
        return e.code


def _file(path: Path, text: str = '') -> Path:
    path.write_text(text)
    return path


def _folder(path: Path) -> Path:
    path.mkdir()
    return path


def _proc(tmp: Path) -> Path:
    if not Path('/proc').is_dir():
        pytest.skip('no /proc')
    return Path('/proc/res.json')


BAD_SETUPS = {
    'device': (lambda tmp: ['--device', 'bogus'], '--device bogus: not a device'),
    'yaml': (lambda tmp: ['-c', _file(tmp / 'bad.yaml', 'a: [\n')], 'not valid YAML'),
    'no_data_dir': (lambda tmp: ['--dataset', '', '--data-dir', ''], 'needs --data-dir'),
    'empty_data_dir': (lambda tmp: ['--dataset', '', '--data-dir', _folder(tmp / 'empty')], 'no folder of split'),
    'file_data_dir': (lambda tmp: ['--dataset', '', '--data-dir', _file(tmp / 'afile')], 'Found 0 images'),
    'unknown_dataset': (lambda tmp: ['--dataset', 'torch/nosuch'], 'Unknown torchvision dataset'),
    'class_map': (lambda tmp: ['--class-map', 'nosuch.txt'], 'class map'),
    'mean': (lambda tmp: ['--mean', '0.5', '0.5'], '--mean takes 1 value or one per input channel (3), got 2'),
    'split': (lambda tmp: ['--split', 'nosuch'], "no folder of split 'nosuch'"),
    'state_is_folder': (lambda tmp: ['--resume-state', tmp], 'is a folder, not a state file'),
    'plot_dir_is_file': (lambda tmp: ['--plot-dir', _file(tmp / 'afile')], 'afile: it is not a folder'),
    'results_under_file': (lambda tmp: ['--results-file', _file(tmp / 'afile') / 'res.json'], 'not a folder'),
    'results_unwritable': (lambda tmp: ['--results-file', _proc(tmp)], 'cannot write into /proc'),
}


@pytest.mark.parametrize('case', list(BAD_SETUPS))
def test_bad_setup_is_a_one_line_error_before_the_evaluation(digits_dir, tmp_path, capsys, monkeypatch, case):
    """Bad devices, configs, datasets, normalization, state and output paths: exit 2 with one line, nothing run."""
    def no_evaluation(*args, **kwargs):
        raise AssertionError('the evaluation started')

    monkeypatch.setattr(runner, 'RobustEvaluator', no_evaluation)
    extra, message = BAD_SETUPS[case]
    out = _folder(tmp_path / 'out')
    argv = _argv(digits_dir, out, '--model', 'test_mbn_resnet', '--attacks', 'fgsm', '--gammas', '1',
                 *[str(a) for a in extra(tmp_path)])
    assert _status(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith('validate_adv.py: error:') and message in err[0], err
    assert not (out / 'results.json').exists()


def _image_folder(digits_dir: Path, root: Path, bad: dict, per_class: int = 3) -> Path:
    """A two-class image folder of digits (``root/validation/{0,1}/``) plus the `bad` files (path: bytes)."""
    for label in ('0', '1'):
        (root / 'validation' / label).mkdir(parents=True)
        for image in sorted((digits_dir / 'digits-32px' / 'validation' / label).iterdir())[:per_class]:
            (root / 'validation' / label / image.name).write_bytes(image.read_bytes())
    for name, data in bad.items():
        (root / 'validation' / name).write_bytes(data)
    return root


def _truncated_png(digits_dir: Path) -> bytes:
    return next((digits_dir / 'digits-32px' / 'validation' / '2').iterdir()).read_bytes()[:60]


def test_unreadable_images_are_refused_by_name_or_skipped_and_listed(digits_dir, tmp_path, capsys):
    """timm would evaluate the next image in place of a bad one and still report 8 samples."""
    folder = _image_folder(digits_dir, tmp_path / 'images', {'0/text.png': b'not an image',
                                                             '1/cut.png': _truncated_png(digits_dir)})
    argv = _argv(digits_dir, tmp_path / 'out', '--model', 'test_mbn_resnet', '--num-classes', '2', '--dataset', '',
                 '--data-dir', folder, '--num-samples', '0', '--attacks', 'fgsm', '--gammas', '1', '--sanity',
                 'off')
    assert _run(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and '2 of the 8 images to evaluate' in err[0] and '--skip-bad-images' in err[0], err
    assert '0/text.png (cannot identify image file' in err[0] and '1/cut.png (' in err[0], err
    assert not (tmp_path / 'out').exists()

    assert _run(argv + ['--skip-bad-images']) == 0
    results = _results(tmp_path / 'out')
    assert results['num_samples'] == 6 and all(v['samples'] == 6 for v in results['variants'])
    assert sorted(entry['file'] for entry in results['skipped_images']) == ['0/text.png', '1/cut.png']
    assert all(entry['error'] for entry in results['skipped_images'])


def test_skipped_images_are_replaced_from_the_seeded_order(digits_dir, tmp_path):
    folder = _image_folder(digits_dir, tmp_path / 'images', {f'0/bad{i}.png': b'' for i in range(3)}, per_class=6)
    common = ['--model', 'test_mbn_resnet', '--dataset', '', '--data-dir', folder, '--num-samples', '10',
              '--attacks', 'fgsm', '--gammas', '1', '--sanity', 'off', '--skip-bad-images', '--num-classes', '2']
    assert _run(_argv(digits_dir, tmp_path / 'a', *common)) == 0
    results = _results(tmp_path / 'a')
    assert results['num_samples'] == 10 and results['variants'][0]['samples'] == 10  # the size asked for
    skipped = {entry['file'] for entry in results['skipped_images']}
    assert skipped and skipped <= {f'0/bad{i}.png' for i in range(3)}  # those the first 10 of the seeded order held
    clean = _image_folder(digits_dir, tmp_path / 'clean', {}, per_class=6)
    assert _run(_argv(digits_dir, tmp_path / 'b', *common[:5], clean, *common[6:])) == 0
    assert _results(tmp_path / 'b')['skipped_images'] == []


def test_the_evaluation_loader_never_evaluates_another_image_in_place_of_a_bad_one(digits_dir, tmp_path):
    """A file that turns unreadable after the up-front check fails the run (timm would load the next image)."""
    from timm.data import resolve_data_config

    from timm_advnorm.eval.run.distributed import DistributedInfo

    folder = _image_folder(digits_dir, tmp_path / 'images', {'0/late.png': b''})
    args = validate_adv.parse_args(['--model', 'test_mbn_resnet', '--dataset', '', '--data-dir', str(folder)])
    data_config = resolve_data_config({}, model=timm.create_model('test_mbn_resnet'))
    options = eval_options(args)
    dataset = build.create_eval_dataset(options.data, data_config, DistributedInfo(), options.runtime.batch_size)
    late = next(i for i in range(len(dataset)) if dataset.filename(i) == '0/late.png')
    with pytest.raises(RuntimeError, match='Failed to load'):
        dataset[late]


@pytest.mark.parametrize('extra, message', [
    (['--gammas', '2'], 'gamma'),
    (['--attacks', 'nope'], 'Unknown attack'),
    (['--bn-layer', 'no.such.layer', '--plot-dir', '{out}/plots'], 'no mixture-BN layer of that name'),
    (['--dataset', '', '--data-dir', '{tmp}/missing'], 'not found'),
    (['--split', 'nosuch'], "no folder of split 'nosuch'"),
    (['--resume-state', '{out}/state/state.jsonl', '--checkpoint', '{tmp}/missing.pth'], 'not found'),
])
def test_a_refused_run_creates_no_folder(digits_dir, tmp_path, capsys, extra, message):
    """The output folders (results, plots, state) come with the first file written into them, not before."""
    out = tmp_path / 'out' / 'nested'
    extra = [a.format(out=out, tmp=tmp_path) for a in extra]
    argv = _argv(digits_dir, out, '--model', 'test_mbn_resnet', '--attacks', 'fgsm', '--gammas', '1', *extra)
    assert _run(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and message in err[0], err
    assert list(tmp_path.iterdir()) == []


def test_split_folder_is_found_like_timm_but_never_falls_back_to_the_root(tmp_path):
    (tmp_path / 'validation').mkdir()
    assert split_folder(tmp_path, 'val') == tmp_path / 'validation'
    assert split_folder(tmp_path, 'validation') == tmp_path / 'validation'
    assert split_folder(tmp_path, '') == tmp_path  # explicitly the root
    with pytest.raises(ValueError, match="no folder of split 'train'.*train, training"):
        split_folder(tmp_path, 'train')


def test_missing_matplotlib_is_reported_before_the_evaluation(digits_dir, tmp_path, capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, 'matplotlib', None)  # import matplotlib now raises ImportError
    monkeypatch.setattr(build, 'create_eval_model', None)  # would fail if reached
    argv = _argv(digits_dir, tmp_path, '--model', 'test_mbn_resnet', '--plot-dir', tmp_path / 'plots')
    assert _run(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and 'matplotlib' in err[0] and 'timm-advnorm[plots]' in err[0]


def test_a_failing_plot_does_not_lose_the_results(digits_dir, tmp_path, monkeypatch):
    def broken_plots(*args, **kwargs):
        raise RuntimeError('plotting failed')

    monkeypatch.setattr(report, 'write_plots', broken_plots)
    argv = _argv(digits_dir, tmp_path, '--model', 'test_mbn_resnet', '--attacks', 'fgsm', '--gammas', '1',
                 '--plot-dir', tmp_path / 'plots')
    with pytest.raises(RuntimeError, match='plotting failed'):  # a genuine failure keeps its traceback
        _run(argv)
    assert _results(tmp_path)['variants'] and (tmp_path / 'results.csv').stat().st_size > 0


def test_resume_refuses_other_weights_at_the_same_path_and_other_settings(digits_dir, tmp_path, capsys):
    path = tmp_path / 'model.pth.tar'

    def save(seed: int) -> None:
        torch.manual_seed(seed)
        model = timm.create_model('test_mbn_resnet', num_classes=10)
        torch.save({'state_dict': model.state_dict(), 'arch': 'test_mbn_resnet'}, path)

    save(0)
    argv = _argv(digits_dir, tmp_path, '--checkpoint', path, '--attacks', 'fgsm', '--gammas', '1',
                 '--resume-state', tmp_path / 'state.jsonl', '--overwrite')
    assert _run(argv) == 0
    changes = [(['--model-kwargs', 'drop_rate=0.5'], 'model_kwargs'), (['--num-classes', '10'], 'num_classes'),
               (['--split', 'val'], 'split'),
               (['--dataset', '', '--data-dir', str(digits_dir / 'digits-32px')], 'data_dir, dataset')]
    for extra, differs in changes:
        with pytest.raises(ValueError, match=f'different evaluation .*{differs}'):
            validate_adv.validate(validate_adv.eval_options(validate_adv.parse_args(argv + extra)))
    save(1)  # the same path, other weights
    capsys.readouterr()
    assert _run(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and 'different evaluation (differs in: weights)' in err[0], err


def test_a_malformed_state_record_is_a_one_line_error_naming_the_line(digits_dir, tmp_path, capsys):
    state = tmp_path / 'state.jsonl'
    argv = _argv(digits_dir, tmp_path, '--model', 'test_mbn_resnet', '--attacks', 'fgsm', '--gammas', '1',
                 '--resume-state', state, '--overwrite')
    assert _run(argv) == 0
    lines = state.read_text().splitlines(keepends=True)
    state.write_text(''.join(lines[:2]) + '{"variant": "adv", "stage": "clean"}\n' + ''.join(lines[2:]))
    capsys.readouterr()
    assert _run(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and f'{state}: line 3 is not an evaluation record' in err[0], err


def test_a_published_model_reproduces_its_card_when_loaded_from_the_hub(digits_dir, tmp_path, checkpoint,
                                                                        monkeypatch):
    """Publish with --inference-branch adv, load the export back offline as hf-hub:ORG/NAME: the model runs on its
    adversarial branch, and validate_adv.py on it reproduces the robust accuracy the card advertises."""
    from huggingface_hub import ModelCard, constants

    from timm_advnorm.commands.publish import run as run_publish
    from timm_advnorm.hub import install_to_hf_cache

    attacks = ['--attacks', 'pgd', '--attack-steps', '3', '--attack-step', '4', '--gammas', '0', '1']
    assert _run(_argv(digits_dir, tmp_path / 'source', '--checkpoint', checkpoint, *attacks)) == 0
    export = tmp_path / 'export'
    assert run_publish(argv=[str(checkpoint), '--inference-branch', 'adv', '--results',
                             str(tmp_path / 'source' / 'results.json'), '--local-dir', str(export),
                             '--repo-id', 'org/demo-mbn', '--dry-run']) == 0
    card = ModelCard((export / 'README.md').read_text())
    advertised = {result.metric_name: result.metric_value for result in card.data.eval_results}
    robust_adv = [value for name, value in advertised.items() if 'pgd' in name and '[adv]' in name]
    assert len(robust_adv) == 1

    install_to_hf_cache(export, 'org/demo-mbn', cache_dir=tmp_path / 'hub')
    monkeypatch.setattr(constants, 'HF_HUB_CACHE', str(tmp_path / 'hub'))
    monkeypatch.setattr(constants, 'HF_HUB_OFFLINE', True)
    assert _run(_argv(digits_dir, tmp_path / 'loaded', '--model', 'hf-hub:org/demo-mbn', *attacks)) == 0
    loaded = _results(tmp_path / 'loaded')
    assert loaded['inference_branch'] == 'adv' and loaded['primary_variant'] == 'adv'
    assert loaded['robust_top1'] == pytest.approx(robust_adv[0], abs=0.01)


def test_robustbench_subset_and_model_info_fields(tmp_path):
    """--subset robustbench evaluates the first N images of RobustBench's list and writes the result in the fields of
    RobustBench's model_info JSON, saying what ran."""
    from PIL import Image

    from timm_advnorm.eval.run.subsets import subset_files

    for i, name in enumerate(subset_files('robustbench')[:3]):
        path = tmp_path / 'imagenet' / 'val' / name
        path.parent.mkdir(parents=True)
        Image.new('RGB', (40, 40), (60 * i, 30, 200)).save(path, format='PNG')
    # three of ImageNet's class folders: a class map says which of the model's classes they are
    (tmp_path / 'wnids.txt').write_text(''.join(f'{Path(name).parent}\n' for name in subset_files('robustbench')[:3]))
    argv = ['--model', 'test_resnet', '--num-classes', '10', '--data-dir', tmp_path / 'imagenet', '--val-split', 'val',
            '--subset', 'robustbench', '--num-samples', 3, '--protocol', 'robustbench', '--reduced', '-j', 0,
            '--sanity-samples', 0, '--no-progress', '--results-file', tmp_path / 'rb.json',
            '--class-map', tmp_path / 'wnids.txt']
    assert _run([str(a) for a in argv]) == 0
    results = json.loads((tmp_path / 'rb.json').read_text())
    assert results['subset'] == 'robustbench' and results['num_samples'] == 3
    info = results['robustbench_model_info']
    assert {'link', 'name', 'authors', 'additional_data', 'number_forward_passes', 'dataset', 'venue', 'architecture',
            'eps', 'clean_acc', 'reported', 'autoattack_acc'} <= set(info)
    assert info['dataset'] == 'imagenet' and info['eps'] == '4/255' and info['architecture'] == 'test_resnet'
    assert info['clean_acc'] == results['top1'] and info['autoattack_acc'] == results['robust_top1']
    assert "first 3 of RobustBench's ImageNet list" in info['footnote'] and 'reduced budgets' in info['footnote']
