"""The training attack every method shares: which attack of the registry, and its budget, iterations and starts.

The training command's ``--attack`` and ``--attack-*`` options, as one frozen object whose fields declare them
(`method_options.option`); a method takes those it uses (`AdversarialClassificationTask.used_attack_options`).
"""
import dataclasses
from dataclasses import dataclass
from typing import Optional

import torch

from ..arg_types import positive_int, positive_pixel_step, probability, training_attack
from ..attacks.base import Attack
from ..attacks.pgd import CLEAN_START_MODES
from ..attacks.registry import create_training_attack, training_attacks
from ..attacks.space import InputSpace
from .method_options import option

__all__ = ['TRAINING_ATTACK_OPTIONS', 'TrainingAttackOptions']


def _attack_help() -> str:
    return (f'Training attack, from the attack registry: {", ".join(training_attacks())}. Each takes the options below '
            f'that it has: fgsm is one step of --attack-step (Wong et al.: 1.25 × --attack-eps) and ignores '
            f'--attack-steps and --attack-step-rule (the run records 1 and fixed). (default: pgd)')


@dataclass(frozen=True)
class TrainingAttackOptions:
    """The training attack, each field declaring the training command's option of its name (``attack_eps``:
    ``--attack-eps``), its default the option's.

    Attributes:
        attack: The attack, from the attack registry's training attacks.
        attack_eps: Budget on the 0-255 scale.
        attack_step: Step size on the 0-255 scale.
        attack_steps: Iterations (PGD-N).
        attack_norm: Threat model, ``linf`` or ``l2``.
        attack_targeted: Whether the attack aims at a target drawn among the other classes.
        attack_clean_start_prob: Probability of starting from the clean image instead of a random start.
        attack_clean_start_mode: How clean starts are drawn (`timm_advnorm.attacks.pgd.CLEAN_START_MODES`).
        attack_step_rule: ``max`` (step = max(step, eps/N)) or ``fixed``.
        attack_bn_stats: BN statistics the attack uses, ``running`` or ``batch``.
    """

    attack: str = option('pgd', _attack_help, type=training_attack, metavar='NAME')
    attack_eps: float = option(16.0, 'Attack budget on the 0-255 scale: 16 means 16/255 (a value in (0, 1) is refused '
                                     'as one of the [0, 1] scale).')
    attack_step: float = option(1.0, 'Attack step size on the 0-255 scale (a value below 0.1 is refused as one of the '
                                     '[0, 1] scale).', type=positive_pixel_step)
    attack_steps: int = option(30, 'Attack iterations (PGD-N).', type=positive_int)
    attack_norm: str = option('linf', 'Threat model (Fast AdvProp: linf only).')
    attack_targeted: bool = option(True, 'Targeted attack, target uniform among the other classes (Xie & Yuille). Not '
                                         'for Fast AdvProp, whose PGD is untargeted from a random start with batch '
                                         'statistics.')
    attack_clean_start_prob: float = option(
        0.2, 'Probability that an attack starts from the clean image instead of a random start (not for Fast '
             'AdvProp).', type=probability)
    attack_clean_start_mode: str = option(
        'per_sample', 'How clean starts are drawn: per_sample (each image with --attack-clean-start-prob), per_batch '
                      '(the whole batch at once: Xie & Yuille\'s released code), per_batch_randn (the whole batch '
                      'when a standard normal draw is <= 0.2, probability 0.579: Fast AdvProp\'s released code; '
                      '--attack-clean-start-prob is then not used).', choices=CLEAN_START_MODES)
    attack_step_rule: str = option('max', '"max": step = max(step, eps/N) as in the original code; "fixed": step as '
                                          'given.', choices=('max', 'fixed'))
    attack_bn_stats: str = option('running', 'BN statistics the attack uses: running (eval mode) or batch (train '
                                             'mode; Fast AdvProp always).', choices=('running', 'batch'))

    def create_attack(self, space: InputSpace, seed: int, amp_dtype: Optional[torch.dtype] = None) -> Attack:
        """The attack these options describe, from random starts, returning its last iterate.

        Args:
            space: The model's input normalization (budgets are on the 0-255 scale).
            seed: Seeds its random starts (vary it per process).
            amp_dtype: Autocast dtype its forwards run under; None for fp32.
        """
        return create_training_attack(
            self.attack, space=space, eps=self.attack_eps, step=self.attack_step, steps=self.attack_steps,
            norm=self.attack_norm, targeted=self.attack_targeted, random_start=True,
            clean_start_prob=self.attack_clean_start_prob, clean_start_mode=self.attack_clean_start_mode,
            step_rule=self.attack_step_rule, best_iterate=False, bn_stats=self.attack_bn_stats,
            autocast_dtype=amp_dtype, seed=seed)


#: The training command's options (by name) the training attack is made from.
TRAINING_ATTACK_OPTIONS = tuple(field.name for field in dataclasses.fields(TrainingAttackOptions))
