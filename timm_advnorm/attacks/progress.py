"""Progress reports from inside an attack, for whoever shows them (the evaluation's progress bar).

An attack that runs many iterations or queries takes an optional ``progress`` callback (a keyword of its functional
core, filled from `Attack.progress`) and calls it with an `AttackProgress` before each iteration or query: which part
of the attack runs (AutoAttack's sub-attack, a target class and restart of APGD-T or FAB-T, a restart of Square) and
how far it is. Attack code never prints and keeps no state of its own for it: the caller decides what to show and how
often (a report costs a function call; an iteration costs a forward and a backward of the model).
"""
from dataclasses import dataclass, replace
from typing import Callable, Optional

__all__ = ['AttackProgress', 'ProgressFn', 'reporter', 'within', 'restart_part']


@dataclass(frozen=True)
class AttackProgress:
    """Where a running attack is.

    Attributes:
        attack: The attack reporting (``pgd``, ``square``, ``autoattack``).
        part: The part that runs (``target 3/9, restart 1/1``; for AutoAttack ``apgd-t target 3/9, restart 1/1``),
            ``''`` for an attack of one part.
        done: Iterations (or queries) of the part done so far.
        total: Its iterations (or queries) in all.
        unit: ``it`` (iterations) or ``queries``.
    """

    attack: str
    part: str
    done: int
    total: int
    unit: str = 'it'

    def text(self) -> str:
        """One short line: ``autoattack: apgd-t target 3/9, restart 1/1, 40/100 it``."""
        head = f'{self.attack}: {self.part}' if self.part else self.attack
        return f'{head}, {self.done}/{self.total} {self.unit}'


#: What an attack reports to: called with each `AttackProgress`.
ProgressFn = Callable[[AttackProgress], None]


def reporter(progress: Optional[ProgressFn], attack: str, part: str, total: int,
             unit: str = 'it') -> Callable[[int], None]:
    """A function of the count done that reports it to `progress` as `attack`'s `part` of `total` (a function that
    does nothing without `progress`), for an attack's loop to call before each iteration."""
    if progress is None:
        return lambda done: None
    return lambda done: progress(AttackProgress(attack, part, done, total, unit))


def within(progress: Optional[ProgressFn], attack: str) -> Optional[ProgressFn]:
    """`progress` for the components of a composite `attack` (AutoAttack): a component's report becomes a part of
    `attack` named by the component and its own part (``apgd-t target 3/9, restart 1/1``)."""
    if progress is None:
        return None

    def report(event: AttackProgress) -> None:
        progress(replace(event, attack=attack, part=f'{event.attack} {event.part}'.strip()))

    return report


def restart_part(restart: int, restarts: int) -> str:
    """``restart 2/3`` for the restart of index `restart` (0-based) of `restarts`."""
    return f'restart {restart + 1}/{restarts}'
