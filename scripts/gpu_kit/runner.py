"""Running the stages within a budget: each in a process group of its own, ended with the kit.

A stage starts only when its estimated seconds fit the budget left, and may run for its own timeout or the budget
left, whichever is less; a stage that does not fit is recorded as skipped for the budget and never started, and the
stages after it still run if they fit. SIGTERM and SIGINT end the running stage's process group, and the report is
written before the kit exits; a stage's process is also killed if the kit itself dies (SIGKILL), by the kernel.
"""
import ctypes
import json
import os
import signal
import subprocess
import time
import xml.etree.ElementTree as ElementTree
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Callable, Dict, List, Optional

from .report import JUNIT, LOGS, PENDING, REPORT, RUNNING, Outcome, archive_logs, render_report, write_atomically, \
    write_environment
from .stages import Sizes, Stage
from .wheels import REPO

#: Seconds of the budget kept for the last report and archive.
RESERVE_SECONDS = 3.0
_PR_SET_PDEATHSIG = 1


class Interrupted(BaseException):
    """SIGTERM or SIGINT reached the kit (a BaseException, as KeyboardInterrupt: no stage's `except Exception` may
    swallow it)."""

    def __init__(self, signum: int):
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


def _raise_interrupted(signum: int, frame) -> None:
    for caught in (signal.SIGTERM, signal.SIGINT):  # the first signal ends the run; the report is written once
        signal.signal(caught, signal.SIG_IGN)
    raise Interrupted(signum)


def _die_with_the_kit() -> None:
    """In a stage's process before it runs: the kernel kills it when the kit dies, even by SIGKILL (Linux)."""
    try:
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    except (OSError, AttributeError):  # not Linux: a killed kit may leave its stage running
        pass


def stage_environment(site: Optional[Path]) -> Dict[str, str]:
    """The stages' environment, offline: this working tree, then the folder of the installed wheels, first on
    ``PYTHONPATH`` (the tree's code is what the run checks, even where the project's own wheel is older)."""
    paths = [str(REPO)] + ([str(site)] if site is not None else [])
    paths += [p for p in os.environ.get('PYTHONPATH', '').split(os.pathsep) if p]
    return {**os.environ, 'PYTHONPATH': os.pathsep.join(paths), 'HF_HUB_OFFLINE': '1', 'PYTHONUNBUFFERED': '1'}


def _tier_counts(junit: Path) -> Dict[str, int]:
    """Tests, failures, errors and skips a pytest run wrote to its JUnit file (empty when it wrote none)."""
    try:
        root = ElementTree.parse(junit).getroot()
    except (OSError, ElementTree.ParseError):
        return {}
    suites = [root] if root.tag == 'testsuite' else root.findall('testsuite')
    return {key: sum(int(suite.get(key, 0)) for suite in suites) for key in ('tests', 'failures', 'errors', 'skipped')}


def _judge_tier(outcome: Outcome) -> Outcome:
    """A tier's outcome from its JUnit counts: never ``passed`` when no test ran (all skipped, or none collected)."""
    counts = _tier_counts(outcome.stage.junit)
    if not counts:
        return outcome
    ran = counts['tests'] - counts['skipped']
    detail = (f'{ran - counts["failures"] - counts["errors"]} passed, {counts["failures"]} failed, '
              f'{counts["errors"]} errors, {counts["skipped"]} skipped')
    if outcome.status == 'passed' and ran == 0:
        return replace(outcome, status='failed', detail=f'no test ran: {detail}')
    return replace(outcome, detail=detail if outcome.status == 'passed' else f'{detail}; {outcome.detail}')


def _end_group(process: subprocess.Popen) -> str:
    """Kill `process`'s group (SIGTERM, then SIGKILL after 5 s) and return what it printed."""
    for sig, wait in ((signal.SIGTERM, 5), (signal.SIGKILL, None)):
        try:
            os.killpg(process.pid, sig)
        except ProcessLookupError:
            break
        try:
            return process.communicate(timeout=wait)[0] or ''
        except subprocess.TimeoutExpired:
            continue
    return process.communicate()[0] or ''


def run_stage(stage: Stage, timeout: float, env: Dict[str, str], log: Path) -> Outcome:
    """Run `stage` for at most `timeout` seconds (its whole process group is ended then); its output goes to `log`.

    Raises:
        Interrupted: A signal ended the stage (its group is ended, its log written) and the run.
    """
    start = time.perf_counter()
    command = stage.resolve_command() if stage.command else ()
    interrupted: Optional[Interrupted] = None
    if stage.action is not None:
        try:
            output, status = stage.action(), 'passed'
        except Exception as e:  # the stage's failure is recorded, the run goes on
            output, status = f'{type(e).__name__}: {e}', 'failed'
    else:
        process = subprocess.Popen(command, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                   text=True, start_new_session=True, preexec_fn=_die_with_the_kit)
        try:
            output, _ = process.communicate(timeout=timeout)
            status = 'passed' if process.returncode == 0 else 'failed'
        except subprocess.TimeoutExpired:
            output = _end_group(process) + f'\ntimed out after {timeout:.0f} s'
            status = 'timed out'
        except Interrupted as e:
            output = _end_group(process) + f'\ninterrupted by {e}'
            status, interrupted = 'interrupted', e
    log.write_text(f'$ {" ".join(command)}\n{output}' if command else output)
    outcome = Outcome(stage, status, time.perf_counter() - start, output)
    outcome = replace(outcome, detail='' if status == 'passed' else outcome.last_line)
    if stage.junit is not None:
        outcome = _judge_tier(outcome)
    if interrupted is not None:
        raise _StageInterrupted(interrupted.signum, outcome)
    return outcome


