"""The line a training run logs for each epoch, in the shape of timm's train.py lines (``Name: value`` fields two
spaces apart, the loss to three significant digits, the learning rate in ``.3e``): which epoch of how many, the
training loss and its parts, the learning rate, the epoch's time and throughput, then the validation's time and
accuracies under the names ``summary.csv`` and ``--eval-metric`` use, the robust ones' attack named briefly::

    Epoch 1 (2/12)  Loss: 1.21 (clean 0.873, adv 1.55)  LR: 4.830e-02  Time: 14.2s, 99.2/s  Val: 9.8s  top1: 78.83
    robust_top1: 34.38  adv_branch_top1: 83.01  adv_branch_robust_top1: 40.62  (robust: pgd10 ε=16/255, 200 images)

(one line). The epoch is numbered from 0, as the run's checkpoints and ``summary.csv`` rows are; the count in
brackets says how far the run is.
"""
from typing import Mapping

from ..attacks.base import Attack

__all__ = ['attack_label', 'epoch_line']

def attack_label(attack: Attack) -> str:
    """An attack in brief: its name and iterations (``pgd10``), the norm where it is not L∞ (``pgd10-l2``), whether it
    is targeted, and ε on the 0-255 scale (``pgd10 ε=16/255``)."""
    name = type(attack).__name__.lower() + str(getattr(attack, 'steps', ''))
    norm = getattr(attack, 'norm', 'linf')
    if norm != 'linf':
        name += f'-{norm}'
    if attack.targeted:
        name += ' targeted'
    return f'{name} ε={attack.eps:g}/255'


def _loss_text(train_metrics: Mapping[str, float]) -> str:
    """``Loss: 1.21 (clean 0.873, adv 1.55)``: the whole objective, then its parts when the method has several."""
    parts = [f'{name.removeprefix("loss_")} {value:#.3g}' for name, value in train_metrics.items()
             if name.startswith('loss_')]
    return f'Loss: {train_metrics["loss"]:#.3g}' + (f' ({", ".join(parts)})' if parts else '')


def epoch_line(epoch: int, epochs: int, train_metrics: Mapping[str, float], lr: float,
               eval_metrics: Mapping[str, float], validation_seconds: float, attack: Attack,
               robust_samples: int) -> str:
    """The epoch's line (see the module docstring).

    Args:
        epoch: The epoch's index, from 0.
        epochs: The run's epochs.
        train_metrics: `train_one_epoch`'s metrics (``loss`` and its ``loss_*`` parts, ``images_per_sec``), with the
            epoch's ``seconds``.
        lr: The learning rate the epoch ended with.
        eval_metrics: The validation's accuracies in percent, by metric name (the EMA's included).
        validation_seconds: Wall time of the validation (the EMA's included).
        attack: The robust validation's attack.
        robust_samples: Attacked images behind each robust accuracy.
    """
    fields = [
        f'Epoch {epoch} ({epoch + 1}/{epochs})',
        _loss_text(train_metrics),
        f'LR: {lr:.3e}',
        f'Time: {train_metrics["seconds"]:.1f}s, {train_metrics["images_per_sec"]:.1f}/s',
        f'Val: {validation_seconds:.1f}s',
        *(f'{name}: {value:.2f}' for name, value in eval_metrics.items()),
        f'(robust: {attack_label(attack)}, {robust_samples} images)',
    ]
    return '  '.join(fields)
