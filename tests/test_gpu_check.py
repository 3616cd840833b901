"""The GPU kit (``scripts/gpu_check.sh``): its stages on tiny models on the CPU within a budget, the files it leaves
for a GPU window to bring back, what it does with a failing, overrunning, skipped or interrupted stage, its wheels and
their manifest, and bad input."""
import importlib
import json
import os
import re
import signal
import subprocess
import sys
import tarfile
import time
import zipfile
from pathlib import Path

import pytest
import timm

REPO = Path(__file__).resolve().parents[1]
AFTER_THE_BUDGET = ['bench_eval', 'bench_methods', 'bench_memory', 'train', 'validate', 'train-compiled']
MIB = 1 << 20


@pytest.fixture
def kit(monkeypatch):
    """The kit's modules, imported as ``scripts/gpu_check.py`` imports them."""
    monkeypatch.syspath_prepend(str(REPO / 'scripts'))
    return importlib.import_module('gpu_check')


@pytest.fixture
def parts(kit):
    return {name: importlib.import_module(f'gpu_kit.{name}') for name in ('report', 'runner', 'stages', 'wheels')}


def _stage_rows(report: str) -> dict:
    """Result and detail of each stage by name, from the report's stage table."""
    table = report.split('## Figures', 1)[0]
    rows = re.findall(r'^\| ([\w-]+) \| ([^|]+) \| [\d.]+ \| (.*) \|$', table, re.M)
    return {name: (status, detail) for name, status, detail in rows}


def _section(report: str, title: str) -> str:
    return report.split(f'### {title}\n', 1)[1].split('\n### ', 1)[0]


def _run_kit(*argv: str, timeout: float = 300, tier_selection: str = '') -> subprocess.CompletedProcess:
    """The kit as a user runs it; `tier_selection` narrows the device tier's pytest run (``-k``)."""
    env = {**os.environ, 'PYTHON': sys.executable}
    if tier_selection:
        env['PYTEST_ADDOPTS'] = f'{env.get("PYTEST_ADDOPTS", "")} -k {tier_selection}'.strip()
    return subprocess.run(['bash', 'scripts/gpu_check.sh', *argv], cwd=REPO, env=env, capture_output=True, text=True,
                          timeout=timeout)


def _assert_what_a_window_returns(out: Path) -> None:
    files = sorted(path for path in out.rglob('*'))
    assert all(path.is_file() for path in files) and len(files) <= 8, files
    assert {path.name for path in files} <= {'gpu_report.md', 'environment.json', 'junit.xml', 'logs.tar.gz'}
    assert all(path.stat().st_size < 16 * MIB for path in files)


def test_a_tiny_cpu_run_ends_within_its_budget_and_leaves_only_what_a_window_brings_back(tmp_path):
    out, scratch = tmp_path / 'out', tmp_path / 'scratch'
    start = time.monotonic()
    # On the CPU the tier is tests/test_device_checks.py, which the suite runs in full: here a few of its tests show the
    # stage's plumbing (its count, its JUnit file) at a fraction of the time. The budget fits the tier after an
    # environment stage of up to 12 s (a loaded machine) and never the inductor-compiled run (~60 s), whatever the
    # machine's speed: the verdicts do not hang on how long the stages happen to take.
    done = _run_kit('--device', 'cpu', '--tiny', '--budget', '40', '--stages',
                    'device-tier,imagenet-folder,train-compiled', '--compile-backend', 'inductor',
                    '--scratch', str(scratch), str(out), tier_selection='in_eval_mode')
    assert time.monotonic() - start < 60
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    _assert_what_a_window_returns(out)
    rows = _stage_rows((out / 'gpu_report.md').read_text())
    assert rows['environment'] == ('passed', '') and rows['device-tier'][0] == 'passed'
    assert re.fullmatch(r'(\d+) passed, 0 failed, 0 errors, 0 skipped', rows['device-tier'][1])
    skipped = [name for name, (status, _) in rows.items() if status == 'skipped (budget)']
    assert skipped and all(re.fullmatch(r'needs ~\d+ s, \d+ s left', rows[name][1]) for name in skipped)
    assert all(status in ('passed', 'skipped (budget)', 'skipped (needs train)') for status, _ in rows.values())
    ran = [name for name, (status, _) in rows.items() if status == 'passed' and name != 'imagenet-folder']
    with tarfile.open(out / 'logs.tar.gz') as archive:
        names = archive.getnames()
    assert {re.sub(r'^logs/\d+-(.*)\.log$', r'\1', name) for name in names if name.startswith('logs/')} >= set(ran)
    assert not [name for name in names if name.endswith(('.tar', '.pth', '.safetensors', '.JPEG', '.jpg', '.png'))]
    environment = json.loads((out / 'environment.json').read_text())
    assert environment['timm'] == timm.__version__ and environment['packages']['timm'] == timm.__version__
    assert {'device', 'driver', 'python', 'torch', 'cuda', 'cudnn', 'torchvision'} <= set(environment)
    assert 'testcase' in (out / 'junit.xml').read_text()


