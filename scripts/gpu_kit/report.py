"""What a run leaves in the folder a GPU window brings back: the report, the environment and an archive of the logs.

Each file is replaced atomically (written beside, then renamed), after every stage: a run cut off at any point, by its
budget, a signal or SIGKILL, leaves complete files describing the stages done so far.
"""
import io
import json
import os
import shlex
import tarfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, Iterable, List, Sequence

from .stages import Stage

REPORT = 'gpu_report.md'
ENVIRONMENT = 'environment.json'
JUNIT = 'junit.xml'
LOGS = 'logs.tar.gz'
#: Every file the kit writes to its output folder: what a window brings back (at most 8 files of 16 MiB each).
OUTPUT_FILES = (REPORT, ENVIRONMENT, JUNIT, LOGS)
#: Text files of the runs kept in the archive (checkpoints and images are left out), and the most of each kept.
ARCHIVED_SUFFIXES = ('.log', '.txt', '.csv', '.json', '.yaml', '.md', '.xml')
ARCHIVED_BYTES = 1 << 20
#: Statuses of a stage that has not ended.
PENDING, RUNNING = 'pending', 'running'


@dataclass(frozen=True)
class Outcome:
    """What a stage did: its status (``passed``, ``failed``, ``timed out``, ``interrupted``, ``skipped: <why>``,
    or `PENDING` / `RUNNING`), its seconds, its output and the line the report shows beside it."""
    stage: Stage
    status: str
    seconds: float = 0.0
    output: str = ''
    detail: str = ''

    @property
    def last_line(self) -> str:
        """The output's last non-empty line: the error of a failed stage."""
        lines = [line.strip() for line in self.output.splitlines() if line.strip()]
        return lines[-1] if lines else ''


def write_atomically(path: Path, data: bytes) -> None:
    """Replace `path` by `data` so that it is never seen half-written."""
    partial = path.with_name(f'.{path.name}.partial')
    partial.write_bytes(data)
    os.replace(partial, path)


def figures(output: str) -> List[str]:
    """The markdown tables a benchmark printed, each after its caption (the last other line printed before it: the
    settings it ran with), and its goal lines."""
    kept: List[str] = []
    caption, in_table = '', False
    for line in (line.rstrip() for line in output.splitlines()):
        if line.startswith('|'):
            if not in_table:
                kept += ([''] if kept else []) + ([caption, ''] if caption else [])
                caption = ''
            kept.append(line)
        elif line.startswith('Goal:'):
            kept += ['', line]
        elif line.strip():
            caption = line.strip()
        in_table = line.startswith('|')
    return kept


def _command_text(stage: Stage) -> str:
    command = stage.resolve_command() if stage.command else ()
    return shlex.join(command[1:]) if command else stage.name


def render_report(mode: str, budget: float, environment: Dict[str, object], outcomes: Sequence[Outcome],
                  seconds: float) -> str:
    """``gpu_report.md``: the environment, a table of every stage (those still to run too), then every benchmark's
    figures."""
    ended = [outcome for outcome in outcomes if outcome.status not in (PENDING, RUNNING)]
    progress = (f'{seconds:.0f} s in all' if len(ended) == len(outcomes) else
                f'{seconds:.0f} s so far, {len(ended)} of {len(outcomes)} stages ended')
    lines = ['# GPU check', '', f'Run {time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())}, {mode}, budget '
             f'{budget:.0f} s; {progress}.', '']
    for key in ('device', 'driver', 'torch', 'cuda', 'cudnn', 'torchvision', 'timm', 'python', 'timm_advnorm'):
        lines.append(f'- {key}: {environment.get(key, "unknown (the environment stage has not passed)")}')
    lines += ['', '| stage | result | seconds | detail (a failure\'s last line, the tier\'s test counts) |',
              '|---|---|---:|---|']
    for outcome in outcomes:
        detail = outcome.detail.replace('|', '\\|')
        lines.append(f'| {outcome.stage.name} | {outcome.status} | {outcome.seconds:.1f} | {detail} |')
    lines += ['', '## Figures', '', 'Each benchmark\'s tables as it printed them: ratios against the baseline it measured '
              'in the same run (absolute times are this device\'s).']
    for outcome in outcomes:
        if outcome.stage.figures:
            lines += ['', f'### {outcome.stage.name}', '', f'`{_command_text(outcome.stage)}`', '']
            lines += figures(outcome.output) if outcome.status == 'passed' else [f'No figures: {outcome.status}.']
    return '\n'.join(lines) + '\n'


#: Folders of the scratch folder left out of the archive: the installed wheels (their metadata are not logs).
UNARCHIVED_FOLDERS = ('site',)


def _archived_files(scratch: Path) -> Iterable[Path]:
    for path in sorted(scratch.rglob('*')):
        if (path.is_file() and path.suffix in ARCHIVED_SUFFIXES and not path.name.startswith('.')
                and path.relative_to(scratch).parts[0] not in UNARCHIVED_FOLDERS):
            yield path


def archive_logs(scratch: Path) -> bytes:
    """A gzipped tar of the text files under `scratch` (stage logs, run records, results), each cut to its last
    `ARCHIVED_BYTES`; checkpoints and images are left out."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode='w:gz') as archive:
        for path in _archived_files(scratch):
            try:
                data = path.read_bytes()
            except OSError:  # a file a stage is replacing right now: the next archive has it
                continue
            data = data if len(data) <= ARCHIVED_BYTES else b'[cut to its last 1 MiB]\n' + data[-ARCHIVED_BYTES:]
            info = tarfile.TarInfo(str(path.relative_to(scratch)))
            info.size, info.mtime = len(data), int(path.stat().st_mtime)
            archive.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


def write_environment(outdir: Path, environment: Dict[str, object]) -> None:
    write_atomically(outdir / ENVIRONMENT, (json.dumps(environment, indent=2) + '\n').encode())
