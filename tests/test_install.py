"""The installed product: build the sdist and the wheel as a release does (``python -m build``: the wheel is built from
the sdist), check their metadata as ``twine check`` would, install the wheel into a fresh virtual environment (reusing
this environment's torch and other dependencies, no network) and run the digits demo (``timm-advnorm-demo --smoke``)
and a publish from a folder outside the checkout with only the console commands a user gets from
``pip install timm-advnorm``."""
import email
import json
import os
import shutil
import subprocess
import sys
import sysconfig
import tarfile
import zipfile
from pathlib import Path
from typing import Tuple

import pytest
from concurrent_runs import run_concurrently

import timm_advnorm
from timm_advnorm.write_guard import EXPORT_MANIFEST

REPO = Path(__file__).resolve().parents[1]
COMMANDS = ('timm-advnorm-train', 'timm-advnorm-validate', 'timm-advnorm-publish', 'timm-advnorm-convert',
            'timm-advnorm-deepaugment', 'timm-advnorm-study', 'timm-advnorm-demo')


def _run(command, cwd: Path, env: dict, timeout: int = 600) -> subprocess.CompletedProcess:
    result = subprocess.run([str(c) for c in command], cwd=cwd, env=env, capture_output=True, text=True,
                            timeout=timeout)
    assert result.returncode == 0, f'{command}: {result.stderr[-3000:]}'
    return result


def _not_source(folder: str, names: list) -> set:
    """What a copy of the checkout leaves out: caches everywhere, and the checkout's own environment, build and run
    outputs at its top (only there: ``timm_advnorm/data`` is a package)."""
    skipped = {name for name in names if name in ('__pycache__', '.pytest_cache') or name.endswith('.egg-info')}
    if Path(folder) == REPO:
        skipped |= {'.git', '.venv', 'build', 'dist', 'output', 'data'} & set(names)
    return skipped


@pytest.fixture(scope='module')
def dists(tmp_path_factory) -> Tuple[Path, Path]:
    """The sdist and the wheel of this checkout, as ``python -m build`` makes them (the wheel from the sdist, so a file
    the sdist leaves out fails here), offline with this environment's setuptools."""
    # built from a copy: an in-place build leaves build/ in the checkout, whose stale files later wheels would ship
    source = tmp_path_factory.mktemp('source') / 'timm-advnorm'
    shutil.copytree(REPO, source, ignore=_not_source)
    dist = tmp_path_factory.mktemp('dist')
    built = subprocess.run([sys.executable, '-m', 'build', '--no-isolation', '--outdir', str(dist), str(source)],
                           capture_output=True, text=True, timeout=300)
    assert built.returncode == 0, built.stdout[-3000:] + built.stderr[-3000:]
    sdists, wheels = list(dist.glob('timm_advnorm-*.tar.gz')), list(dist.glob('timm_advnorm-*.whl'))
    assert len(sdists) == 1 and len(wheels) == 1
    return sdists[0], wheels[0]


@pytest.fixture(scope='module')
def wheel(dists) -> Path:
    return dists[1]


@pytest.fixture(scope='module')
def installed(wheel, tmp_path_factory):
    """A fresh virtual environment with the wheel installed; its dependencies come from this environment through a
    ``.pth`` line after the new environment's own site-packages, so the package itself is the installed copy."""
    venv = tmp_path_factory.mktemp('venv')
    subprocess.run([sys.executable, '-m', 'venv', '--without-pip', str(venv)], check=True, timeout=120)
    python = venv / 'bin' / 'python'
    site = Path(subprocess.run([str(python), '-c', 'import sysconfig; print(sysconfig.get_paths()["purelib"])'],
                               check=True, capture_output=True, text=True).stdout.strip())
    (site / 'host-dependencies.pth').write_text(sysconfig.get_paths()['purelib'] + '\n')
    subprocess.run([sys.executable, '-m', 'pip', '--python', str(python), 'install', '--no-index', '--no-deps', '-q',
                    str(wheel)], check=True, capture_output=True, timeout=300)
    env = {k: v for k, v in os.environ.items() if k not in ('PYTHONPATH', 'VIRTUAL_ENV')}
    env.update(PATH=f'{venv / "bin"}{os.pathsep}{env.get("PATH", "")}', HF_HUB_OFFLINE='1', OMP_NUM_THREADS='2')
    return venv, env


def test_wheel_ships_the_commands_recipes_and_card_template(wheel):
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
        metadata = archive.read(next(n for n in names if n.endswith('.dist-info/METADATA'))).decode()
        entry_points = archive.read(next(n for n in names if n.endswith('.dist-info/entry_points.txt'))).decode()
    assert 'timm_advnorm/recipes/digits_demo_mbn.yaml' in names
    assert 'timm_advnorm/hub/model_card_template.md' in names
    assert 'timm_advnorm/eval/run/robustbench_imagenet_5000.txt' in names
    assert {f'timm_advnorm/eval/protocols/imagenet_{name}_wnids.txt' for name in 'ra'} <= set(names)
    for command in COMMANDS:
        assert f'{command} = ' in entry_points
    # pip install "timm-advnorm[corruptions]" (the README's words) names an extra that exists
    assert 'Provides-Extra: corruptions' in metadata
    assert 'extra == "corruptions"' in metadata