def test_the_stages_a_short_budget_skips_pass_on_tiny_models(tmp_path):
    out, scratch = tmp_path / 'out', tmp_path / 'scratch'
    done = _run_kit('--device', 'cpu', '--tiny', '--stages', ','.join(AFTER_THE_BUDGET), '--compile-backend', 'eager',
                    '--scratch', str(scratch), str(out))
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    stages = ['environment', 'bench_eval', 'bench_methods', 'bench_memory', 'imagenet-folder', 'train', 'validate',
              'train-compiled']
    for index, name in enumerate(stages, 1):  # each stage's time, printed as it ends
        assert re.search(rf'^\[{index}/{len(stages)}\] {name} passed in [\d.]+ s$', done.stdout, re.M), name
    report = (out / 'gpu_report.md').read_text()
    assert _stage_rows(report) == {name: ('passed', '') for name in stages}
    for name in AFTER_THE_BUDGET[:3]:  # the benchmarks: a table with a ratio column against the run's own baseline
        figures = _section(report, name)
        header = next(line for line in figures.splitlines() if line.startswith('|'))
        assert '×' in header or 'ratio' in header, name
        assert re.search(r'\| \d+\.\d+ \|', figures), name
    assert (scratch / 'runs' / 'train' / 'last.pth.tar').exists() and (scratch / 'runs' / 'compiled' / 'last.pth.tar').exists()
    assert (scratch / 'validate' / 'xie2020.json').exists()
    _assert_what_a_window_returns(out)


def _sizes(parts, estimates: dict, timeouts: dict):
    return parts['stages'].Sizes(benchmarks={}, train=(), images_per_class=(1, 1), img_size=8, estimates=estimates,
                                 compile_estimates={'eager': 1}, timeouts=timeouts, test_timeout=10)


def _execute(parts, tmp_path, stages, sizes, budget=60.0) -> int:
    run = parts['runner'].Run(stages, sizes, 'eager', budget, tmp_path / 'out', tmp_path / 'scratch', 'test',
                              time.monotonic())
    (tmp_path / 'out').mkdir()
    return run.execute(parts['runner'].stage_environment(None), lambda line: None)


def test_a_failing_or_overrunning_stage_is_recorded_and_the_next_one_runs(parts, tmp_path):
    Stage, python = parts['stages'].Stage, sys.executable
    stages = [Stage('breaks', (python, '-c', 'print("working"); raise SystemExit("it broke")')),
              Stage('overruns', (python, '-c', 'import time; time.sleep(60)')),
              Stage('prints-figures', (python, '-c', 'print("| variant | ratio |\\n|---|---:|\\n| a | 1.5 |")'),
                    figures=True)]
    sizes = _sizes(parts, dict.fromkeys(['breaks', 'overruns', 'prints-figures'], 1),
                   {'breaks': 30, 'overruns': 2, 'prints-figures': 30})
    assert _execute(parts, tmp_path, stages, sizes) == 1
    report = (tmp_path / 'out' / 'gpu_report.md').read_text()
    assert _stage_rows(report) == {'breaks': ('failed', 'it broke'), 'overruns': ('timed out', 'timed out after 2 s'),
                                   'prints-figures': ('passed', '')}
    assert '- torch: unknown (the environment stage has not passed)' in report
    assert _section(report, 'prints-figures').strip().splitlines()[-1] == '| a | 1.5 |'


