"""``timm-advnorm-train`` / ``train_adv.py`` / ``python -m timm_advnorm.train``: adversarial training of timm models,
every method of the papers on timm's data, optimizers and `timm.task`.

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

The run reads as three steps: parse (this module), build (`timm_advnorm.train.build`: device, model, method,
optimizer, resumed state, EMA, data and schedule, its input checked by `train.checks`; ``--plan`` measures one step of
the built run and stops there) and run (`build.prepare_training` counts the budget, wraps the task for distributed
training and makes the validation attack; `train.runner` opens the run folder, `run_folder`, and runs the epoch loop).

The arguments: timm-style groups, an "Adversarial training" group of what every method shares (the method, its attack
and the per-epoch robust validation), and one group per registered method ("Method mbn") holding the options that
method declares (`AdversarialClassificationTask.add_args`). Config flows one way: a YAML file (``-c``) sets the
parser's defaults, the command line overrides them (with ``--resume``, both override the arguments the checkpoint
records: `train.recorded`), and `train_options` converts the namespace once into the typed, frozen options the build
reads (`train.options.TrainOptions`, with the method's own options checked by the method); nothing below this module
sees the namespace. The parser is importable so tests can drive it. Every registered method's options are on the parser
whichever ``--method`` runs, so a config or command line that names another method's option is accepted, as it always
was (a recipe is a base other methods run from: the demo trains its baseline with ``-c digits_demo_mbn --method
vanilla``); one given on the command line that the method does not use (another method's, or a training-attack option
of a method that runs no attack) is named in a warning, as it is ignored.
"""
import argparse
import logging
import sys
from typing import Any, Dict, FrozenSet, List, Optional, Tuple

import yaml
from timm.utils import ParseKwargs, setup_default_logging

from ..arg_types import (
    finite_float, fraction, non_negative_float, non_negative_int, open_fraction, pixel_budget, positive_float,
    positive_int, positive_pixel_step, probability)
from ..attacks import check_training_attack, training_attacks
from ..attacks.pgd import CLEAN_START_MODES
from ..data import rendered_kept_on_success
from ..recipes import describe_recipe, list_recipes, resolve_config
from ..task import (
    TASKS, MethodOptions, TrainingAttackOptions, declared_options, get_task_class, list_tasks, options_from_values,
    unused_options)
from ..train.build import build_training, plan_text, plan_training, prepare_training
from ..train.distribute_bn import DIST_BN_MODES
from ..train.lr_scaling import LR_BASE_SCALES
from ..train.options import (
    AugmentOptions, DataOptions, ModelOptions, OptimizerOptions, OutputOptions, ResumeOptions, RuntimeOptions,
    ScheduleOptions, TrackingOptions, TrainOptions, ValidationOptions, options_from)
from ..train.recorded import apply_recorded_args, read_recorded_args
from ..train.runner import run_training
from ..usage import default_workers
from .options import (
    AMP, AMP_DTYPE, ATTACK_EPS, ATTACK_NORM, ATTACK_STEP, ATTACK_STEPS, ATTACK_TARGETED, BATCH_SIZE, CHANNELS_LAST,
    CLASS_MAP, CONFIG, DATA_DIR, DATASET, DEVICE, MODEL, MODEL_KWARGS, NO_PROGRESS, NUM_CLASSES, NUM_SAMPLES, PIN_MEM,
    PLAN, PRETRAINED, SEED, SKIP_BAD_IMAGES, VAL_SPLIT, WORKERS, add_preprocessing_args)
from .parser import ArgumentParser, add_hidden_alias, given_options, parse_with_config, run_cli

__all__ = ['get_args_parser', 'parse_args', 'parse_invocation', 'option_dests', 'train_options', 'main', 'run',
           'console_main', 'AGC_CLIP_FACTOR']

_logger = logging.getLogger('train_adv')
#: Training-attack options whose value is the robust validation's default (``--val-attack-eps``, ...) when not given.
_VALIDATION_DEFAULTS = ('attack_eps', 'attack_step', 'attack_targeted')

#: ``--clip-grad`` under ``--clip-mode agc`` when not given: `timm.utils.adaptive_clip_grad`'s default clip factor
#: (Brock et al., NFNets); without it AGC would silently clip nothing.
AGC_CLIP_FACTOR = 0.01
#: ``--workers`` when neither given nor recorded by a resumed run, lowered to the CPUs this process may use
#: (`usage.default_workers`).
DEFAULT_WORKERS = 2

_logger = logging.getLogger('train_adv')


