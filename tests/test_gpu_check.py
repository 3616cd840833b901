"""The GPU kit (``scripts/gpu_check.sh``): its every stage on tiny models on the CPU, its offline install, and what it
does with a failing or overrunning stage and with bad input."""
import dataclasses
import importlib
import os
import re
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
import torch

REPO = Path(__file__).resolve().parents[1]
STAGES = ['environment', 'cuda tier', 'bench_split_bn', 'bench_attack', 'bench_eval', 'bench_methods', 'bench_memory',
          'imagenet-shaped folder', 'train', 'train --torchcompile', 'validate']


@pytest.fixture
def gpu_check(monkeypatch):
    monkeypatch.syspath_prepend(str(REPO / 'scripts'))
    return importlib.import_module('gpu_check')


def _stage_rows(report: str) -> dict:
    """Result of each stage by name, from the report's stage table."""
    rows = re.findall(r'^\| ([^|]+) \| (passed|failed|timed out|not run) \| [\d.]+ \| (.*) \|$', report, re.M)
    return {name: (status, detail) for name, status, detail in rows}


def _section(report: str, title: str) -> str:
    return report.split(f'### {title}\n', 1)[1].split('\n### ', 1)[0]


def test_every_stage_passes_on_tiny_models_on_the_cpu(tmp_path):
    out = tmp_path / 'check'
    done = subprocess.run(['bash', 'scripts/gpu_check.sh', '--device', 'cpu', '--tiny', str(out)], cwd=REPO,
                          env={**os.environ, 'PYTHON': sys.executable}, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    for index, name in enumerate(STAGES, 1):  # each stage's time, printed as it ends
        assert re.search(rf'^\[{index}/{len(STAGES)}\] {re.escape(name)} passed in [\d.]+ s$', done.stdout, re.M), name
    report = (out / 'gpu_report.md').read_text()
    assert _stage_rows(report) == {name: ('passed', '') for name in STAGES}
    assert f'- torch: {torch.__version__}' in report and '- timm: ' in report and '- cuda: ' in report
    for name in STAGES[2:7]:  # the benchmarks: a table with a ratio column against the run's own baseline
        figures = _section(report, name)
        header = next(line for line in figures.splitlines() if line.startswith('|'))
        assert '×' in header or 'ratio' in header, name
        assert re.search(r'\| \d+\.\d+ \|', figures), name
    assert (out / 'runs' / 'train' / 'last.pth.tar').exists() and (out / 'runs' / 'compiled' / 'last.pth.tar').exists()
    assert (out / 'validate' / 'xie2020.json').exists()
    assert len(list((out / 'logs').glob('*.log'))) == len(STAGES)


def test_a_failing_stage_is_recorded_and_the_next_one_runs(gpu_check, tmp_path, monkeypatch):
    python = sys.executable
    stages = [gpu_check.Stage('breaks', (python, '-c', 'print("working"); raise SystemExit("it broke")')),
              gpu_check.Stage('overruns', (python, '-c', 'import time; time.sleep(60)')),
              gpu_check.Stage('prints figures', (python, '-c', 'print("| variant | ratio |\\n|---|---:|\\n| a | 1.5 |")'),
                              figures=True)]
    monkeypatch.setattr(gpu_check, 'build_stages', lambda args, sizes, site: stages)
    monkeypatch.setitem(gpu_check.TINY_SIZES.timeouts, 'overruns', 2)
    args = gpu_check.get_args_parser().parse_args(['--device', 'cpu', '--tiny', str(tmp_path / 'out')])
    assert gpu_check.run(args) is False
    report = (tmp_path / 'out' / 'gpu_report.md').read_text()
    assert _stage_rows(report) == {'breaks': ('failed', 'it broke'), 'overruns': ('timed out', 'timed out after 2 s'),
                                   'prints figures': ('passed', '')}
    assert '- torch: unknown (the environment stage failed)' in report
    assert _section(report, 'prints figures').strip().splitlines()[-1] == '| a | 1.5 |'


def test_a_stage_out_of_the_runs_time_is_not_run(gpu_check, tmp_path, monkeypatch):
    stages = [gpu_check.Stage('late', (sys.executable, '-c', 'pass'))]
    monkeypatch.setattr(gpu_check, 'build_stages', lambda args, sizes, site: stages)
    monkeypatch.setattr(gpu_check, 'TINY_SIZES', dataclasses.replace(gpu_check.TINY_SIZES, total_seconds=0))
    args = gpu_check.get_args_parser().parse_args(['--device', 'cpu', '--tiny', str(tmp_path / 'out')])
    assert gpu_check.run(args) is False
    assert _stage_rows((tmp_path / 'out' / 'gpu_report.md').read_text())['late'][0] == 'not run'


def _probe_wheel(folder: Path) -> Path:
    """A minimal pure-Python wheel of a module, ``gpu_check_probe``, and of an outdated ``timm_advnorm``."""
    folder.mkdir()
    wheel = folder / 'gpu_check_probe-1.0-py3-none-any.whl'
    info = 'gpu_check_probe-1.0.dist-info'
    with zipfile.ZipFile(wheel, 'w') as archive:
        archive.writestr('gpu_check_probe.py', 'ANSWER = 42\n')
        archive.writestr('timm_advnorm/__init__.py', '')
        archive.writestr(f'{info}/METADATA', 'Metadata-Version: 2.1\nName: gpu-check-probe\nVersion: 1.0\n')
        archive.writestr(f'{info}/WHEEL', 'Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\n'
                                          'Tag: py3-none-any\n')
        archive.writestr(f'{info}/RECORD', '')
    return wheel


def test_the_wheels_are_installed_offline_on_the_stages_path_after_the_working_tree(gpu_check, tmp_path):
    wheels = _probe_wheel(tmp_path / 'wheels').parent
    site = tmp_path / 'site'
    env = {**gpu_check._stage_environment(site), 'PIP_INDEX_URL': 'http://127.0.0.1:9/unreachable'}
    install = gpu_check.run_stage(gpu_check.Stage('install', gpu_check._install_command(wheels, site)), 60, env,
                                  tmp_path / 'install.log')
    assert install.status == 'passed', install.output
    probe = gpu_check.run_stage(gpu_check.Stage('probe', (sys.executable, '-c', 'import gpu_check_probe, timm_advnorm; '
                                                          'print(gpu_check_probe.ANSWER, timm_advnorm.__file__)')),
                                60, env, tmp_path / 'probe.log')
    assert probe.status == 'passed', probe.output
    answer, package = probe.last_line.split()
    assert answer == '42' and Path(package) == REPO / 'timm_advnorm' / '__init__.py'  # the tree's, not the wheel's
    assert (site / 'timm_advnorm' / '__init__.py').exists()


def _error(gpu_check, argv, capsys) -> str:
    with pytest.raises(SystemExit) as exit_info:
        gpu_check.main(argv)
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert err.count('\n') == 1
    return err


def test_bad_input_is_one_line_and_exit_status_2_before_anything_is_written(gpu_check, tmp_path, capsys):
    assert _error(gpu_check, ['--device', 'cpu'], capsys) == \
        'gpu_check.sh: error: OUTDIR is required (or --prepare-wheels DIR) (see --help)\n'
    assert 'no wheel there' in _error(gpu_check, ['--wheels', str(tmp_path), str(tmp_path / 'out')], capsys)
    assert 'takes no OUTDIR' in _error(gpu_check, ['--prepare-wheels', str(tmp_path), str(tmp_path / 'out')], capsys)
    assert not (tmp_path / 'out').exists()
    (tmp_path / 'gpu_report.md').write_text('an earlier run\n')
    assert 'already exists' in _error(gpu_check, [str(tmp_path)], capsys)
    assert (tmp_path / 'gpu_report.md').read_text() == 'an earlier run\n'


def test_the_wheels_are_prepared_for_the_gpu_machine(gpu_check, tmp_path, monkeypatch):
    """What `--prepare-wheels` asks pip for (the download itself needs the network, which tests do not have)."""
    commands = []
    monkeypatch.setattr(gpu_check.subprocess, 'run', lambda command, check: commands.append(command))
    assert gpu_check.main(['--prepare-wheels', str(tmp_path / 'wheels')]) == 0
    download, build = commands
    assert download[3:5] == ['download', '--no-deps'] and '--only-binary=:all:' in download
    assert download[download.index('--python-version') + 1] == '3.12'
    assert download[-2:] == ['timm>=1.0.31', 'torchattacks==3.5.1']
    assert build[3:] == ['wheel', '--no-deps', '-w', str(tmp_path / 'wheels'), str(REPO)]


def test_every_gpu_size_command_parses(gpu_check, tmp_path, monkeypatch):
    """The GPU stages' command lines, which only a GPU runs, are held to their scripts' parsers here (as on a machine
    with one CUDA device: the commands refuse a device the machine lacks)."""
    import torch
    monkeypatch.setattr(torch.cuda, 'is_available', lambda: True)
    monkeypatch.setattr(torch.cuda, 'device_count', lambda: 1)
    from timm_advnorm.commands.validate import parse_args as parse_validate_args
    from timm_advnorm.commands.train import parse_args as parse_train_args
    monkeypatch.syspath_prepend(str(REPO / 'benchmarks'))
    args = gpu_check.get_args_parser().parse_args(['--wheels', str(tmp_path), str(tmp_path / 'out')])
    stages = {stage.name: stage for stage in gpu_check.build_stages(args, gpu_check.GPU_SIZES, tmp_path / 'site')}
    assert list(stages) == ['install', *STAGES]
    for name in STAGES[2:7]:
        script, *argv = stages[name].command[1:]
        parsed = importlib.import_module(Path(script).stem).get_args_parser().parse_args(argv)
        assert (parsed.device, parsed.amp, parsed.channels_last, parsed.img_size) == ('cuda', True, True, 224)
    for name in ('train', 'train --torchcompile'):
        parsed, _ = parse_train_args(list(stages[name].command[2:]))
        assert (parsed.device, parsed.amp, parsed.channels_last, parsed.model) == ('cuda', True, True, 'mbn_resnet50')
    assert parse_train_args(list(stages['train --torchcompile'].command[2:]))[0].torchcompile == 'inductor'
    parsed = parse_validate_args(list(stages['validate'].command[2:]))
    assert (parsed.protocol, parsed.reduced, parsed.device) == ('xie2020', True, 'cuda')
