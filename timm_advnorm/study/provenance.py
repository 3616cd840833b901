"""Where a study's numbers come from: ``provenance.json`` beside its tables.

Every invocation of a study that runs cells or writes its tables appends itself (the code's commit, the command, when it
started, its wall time, the cells it ran and when each was evaluated, how it ended, the machine) when it starts and
keeps its entry current as cells are evaluated, so that a study resumed over several invocations, on several machines or
after a kill, says what produced each part. The top-level ``commit``, ``command`` and ``started`` are the first
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

from ..durations import duration_text
from ..messages import read_utf8
from ..write_guard import atomic_write

__all__ = ['InvocationRecord', 'PROVENANCE_FILE', 'checkout_changes', 'code_commit', 'machine']

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


class InvocationRecord:
    """This invocation's entry in `study_dir`'s ``provenance.json``: written when it starts, again as each cell is
    evaluated, and when it ends, so that an invocation stopped midway (Ctrl-C, a failed cell, kill -9, a lost machine)
    still says what it ran. Its ``outcome`` is ``finished``, ``interrupted`` or ``failed``; ``running`` is left by an
    invocation killed without a word, whose ``wall_s`` then runs to its last evaluated cell.

    Args:
        study_dir: The study's folder.
        commit: The code's commit when the invocation started (`code_commit`).
        command: The command line, as a user would type it.
        jobs: The cells it runs at once (``--jobs``).
        cell_threads: The threads each cell computes on (None: this process's).

    Attributes:
        record: The whole ``provenance.json`` as last written.
    """

    def __init__(self, study_dir: Path, commit: str, command: str, jobs: int = 1,
                 cell_threads: Optional[int] = None):
        self.path = study_dir / PROVENANCE_FILE
        self.started = time.time()
        self._clock = time.perf_counter()
        self.cells_run: List[str] = []
        self.evaluated_at: Dict[str, float] = {}
        self.entry: Dict[str, Any] = {
            'commit': commit, 'command': command,
            'started': time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime(self.started)), 'wall_s': 0.0,
            'outcome': 'running', 'cells_run': self.cells_run, 'evaluated_at_s': self.evaluated_at, 'jobs': jobs,
            'cell_threads': cell_threads if cell_threads is not None else torch.get_num_threads(),
            'machine': machine()}
        self._index: Optional[int] = None
        self.record = self._write()

    def cell_evaluated(self, cell_id: str) -> None:
        """Add a cell this invocation trained or evaluated, with when it was evaluated (seconds into the invocation:
        a part of a grid, a seed, is timed from these)."""
        self.cells_run.append(cell_id)
        self.evaluated_at[cell_id] = round(time.perf_counter() - self._clock, 1)
        self.record = self._write()

    def finish(self, outcome: str = 'finished') -> Dict[str, Any]:
        """Close the entry with its `outcome`; returns the whole record."""
        self.entry['outcome'] = outcome
        self.record = self._write()
        return self.record

    def summary(self) -> str:
        """``3 invocations, 9.8 h in all``: the study's invocations so far and their summed wall time, this one's
        up to now."""
        self.record = self._write()
        count = len(self.record['invocations'])
        return f'{count} invocation{"s" if count > 1 else ""}, {duration_text(self.record["wall_s"])} in all'

    def _write(self) -> Dict[str, Any]:
        """Put the entry in its place in the file (appended the first time), the top-level fields worked out again,
        written atomically."""
        self.entry['wall_s'] = round(time.perf_counter() - self._clock, 1)
        invocations = json.loads(read_utf8(self.path))['invocations'] if self.path.is_file() else []
        if self._index is None:
            self._index = len(invocations)
            invocations.append(self.entry)
        else:
            invocations[self._index] = self.entry
        first = invocations[0]
        record = {'commit': first['commit'], 'command': first['command'], 'started': first['started'],
                  'wall_s': round(sum(i['wall_s'] for i in invocations), 1), 'machine': first['machine'],
                  'invocations': invocations}
        atomic_write(self.path, lambda tmp: tmp.write_text(json.dumps(record, indent=2) + '\n'))
        return record
