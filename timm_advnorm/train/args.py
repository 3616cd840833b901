"""Command-line arguments of `train_adv.py`: timm-style groups plus an "Adversarial training" group.

Config flows one way: a YAML file (``-c``) sets the parser's defaults, the command line overrides them, and the
script turns the namespace into explicit keyword arguments. The parser is importable so tests can drive it.
"""
import argparse
import math
import sys
from typing import List, Optional, Tuple, Union

import yaml

from ..cli import ArgumentParser, add_hidden_alias, parse_with_config
from ..recipes import describe_recipe, list_recipes, resolve_config
from ..task import TASKS

__all__ = ['get_args_parser', 'parse_args', 'AGC_CLIP_FACTOR', 'Number', 'finite_float', 'non_negative_float',
           'positive_float', 'probability', 'fraction', 'open_fraction', 'non_negative_int', 'positive_int', 'seed_int']

#: ``--clip-grad`` under ``--clip-mode agc`` when not given: `timm.utils.adaptive_clip_grad`'s default clip factor
#: (Brock et al., NFNets); without it AGC would silently clip nothing.
AGC_CLIP_FACTOR = 0.01


class Number:
    """An argparse ``type``: a finite number of `kind` within a range, said in the error (``argument --lr: must be a
    number > 0, got nan``).

    The script trusts every numeric option once parsed: a NaN learning rate or budget would otherwise train on NaN,
    and a negative weight decay or a probability above 1 train something else than asked, without a word.

    Args:
        kind: ``int`` or ``float``.
        low: Smallest value allowed (None: no bound).
        high: Largest value allowed (None: no bound).
        low_open: Exclude `low` itself.
        high_open: Exclude `high` itself.
    """

    def __init__(self, kind: type, low: Optional[float] = None, high: Optional[float] = None, low_open: bool = False,
                 high_open: bool = False):
        self.kind, self.low, self.high, self.low_open, self.high_open = kind, low, high, low_open, high_open
        self.__name__ = kind.__name__  # argparse names the type in some of its messages

    def describe(self) -> str:
        """The values allowed, in words: ``an integer >= 1``, ``a number in [0, 1)``."""
        noun = 'an integer' if self.kind is int else 'a number'
        if self.low is not None and self.high is not None:
            opening, closing = '(' if self.low_open else '[', ')' if self.high_open else ']'
            return f'{noun} in {opening}{self.low}, {self.high}{closing}'
        if self.low is not None:
            return f'{noun} {">" if self.low_open else ">="} {self.low}'
        if self.high is not None:
            return f'{noun} {"<" if self.high_open else "<="} {self.high}'
        return f'a finite {noun.split()[-1]}'

    def __call__(self, text: str) -> Union[int, float]:
        try:
            number = self.kind(text)
            valid = math.isfinite(number) and self._in_range(number)
        except (TypeError, ValueError, OverflowError):  # not a number of the kind; an int too large for a float
            valid = False
        if not valid:
            raise argparse.ArgumentTypeError(f'must be {self.describe()}, got {text}')
        return number

    def _in_range(self, number: Union[int, float]) -> bool:
        above = self.low is None or (number > self.low if self.low_open else number >= self.low)
        below = self.high is None or (number < self.high if self.high_open else number <= self.high)
        return above and below


finite_float = Number(float)
non_negative_float = Number(float, low=0)
positive_float = Number(float, low=0, low_open=True)
probability = Number(float, low=0, high=1)
fraction = Number(float, low=0, high=1, high_open=True)  # [0, 1): smoothing, dropout, momentum
open_fraction = Number(float, low=0, high=1, low_open=True, high_open=True)
non_negative_int = Number(int, low=0)
positive_int = Number(int, low=1)
seed_int = Number(int, low=0, high=2 ** 32 - 1)  # numpy's seed range


