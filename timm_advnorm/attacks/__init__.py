"""Adversarial attacks: functional cores working in timm's normalized input space, plus thin configured classes.

Importing this package registers every attack class with `create_attack`.
"""
from .core import attack_context, cross_entropy_per_sample, input_gradient, is_fooled, random_targets
from .progress import AttackProgress, ProgressFn
from .registry import (
    attack_config, check_training_attack, create_attack, create_training_attack, list_attacks, register_attack,
    training_attacks)
from .space import PIXEL_SCALE, BudgetScaleWarning, InputSpace, PixelBudget
from .base import (
    Attack, AttackConfig, l2_direction, pixel_l2_norm, project, project_l2, project_linf, random_l2_start,
    random_linf_start)
from .fgsm import FGSM
from .fold_bn import find_conv_bn_pairs, fold_batchnorm
from .pgd import PGD, PGDGeometry, pgd, pgd_budgets
from .losses import cw_loss, dlr_loss, margin, targeted_dlr_loss
from .eval_attack import EvalAttack
from .apgd import APGDCE, APGDDLR, APGDT, apgd, apgd_targeted
from .fab import FABT, fab_targeted
from .square import Square, square
from .autoattack import AutoAttack, AutoAttackResult, autoattack
from .mifgsm import MIFGSM, mifgsm
from .cw import CWLinf, cw_linf
from .bim import BIML2, BIMLinf, bim, galloway_l2_eps
from .noise import GaussianNoise, gaussian_noise
from .corruptions import Corruption, corrupt

__all__ = ['attack_context', 'cross_entropy_per_sample', 'input_gradient', 'is_fooled', 'random_targets',
    'AttackProgress', 'ProgressFn', 'attack_config', 'check_training_attack', 'create_attack', 'create_training_attack',
    'list_attacks', 'register_attack', 'training_attacks', 'PIXEL_SCALE', 'BudgetScaleWarning', 'InputSpace',
    'PixelBudget', 'Attack', 'AttackConfig', 'l2_direction', 'pixel_l2_norm', 'project', 'project_l2', 'project_linf',
    'random_l2_start', 'random_linf_start', 'FGSM', 'find_conv_bn_pairs', 'fold_batchnorm', 'PGD', 'PGDGeometry', 'pgd',
    'pgd_budgets', 'cw_loss', 'dlr_loss', 'margin', 'targeted_dlr_loss', 'EvalAttack', 'APGDCE', 'APGDDLR', 'APGDT',
    'apgd', 'apgd_targeted', 'FABT', 'fab_targeted', 'Square', 'square', 'AutoAttack', 'AutoAttackResult', 'autoattack',
    'MIFGSM', 'mifgsm', 'CWLinf', 'cw_linf', 'BIML2', 'BIMLinf', 'bim', 'galloway_l2_eps', 'GaussianNoise',
    'gaussian_noise', 'Corruption', 'corrupt']
