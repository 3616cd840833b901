"""The wheels a bare GPU machine lacks: prepared here (with network), verified and installed there (offline).

The prepared folder holds exactly one wheel per package and ``manifest.json``, the SHA-256 of each: the GPU machine
installs only what the manifest names, unchanged, so a window never tests a timm other than the one the suite here
was run with, and never stops on two versions of one package.
"""
import hashlib
import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Dict, List, Tuple

REPO = Path(__file__).resolve().parents[2]
MANIFEST = 'manifest.json'
#: The file that pins the versions the test suite runs with (``scripts/setup.sh`` installs with it).
CONSTRAINTS = REPO / 'constraints.txt'
#: Packages besides timm a bare GPU machine may lack: the benchmarks' reference PGD. Its own needs (numpy, scipy)
#: come with the machine's scikit-learn. Not pyautoattack: only the CPU cross-check tests use it.
EXTRA_REQUIREMENTS = ('torchattacks==3.5.1',)
#: The GPU machine's interpreter and platforms, for ``pip download``.
WHEEL_TARGET = ('--python-version', '3.12', '--implementation', 'cp', '--platform', 'manylinux_2_28_x86_64',
                '--platform', 'manylinux_2_17_x86_64', '--platform', 'manylinux2014_x86_64')


def pinned_requirement(name: str, constraints: Path = CONSTRAINTS) -> str:
    """``name==version`` as `constraints` pins it.

    Raises:
        ValueError: `constraints` pins no exact version of `name`.
    """
    for line in constraints.read_text().splitlines():
        requirement = line.split('#', 1)[0].strip()
        if '==' in requirement and distribution_name(requirement.split('==', 1)[0]) == distribution_name(name):
            return requirement
    raise ValueError(f'{constraints.name} pins no version of {name} (a line {name}==VERSION)')


def wheel_requirements() -> Tuple[str, ...]:
    """What ``--prepare-wheels`` downloads: timm at the suite's pinned version, then `EXTRA_REQUIREMENTS`."""
    return (pinned_requirement('timm'), *EXTRA_REQUIREMENTS)


def distribution_name(name: str) -> str:
    """A package name normalized as pip compares them (PEP 503): ``Foo_Bar.baz`` -> ``foo-bar-baz``."""
    return re.sub(r'[-_.]+', '-', name).lower()


def _wheel_package(wheel: Path) -> str:
    return distribution_name(wheel.name.split('-', 1)[0])


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open('rb') as file:
        for block in iter(lambda: file.read(1 << 20), b''):
            digest.update(block)
    return digest.hexdigest()


def _one_wheel_per_package(wheels: List[Path], folder: Path) -> None:
    packages: Dict[str, List[str]] = {}
    for wheel in wheels:
        packages.setdefault(_wheel_package(wheel), []).append(wheel.name)
    for names in packages.values():
        if len(names) > 1:
            raise ValueError(f'{folder} holds {len(names)} wheels of one package ({", ".join(names)}): keep one')


def write_manifest(folder: Path) -> Dict[str, str]:
    """Record the SHA-256 of every wheel of `folder` in its ``manifest.json``; the recorded hashes by file name.

    Raises:
        ValueError: Two wheels of one package.
    """
    wheels = sorted(folder.glob('*.whl'))
    _one_wheel_per_package(wheels, folder)
    hashes = {wheel.name: _sha256(wheel) for wheel in wheels}
    (folder / MANIFEST).write_text(json.dumps({'wheels': hashes}, indent=2) + '\n')
    return hashes


def verify_wheels(folder: Path) -> List[Path]:
    """The wheels of `folder`, each checked against ``manifest.json``: none missing, none added, none changed.

    Raises:
        ValueError: What does not match, in one line.
    """
    manifest = folder / MANIFEST
    if not manifest.is_file():
        raise ValueError(f'--wheels {folder}: no {MANIFEST} there; make the folder with --prepare-wheels')
    try:
        recorded = json.loads(manifest.read_text())['wheels']
    except (ValueError, KeyError, TypeError) as e:
        raise ValueError(f'--wheels {folder}: {MANIFEST} is not a wheel manifest ({type(e).__name__}: {e})') from e
    wheels = sorted(folder.glob('*.whl'))
    present = {wheel.name for wheel in wheels}
    if present - set(recorded):
        raise ValueError(f'--wheels {folder}: {", ".join(sorted(present - set(recorded)))} not in its {MANIFEST}')
    if set(recorded) - present:
        raise ValueError(f'--wheels {folder}: {", ".join(sorted(set(recorded) - present))} missing '
                         f'(its {MANIFEST} names it)')
    _one_wheel_per_package(wheels, folder)
    for wheel in wheels:
        if _sha256(wheel) != recorded[wheel.name]:
            raise ValueError(f'--wheels {folder}: {wheel.name} differs from the SHA-256 its {MANIFEST} records')
    return wheels


def prepare_wheels(folder: Path) -> List[str]:
    """Download `wheel_requirements` for the GPU machine (`WHEEL_TARGET`), build the project's own wheel, and write
    the manifest, all into `folder`; the wheels' names.

    Raises:
        ValueError: `folder` already holds wheels (a stale version would sit beside the new one).
        subprocess.CalledProcessError: pip failed (no network, say).
    """
    if any(folder.glob('*.whl')):
        raise ValueError(f'--prepare-wheels {folder}: it already holds wheels; give a new or empty folder')
    folder.mkdir(parents=True, exist_ok=True)
    pip = [sys.executable, '-m', 'pip']
    subprocess.run([*pip, 'download', '--no-deps', '--only-binary=:all:', *WHEEL_TARGET, '-d', str(folder),
                    *wheel_requirements()], check=True)
    subprocess.run([*pip, 'wheel', '--no-deps', '-w', str(folder), str(REPO)], check=True)
    return sorted(write_manifest(folder))


def install_command(wheels: List[Path], site: Path) -> Tuple[str, ...]:
    """Install `wheels` offline, without their dependencies, into `site` (a folder put on ``PYTHONPATH``)."""
    return (sys.executable, '-m', 'pip', 'install', '-q', '--no-index', '--no-deps', '--no-compile', '--no-cache-dir',
            '--upgrade', '--target', str(site), *map(str, wheels))
