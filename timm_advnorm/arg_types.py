"""argparse types of the numeric options: a finite number within a range, said in the error (and of ``--attack``).

The commands' numeric options (training, evaluation, the preprocessing options they share) and each method's own
(`AdversarialClassificationTask.add_args`) use them, so that every number is checked the same way, from the command
line and from a ``-c`` config alike.
"""
import argparse
import math
import re
from typing import Optional, Union

from .attacks.registry import check_training_attack
from .attacks.space import scale_255_text

__all__ = ['BooleanOptionalAction', 'Number', 'PixelScale', 'finite_float', 'non_negative_float', 'positive_float',
           'probability', 'fraction', 'open_fraction', 'non_negative_int', 'positive_int', 'seed_int', 'pixel_budget',
           'pixel_step', 'positive_pixel_step', 'training_attack']

#: argparse's action of an on/off option with its ``--no-`` form, for the methods' option declarations (which do not
#: import argparse themselves).
BooleanOptionalAction = argparse.BooleanOptionalAction


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


#: A value written as a fraction (``8/255``, ``0.5 / 255``): what papers write a budget as.
_FRACTION = re.compile(r'\s*(\d+(?:\.\d*)?|\.\d+)\s*/\s*(\d+(?:\.\d*)?|\.\d+)\s*')


class PixelScale(Number):
    """An argparse ``type`` for a budget or step on the 0-255 pixel scale: a finite number >= 0 that is not a value
    of the [0, 1] scale (``argument --attack-eps: got 0.031, but budgets are on the 0-255 scale; did you mean 8
    (= 8/255)?``), nor a fraction as papers write budgets (``argument --attack-eps: 8/255 looks like a fraction of
    the [0, 1] scale; budgets are on the 0-255 scale: give 8``).

    Read on the 0-255 scale, ε = 0.031 attacks with 0.031/255 of the pixel range: no attack, and the clean accuracy
    reported as robust accuracy. 0 stays allowed (a sweep's clean point; no adversary).

    Args:
        smallest: Values in (0, `smallest`) are refused as [0, 1]-scale values.
        noun: What the option holds, for the message (``budgets``, ``steps``).
        positive: Refuse 0 too (a step that never moves).
    """

    def __init__(self, smallest: float, noun: str, positive: bool = False):
        super().__init__(float, low=0, low_open=positive)
        self.smallest, self.noun = smallest, noun

    def __call__(self, text: str) -> float:
        fraction = _FRACTION.fullmatch(str(text))
        if fraction is not None and float(fraction.group(2)):
            meant = scale_255_text(float(fraction.group(1)) / float(fraction.group(2)))
            raise argparse.ArgumentTypeError(f'{text} looks like a fraction of the [0, 1] scale; {self.noun} are on '
                                             f'the 0-255 scale: give {meant}')
        number = super().__call__(text)
        if 0 < number < self.smallest:
            meant = scale_255_text(number)
            raise argparse.ArgumentTypeError(f'got {text}, but {self.noun} are on the 0-255 scale; did you mean '
                                             f'{meant} (= {meant}/255)?')
        return number


finite_float = Number(float)
non_negative_float = Number(float, low=0)
positive_float = Number(float, low=0, low_open=True)
probability = Number(float, low=0, high=1)
fraction = Number(float, low=0, high=1, high_open=True)  # [0, 1): smoothing, dropout, momentum
open_fraction = Number(float, low=0, high=1, low_open=True, high_open=True)
non_negative_int = Number(int, low=0)
positive_int = Number(int, low=1)
seed_int = Number(int, low=0, high=2 ** 32 - 1)  # numpy's seed range
#: ε on the 0-255 scale: 0, or at least 1 (one grey level; every paper's budget is 1/255 or more).
pixel_budget = PixelScale(1.0, 'budgets')
#: A step on the 0-255 scale: 0, or at least 0.1. Steps below one grey level are legitimate (Galloway's BIM step
#: ε/20 is 0.3825, NoFrost's min(1.25ε, ε+4)/N with ε=8 and N=20 is 0.5), but one below a tenth of a grey level is a
#: [0, 1]-scale step (2/255 = 0.0078, 0.01).
pixel_step = PixelScale(0.1, 'steps')
positive_pixel_step = PixelScale(0.1, 'steps', positive=True)


def training_attack(name: str) -> str:
    """argparse type of ``--attack``: a registered attack that can make training examples (the error names them)."""
    try:
        return check_training_attack(name)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None