class _StageInterrupted(Interrupted):
    """`Interrupted` while a stage ran, with that stage's outcome."""

    def __init__(self, signum: int, outcome: Outcome):
        super().__init__(signum)
        self.outcome = outcome


@dataclass
class Run:
    """One run of the kit: its stages, what each did so far, and the files it keeps up to date.

    Attributes:
        stages: The stages, in order.
        sizes: Their estimates and timeouts.
        compile_backend: The compiled training run's backend (its estimate depends on it).
        budget: Seconds the whole run may take, counted from `started`.
        outdir: The folder a window brings back (`report.OUTPUT_FILES`).
        scratch: Where logs, runs and data go.
        mode: The run's device and sizes, in words, for the report.
        started: `time.monotonic()` when the kit started.
    """
    stages: List[Stage]
    sizes: Sizes
    compile_backend: str
    budget: float
    outdir: Path
    scratch: Path
    mode: str
    started: float

    def __post_init__(self):
        self.outcomes: Dict[str, Outcome] = {stage.name: Outcome(stage, PENDING) for stage in self.stages}
        self.environment: Dict[str, object] = {}

    def left(self) -> float:
        return self.budget - (time.monotonic() - self.started)

    def save(self) -> None:
        """Rewrite the report, the environment, the tier's JUnit file and the logs' archive."""
        report = render_report(self.mode, self.budget, self.environment, list(self.outcomes.values()),
                               time.monotonic() - self.started)
        write_atomically(self.outdir / REPORT, report.encode())
        junit = self.scratch / JUNIT
        if junit.is_file():
            write_atomically(self.outdir / JUNIT, junit.read_bytes())
        write_atomically(self.outdir / LOGS, archive_logs(self.scratch))

    def _skip(self, stage: Stage) -> Optional[Outcome]:
        """The outcome of `stage` when it cannot start: a stage it requires did not pass, or it does not fit the
        budget left; None when it can."""
        for required in stage.requires:
            status = self.outcomes[required].status
            if status != 'passed':
                return Outcome(stage, f'skipped (needs {required})', detail=f'{required}: {status}')
        estimate = self.sizes.estimate(stage.name, self.compile_backend)
        left = self.left() - RESERVE_SECONDS
        if estimate > left:
            return Outcome(stage, 'skipped (budget)', detail=f'needs ~{estimate:.0f} s, {max(left, 0):.0f} s left')
        return None

    def _record(self, outcome: Outcome) -> None:
        self.outcomes[outcome.stage.name] = outcome
        if outcome.stage.name == 'environment' and outcome.status == 'passed':
            self.environment = json.loads(outcome.last_line)
            write_environment(self.outdir, self.environment)

    def execute(self, env: Dict[str, str], announce: Callable[[str], None]) -> int:
        """Run every stage in order, saving after each; 0 when no stage that ran failed, 1 when one did, 128 + the
        signal's number when a signal ended the run."""
        handlers = {sig: signal.signal(sig, _raise_interrupted) for sig in (signal.SIGTERM, signal.SIGINT)}
        (self.scratch / 'logs').mkdir(parents=True, exist_ok=True)
        try:
            self.save()
            for index, stage in enumerate(self.stages, 1):
                counter = f'[{index}/{len(self.stages)}] {stage.name}'
                skipped = self._skip(stage)
                if skipped is not None:
                    self._record(skipped)
                    announce(f'{counter} {skipped.status}: {skipped.detail}')
                    self.save()
                    continue
                self.outcomes[stage.name] = Outcome(stage, RUNNING)
                self.save()
                announce(f'{counter} ...')
                timeout = min(self.sizes.timeouts[stage.name], self.left() - RESERVE_SECONDS)
                outcome = run_stage(stage, timeout, env, self.scratch / 'logs' / f'{index:02d}-{stage.name}.log')
                self._record(outcome)
                announce(f'{counter} {outcome.status} in {outcome.seconds:.1f} s'
                         + (f': {outcome.detail}' if outcome.detail else ''))
                self.save()
        except Interrupted as e:
            if isinstance(e, _StageInterrupted):
                self._record(e.outcome)
            for name, outcome in self.outcomes.items():
                if outcome.status in (PENDING, RUNNING):
                    self.outcomes[name] = Outcome(outcome.stage, 'not run', detail=f'the run was interrupted ({e})')
            self.save()
            announce(f'interrupted by {e}: wrote {self.outdir / REPORT}')
            return 128 + e.signum
        finally:
            for sig, handler in handlers.items():
                signal.signal(sig, handler)
        statuses = [outcome.status for outcome in self.outcomes.values()]
        announce(f'{statuses.count("passed")} of {len(statuses)} stages passed, '
                 f'{sum(s.startswith("skipped") for s in statuses)} skipped; wrote {self.outdir / REPORT}')
        return 0 if all(s == 'passed' or s.startswith('skipped') for s in statuses) else 1
