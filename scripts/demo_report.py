#!/usr/bin/env python3
"""Print the demo's comparison: clean and PGD accuracy of each evaluated run and branch, from validate_adv.py JSON."""
import argparse
import sys

from timm_advnorm.eval.schema import AttackResult, read_results
from timm_advnorm.eval.summary import attack_title


def _attack(attack: AttackResult) -> str:
    """An attack as it ran: its name with the budget, and its L-inf or L2 radius on the 0-255 scale."""
    title = attack_title(attack.label, attack.steps, attack.queries)
    if attack.eps is None:  # noise and corruptions: the name says what ran
        return title
    if attack.norm == 'linf':
        return f'{title}, L∞ ε={attack.eps:g}/255'
    return f'{title}, L2 ε={attack.eps:g} on the 0-255 scale'


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument('results', nargs='+', metavar='LABEL=RESULTS.json', help='Labelled validate_adv.py results.')
    args = parser.parse_args()
    print('| training | branch | clean top-1 | robust top-1 (attack) |')
    print('| --- | --- | --- | --- |')
    for item in args.results:
        label, _, path = item.partition('=')
        for variant in read_results(path).variants:
            attacks = ', '.join(f'{a.accuracy:.1f}% ({_attack(a)})' for a in variant.attacks)
            print(f'| {label} | {variant.name} | {variant.clean:.1f}% | {attacks} |')
    return 0


if __name__ == '__main__':
    sys.exit(main())
