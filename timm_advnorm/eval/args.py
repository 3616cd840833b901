"""What the evaluation reads from its parsed arguments, below the command that parses them
(`timm_advnorm.commands.validate`): its logger, the sanity probes' options and the out-of-distribution folders.
"""
import argparse
from typing import Dict, Optional

from .ood import OODDataset

__all__ = ['ood_folder', 'sanity_values', 'LOGGER', 'SANITY_MODES', 'SANITY_OPTIONS']

#: The logger of the command's progress and results (as timm's ``validate.py`` logs under ``validate``).
LOGGER = 'validate_adv'
#: ``--sanity``: probes sized to a budget, the complete battery, or none.
SANITY_MODES = ('budget', 'full', 'off')
#: The probes' options and the `plan.SanityBudget` field each sets.
SANITY_OPTIONS = {'sanity_samples': 'samples', 'sanity_steps': 'steps', 'sanity_queries': 'queries'}


def sanity_values(args: argparse.Namespace) -> Dict[str, int]:
    """The probe options given on the command line, by `plan.SanityBudget` field: the budget keeps them."""
    return {field: getattr(args, name) for name, field in SANITY_OPTIONS.items() if getattr(args, name) is not None}


def ood_folder(args: argparse.Namespace, dataset: OODDataset) -> Optional[str]:
    """The folder `dataset`'s option names (None when not given)."""
    return getattr(args, dataset.option[2:].replace('-', '_'))