def _model_group(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group('Model parameters')
    MODEL.add(group, default='test_mbn_resnet', metavar='MODEL',
              help='Registered model name, "hf-hub:org/name" or "local-dir:PATH" (default: test_mbn_resnet).')
    PRETRAINED.add(group, help='Start from the model\'s pretrained weights.')
    group.add_argument('--initial-checkpoint', default='', type=str, metavar='PATH',
                       help='Start from these weights (no optimizer state): a checkpoint, .safetensors, export '
                            'folder, local-dir:PATH or hf-hub:org/name.')
    group.add_argument('--reset-classifier', action='store_true',
                       help='Allow --num-classes to differ from the pretrained weights\' (new, untrained head); '
                            'without it a mismatch is an error, never a silently dropped head.')
    group.add_argument('--resume', default='', type=str, metavar='PATH',
                       help='Resume model, optimizer and epoch from a timm-advnorm-train checkpoint, with the arguments it '
                            'records as the defaults: options given here (or by -c) win, but changing one that '
                            'shapes what is trained or measured (method options, attack, data, preprocessing, '
                            'augmentation, optimizer, schedule, --epochs, validation, seed) needs '
                            '--resume-with-changes; --model, --method, --dataset, --num-classes and --model-ema never '
                            'change. Free to change: --workers, --pin-mem, --validation-batch-size, '
                            '--dataset-download, --dataset-trust-remote-code, --channels-last, --grad-checkpointing, '
                            '--torchcompile(-mode), --output, --experiment, --checkpoint-hist, --recovery-interval, '
                            '--log-interval, --no-progress, --log-wandb, --wandb-project, --wandb-tags; --device is '
                            'chosen anew.')
    group.add_argument('--resume-from-earlier', action='store_true',
                       help='Allow --resume from a checkpoint earlier than its run\'s latest (model_best, an older '
                            'checkpoint-N): the run is rewound to it, its later rows and checkpoints replaced.')
    group.add_argument('--resume-with-changes', action='store_true',
                       help='Let --resume change the recorded recipe: the changes are logged and written at the top '
                            'of the resumed run\'s args-resumed-epochN.yaml.')
    group.add_argument('--no-resume-opt', action='store_true', help='Do not restore the optimizer when resuming.')
    NUM_CLASSES.add(group, help='Classes (default: from dataset).')
    group.add_argument('--gp', default=None, type=str, metavar='POOL',
                       help='Global pool type (avg, max, avgmax, ...; default: the model\'s).')
    add_preprocessing_args(group, images='validation images')
    group.add_argument('--drop', type=fraction, default=0.0, metavar='PCT', help='Dropout rate.')
    group.add_argument('--drop-path', type=fraction, default=None, metavar='PCT', help='Drop-path rate.')
    group.add_argument('--drop-block', type=fraction, default=None, metavar='PCT', help='Drop-block rate.')
    MODEL_KWARGS.add(group, metavar='KEY=VALUE', help='Extra timm.create_model arguments, e.g. zero_init_last=False.')
    group.add_argument('--head-init-scale', type=finite_float, default=None, metavar='SCALE',
                       help='Scale the classifier head\'s initial weights.')
    group.add_argument('--head-init-bias', type=finite_float, default=None, metavar='BIAS',
                       help='Initial value of the classifier head\'s bias.')
    group.add_argument('--bn-momentum', type=probability, default=None, metavar='M',
                       help='Momentum of every batch norm, both mixture-BN branches included (default: the model\'s).')
    group.add_argument('--bn-eps', type=positive_float, default=None, metavar='EPS',
                       help='Epsilon of every batch norm, both mixture-BN branches included (default: the model\'s).')
    group.add_argument('--sync-bn', action='store_true',
                       help='Synchronize BN statistics across processes (mixture BN keeps its routing).')
    group.add_argument('--dist-bn', type=str, default='reduce', choices=DIST_BN_MODES,
                       help='Without --sync-bn, after each epoch of distributed training: average ("reduce") or copy '
                            'from rank 0 ("broadcast") the BN running statistics of both mixture-BN branches, or '
                            'leave each process\'s ("") (default: reduce).')
    CHANNELS_LAST.add(group, help='Use channels_last memory layout.')
    group.add_argument('--grad-checkpointing', action='store_true',
                       help='Enable gradient checkpointing through model blocks/stages')
    group.add_argument('--torchcompile', nargs='?', type=str, default=None, const='inductor',
                       help='torch.compile the model with this backend (default when given: inductor).')
    group.add_argument('--torchcompile-mode', type=str, default=None, metavar='MODE',
                       help='torch.compile mode (default, reduce-overhead, max-autotune; default: torch\'s).')


def _data_group(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group('Dataset parameters')
    DATASET.add(group, default='digits',
                help='"digits", "mnist5k" or "mnist" (built in, no download) or any timm dataset name / "" for '
                     'an image folder.')
    DATA_DIR.add(group, help='Dataset root (or digits cache).')
    group.add_argument('--train-split', default='train', type=str, metavar='NAME', help='Training split.')
    VAL_SPLIT.add(group, help='Validation split.')
    group.add_argument('--dataset-download', action='store_true',
                       help='Allow timm to download torch/ and tfds/ datasets that support it.')
    CLASS_MAP.add(group,
                  help='Class-to-index mapping file of both splits (default: the training split\'s folder names, '
                       'sorted; the validation split must have the same class folders).')
    SKIP_BAD_IMAGES.add(group,
                        help='Every image of both splits is decoded before the first step; a file that fails (corrupt, '
                             'truncated, not an image) is an error naming it, as timm\'s loader would silently load '
                             'the next image in its place. With this flag such files are left out, with a warning naming '
                             'them.')
    group.add_argument('--input-key', default=None, type=str, metavar='NAME',
                       help='Image field of hfds/ and wds/ datasets.')
    group.add_argument('--target-key', default=None, type=str, metavar='NAME',
                       help='Label field of hfds/ and wds/ datasets.')
    group.add_argument('--dataset-trust-remote-code', action='store_true',
                       help='Allow Hugging Face datasets to run their own loading code.')
    BATCH_SIZE.add(group, default=64,
                   help='Training batch size per process (Fast AdvProp: the clean rows; the loader adds the '
                        'attacked share).')
    group.add_argument('-vb', '--validation-batch-size', type=positive_int, default=None, metavar='N',
                       help='Validation batch size (default: batch size).')
    group.add_argument('--grad-accum-steps', type=positive_int, default=1, metavar='N',
                       help='Batches whose gradients make one optimizer update; the attack runs on each '
                            '(default: 1).')
    WORKERS.add(group, default=None,
                help=f'Data-loading workers (default: {DEFAULT_WORKERS}, at most the CPUs this process may use).')
    PIN_MEM.add(group, help='Pin the loaders\' CPU memory (faster copies to GPU).')
    group.add_argument('--worker-seeding', type=str, default='all', choices=('all', 'part'),
                       help='Seeding of the data-loading workers (timm\'s; default: all).')
    group.add_argument('--hflip', type=probability, default=0.5, help='Horizontal flip probability.')
    group.add_argument('--vflip', type=probability, default=0.0, help='Vertical flip probability.')
    group.add_argument('--scale', type=positive_float, nargs=2, default=[0.08, 1.0], metavar='PCT',
                       help='Random-resized-crop scale range.')
    group.add_argument('--ratio', type=positive_float, nargs=2, default=[3. / 4., 4. / 3.], metavar='RATIO',
                       help='Random-resized-crop aspect-ratio range.')
    group.add_argument('--train-crop-mode', type=str, default=None, metavar='MODE',
                       help='Training crop mode (rrc, rkrc, rkrr; default: random-resized crop).')
    group.add_argument('--train-interpolation', type=str, default='random', metavar='NAME',
                       help='Resize interpolation of training images (default: random).')
    group.add_argument('--no-aug', action='store_true', help='No training augmentation (resize and crop only).')
    group.add_argument('--color-jitter', type=non_negative_float, default=0.4, metavar='PCT',
                       help='Colour-jitter strength (0: none; default: 0.4).')
    group.add_argument('--color-jitter-prob', type=probability, default=None, metavar='P',
                       help='Apply colour jitter with this probability (default: always).')
    group.add_argument('--grayscale-prob', type=probability, default=None, metavar='P',
                       help='Grayscale conversion probability.')
    group.add_argument('--gaussian-blur-prob', type=probability, default=None, metavar='P',
                       help='Gaussian blur probability.')
    group.add_argument('--aa', type=str, default=None, metavar='NAME',
                       help='AutoAugment / RandAugment policy, e.g. rand-m9-mstd0.5 (default: none).')
    group.add_argument('--aug-repeats', type=non_negative_float, default=0, metavar='N',
                       help='Repeated-augmentation count (distributed training only; default: 0).')
    group.add_argument('--reprob', type=probability, default=0.0, metavar='PCT', help='Random-erasing probability.')
    group.add_argument('--remode', type=str, default='pixel', choices=('const', 'rand', 'pixel'),
                       help='Random-erasing fill (default: pixel).')
    group.add_argument('--recount', type=positive_int, default=1, help='Random-erasing count (default: 1).')
    group.add_argument('--mixup', type=non_negative_float, default=0.0, help='Mixup alpha (0 disables).')
    group.add_argument('--cutmix', type=non_negative_float, default=0.0, help='CutMix alpha (0 disables).')
    group.add_argument('--mixup-prob', type=probability, default=1.0, help='Probability of mixing a batch.')
    group.add_argument('--mixup-switch-prob', type=probability, default=0.5, help='Probability of CutMix when both on.')
    group.add_argument('--cutmix-minmax', type=open_fraction, nargs=2, default=None, metavar=('MIN', 'MAX'),
                       help='CutMix box ratio range; overrides --cutmix and enables CutMix.')
    group.add_argument('--mixup-mode', type=str, default='batch', choices=('batch', 'pair', 'elem'),
                       help='Mixup/CutMix parameters drawn per batch, pair or element (default: batch).')
    group.add_argument('--mixup-off-epoch', type=non_negative_int, default=0, metavar='N',
                       help='Turn Mixup/CutMix off from this epoch (0: never).')
    group.add_argument('--smoothing', type=fraction, default=0.0, help='Label smoothing.')


def _optim_group(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group('Optimizer and schedule')
    group.add_argument('--opt', default='sgd', type=str, metavar='OPTIMIZER', help='timm optimizer name.')
    group.add_argument('--opt-eps', type=positive_float, default=None, metavar='EPSILON',
                       help='Optimizer epsilon (default: the optimizer\'s).')
    group.add_argument('--opt-betas', type=fraction, nargs='+', default=None, metavar='BETA',
                       help='Optimizer betas (default: the optimizer\'s).')
    group.add_argument('--opt-kwargs', nargs='*', default={}, action=ParseKwargs, metavar='KEY=VALUE',
                       help='Extra optimizer arguments, e.g. nesterov=False.')
    group.add_argument('--lr', type=positive_float, default=None, metavar='LR',
                       help='Learning rate as given (default: --lr-base scaled by the global batch).')
    group.add_argument('--lr-base', type=positive_float, default=0.1, metavar='LR',
                       help='Learning rate at --lr-base-size images per update, scaled to the global batch '
                            '(--batch-size x processes x --grad-accum-steps) when --lr is not given (default: 0.1).')
    group.add_argument('--lr-base-size', type=positive_int, default=256, metavar='N',
                       help='Global batch of --lr-base (default: 256).')
    group.add_argument('--lr-base-scale', type=str, default='', choices=LR_BASE_SCALES, metavar='SCALE',
                       help='Scaling of --lr-base: linear or sqrt (default: sqrt for Adam- and LAMB-type '
                            'optimizers, else linear).')
    group.add_argument('--momentum', type=fraction, default=0.9, metavar='M', help='Optimizer momentum.')
    group.add_argument('--weight-decay', type=non_negative_float, default=1e-4, help='Weight decay.')
    group.add_argument('--wd-all-params', action='store_true',
                       help='Decay every parameter, biases and normalization weights included (timm skips 1-D '
                            'parameters; Fast AdvProp\'s released code decays all).')
    group.add_argument('--layer-decay', type=positive_float, default=None, metavar='RATE',
                       help='Layer-wise learning-rate decay (default: none).')
    group.add_argument('--layer-decay-min-scale', type=non_negative_float, default=0, metavar='SCALE',
                       help='Smallest layer-wise learning-rate scale (default: 0).')
    group.add_argument('--layer-decay-no-opt-scale', type=non_negative_float, default=None, metavar='SCALE',
                       help='Layers whose layer-wise scale falls below this are not optimized (default: none).')
    group.add_argument('--clip-grad', type=positive_float, default=None, metavar='NORM',
                       help=f'Gradient clipping value (default: no clipping; {AGC_CLIP_FACTOR} with --clip-mode agc, '
                            f'the clip factor of timm\'s and the NFNet paper\'s AGC).')
    group.add_argument('--clip-mode', type=str, default='norm', choices=('norm', 'value', 'agc'),
                       help='Gradient clipping mode; agc = adaptive gradient clipping (Brock et al., NFNets; '
                            'NoFrost\'s released training clips nothing).')
    group.add_argument('--skip-nonfinite', type=non_negative_int, default=0, metavar='N',
                       help='Skip up to N training steps whose loss or gradient is not finite (no optimizer step, '
                            'BN statistics and EMA untouched, each one logged), then stop. 0: stop at the first. '
                            'Checkpoints never hold non-finite weights either way. (default: 0)')
    group.add_argument('--sched', type=str, default='cosine', metavar='SCHEDULER', help='timm scheduler name.')
    group.add_argument('--sched-on-updates', action='store_true',
                       help='Step the schedule on every optimizer update instead of every epoch.')
    group.add_argument('--lr-noise', type=non_negative_float, nargs='+', default=None, metavar='PCT',
                       help='Learning-rate noise on/off epoch fractions.')
    group.add_argument('--lr-noise-pct', type=non_negative_float, default=0.67, metavar='PERCENT',
                       help='Learning-rate noise limit (default: 0.67).')
    group.add_argument('--lr-noise-std', type=non_negative_float, default=1.0, metavar='STDDEV',
                       help='Learning-rate noise standard deviation (default: 1.0).')
    group.add_argument('--lr-cycle-mul', type=positive_float, default=1.0, metavar='MULT',
                       help='Cycle length multiplier of cyclic schedules (default: 1.0).')
    group.add_argument('--lr-cycle-decay', type=positive_float, default=0.5, metavar='MULT',
                       help='Learning-rate decay per cycle (default: 0.5).')
    group.add_argument('--lr-cycle-limit', type=positive_int, default=1, metavar='N',
                       help='Cycles of cyclic schedules (default: 1).')
    group.add_argument('--lr-k-decay', type=positive_float, default=1.0,
                       help='k-decay of cosine and poly schedules (default: 1.0).')
    group.add_argument('--epochs', type=positive_int, default=10, metavar='N', help='Epochs to train.')
    group.add_argument('--decay-milestones', type=non_negative_int, nargs='+', default=[35, 70, 95], metavar='EPOCH',
                       help='Epochs at which multistep schedules decay (Xie & Yuille: 35 70 95 of 110).')
    group.add_argument('--decay-epochs', type=positive_float, default=90, metavar='N',
                       help='Epochs between decays of the step schedule (default: 90).')
    group.add_argument('--decay-rate', type=positive_float, default=0.1, metavar='RATE', help='Step decay factor.')
    group.add_argument('--warmup-epochs', type=non_negative_int, default=0, metavar='N', help='Linear warm-up epochs.')
    group.add_argument('--warmup-prefix', action='store_true',
                       help='Warm up before the schedule instead of over its first epochs.')
    group.add_argument('--cooldown-epochs', type=non_negative_int, default=0, metavar='N',
                       help='Epochs at --min-lr after a cyclic schedule ends, added to --epochs (default: 0).')
    group.add_argument('--patience-epochs', type=non_negative_int, default=10, metavar='N',
                       help='Patience of the plateau schedule (default: 10).')
    group.add_argument('--warmup-lr', type=non_negative_float, default=1e-5, metavar='LR',
                       help='Warm-up start learning rate.')
    group.add_argument('--min-lr', type=non_negative_float, default=0.0, metavar='LR',
                       help='Floor of cyclic schedules.')


def _training_attack(name: str) -> str:
    """argparse type of ``--attack``: a registered attack that can make training examples."""
    try:
        return check_training_attack(name)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def _adversarial_group(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group('Adversarial training')
    group.add_argument('--method', default='mbn', choices=list_tasks(),
                       help='Training method (default: mbn); its own options are in its "Method" group below.')
    group.add_argument('--attack', default='pgd', type=_training_attack, metavar='NAME',
                       help=f'Training attack, from the attack registry: {", ".join(training_attacks())}. Each takes '
                            f'the options below that it has: fgsm is one step of --attack-step (Wong et al.: 1.25 '
                            f'× --attack-eps) and ignores --attack-steps and --attack-step-rule (the run records 1 '
                            f'and fixed). (default: pgd)')
    ATTACK_EPS.add(group, default=16.0,
                   help='Attack budget on the 0-255 scale: 16 means 16/255 (a value in (0, 1) is refused as one '
                        'of the [0, 1] scale).')
    ATTACK_STEP.add(group, type=positive_pixel_step, default=1.0,
                    help='Attack step size on the 0-255 scale (a value below 0.1 is refused as one of the [0, 1] '
                         'scale).')
    ATTACK_STEPS.add(group, type=positive_int, default=30, help='Attack iterations (PGD-N).')
    ATTACK_NORM.add(group, default='linf', help='Threat model (Fast AdvProp: linf only).')
    ATTACK_TARGETED.add(group, action=argparse.BooleanOptionalAction, default=True,
                        help='Targeted attack, target uniform among the other classes (Xie & Yuille). Not for Fast '
                             'AdvProp, whose PGD is untargeted from a random start with batch statistics.')
    group.add_argument('--attack-clean-start-prob', type=probability, default=0.2,
                       help='Probability that an attack starts from the clean image instead of a random start '
                            '(not for Fast AdvProp).')
    group.add_argument('--attack-clean-start-mode', default='per_sample', choices=CLEAN_START_MODES,
                       help='How clean starts are drawn: per_sample (each image with --attack-clean-start-prob), '
                            'per_batch (the whole batch at once: Xie & Yuille\'s released code), per_batch_randn (the '
                            'whole batch when a standard normal draw is <= 0.2, probability 0.579: Fast AdvProp\'s '
                            'released code; --attack-clean-start-prob is then not used).')
    group.add_argument('--attack-step-rule', default='max', choices=('max', 'fixed'),
                       help='"max": step = max(step, eps/N) as in the original code; "fixed": step as given.')
    group.add_argument('--attack-bn-stats', default='running', choices=('running', 'batch'),
                       help='BN statistics the attack uses: running (eval mode) or batch (train mode; Fast '
                            'AdvProp always).')
    group.add_argument('--same-budget', action='store_true',
                       help='Divide --epochs, --decay-milestones, --decay-epochs and --running-stats-epochs by the '
                            'method\'s passes per image (equal-budget runs; warm-up and cool-down epochs are kept).')
    group.add_argument('--running-stats-epochs', type=non_negative_int, default=0, metavar='N',
                       help='Train with BN running statistics in the last N epochs (Xie & Yuille §4.3).')
    group.add_argument('--val-attack-steps', type=positive_int, default=10,
                       help='PGD iterations of the per-epoch robust eval.')
    group.add_argument('--val-attack-eps', type=pixel_budget, default=None,
                       help='Robust-eval budget (default: attack-eps).')
    group.add_argument('--val-attack-step', type=positive_pixel_step, default=None,
                       help='Robust-eval step (default: attack-step).')
    group.add_argument('--val-attack-targeted', action=argparse.BooleanOptionalAction, default=None,
                       help='Targeted robust eval (default: as training).')
    NUM_SAMPLES.add(group, type=positive_int, default=None,
                    help='Robust-evaluate a fixed seeded subset of N validation images (default: all).')
    add_hidden_alias(parser, group, '--val-samples', 'num_samples', type=positive_int)


class _MethodGroup:
    """The argument group a method's `add_args` fills ("Method mbn").

    A subclass that does not override `add_args` inherits its parent method's, and so declares the same options
    again: an option declared exactly as before is skipped (it stays in the group of the method that declared it
    first), one declared differently is an error naming both methods.

    Args:
        parser: The command's parser.
        method: The method's name.
        declared: Shared by the groups of one parser: each option string's declaring method and arguments.
    """

    def __init__(self, parser: argparse.ArgumentParser, method: str, declared: Dict[str, Tuple[str, tuple, dict]]):
        self._group = parser.add_argument_group(f'Method {method}')
        self._method = method
        self._declared = declared

    def add_argument(self, *flags: str, **kwargs: Any) -> Optional[argparse.Action]:
        """`argparse`'s ``add_argument``; returns None for an option already declared the same way."""
        first = self._declared.get(flags[0])
        if first is not None:
            owner, owner_flags, owner_kwargs = first
            if (owner_flags, owner_kwargs) != (flags, kwargs):
                raise ValueError(f'Method {self._method} declares {flags[0]} unlike method {owner}.')
            return None
        self._declared.update((flag, (self._method, flags, kwargs)) for flag in flags)
        return self._group.add_argument(*flags, **kwargs)


def _method_groups(parser: argparse.ArgumentParser) -> None:
    """One group per registered method, in registration order (a parent method before the methods deriving from it),
    each holding the options the method declares."""
    declared: Dict[str, Tuple[str, tuple, dict]] = {}
    for name, task in TASKS.items():
        task.add_args(_MethodGroup(parser, name, declared))


def _misc_group(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group('Miscellaneous')
    SEED.add(group, help='Random seed.')
    DEVICE.add(group, default=None, help='Device (default: cuda if available, else cpu).')
    AMP.add(group, help='Autocast (--amp-dtype) for training and attacks.')
    AMP_DTYPE.add(group,
                  help='Autocast dtype with --amp. float16 trains with a loss scaler and scales the attacks\' '
                       'losses (their input gradients would underflow); timm\'s default is float16, ours '
                       'bfloat16, which needs neither.')
    group.add_argument('--model-ema', action='store_true', help='Keep an exponential moving average of weights.')
    group.add_argument('--model-ema-decay', type=open_fraction, default=0.9998, help='EMA decay.')
    group.add_argument('--model-ema-warmup', action='store_true', help='Warm the EMA decay up over the first updates.')
    group.add_argument('--output', default='output/train', type=str, metavar='DIR', help='Output root folder.')
    group.add_argument('--experiment', default='', type=str, metavar='NAME', help='Run folder name under --output.')
    defaults = ', '.join(f'{name}: {task.default_eval_metric}' for name, task in TASKS.items())
    group.add_argument('--eval-metric', default=None, type=str, metavar='METRIC',
                       help=f'Validation metric that ranks checkpoints (default: the method\'s; {defaults}).')
    group.add_argument('--checkpoint-hist', type=positive_int, default=3, metavar='N', help='Checkpoints kept.')
    group.add_argument('--recovery-interval', type=non_negative_int, default=0, metavar='N',
                       help='Write a recovery checkpoint every N optimizer updates (0: never).')
    group.add_argument('--log-interval', type=non_negative_int, default=50, metavar='N',
                       help='Batches between log lines.')
    NO_PROGRESS.add(group,
                    help='No progress bars over the training batches and the validations (shown only on a terminal, '
                         'not under CI).')
    group.add_argument('--log-wandb', action='store_true',
                       help='Log each epoch\'s summary.csv row and the run\'s budget to Weights & Biases '
                            '(pip install "timm-advnorm[wandb]"; WANDB_MODE=offline logs without a network).')
    group.add_argument('--wandb-project', default=None, type=str, metavar='NAME',
                       help='Weights & Biases project (default: wandb\'s).')
    group.add_argument('--wandb-tags', default=[], type=str, nargs='*', metavar='TAG', help='Weights & Biases tags.')
    group.add_argument('--wandb-resume-id', default='', type=str, metavar='ID',
                       help='Continue this Weights & Biases run (with --resume).')
    PLAN.add(group,
             help='Do not train: build the run, measure one training step on this device and print the '
                  'run\'s budget (passes, FLOPs, peak memory, projected time).')
    group.add_argument('--world-size', dest='plan_world_size', type=positive_int, default=None, metavar='N',
                       help='With --plan: project the run to N processes, each on a device like this one (default: '
                            'the processes of this launch).')


class _ListRecipes(argparse.Action):
    """``--list-recipes``: print the packaged recipes (name and what each trains) and exit."""

    def __init__(self, option_strings, dest, **kwargs):
        super().__init__(option_strings, dest, nargs=0, default=argparse.SUPPRESS, **kwargs)

    def __call__(self, parser, namespace, values, option_string=None):
        width = max(len(name) for name in list_recipes())
        lines = [f'{name:<{width}}  {describe_recipe(name)}' for name in list_recipes()]
        sys.stdout.write('Packaged recipes (train with -c NAME):\n' + '\n'.join(lines) + '\n')
        parser.exit(0)


def get_args_parser(prog: str = 'timm-advnorm-train') -> ArgumentParser:
    """The command-line parser (importable, so tests and wrappers can drive it)."""
    parser = ArgumentParser(prog=prog, description='Adversarial training of timm models (timm-advnorm).')
    CONFIG.add(parser,
               help='YAML file of argument defaults (keys as the long options, with underscores), or the '
                    'name of a packaged recipe (see --list-recipes); command-line values win.')
    parser.add_argument('--list-recipes', action=_ListRecipes, help='List the packaged recipes and exit.')
    for add_group in (_model_group, _data_group, _optim_group, _adversarial_group, _method_groups, _misc_group):
        add_group(parser)
    return parser


def option_dests(parser: Optional[ArgumentParser] = None) -> FrozenSet[str]:
    """The destinations of the command's options (of `parser`, else a new one): what a checkpoint's record is read
    for (`recorded`)."""
    actions = (parser or get_args_parser())._actions
    return frozenset(action.dest for action in actions if action.dest != argparse.SUPPRESS)


def parse_args(argv: Optional[List[str]] = None, prog: str = 'timm-advnorm-train') -> Tuple[argparse.Namespace, str]:
    """Parse `argv` with YAML defaults from ``-c``; returns the namespace and its YAML text (saved with the run).

    With ``--resume``, the arguments the checkpoint records are the defaults of whatever `argv` and its ``-c`` file
    do not give (`recorded.apply_recorded_args`); the build checks the changes (`recorded.check_resume_args`).
    """
    args, args_text, _ = parse_invocation(argv, prog)
    return args, args_text


def parse_invocation(argv: Optional[List[str]], prog: str) -> Tuple[argparse.Namespace, str, Optional[str]]:
    """`parse_args`, and what chose the dataset when ``--dataset`` was not given (here or by ``-c``): its default,
    or the resumed run's record with another ``--data-dir`` than the run's. None when given, or resumed on the run's
    own data: only then is a built-in dataset rendered into ``--data-dir``."""
    parser = get_args_parser(prog)
    args, config = parse_with_config(parser, argv, resolve=resolve_config)
    given = given_options(parser, argv, config)
    recorded = read_recorded_args(args.resume, option_dests(parser)) if args.resume else None
    if recorded is not None:
        apply_recorded_args(args, recorded, given)
    if args.clip_mode == 'agc' and args.clip_grad is None:
        args.clip_grad = AGC_CLIP_FACTOR
    args.workers, note = default_workers(args.workers, DEFAULT_WORKERS)
    if note:
        _logger.info(note)
    _warn_unused_options(args, given_options(parser, argv, {}))
    if 'dataset' in given or ('dataset' in (recorded or {}) and 'data_dir' not in given):
        chosen_by = None  # given, or resumed on the data of the run, where it was rendered already
    else:
        chosen_by = "the resumed run's record" if 'dataset' in (recorded or {}) else 'the default of --dataset'
    return args, yaml.safe_dump(vars(args), default_flow_style=False), chosen_by


def _warn_unused_options(args: argparse.Namespace, given: FrozenSet[str]) -> None:
    """Name the options given on the command line (`given`) that ``--method`` does not use (`task.unused_options`):
    another method's own, or the training attack's where the method runs none. They are accepted (see the module's
    docstring) and ignored; a warning keeps that from passing without a word."""
    if args.method not in TASKS:  # refused later, with the registered methods named
        return
    # the training attack's budget is the per-epoch robust validation's default, which every method runs
    validation = {name for name in _VALIDATION_DEFAULTS if getattr(args, f'val_{name}') is None}
    unused = sorted(given & unused_options(vars(args)) - validation)
    if unused:
        owners = {name: [method for method, task in TASKS.items() if name in declared_options(task)]
                  for name in unused}
        flags = ', '.join('--' + name.replace('_', '-') + (f' (method {"/".join(owners[name])})' if owners[name] else
                                                            ' (training attack)') for name in unused)
        _logger.warning(f'{flags}: not used by --method {args.method}, so ignored')


def _method_options(args: argparse.Namespace) -> Tuple[MethodOptions, TrainingAttackOptions]:
    """The options of the method `args` names (its `options_class`) and of the training attack, checked by the
    method (`check_options`)."""
    task = get_task_class(args.method)
    values = vars(args)
    options = options_from_values(task.options_class, values)
    attack = options_from_values(TrainingAttackOptions, values)
    task.check_options(options, attack)
    return options, attack


def train_options(args: argparse.Namespace, dataset_chosen_by: Optional[str] = None) -> TrainOptions:
    """The typed options of the run `args` (as `parse_args` returns them) describe; `args` is kept in them as the
    record the run writes, unchanged. `dataset_chosen_by`: what chose the dataset, when ``--dataset`` was not given
    (`DataOptions.dataset_chosen_by`)."""
    values = vars(args)
    method_options, attack = _method_options(args)
    val_attack = dict(
        attack_eps=args.attack_eps if args.val_attack_eps is None else args.val_attack_eps,
        attack_step=args.attack_step if args.val_attack_step is None else args.val_attack_step,
        attack_steps=args.val_attack_steps,
        attack_targeted=args.attack_targeted if args.val_attack_targeted is None else args.val_attack_targeted)
    return TrainOptions(
        method=args.method, model=options_from(ModelOptions, values),
        data=options_from(DataOptions, values, dataset_chosen_by=dataset_chosen_by),
        augment=options_from(AugmentOptions, values), optimizer=options_from(OptimizerOptions, values),
        schedule=options_from(ScheduleOptions, values), runtime=options_from(RuntimeOptions, values),
        validation=options_from(ValidationOptions, values, **val_attack), output=options_from(OutputOptions, values),
        # the record is read for the command's options only when resuming: the parser is not built again otherwise
        resume=options_from(ResumeOptions, values, option_names=option_dests() if args.resume else frozenset()),
        tracking=options_from(TrackingOptions, values), method_options=method_options, attack=attack, recorded=args,
        plan=args.plan, plan_world_size=args.plan_world_size)


def main(argv: Optional[List[str]] = None, prog: str = 'timm-advnorm-train') -> int:
    """Train as `argv` says; returns the exit status. Bad input raises (see `run`)."""
    if not logging.root.handlers:  # a host application (or pytest) may have configured logging already
        setup_default_logging()
    args, args_text, dataset_chosen_by = parse_invocation(argv, prog)
    options = train_options(args, dataset_chosen_by)
    with rendered_kept_on_success(options.data.data_dir):  # a refusal after the rendering leaves no copy behind
        training = build_training(options, args_text)
    if args.plan:  # one measured step, on the task before it is wrapped for distributed training
        budget = plan_training(training)
        if training.options.runtime.rank == 0:
            print(plan_text(training, budget))
        return 0
    return run_training(training, prepare_training(training))


def run(prog: str = 'timm-advnorm-train', argv: Optional[List[str]] = None) -> int:
    """Command-line entry: `main`, with bad input reported as one line and exit status 2."""
    return run_cli(lambda a: main(a, prog=prog), prog, argv)


def console_main() -> None:
    """The ``timm-advnorm-train`` console command."""
    sys.exit(run('timm-advnorm-train'))
