"""Run several command lines at once, for tests that check many short commands each of which imports torch.

Each command's start-up (the imports) dominates its time, and one command keeps one core busy: started together,
they overlap on every core and while pytest waits, where one test per command would run them one after another.
"""
import subprocess
from concurrent.futures import ThreadPoolExecutor
from typing import List, Sequence

__all__ = ['run_concurrently']


def run_concurrently(commands: Sequence[Sequence], jobs: int, timeout: float = 300,
                     **kwargs) -> List[subprocess.CompletedProcess]:
    """Run `commands` (argument lists), at most `jobs` at a time, each with its own `timeout` in seconds; their
    results in the order of `commands`, text output captured. `kwargs` go to `subprocess.run` (``cwd``, ``env``).

    A command that runs past its timeout is killed and raises `subprocess.TimeoutExpired`, which names it.
    """
    def run(command: Sequence) -> subprocess.CompletedProcess:
        return subprocess.run([str(part) for part in command], capture_output=True, text=True, timeout=timeout,
                              **kwargs)

    with ThreadPoolExecutor(max_workers=jobs) as pool:
        return list(pool.map(run, commands))

