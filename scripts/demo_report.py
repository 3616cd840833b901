#!/usr/bin/env python3
"""Print the demo's comparison: clean and PGD accuracy of each evaluated run and branch, from validate_adv.py JSON."""
import argparse
import json
import sys
from pathlib import Path

from timm_advnorm.eval.summary import attack_title


def _attack(attack: dict) -> str:
    """An attack as it ran: its name with the budget, and its L-inf or L2 radius on the 0-255 scale."""
    if 'eps' not in attack:  # noise and corruptions: the name says what ran
        return attack_title(attack)
    if attack['norm'] == 'linf':
        return f'{attack_title(attack)}, L∞ ε={attack["eps"]:g}/255'
    return f'{attack_title(attack)}, L2 ε={attack["eps"]:g} on the 0-255 scale'


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument('results', nargs='+', metavar='LABEL=RESULTS.json', help='Labelled validate_adv.py results.')
    args = parser.parse_args()
    print('| training | branch | clean top-1 | robust top-1 (attack) |')
    print('| --- | --- | --- | --- |')
    for item in args.results:
        label, _, path = item.partition('=')
        results = json.loads(Path(path).read_text())
        for variant in results['variants']:
            attacks = ', '.join(f'{a["accuracy"]:.1f}% ({_attack(a)})' for a in variant['attacks'])
            print(f'| {label} | {variant["name"]} | {variant["clean"]:.1f}% | {attacks} |')
    return 0


if __name__ == '__main__':
    sys.exit(main())
