"""Experiment tracking with Weights & Biases (``--log-wandb``), as timm's train.py does it.

wandb is an optional extra (``pip install "timm-advnorm[wandb]"``): asking for it without the package is an error
before the run starts, not a warning in the middle of a log. The run logs what ``summary.csv`` holds, one row per
epoch, and the run's budget (`timm_advnorm.train.budget.RunBudget`) in its config and summary. ``WANDB_MODE=offline``
logs to local files only (``wandb sync`` uploads them later): nothing here needs a network.
"""
import importlib
from types import ModuleType
from typing import Any, Dict, Mapping, Optional

from .options import TrackingOptions

__all__ = ['WandbRun', 'import_wandb']


def import_wandb() -> ModuleType:
    """The wandb package.

    Raises:
        ValueError: It is not installed.
    """
    try:
        return importlib.import_module('wandb')
    except ImportError:
        raise ValueError('--log-wandb needs the wandb package: pip install "timm-advnorm[wandb]" (or pip install '
                         'wandb)') from None


class WandbRun:
    """One training run's Weights & Biases run: its arguments as config, then one logged row per epoch.

    Args:
        options: ``--wandb-project``, ``--wandb-tags``, ``--wandb-resume-id``.
        config: The run's recorded arguments, the wandb run's config.
        run_dir: The run folder; wandb's files go into it (``wandb/``).
        name: The wandb run's name (``--experiment``; None: wandb's own).
    """

    def __init__(self, options: TrackingOptions, config: Mapping[str, Any], run_dir: str, name: Optional[str] = None):
        wandb = import_wandb()
        resume_id = options.wandb_resume_id or None
        self.run = wandb.init(
            project=options.wandb_project, name=name, config=dict(config), tags=options.wandb_tags or None,
            dir=run_dir, id=resume_id, resume='must' if resume_id else None)

    def log_budget(self, budget: Mapping[str, Any]) -> None:
        """Put the run's budget in the run's config (prefixed ``budget/``) and summary."""
        record = {f'budget/{key}': value for key, value in budget.items()}
        self.run.config.update(record, allow_val_change=True)
        self.run.summary.update(record)

    def log_epoch(self, epoch: int, train_metrics: Mapping[str, float], eval_metrics: Mapping[str, float],
                  lr: float) -> None:
        """Log one epoch under the column names of its ``summary.csv`` row (timm's `update_summary`)."""
        row: Dict[str, Any] = {'epoch': epoch}
        row.update((f'train_{key}', value) for key, value in train_metrics.items())
        row.update((f'eval_{key}', value) for key, value in eval_metrics.items())
        row['lr'] = lr
        self.run.log(row, step=epoch)

    def finish(self, exit_code: Optional[int] = None) -> None:
        """Close the run (a non-zero `exit_code` marks it failed)."""
        self.run.finish(exit_code=exit_code)
