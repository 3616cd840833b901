"""Where a study's numbers come from: ``provenance.json`` beside its tables.

Every invocation of a study that runs cells or writes its tables appends itself (the code's commit, the command, when
it started, its wall time, the cells it ran, the machine), so that a study resumed over several invocations, or on
several machines, says what produced each part. The top-level ``commit``, ``command`` and ``started`` are the first
invocation's, ``wall_s`` the sum over all of them.
"""
import json
import os
import platform
import subprocess
import time
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

import timm
import torch

from ..messages import read_utf8
from ..write_guard import atomic_write

__all__ = ['PROVENANCE_FILE', 'checkout_changes', 'code_commit', 'machine', 'record_invocation']

PROVENANCE_FILE = 'provenance.json'
_PACKAGE_ROOT = Path(__file__).resolve().parents[2]


def checkout_changes() -> Optional[Tuple[str, List[str]]]:
    """The git commit of the package's checkout and its tracked files with uncommitted changes, or None (an installed
    wheel, no git)."""
    def git(*args: str) -> str:
        return subprocess.run(['git', '-C', str(_PACKAGE_ROOT), *args], capture_output=True, text=True,
                              timeout=30, check=True).stdout
    try:
        commit = git('rev-parse', 'HEAD').strip()
        status = git('status', '--porcelain', '--untracked-files=no')
    except (OSError, subprocess.SubprocessError):
        return None
    return commit, [line[3:] for line in status.splitlines()]


def code_commit() -> str:
    """The git commit of the package's checkout, ``+dirty`` when it has uncommitted changes to tracked files, or
    ``unknown`` (an installed wheel, no git)."""
    checkout = checkout_changes()
    if checkout is None:
        return 'unknown'
    commit, changed = checkout
    return commit + ('+dirty' if changed else '')


def _cpu_name() -> str:
    try:
        for line in Path('/proc/cpuinfo').read_text().splitlines():
            if line.startswith('model name'):
                return line.split(':', 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def machine() -> Dict[str, Any]:
    """The machine and software the numbers were produced with."""
    return {'cpu': _cpu_name(), 'cores': os.cpu_count(), 'threads': torch.get_num_threads(),
            'cuda': torch.cuda.get_device_name(0) if torch.cuda.is_available() else None,
            'python': platform.python_version(), 'torch': torch.__version__, 'timm': timm.__version__,
            'platform': platform.platform()}


def record_invocation(study_dir: Path, commit: str, command: str, started: float, wall_s: float,
                      cells_run: List[str], jobs: int = 1, cell_threads: Optional[int] = None) -> Dict:
    """Append this invocation to `study_dir`'s ``provenance.json`` (written atomically) and return the record.

    Args:
        commit: The code's commit when the invocation started (`code_commit`).
        command: The command line, as a user would type it.
        started: When the invocation started (seconds since the epoch).
        wall_s: Its wall time.
        cells_run: Ids of the cells it trained or evaluated.
        jobs: The cells it ran at once (``--jobs``).
        cell_threads: The threads each cell computed on (None: this process's).
    """
    path = study_dir / PROVENANCE_FILE
    invocations = json.loads(read_utf8(path))['invocations'] if path.is_file() else []
    invocations.append({'commit': commit, 'command': command,
                        'started': time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime(started)),
                        'wall_s': round(wall_s, 1), 'cells_run': cells_run, 'jobs': jobs,
                        'cell_threads': cell_threads if cell_threads is not None else torch.get_num_threads(),
                        'machine': machine()})
    first = invocations[0]
    record = {'commit': first['commit'], 'command': first['command'], 'started': first['started'],
              'wall_s': round(sum(i['wall_s'] for i in invocations), 1), 'machine': first['machine'],
              'invocations': invocations}
    atomic_write(path, lambda tmp: tmp.write_text(json.dumps(record, indent=2) + '\n'))
    return record