def test_a_stage_that_does_not_fit_the_budget_is_skipped_never_started_and_later_ones_still_run(parts, tmp_path):
    Stage, python = parts['stages'].Stage, sys.executable
    started = tmp_path / 'started'
    stages = [Stage('long', (python, '-c', f'open({str(started)!r}, "w")')),
              Stage('needs-long', (python, '-c', 'pass'), requires=('long',)),
              Stage('short', (python, '-c', 'pass'))]
    sizes = _sizes(parts, {'long': 100, 'needs-long': 1, 'short': 1}, dict.fromkeys(['long', 'needs-long', 'short'], 30))
    assert _execute(parts, tmp_path, stages, sizes, budget=20) == 0  # skipped for the budget is not a failure
    rows = _stage_rows((tmp_path / 'out' / 'gpu_report.md').read_text())
    assert rows['long'][0] == 'skipped (budget)' and re.fullmatch(r'needs ~100 s, 1\d s left', rows['long'][1])
    assert rows['needs-long'] == ('skipped (needs long)', 'long: skipped (budget)')
    assert rows['short'] == ('passed', '') and not started.exists()


def test_a_tier_whose_tests_all_skipped_has_not_passed(parts, tmp_path):
    Stage = parts['stages'].Stage
    tests = tmp_path / 'test_skipping.py'
    tests.write_text('import pytest\n\n@pytest.mark.skip(reason="no device")\ndef test_a():\n    pass\n')
    junit = tmp_path / 'scratch' / 'junit.xml'
    stage = Stage('tier', (sys.executable, '-m', 'pytest', '-p', 'no:cacheprovider', f'--junitxml={junit}',
                           str(tests)), junit=junit)
    assert _execute(parts, tmp_path, [stage], _sizes(parts, {'tier': 1}, {'tier': 60})) == 1
    assert _stage_rows((tmp_path / 'out' / 'gpu_report.md').read_text())['tier'] == \
        ('failed', 'no test ran: 0 passed, 0 failed, 0 errors, 1 skipped')
    assert (tmp_path / 'out' / 'junit.xml').read_bytes() == junit.read_bytes()


def test_the_tier_names_a_hung_test_and_times_each_one_out(parts, tmp_path):
    command = parts['stages']._tier_command('cuda', tmp_path / 'junit.xml', None, 150)()
    assert command[1:3] == ('-m', 'pytest') and {'-v', '-rA', '--durations=20', '--timeout=150'} <= set(command)
    assert f'--junitxml={tmp_path / "junit.xml"}' in command and command[-3:] == tuple(
        f'tests/test_cuda_{name}.py' for name in ('attacks', 'layers', 'training'))
    assert parts['stages']._tier_command('cpu', tmp_path / 'junit.xml', None, 150)()[-1] == 'tests/test_device_checks.py'


_DRIVER = """
import sys, time
from pathlib import Path
sys.path.insert(0, sys.argv[1])
from gpu_kit.runner import Run, stage_environment
from gpu_kit.stages import Sizes, Stage
out, scratch, pid_file = map(Path, sys.argv[2:5])
hangs = f'import os, time; open({str(pid_file)!r}, "w").write(str(os.getpid())); time.sleep(120)'
stages = [Stage('quick', (sys.executable, '-c', 'pass')), Stage('hangs', (sys.executable, '-c', hangs)),
          Stage('after', (sys.executable, '-c', 'pass'))]
names = [stage.name for stage in stages]
sizes = Sizes({}, (), (1, 1), 8, dict.fromkeys(names, 1), {'eager': 1}, dict.fromkeys(names, 300), 10)
sys.exit(Run(stages, sizes, 'eager', 300, out, scratch, 'test', time.monotonic()).execute(stage_environment(None), print))
"""


