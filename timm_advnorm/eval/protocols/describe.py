"""One line naming an attack exactly as it ran: ``PGD-20 L∞, ε = 8/255, α = 2/255 (sign step), untargeted, best
iterate, reduced``.

Every output that names an attack (the console, the CSV's ``description`` column, plot titles, the model card) takes
its text from `describe_attack`, through the results records (`schema.AttackResult.describe`,
`schema.SanityProbe.describe`), so that no two outputs can say different things about the same run. The line names
the attack and its iterations or queries, the norm, ε as k/255, the step α as k/255 with how it is taken and set (or
how the attack steps when it has no fixed size: APGD's adaptive step, Square's random squares), ``from the clean
input`` when an attack that can start at random did not (PGD so run is Kurakin et al.'s BIM), targeted or not,
best or last iterate, and whether the protocol was reduced for a smoke test. ε set by a rule says which
(`eps_rule_note`, `standardized_phrase`): ``BIM-L∞, 20 iterations, ε = 1.729/255, α = 0.08645/255 (sign step, ε/N),
ε = 0.03 of the standardized input (the model's std 0.226), ...``. A results file written before steps were recorded
says ``step not recorded`` rather than guess.
"""
from typing import Optional

from ...attacks.registry import attack_title

__all__ = ['describe_attack', 'step_phrase', 'pixels_text', 'eps_rule_note', 'standardized_phrase', 'NORM_NAMES']

NORM_NAMES = {'linf': 'L∞', 'l2': 'L2'}


def pixels_text(value: float) -> str:
    """A budget or step on the 0-255 scale as ``k/255`` (``8/255``, ``1.6/255``, ``0.3825/255``; ``0`` for none)."""
    return '0' if value == 0 else f'{value:.4g}/255'


def step_phrase(step: Optional[float], rule: Optional[str]) -> Optional[str]:
    """The step of an attack: ``α = 2/255 (sign step)``, ``α = 1.6/255 (sign step, max(1/255, ε/N))``, or how it
    steps when it has no fixed size (``adaptive step (from 2ε, halved at checkpoints)``); None when neither is
    recorded."""
    if step is None:
        return rule
    return f'α = {pixels_text(step)}' + (f' ({rule})' if rule else '')


def eps_rule_note(rule: Optional[str]) -> Optional[str]:
    """How a recorded ``eps_rule`` (`protocols.EPS_RULES`) scaled ε, for `describe_attack`'s `eps_note`: ``ε∞·√d``
    for ``sqrt_dim`` and ``std_sqrt_dim``, else None."""
    return 'ε∞·√d' if rule in ('sqrt_dim', 'std_sqrt_dim') else None


def standardized_phrase(rule: Optional[str], eps_standardized: Optional[float] = None,
                        input_std: Optional[float] = None) -> Optional[str]:
    """What a budget declared in units of the standardized input (``eps_rule`` ``std``, ``std_sqrt_dim``) was, for
    `describe_attack`'s `standardized`: ``ε = 0.03 of the standardized input (the model's std 0.226)`` (``ε∞ = ...``
    when √d scaled it after; ``ε in units of the standardized input`` when results do not record the declared ε and
    the std it was resolved with); None for the other rules."""
    if rule not in ('std', 'std_sqrt_dim'):
        return None
    name = 'ε∞' if rule == 'std_sqrt_dim' else 'ε'
    if eps_standardized is None or input_std is None:
        return f'{name} in units of the standardized input'
    return f"{name} = {eps_standardized:g} of the standardized input (the model's std {input_std:.4g})"


def _head(name: str, norm: Optional[str], iterations: Optional[int], queries: Optional[int]) -> str:
    """``PGD-20 L∞``, ``APGD-CE L∞, 100 iterations``, ``BIM-L2, 20 iterations``, ``Square L∞, 400 queries``: the norm
    after the name unless the name carries it."""
    norm_name = NORM_NAMES.get(norm, norm) if norm else None
    named = f'{name} {norm_name}' if norm_name and not name.endswith(norm_name) else name
    if iterations is not None and '-' not in name:
        return f'{name}-{iterations}' + named[len(name):]
    if iterations is not None:
        return f'{named}, {iterations} iterations'
    if queries is not None:
        return f'{named}, {queries} queries'
    return named


def describe_attack(
        *,
        attack: Optional[str],
        label: str,
        norm: Optional[str],
        eps: Optional[float],
        step: Optional[float],
        step_rule: Optional[str],
        iterations: Optional[int] = None,
        queries: Optional[int] = None,
        targeted: Optional[bool] = None,
        iterate: Optional[str] = None,
        reduced: bool = False,
        eps_note: Optional[str] = None,
        random_start: Optional[bool] = None,
        standardized: Optional[str] = None,
) -> str:
    """The attack as it ran, in one line (see the module docstring).

    Args:
        attack: Registered attack name (``pgd``); `label` stands in when it is not recorded.
        label: The attack's label in the results.
        norm: ``linf`` or ``l2``.
        eps: Budget on the 0-255 scale, as the attack was built with it.
        step: Size of every step on the 0-255 scale (None: no fixed size, or not recorded).
        step_rule: How the attack steps (`Attack.step_description`); None with no `step` either: not recorded.
        iterations: Iterations that ran.
        queries: Queries that ran (query-based attacks).
        targeted: Whether it aimed at target classes (None: not recorded).
        iterate: ``best`` or ``last``: which iterate the accuracy is on.
        reduced: Whether the protocol's budgets were reduced for a smoke test.
        eps_note: How ε was set, when by a rule (``ε∞·√d``).
        random_start: False: an attack that can start at random started at the clean input (said so); None: it
            cannot, or its start is the attack's own default.
        standardized: The budget as declared in units of the standardized input, when it was
            (`standardized_phrase`): after the step, as it sets both.
    """
    parts = [_head(attack_title(attack) if attack else label, norm, iterations, queries)]
    if eps is not None:
        parts.append(f'ε = {pixels_text(eps)}' + (f' ({eps_note})' if eps_note else ''))
    parts.append(step_phrase(step, step_rule) or 'step not recorded')
    if standardized:
        parts.append(standardized)
    if random_start is False:
        parts.append('from the clean input')
    if targeted is not None:
        parts.append('targeted' if targeted else 'untargeted')
    if iterate:
        parts.append(f'{iterate} iterate')
    if reduced:
        parts.append('reduced')
    return ', '.join(parts)
