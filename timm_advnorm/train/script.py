"""The body of ``timm-advnorm-train`` / ``train_adv.py``: adversarial training of timm models, every method of the
papers on timm's data, optimizers and `timm.task`.

Single process:  timm-advnorm-train -c digits_demo_mbn   (or python train_adv.py, python -m timm_advnorm.train)
Many processes:  torchrun --nproc_per_node=8 -m timm_advnorm.train -c xie2020_mbn_resnet152 --data-dir /imagenet

Each epoch validates clean and robust (PGD) top-1 — on the branches the method trains — and appends them, with
the method's cost in forward+backward passes per image, to ``summary.csv`` in the run folder, after the epoch's
checkpoints, which carry the row: a run killed in between is completed by its resume (`epoch_record`). A resume
from an earlier checkpoint than the run's latest needs ``--resume-from-earlier``; one run folder trains in one
process at a time (`run_lock`). SIGINT and SIGTERM stop the run with one line naming the checkpoint to resume from.

Every argument is checked before the run folder is made. A non-finite loss or gradient stops the run (or, with
``--skip-nonfinite N``, skips up to N such steps) and no checkpoint ever holds non-finite weights: ``last`` and
``model_best`` stay the last good ones, to resume from.

The run reads as three steps over modules of their own: parse (`args`), build (`build`: device, model, method,
optimizer, resumed state, EMA, data and schedule, its input checked by `checks`; ``--plan`` measures one step of the
built run and stops there) and run (`build.prepare_training` counts the budget, wraps the task for distributed
training and makes the validation attack; `runner` opens the run folder, `run_folder`, and runs the epoch loop).
"""
import logging
import sys
from typing import List, Optional

from timm.utils import setup_default_logging

from ..cli import run_cli
from .args import parse_args, train_options
from .build import build_training, plan_training, prepare_training
from .runner import run_training

__all__ = ['main', 'run', 'console_main']


def main(argv: Optional[List[str]] = None, prog: str = 'timm-advnorm-train') -> int:
    """Train as `argv` says; returns the exit status. Bad input raises (see `run`)."""
    if not logging.root.handlers:  # a host application (or pytest) may have configured logging already
        setup_default_logging()
    args, args_text = parse_args(argv, prog=prog)
    training = build_training(train_options(args), args_text)
    if args.plan:  # one measured step, on the task before it is wrapped for distributed training
        budget = plan_training(training)
        if training.options.runtime.rank == 0:
            print(budget.format())
        return 0
    return run_training(training, prepare_training(training))


def run(prog: str = 'timm-advnorm-train', argv: Optional[List[str]] = None) -> int:
    """Command-line entry: `main`, with bad input reported as one line and exit status 2."""
    return run_cli(lambda a: main(a, prog=prog), prog, argv)


def console_main() -> None:
    """The ``timm-advnorm-train`` console command."""
    sys.exit(run('timm-advnorm-train'))