def _check_metadata(text: str, where: str) -> None:
    """What ``twine check`` checks (twine is not installable offline here, so it did not run): the core fields are
    set, and the long description, the README, is there as Markdown and says so."""
    metadata = email.message_from_string(text)
    assert metadata['Name'] == 'timm-advnorm', where
    assert metadata['Version'] == timm_advnorm.__version__, f'{where}: one version, the package\'s'
    assert metadata['Summary'] and metadata['Metadata-Version'], where
    assert metadata['Description-Content-Type'] == 'text/markdown', where
    description = metadata.get_payload()
    assert description.strip() and description.strip() == (REPO / 'README.md').read_text(encoding='utf-8').strip(), \
        f'{where}: the long description is not the README'


def test_sdist_and_wheel_carry_the_release_metadata(dists):
    sdist, wheel = dists
    with tarfile.open(sdist) as archive:
        pkg_info = archive.extractfile(f'{sdist.name.removesuffix(".tar.gz")}/PKG-INFO').read().decode()
    _check_metadata(pkg_info, sdist.name)
    with zipfile.ZipFile(wheel) as archive:
        _check_metadata(archive.read(next(n for n in archive.namelist() if n.endswith('.dist-info/METADATA'))).decode(),
                        wheel.name)
    assert wheel.name.startswith(f'timm_advnorm-{timm_advnorm.__version__}-')


def test_short_demo_runs_from_the_installed_commands(installed, tmp_path):
    """The README's demo (two trainings, two evaluations, the report) with tiny budgets, then a publish of its
    adversarial run: every command a user is told to run is in the install."""
    venv, env = installed
    where = _run([venv / 'bin' / 'python', '-c', 'import timm_advnorm; print(timm_advnorm.__file__)'], tmp_path, env)
    assert Path(where.stdout.strip()).is_relative_to(venv), 'the installed copy must be the one imported'

    listing = _run(['timm-advnorm-train', '--list-recipes'], tmp_path, env)
    assert 'digits_demo_mbn' in listing.stdout
    demo = _run(['timm-advnorm-demo', '--smoke', '--output', tmp_path / 'demo', '--data-dir', tmp_path / 'data'],
                tmp_path, env)
    report = (tmp_path / 'demo' / 'report.md').read_text()
    assert demo.stdout.endswith(report)
    head, table = report.split('\n\n| training |')
    assert [row.split(' | ')[:2] for row in table.splitlines()[2:]] == [
        ['| adversarial (mbn)', variant] for variant in ('clean', 'mix@0.5', 'logits@0.5', 'adv')] + [
        ['| clean (vanilla)', 'clean']]
    # what ran, read from the runs' records (issue #38): smoke first, then data, samples, epochs, attacks, plots
    assert head.splitlines()[2].startswith('**Smoke run') and 'mean nothing about robustness' in head
    assert head.count('1 epoch of method') == 2 and head.count('1,438 images of digits (training split)') == 2
    assert head.count('evaluated on 32 images of digits (validation split, seed 42)') == 2
    assert 'PGD-1 L∞, ε = 16/255' in head and 'PGD-2 L∞, ε = 16/255' in head
    assert '`adversarial/plots/gamma_tradeoff.png`' in head
    assert '$ timm-advnorm-train -c digits_demo_mbn' in demo.stderr and '_adv.py' not in demo.stdout + demo.stderr
    results = json.loads((tmp_path / 'demo' / 'adversarial' / 'robust.json').read_text())
    assert results['num_samples'] == 32
    checkpoint = tmp_path / 'demo' / 'adversarial' / 'last.pth.tar'
    _run(['timm-advnorm-publish', checkpoint, '--inference-branch', 'adv', '--results',
          tmp_path / 'demo' / 'adversarial' / 'robust.json', '--local-dir', tmp_path / 'export'], tmp_path, env)
    assert {p.name for p in (tmp_path / 'export').iterdir()} == {
        'README.md', 'config.json', 'model.safetensors', EXPORT_MANIFEST}
    assert '_adv.py' not in (tmp_path / 'export' / 'README.md').read_text()


HELP_COMMANDS = (
    ['timm-advnorm-convert', '--help'],
    ['python', '-m', 'timm_advnorm.train', '--help'],
    ['python', '-m', 'timm_advnorm.eval', '--help'],
    ['python', '-m', 'timm_advnorm.commands.publish', '--help'],
    ['python', '-m', 'timm_advnorm.convert', '--help'],
    ['timm-advnorm-deepaugment', '--help'],
    ['timm-advnorm-demo', '--help'],
    ['python', '-m', 'timm_advnorm.commands.demo', '--help'],
    ['python', '-m', 'timm_advnorm.commands.deepaugment', '--help'],
)


def test_every_command_and_module_form_answers_help(installed, tmp_path):
    # all at once: each one's time is its imports, which overlap (one test per command ran them one after another)
    results = run_concurrently(HELP_COMMANDS, jobs=len(HELP_COMMANDS), timeout=600, cwd=tmp_path, env=installed[1])
    for command, result in zip(HELP_COMMANDS, results):
        assert result.returncode == 0, f'{command}: {result.stderr[-3000:]}'
        assert result.stdout.startswith('usage:'), f'{command}: {result.stdout[:200]}'


def test_bad_input_to_an_installed_command_is_one_line_and_status_2(installed, tmp_path):
    result = subprocess.run(['timm-advnorm-publish', str(tmp_path / 'missing.pth'), '--local-dir', str(tmp_path)],
                            cwd=tmp_path, env=installed[1], capture_output=True, text=True, timeout=120)
    assert result.returncode == 2
    assert result.stderr.strip().splitlines()[-1].startswith('timm-advnorm-publish: error:')