def _model_group(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group('Model parameters')
    group.add_argument('--model', default='test_mbn_resnet', type=str, metavar='MODEL',
                       help='Registered model name, "hf-hub:org/name" or "local-dir:PATH" (default: test_mbn_resnet).')
    group.add_argument('--pretrained', action='store_true', help='Start from the model\'s pretrained weights.')
    group.add_argument('--initial-checkpoint', default='', type=str, metavar='PATH',
                       help='Start from these weights (no optimizer state): a checkpoint, .safetensors, export '
                            'folder, local-dir:PATH or hf-hub:org/name.')
    group.add_argument('--reset-classifier', action='store_true',
                       help='Allow --num-classes to differ from the pretrained weights\' (new, untrained head); '
                            'without it a mismatch is an error, never a silently dropped head.')
    group.add_argument('--resume', default='', type=str, metavar='PATH',
                       help='Resume model, optimizer and epoch from a train_adv.py checkpoint.')
    group.add_argument('--no-resume-opt', action='store_true', help='Do not restore the optimizer when resuming.')
    group.add_argument('--num-classes', type=positive_int, default=None, metavar='N',
                       help='Classes (default: from dataset).')
    group.add_argument('--img-size', type=positive_int, default=None, metavar='N', help='Input image size.')
    group.add_argument('--mean', type=finite_float, nargs='+', default=None, metavar='MEAN',
                       help='Override dataset mean.')
    group.add_argument('--std', type=positive_float, nargs='+', default=None, metavar='STD',
                       help='Override dataset std.')
    group.add_argument('--drop', type=fraction, default=0.0, metavar='PCT', help='Dropout rate.')
    group.add_argument('--drop-path', type=fraction, default=None, metavar='PCT', help='Drop-path rate.')
    group.add_argument('--sync-bn', action='store_true',
                       help='Synchronize BN statistics across processes (mixture BN keeps its routing).')
    group.add_argument('--channels-last', action='store_true', help='Use channels_last memory layout.')
    group.add_argument('--torchcompile', nargs='?', type=str, default=None, const='inductor',
                       help='torch.compile the model with this backend (default when given: inductor).')


def _data_group(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group('Dataset parameters')
    group.add_argument('--dataset', default='digits', type=str, metavar='NAME',
                       help='"digits" (built in, no download) or any timm dataset name / "" for an image folder.')
    group.add_argument('--data-dir', default=None, type=str, metavar='DIR', help='Dataset root (or digits cache).')
    group.add_argument('--train-split', default='train', type=str, metavar='NAME', help='Training split.')
    group.add_argument('--val-split', default='validation', type=str, metavar='NAME', help='Validation split.')
    group.add_argument('-b', '--batch-size', type=positive_int, default=64, metavar='N',
                       help='Training batch size per process (Fast AdvProp: the clean rows; the loader adds the '
                            'attacked share).')
    group.add_argument('-vb', '--validation-batch-size', type=positive_int, default=None, metavar='N',
                       help='Validation batch size (default: batch size).')
    group.add_argument('-j', '--workers', type=non_negative_int, default=2, metavar='N', help='Data-loading workers.')
    group.add_argument('--hflip', type=probability, default=0.5, help='Horizontal flip probability.')
    group.add_argument('--scale', type=positive_float, nargs=2, default=[0.08, 1.0], metavar='PCT',
                       help='Random-resized-crop scale range.')
    group.add_argument('--no-aug', action='store_true', help='No training augmentation (resize and crop only).')
    group.add_argument('--mixup', type=non_negative_float, default=0.0, help='Mixup alpha (0 disables).')
    group.add_argument('--cutmix', type=non_negative_float, default=0.0, help='CutMix alpha (0 disables).')
    group.add_argument('--mixup-prob', type=probability, default=1.0, help='Probability of mixing a batch.')
    group.add_argument('--mixup-switch-prob', type=probability, default=0.5, help='Probability of CutMix when both on.')
    group.add_argument('--smoothing', type=fraction, default=0.0, help='Label smoothing.')


def _optim_group(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group('Optimizer and schedule')
    group.add_argument('--opt', default='sgd', type=str, metavar='OPTIMIZER', help='timm optimizer name.')
    group.add_argument('--lr', type=positive_float, default=0.1, metavar='LR', help='Learning rate.')
    group.add_argument('--momentum', type=fraction, default=0.9, metavar='M', help='Optimizer momentum.')
    group.add_argument('--weight-decay', type=non_negative_float, default=1e-4, help='Weight decay.')
    group.add_argument('--clip-grad', type=positive_float, default=None, metavar='NORM',
                       help=f'Gradient clipping value (default: no clipping; {AGC_CLIP_FACTOR} with --clip-mode agc, '
                            f'the clip factor of timm\'s and the NFNet paper\'s AGC).')
    group.add_argument('--clip-mode', type=str, default='norm', choices=('norm', 'value', 'agc'),
                       help='Gradient clipping mode; agc = adaptive gradient clipping (NF-ResNets, NoFrost).')
    group.add_argument('--skip-nonfinite', type=non_negative_int, default=0, metavar='N',
                       help='Skip up to N training steps whose loss or gradient is not finite (no optimizer step, '
                            'BN statistics and EMA untouched, each one logged), then stop. 0: stop at the first. '
                            'Checkpoints never hold non-finite weights either way. (default: 0)')
    group.add_argument('--sched', type=str, default='cosine', metavar='SCHEDULER', help='timm scheduler name.')
    group.add_argument('--epochs', type=positive_int, default=10, metavar='N', help='Epochs to train.')
    group.add_argument('--decay-milestones', type=non_negative_int, nargs='+', default=[35, 70, 95], metavar='EPOCH',
                       help='Epochs at which multistep schedules decay (Xie & Yuille: 35 70 95 of 110).')
    group.add_argument('--decay-rate', type=positive_float, default=0.1, metavar='RATE', help='Step decay factor.')
    group.add_argument('--warmup-epochs', type=non_negative_int, default=0, metavar='N', help='Linear warm-up epochs.')
    group.add_argument('--warmup-lr', type=non_negative_float, default=1e-5, metavar='LR',
                       help='Warm-up start learning rate.')
    group.add_argument('--min-lr', type=non_negative_float, default=0.0, metavar='LR',
                       help='Floor of cyclic schedules.')


def _adversarial_group(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group('Adversarial training')
    group.add_argument('--method', default='mbn', choices=tuple(TASKS),
                       help='Training method (default: mbn).')
    group.add_argument('--attack-eps', type=non_negative_float, default=16.0, help='Attack budget on the 0-255 scale.')
    group.add_argument('--attack-step', type=positive_float, default=1.0, help='Attack step size on the 0-255 scale.')
    group.add_argument('--attack-steps', type=positive_int, default=30, help='Attack iterations (PGD-N).')
    group.add_argument('--attack-norm', default='linf', choices=('linf', 'l2'),
                       help='Threat model (Fast AdvProp: linf only).')
    group.add_argument('--attack-targeted', action=argparse.BooleanOptionalAction, default=True,
                       help='Targeted attack, target uniform among the other classes (Xie & Yuille). Not for Fast '
                            'AdvProp, whose PGD is untargeted from a random start with batch statistics.')
    group.add_argument('--attack-clean-start-prob', type=probability, default=0.2,
                       help='Probability that an attack starts from the clean image instead of a random start '
                            '(not for Fast AdvProp).')
    group.add_argument('--attack-step-rule', default='max', choices=('max', 'fixed'),
                       help='"max": step = max(step, eps/N) as in the original code; "fixed": step as given.')
    group.add_argument('--attack-bn-stats', default='running', choices=('running', 'batch'),
                       help='BN statistics the attack uses: running (eval mode) or batch (train mode; Fast '
                            'AdvProp always).')
    group.add_argument('--alpha', type=probability, default=0.5, help='Clean-loss weight (mixed, alp, mbn).')
    group.add_argument('--clean-ratio', type=probability, default=1.0, help='Share of clean images kept (mixed).')
    group.add_argument('--pairing-weight', type=non_negative_float, default=None,
                       help='Adversarial logit pairing weight (alp: default 0.5; mbn: default 0 = off).')
    group.add_argument('--adv-weight', type=non_negative_float, default=0.5,
                       help='Adversarial-loss weight λ (nofrost) / β of adversarial rows (fast_advprop).')
    group.add_argument('--p-adv', type=open_fraction, default=0.2, help='Fast AdvProp: attacked share of the batch.')
    group.add_argument('--noise-weight', type=positive_float, default=0.5, help='Fast AdvProp: β of the noisy rows.')
    group.add_argument('--shuffle-bn', action=argparse.BooleanOptionalAction, default=True,
                       help='Fast AdvProp: shuffle adversarial rows across ranks before their forward.')
    group.add_argument('--rescale-grads', action=argparse.BooleanOptionalAction, default=True,
                       help='Fast AdvProp: per-group gradient rescaling (synchronized update speed).')
    group.add_argument('--same-budget', action='store_true',
                       help='Divide epochs, milestones and --running-stats-epochs by the method\'s passes per image '
                            '(equal-budget runs).')
    group.add_argument('--running-stats-epochs', type=non_negative_int, default=0, metavar='N',
                       help='Train with BN running statistics in the last N epochs (Xie & Yuille §4.3).')
    group.add_argument('--val-attack-steps', type=positive_int, default=10,
                       help='PGD iterations of the per-epoch robust eval.')
    group.add_argument('--val-attack-eps', type=non_negative_float, default=None,
                       help='Robust-eval budget (default: attack-eps).')
    group.add_argument('--val-attack-step', type=positive_float, default=None,
                       help='Robust-eval step (default: attack-step).')
    group.add_argument('--val-attack-targeted', action=argparse.BooleanOptionalAction, default=None,
                       help='Targeted robust eval (default: as training).')
    group.add_argument('--num-samples', type=positive_int, default=None, metavar='N',
                       help='Robust-evaluate a fixed seeded subset of N validation images (default: all).')
    add_hidden_alias(parser, group, '--val-samples', 'num_samples', type=positive_int)


def _misc_group(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group('Miscellaneous')
    group.add_argument('--seed', type=seed_int, default=42, metavar='S', help='Random seed.')
    group.add_argument('--device', default=None, type=str, help='Device (default: cuda if available, else cpu).')
    group.add_argument('--amp', action='store_true', help='bfloat16 autocast for training and attacks.')
    group.add_argument('--model-ema', action='store_true', help='Keep an exponential moving average of weights.')
    group.add_argument('--model-ema-decay', type=open_fraction, default=0.9998, help='EMA decay.')
    group.add_argument('--output', default='output/train', type=str, metavar='DIR', help='Output root folder.')
    group.add_argument('--experiment', default='', type=str, metavar='NAME', help='Run folder name under --output.')
    defaults = ', '.join(f'{name}: {task.default_eval_metric}' for name, task in TASKS.items())
    group.add_argument('--eval-metric', default=None, type=str, metavar='METRIC',
                       help=f'Validation metric that ranks checkpoints (default: the method\'s; {defaults}).')
    group.add_argument('--checkpoint-hist', type=positive_int, default=3, metavar='N', help='Checkpoints kept.')
    group.add_argument('--log-interval', type=non_negative_int, default=50, metavar='N',
                       help='Batches between log lines.')


class _ListRecipes(argparse.Action):
    """``--list-recipes``: print the packaged recipes (name and what each trains) and exit."""

    def __init__(self, option_strings, dest, **kwargs):
        super().__init__(option_strings, dest, nargs=0, default=argparse.SUPPRESS, **kwargs)

    def __call__(self, parser, namespace, values, option_string=None):
        width = max(len(name) for name in list_recipes())
        lines = [f'{name:<{width}}  {describe_recipe(name)}' for name in list_recipes()]
        sys.stdout.write('Packaged recipes (train with -c NAME):\n' + '\n'.join(lines) + '\n')
        parser.exit(0)


def get_args_parser(prog: str = 'train_adv.py') -> ArgumentParser:
    """The command-line parser (importable, so tests and wrappers can drive it)."""
    parser = ArgumentParser(prog=prog, description='Adversarial training of timm models (timm-advnorm).')
    parser.add_argument('-c', '--config', default='', type=str, metavar='FILE',
                        help='YAML file of argument defaults (keys as the long options, with underscores), or the '
                             'name of a packaged recipe (see --list-recipes); command-line values win.')
    parser.add_argument('--list-recipes', action=_ListRecipes, help='List the packaged recipes and exit.')
    for add_group in (_model_group, _data_group, _optim_group, _adversarial_group, _misc_group):
        add_group(parser)
    return parser


def parse_args(argv: Optional[List[str]] = None, prog: str = 'train_adv.py') -> Tuple[argparse.Namespace, str]:
    """Parse `argv` with YAML defaults from ``-c``; returns the namespace and its YAML text (saved with the run)."""
    args, _ = parse_with_config(get_args_parser(prog), argv, resolve=resolve_config)
    if args.clip_mode == 'agc' and args.clip_grad is None:
        args.clip_grad = AGC_CLIP_FACTOR
    return args, yaml.safe_dump(vars(args), default_flow_style=False)
