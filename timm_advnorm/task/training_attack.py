"""The training attack every method shares: which attack of the registry, and its budget, iterations and starts.

The training command's ``--attack`` and ``--attack-*`` options, as one frozen object; a method takes those it uses
(`AdversarialClassificationTask.used_attack_options`).
"""
import dataclasses
from dataclasses import dataclass
from typing import Optional

import torch

from ..attacks.base import Attack
from ..attacks.registry import create_training_attack
from ..attacks.space import InputSpace

__all__ = ['TRAINING_ATTACK_OPTIONS', 'TrainingAttackOptions']


@dataclass(frozen=True)
class TrainingAttackOptions:
    """The training attack, each field named as the training command's option (``attack_eps``: ``--attack-eps``)
    and defaulting as it does.

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

    attack: str = 'pgd'
    attack_eps: float = 16.0
    attack_step: float = 1.0
    attack_steps: int = 30
    attack_norm: str = 'linf'
    attack_targeted: bool = True
    attack_clean_start_prob: float = 0.2
    attack_clean_start_mode: str = 'per_sample'
    attack_step_rule: str = 'max'
    attack_bn_stats: str = 'running'

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
