"""The ``timm-advnorm-demo`` report (``report.md``): what ran, then the comparison table.

What ran is read from the runs' own records, not from what the demo asked for: each training folder's ``args.yaml``
(model, method, epochs, data set, training attack) and ``budget.yaml`` (training images), and each evaluation's
results file (data, split, samples, seed, protocol, attacks with their budgets, sanity checks, plots). A smoke run's
report says first, in bold, that its numbers mean nothing about robustness.
"""
from pathlib import Path
from typing import Any, Dict, List, Sequence, Tuple

from ..attacks.space import InputSpace
from ..eval.protocols.describe import describe_attack
from ..eval.schema import EvalResults, read_results
from ..messages import read_utf8
from ..strict_yaml import load_yaml
from ..task.options import used_options
from ..task.training_attack import TRAINING_ATTACK_OPTIONS, TrainingAttackOptions
from ..train.run_folder import BUDGET_FILE

__all__ = ['SMOKE_NOTICE', 'RESULTS_FILE', 'PLOT_DIR', 'report_table', 'report_text', 'training_text']

#: The first words of a smoke run's report.
SMOKE_NOTICE = ('**Smoke run (`--smoke`): every step ran with tiny budgets, only to check that the demo runs; these '
                'numbers mean nothing about robustness.**')
#: The training run's arguments, as the training command writes them into its folder.
ARGS_FILE = 'args.yaml'
#: Each run's evaluation results and plots, in its folder.
RESULTS_FILE = 'robust.json'
PLOT_DIR = 'plots'


def _read_yaml(path: Path) -> Dict[str, Any]:
    """The mapping a YAML record of a run holds (empty when the file is missing), read as every YAML file is
    (`strict_yaml.load_yaml`: a duplicate key or a recursive anchor is an error naming the file)."""
    return (load_yaml(read_utf8(path), str(path)) or {}) if path.is_file() else {}


def _plural(count: int, noun: str) -> str:
    """``1 epoch``, ``1,438 images``."""
    return f'{count:,} {noun}' + ('' if count == 1 else 's')


def _training_attack(args: Dict[str, Any]) -> str:
    """The training attack a run's arguments describe, as the evaluation names its attacks: ``PGD-5 L∞, ε = 16/255,
    α = 4/255 (sign step, max(4/255, ε/N)), untargeted``."""
    options = TrainingAttackOptions(**{name: args[name] for name in TRAINING_ATTACK_OPTIONS if name in args})
    attack = options.create_attack(InputSpace(), seed=0)
    return describe_attack(attack=options.attack, label=options.attack, norm=getattr(attack, 'norm', None),
                           eps=attack.eps, step=getattr(attack, 'step_size', None), step_rule=attack.step_description,
                           iterations=getattr(attack, 'steps', None), targeted=attack.targeted)


def training_text(run_dir: Path) -> str:
    """What the training in `run_dir` ran: ``test_mbn_resnet, 12 epochs (method mbn) on 1,438 digits training
    images, with adversarial examples of PGD-5 L∞, ...`` (``on clean images only`` for a method without an
    attack)."""
    args, budget = _read_yaml(run_dir / ARGS_FILE), _read_yaml(run_dir / BUDGET_FILE)
    images = budget.get('train_images')
    data = f"{_plural(images, 'image')} of {args.get('dataset')} (training split)" if images else \
        f"{args.get('dataset')} (training images not recorded)"
    examples = (f'with adversarial examples of {_training_attack(args)}' if 'attack_steps' in used_options(args)
                else 'clean images only')
    epochs = _plural(args.get('epochs', 0), 'epoch')
    return f"{args.get('model')}, {epochs} of method {args.get('method')} on {data}, {examples}"


def _evaluation_text(results: EvalResults) -> str:
    """What an evaluation ran: ``32 images of digits (validation split, seed 42), custom protocol; sanity checks:
    passed``."""
    split = f'{results.split} split, ' if results.split else ''
    samples = _plural(results.num_samples, 'image') if results.num_samples else 'a sample count not recorded'
    reduced = ' (reduced)' if results.protocol.reduced else ''
    return (f'{samples} of {results.dataset} ({split}seed {results.seed}), {results.protocol.name} protocol{reduced}; '
            f'sanity checks: {results.sanity_status or "not recorded"}')


def report_table(results: Sequence[Tuple[str, EvalResults]]) -> str:
    """The demo's comparison as a Markdown table: clean and robust accuracy of each labelled run's variants."""
    lines = ['| training | branch | clean top-1 | robust top-1 (attack) |', '| --- | --- | --- | --- |']
    for label, evaluated in results:
        for variant in evaluated.variants:
            attacks = ', '.join(f'{a.accuracy:.1f}% ({a.describe(evaluated.protocol.reduced)})'
                                for a in variant.attacks)
            lines.append(f'| {label} | {variant.name} | {variant.clean:.1f}% | {attacks} |')
    return '\n'.join(lines) + '\n'


def report_text(output: Path, runs: Sequence[Tuple[str, str]], smoke: bool) -> str:
    """The whole report of the demo in `output`: the smoke notice (`smoke`), what each run trained on and was
    evaluated on, the attacks with their budgets, the plots, then `report_table`.

    Args:
        output: The demo's folder.
        runs: Each run as (its folder's name in `output`, its label in the report).
        smoke: Whether the demo ran with ``--smoke``.
    """
    evaluated = [(name, label, read_results(output / name / RESULTS_FILE)) for name, label in runs]
    lines: List[str] = ['# Digits demo: adversarial and clean training, evaluated under attack', '']
    if smoke:
        lines += [SMOKE_NOTICE, '']
    for name, label, results in evaluated:
        lines += [f'- **{label}**: trained {training_text(output / name)}; evaluated on {_evaluation_text(results)}.']
    attacks = {a.label: a.describe(results.protocol.reduced)
               for _, _, results in evaluated for variant in results.variants for a in variant.attacks}
    lines += [f'- **Attack{"s" if len(attacks) > 1 else ""}** (every branch): '
              + '; '.join(f'{label}: {text}' for label, text in attacks.items()) + '.']
    plots = [f'`{name}/{PLOT_DIR}/{plot}`' for name, _, results in evaluated for plot in results.plots or ()]
    if plots:
        lines += [f'- **Plots**: {", ".join(plots)}.']
    return '\n'.join(lines) + '\n\n' + report_table([(label, results) for _, label, results in evaluated])