def _start_driver(tmp_path: Path):
    """A kit run whose second stage hangs, started in a process of its own; the process, the hung stage's pid, and
    the output folder, once that stage runs."""
    out, pid_file = tmp_path / 'out', tmp_path / 'stage.pid'
    out.mkdir()
    driver = subprocess.Popen([sys.executable, '-c', _DRIVER, str(REPO / 'scripts'), str(out), str(tmp_path / 'scratch'),
                               str(pid_file)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    deadline = time.monotonic() + 60
    while not (pid_file.exists() and pid_file.read_text()):
        assert driver.poll() is None and time.monotonic() < deadline, driver.communicate()[0]
        time.sleep(0.05)
    return driver, int(pid_file.read_text()), out


def _gone(pid: int, seconds: float = 10) -> bool:
    """Whether process `pid` ends (or is left a zombie) within `seconds`."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            if Path(f'/proc/{pid}/stat').read_text().rsplit(') ', 1)[1].startswith('Z'):
                return True
        except FileNotFoundError:
            return True
        time.sleep(0.05)
    return False


def test_a_killed_kit_leaves_its_report_of_the_stages_so_far_and_no_stage_running(tmp_path):
    driver, stage_pid, out = _start_driver(tmp_path)
    driver.kill()
    driver.communicate()
    rows = _stage_rows((out / 'gpu_report.md').read_text())
    assert rows == {'quick': ('passed', ''), 'hangs': ('running', ''), 'after': ('pending', '')}
    assert tarfile.open(out / 'logs.tar.gz').getnames() == ['logs/01-quick.log']
    assert _gone(stage_pid)


@pytest.mark.parametrize('sig', [signal.SIGTERM, signal.SIGINT], ids=['SIGTERM', 'SIGINT'])
def test_a_signal_ends_the_running_stage_and_writes_the_report_before_the_kit_exits(tmp_path, sig):
    driver, stage_pid, out = _start_driver(tmp_path)
    driver.send_signal(sig)
    output, _ = driver.communicate(timeout=30)
    assert driver.returncode == 128 + sig, output
    assert _gone(stage_pid, seconds=1)
    rows = _stage_rows((out / 'gpu_report.md').read_text())
    assert rows['quick'] == ('passed', '') and rows['hangs'] == ('interrupted', f'interrupted by {sig.name}')
    assert rows['after'] == ('not run', f'the run was interrupted ({sig.name})')
    assert 'logs/02-hangs.log' in tarfile.open(out / 'logs.tar.gz').getnames()


def test_the_log_archive_keeps_text_records_and_leaves_out_checkpoints_images_and_installed_wheels(parts, tmp_path):
    files = {'logs/01-train.log': b'log', 'runs/train/summary.csv': b'epoch', 'runs/train/args.yaml': b'model',
             'runs/train/last.pth.tar': b'weights', 'imagenet/train/a/0.JPEG': b'jpeg',
             'site/timm-1.0.31.dist-info/entry_points.txt': b'wheel', 'logs/big.log': b'x' * (2 << 20)}
    for name, data in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_bytes(data)
    archive = tmp_path / 'logs.tar.gz'
    archive.write_bytes(parts['report'].archive_logs(tmp_path))
    with tarfile.open(archive) as opened:
        assert sorted(opened.getnames()) == ['logs/01-train.log', 'logs/big.log', 'runs/train/args.yaml',
                                             'runs/train/summary.csv']
        big = opened.extractfile('logs/big.log').read()
    assert big.startswith(b'[cut to its last 1 MiB]\n') and len(big) < (1 << 20) + 100


def test_device_cuda_without_cuda_fails_within_seconds_saying_so(tmp_path):
    start = time.monotonic()
    done = subprocess.run(['bash', 'scripts/gpu_check.sh', '--device', 'cuda', str(tmp_path / 'out')], cwd=REPO,
                          env={**os.environ, 'PYTHON': sys.executable, 'CUDA_VISIBLE_DEVICES': ''},
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and time.monotonic() - start < 60
    assert re.fullmatch(r'gpu_check\.sh: error: --device cuda: torch\.cuda\.is_available\(\) is false here \(torch '
                        r'\S+, CUDA build \S+\); run it on a GPU machine, or use --device cpu --tiny \(see --help\)\n',
                        done.stderr)
    assert not (tmp_path / 'out').exists()


def _error(kit, argv, capsys) -> str:
    with pytest.raises(SystemExit) as exit_info:
        kit.main(argv)
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert err.count('\n') == 1 and err.startswith('gpu_check.sh: error: ')
    return err


def test_bad_input_is_one_line_and_exit_status_2_before_anything_is_written(kit, tmp_path, capsys):
    out = tmp_path / 'out'
    assert _error(kit, ['--device', 'cpu'], capsys) == \
        'gpu_check.sh: error: OUTDIR is required (or --prepare-wheels DIR) (see --help)\n'
    assert 'no manifest.json there' in _error(kit, ['--wheels', str(tmp_path), str(out)], capsys)
    assert 'takes no OUTDIR' in _error(kit, ['--prepare-wheels', str(tmp_path), str(out)], capsys)
    assert 'positive number of seconds, got 0' in _error(kit, ['--device', 'cpu', '--budget', '0', str(out)], capsys)
    assert 'unknown stage tran; choose from device-tier' in _error(kit, ['--stages', 'train,tran', str(out)], capsys)
    assert 'is inside OUTDIR' in _error(kit, ['--device', 'cpu', '--scratch', str(out / 's'), str(out)], capsys)
    (tmp_path / 'used').mkdir()
    (tmp_path / 'used' / 'runs').mkdir()
    assert 'not an empty folder' in _error(kit, ['--device', 'cpu', '--scratch', str(tmp_path / 'used'), str(out)],
                                           capsys)
    assert not out.exists()
    (tmp_path / 'gpu_report.md').write_text('an earlier run\n')
    assert 'is a file; give a new folder' in _error(kit, ['--device', 'cpu', str(tmp_path / 'gpu_report.md')], capsys)
    assert 'already exists' in _error(kit, ['--device', 'cpu', str(tmp_path)], capsys)
    assert (tmp_path / 'gpu_report.md').read_text() == 'an earlier run\n'


def _wheel(folder: Path, name: str, version: str = '1.0', module: str = '') -> Path:
    """A minimal pure-Python wheel of `name` holding `module` (``path: source`` lines)."""
    folder.mkdir(exist_ok=True)
    wheel = folder / f'{name}-{version}-py3-none-any.whl'
    info = f'{name}-{version}.dist-info'
    with zipfile.ZipFile(wheel, 'w') as archive:
        for line in filter(None, module.splitlines()):
            path, source = line.split(': ', 1)
            archive.writestr(path, source + '\n')
        archive.writestr(f'{info}/METADATA', f'Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n')
        archive.writestr(f'{info}/WHEEL', 'Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\n'
                                          'Tag: py3-none-any\n')
        archive.writestr(f'{info}/RECORD', '')
    return wheel


def test_timm_is_pinned_to_the_version_the_suite_runs_with(parts):
    assert parts['wheels'].wheel_requirements() == (f'timm=={timm.__version__}', 'torchattacks==3.5.1')


def test_the_wheels_are_prepared_for_the_gpu_machine_one_per_package_with_their_manifest(kit, parts, tmp_path,
                                                                                         monkeypatch, capsys):
    """What `--prepare-wheels` asks pip for (the download itself needs the network, which tests do not have), and the
    manifest it writes of what pip left."""
    folder, commands = tmp_path / 'wheels', []

    def pip(command, check):
        commands.append(command)
        _wheel(folder, f'package{len(commands)}')
    monkeypatch.setattr(parts['wheels'].subprocess, 'run', pip)
    assert kit.main(['--prepare-wheels', str(folder)]) == 0
    download, build = commands
    assert download[3:5] == ['download', '--no-deps'] and '--only-binary=:all:' in download
    assert download[download.index('--python-version') + 1] == '3.12'
    assert download[-2:] == [f'timm=={timm.__version__}', 'torchattacks==3.5.1']
    assert build[3:] == ['wheel', '--no-deps', '-w', str(folder), str(REPO)]
    manifest = json.loads((folder / 'manifest.json').read_text())['wheels']
    assert sorted(manifest) == ['package1-1.0-py3-none-any.whl', 'package2-1.0-py3-none-any.whl']
    assert [path.name for path in parts['wheels'].verify_wheels(folder)] == sorted(manifest)
    assert 'already holds wheels' in _error(kit, ['--prepare-wheels', str(folder)], capsys)


def test_a_wheel_folder_that_differs_from_its_manifest_is_refused(kit, parts, tmp_path, capsys):
    wheels = parts['wheels']
    folder = tmp_path / 'wheels'
    _wheel(folder, 'timm', '1.0.31')
    wheels.write_manifest(folder)
    out = ['--device', 'cpu', '--tiny', str(tmp_path / 'out')]
    _wheel(folder, 'timm', '1.0.32')
    assert 'timm-1.0.32-py3-none-any.whl not in its manifest.json' in _error(kit, ['--wheels', str(folder), *out], capsys)
    with pytest.raises(ValueError, match='holds 2 wheels of one package'):
        wheels.write_manifest(folder)
    (folder / 'timm-1.0.32-py3-none-any.whl').unlink()
    _wheel(folder, 'timm', '1.0.31', module='timm/__init__.py: __version__ = "changed"')
    assert 'differs from the SHA-256' in _error(kit, ['--wheels', str(folder), *out], capsys)
    (folder / 'timm-1.0.31-py3-none-any.whl').unlink()
    assert 'timm-1.0.31-py3-none-any.whl missing' in _error(kit, ['--wheels', str(folder), *out], capsys)


def test_the_wheels_are_installed_offline_on_the_stages_path_after_the_working_tree(parts, tmp_path):
    folder = tmp_path / 'wheels'
    _wheel(folder, 'gpu_check_probe', module='gpu_check_probe.py: ANSWER = 42\ntimm_advnorm/__init__.py: ')
    parts['wheels'].write_manifest(folder)
    site, Stage, run_stage = tmp_path / 'site', parts['stages'].Stage, parts['runner'].run_stage
    env = {**parts['runner'].stage_environment(site), 'PIP_INDEX_URL': 'http://127.0.0.1:9/unreachable'}
    install = run_stage(Stage('install', parts['wheels'].install_command(parts['wheels'].verify_wheels(folder), site)),
                        60, env, tmp_path / 'install.log')
    assert install.status == 'passed', install.output
    probe = run_stage(Stage('probe', (sys.executable, '-c', 'import gpu_check_probe, timm_advnorm; '
                                      'print(gpu_check_probe.ANSWER, timm_advnorm.__file__)')), 60, env,
                      tmp_path / 'probe.log')
    assert probe.status == 'passed', probe.output
    answer, package = probe.last_line.split()
    assert answer == '42' and Path(package) == REPO / 'timm_advnorm' / '__init__.py'  # the tree's, not the wheel's
    assert (site / 'timm_advnorm' / '__init__.py').exists()


def test_every_gpu_size_command_parses(parts, tmp_path, monkeypatch):
    """The GPU stages' command lines, which only a GPU runs, are held to their scripts' parsers here (as on a machine
    with one CUDA device: the commands refuse a device the machine lacks)."""
    import torch
    monkeypatch.setattr(torch.cuda, 'is_available', lambda: True)
    monkeypatch.setattr(torch.cuda, 'device_count', lambda: 1)
    from timm_advnorm.commands.validate import parse_args as parse_validate_args
    from timm_advnorm.commands.train import parse_args as parse_train_args
    monkeypatch.syspath_prepend(str(REPO / 'benchmarks'))
    stages_module = parts['stages']
    stages = {stage.name: stage for stage in stages_module.build_stages(
        'cuda', stages_module.GPU_SIZES, tmp_path, 'inductor', install=('pip',), site=tmp_path / 'site')}
    assert tuple(stages) == stages_module.STAGE_NAMES
    assert set(stages_module.GPU_SIZES.timeouts) == set(stages_module.STAGE_NAMES)
    assert set(stages_module.GPU_SIZES.estimates) == set(stages_module.STAGE_NAMES) - {'train-compiled'}
    for name in stages_module.STAGE_NAMES[3:8]:
        script, *argv = stages[name].command[1:]
        parsed = importlib.import_module(Path(script).stem).get_args_parser().parse_args(argv)
        assert (parsed.device, parsed.amp, parsed.channels_last, parsed.img_size) == ('cuda', True, True, 224)
    for name in ('train', 'train-compiled'):
        parsed, _ = parse_train_args(list(stages[name].command[2:]))
        assert (parsed.device, parsed.amp, parsed.channels_last, parsed.model) == ('cuda', True, True, 'mbn_resnet50')
    assert parse_train_args(list(stages['train-compiled'].command[2:]))[0].torchcompile == 'inductor'
    parsed = parse_validate_args(list(stages['validate'].command[2:]))
    assert (parsed.protocol, parsed.reduced, parsed.device) == ('xie2020', True, 'cuda')


def test_a_default_gpu_run_fits_every_stage_but_the_compiled_one_in_its_budget(kit, parts):
    """By the estimates: one call of the default budget runs all but ``train-compiled`` (ten seconds left for the kit's
    start-up and CUDA probe), and a second call runs that one."""
    sizes, names = parts['stages'].GPU_SIZES, parts['stages'].STAGE_NAMES
    first = 10 + sum(sizes.estimate(name, 'inductor') for name in names[:-1])
    assert first <= kit.DEFAULT_BUDGET - parts['runner'].RESERVE_SECONDS < first + sizes.estimate(names[-1], 'inductor')
    assert sizes.estimate('install', '') + sizes.estimate('environment', '') + sizes.estimate(names[-1], 'inductor') \
        <= kit.DEFAULT_BUDGET
