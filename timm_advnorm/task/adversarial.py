"""The base of every adversarial training method: a timm `ClassificationTask` that owns its attack.

A method is a subclass whose `forward(input, target)` returns ``loss`` (to back-propagate), ``output`` (logits for
train-time metrics) and its loss parts (``loss_clean``, ``loss_adv``, ...) for logging; a part that is the whole loss
by construction is left out, so each quantity is logged once. The class also says what the script validates and
ranks by: the mixture-BN branches its training pass routes rows through (`trained_branches`) and the metric its
papers report (`default_eval_metric`). The training loop never branches on the method. The task also owns
Mixup/CutMix, because where mixing happens is part of a method (Fast AdvProp mixes clean rows only; the others mix
first and attack the mixed images with the soft target).

The contract with the training command, each part with a default here, so that a method is one module registered
with `register_task`:

* **Options**: `options_class`, a frozen dataclass of the method's own options (`method_options.option`; those it
  reads from another method declared with `method_options.shared_option`), which `add_args` declares in its "Method
  <name>" argument group; `check_options` refuses combinations it cannot train, before anything is built;
  `used_attack_options` names the shared training-attack options a run of it uses (`task.options`: a model card's
  recipe lists these and its own, no other method's).
* **Construction**: `from_options` builds the task from its options, the training attack's (`TrainingAttackOptions`)
  and the run's `TrainingContext`: the training attack, the method's options (`method_kwargs`), the shared
  criterion settings.
* **Run**: `batch_scale` (loader rows per configured batch row), `mixed_rows`, `passes_per_image` (the cost model),
  `attack_steps_at_most` (the short attack a plan measures with), `validated_branches`, `default_eval_metric`,
  `finalize_gradients`, and `prepare_distributed` (which tells DDP whether some parameters go unused in a step).
"""
import contextlib
import dataclasses
from dataclasses import dataclass
from typing import Any, Callable, ClassVar, Dict, Iterator, Optional, Protocol, Tuple, Type

import torch
import torch.nn as nn
from timm.task import ClassificationTask
from timm.utils.model import unwrap_model

from ..attacks.base import Attack, hard_labels
from ..attacks.space import InputSpace
from ..layers.routing import has_mixture_bn, route
from .method_options import MethodOptions, is_shared, option_flag, parser_arguments
from .training_attack import TRAINING_ATTACK_OPTIONS, TrainingAttackOptions

__all__ = ['AdversarialClassificationTask', 'ArgumentGroup', 'MixFn', 'TRAINING_ATTACK_OPTIONS', 'TrainingContext']

MixFn = Callable[[torch.Tensor, torch.Tensor], tuple]


class ArgumentGroup(Protocol):
    """What `AdversarialClassificationTask.add_args` declares options in: a parser's ``add_argument``."""

    def add_argument(self, *flags: str, **kwargs: Any) -> Any:
        ...


@dataclass(frozen=True)
class TrainingContext:
    """What a task is built for besides its options: the run's input space, classes, label smoothing, seed and
    process.

    Attributes:
        space: The model's input normalization (budgets are on the 0-255 scale).
        num_classes: Classes of the run.
        smoothing: Label smoothing of the criterion.
        seed: The run's seed; random draws made per process add `rank` to it.
        rank: This process's rank (0 in a single process).
        amp_dtype: Autocast dtype of the run, which attacks run their forwards under; None for fp32.
    """

    space: InputSpace
    num_classes: int
    smoothing: float = 0.0
    seed: int = 0
    rank: int = 0
    amp_dtype: Optional[torch.dtype] = None


class AdversarialClassificationTask(ClassificationTask):
    """Classification task whose loss involves adversarial examples made on the fly.

    Args:
        model: Model to train (an MBN model for the methods that route branches).
        attack: Configured attack making the training adversarial examples (last iterate); None for methods that
            run their own attack inside the training pass (Fast AdvProp).
        mixup_fn: Optional timm `Mixup`, applied by the task where its method says.
        criterion, criterion_kwargs, device, dtype, verbose: As timm's `ClassificationTask`.
    """

    #: The method's name, set by `register_task`.
    method: str = ''
    #: Whether each training forward runs both branches of a mixture-BN model (the fused MBN pass); otherwise a
    #: pass on one route leaves the other branch's parameters without gradients, which DDP must be told.
    uses_both_branches: bool = False
    #: Branches of a mixture-BN model whose BN the training step routes rows through (over all its passes, unlike
    #: `uses_both_branches`), in validation order. A branch no row reaches keeps its initial weights and statistics:
    #: its accuracies say nothing about the run, and ranking checkpoints by them keeps whichever epoch chance favoured.
    trained_branches: Tuple[str, ...] = ('clean',)
    #: Validation metric that ranks checkpoints unless the user names one: the accuracy the method's papers report.
    default_eval_metric: str = 'robust_top1'
    #: Whether the training loop's float16 loss scaler covers every backward of a step: true when the step's only
    #: backward is the loop's own, of the loss `forward` returns.
    supports_loss_scaling: bool = True
    #: The method's own options, a frozen `MethodOptions` dataclass (none by default); a subclass that does not set
    #: it takes its parent's.
    options_class: ClassVar[Type[MethodOptions]] = MethodOptions

    def __init__(
            self,
            model: nn.Module,
            attack: Optional[Attack],
            mixup_fn: Optional[MixFn] = None,
            criterion: Optional[nn.Module] = None,
            criterion_kwargs: Optional[dict] = None,
            device: Optional[torch.device] = None,
            dtype: Optional[torch.dtype] = None,
            verbose: bool = True,
    ):
        super().__init__(model, criterion=criterion, criterion_kwargs=criterion_kwargs, device=device, dtype=dtype,
                         verbose=verbose)
        self.attack = attack
        self.mixup_fn = mixup_fn

    @classmethod
    def add_args(cls, group: ArgumentGroup) -> None:
        """Declare the method's options (`options_class`) in `group`, its "Method <name>" group of the training
        command, but those it shares with another method (`method_options.shared_option`), whose flags are that
        method's.

        The shared options (the attack and its budget, Mixup, label smoothing, the seed) are the command's. A
        subclass that keeps its parent's `options_class` declares its options again, which the command skips.
        """
        for field in dataclasses.fields(cls.options_class):
            if not is_shared(field):
                group.add_argument(option_flag(field.name), **parser_arguments(field))

    @classmethod
    def check_options(cls, options: MethodOptions, attack_options: TrainingAttackOptions) -> None:
        """Refuse option combinations the method cannot train, before anything is built; none by default.

        Raises:
            ValueError: One line naming the options.
        """

    @classmethod
    def used_attack_options(cls, options: MethodOptions) -> Tuple[str, ...]:
        """The training-attack options (`TrainingAttackOptions` fields) a run with `options` uses: by default every
        one, which make its attack; a method that runs no attack names none (and gets none), one that runs its own
        names those it reads."""
        return TRAINING_ATTACK_OPTIONS

    @classmethod
    def from_options(
            cls,
            model: nn.Module,
            options: MethodOptions,
            attack_options: TrainingAttackOptions,
            context: TrainingContext,
            *,
            mixup_fn: Optional[MixFn] = None,
            device: Optional[torch.device] = None,
            verbose: bool = True,
    ) -> 'AdversarialClassificationTask':
        """The task `options` describe, for `model`.

        Args:
            model: The model to train, on its device.
            options: The method's options (an `options_class`).
            attack_options: The training attack.
            context: The run it trains in: input space, classes, label smoothing, seed, process, autocast dtype.
            mixup_fn: Mixup/CutMix, when the run asks for it (the criterion then takes soft targets).
            device: The training device.
            verbose: Whether this process logs (rank 0).
        """
        criterion_kwargs = dict(smoothing=context.smoothing, soft_targets=mixup_fn is not None)
        return cls(model, **cls.task_kwargs(options, attack_options, context), mixup_fn=mixup_fn,
                   criterion_kwargs=criterion_kwargs, device=device, verbose=verbose)

    @classmethod
    def task_kwargs(cls, options: MethodOptions, attack_options: TrainingAttackOptions,
                    context: TrainingContext) -> Dict[str, Any]:
        """The constructor's method-specific keyword arguments (`from_options` adds the shared ones): the training
        attack, seeded per process, when the method uses it (`used_attack_options`), and the method's options
        (`method_kwargs`).

        Override where the constructor takes others (Fast AdvProp runs its own attack inside the training pass).
        """
        attack = None
        if 'attack' in cls.used_attack_options(options):
            attack = attack_options.create_attack(context.space, context.seed + context.rank, context.amp_dtype)
        return {'attack': attack, **cls.method_kwargs(options)}

    @classmethod
    def method_kwargs(cls, options: MethodOptions) -> Dict[str, Any]:
        """Constructor keyword arguments from the method's options: each option as the argument of its name."""
        return {field.name: getattr(options, field.name) for field in dataclasses.fields(options)}

    @property
    def attack_steps(self) -> int:
        """Forward+backward passes the attack spends per attacked image (0 without an attack)."""
        return 0 if self.attack is None else int(getattr(self.attack, 'steps', 1))

    @contextlib.contextmanager
    def attack_steps_at_most(self, steps: int) -> Iterator[None]:
        """Within the block, the training attack runs at most `steps` iterations, the method otherwise unchanged; its
        own count is restored after. A plan (``--plan``) measures a step's memory and counts its FLOPs so, without
        paying for a long attack: every iteration costs the same and frees its graph before the next."""
        saved = self.attack_steps
        self._set_attack_steps(min(saved, steps))
        try:
            yield
        finally:
            self._set_attack_steps(saved)

    def _set_attack_steps(self, steps: int) -> None:
        """Make the attack run `steps` iterations (an attack without iterations, FGSM, is left as it is)."""
        if self.attack is not None and hasattr(self.attack, 'steps'):
            self.attack.steps = steps

    @property
    def passes_per_image(self) -> float:
        """Training cost in forward+backward passes per training image (vanilla training = 1).

        The papers' budget unit: PGD-K adversarial training costs K + 1, AdvProp K + 2, Fast AdvProp
        ``p_adv * K + 1``. Logged with every run. By default the attack's passes plus one training pass.
        """
        return self.attack_steps + 1.0

    @property
    def batch_scale(self) -> float:
        """Rows of a loader batch per row of the configured batch size (``--batch-size``); 1 by default."""
        return 1.0

    @property
    def validated_branches(self) -> Tuple[str, ...]:
        """Branches validated each epoch: the trained ones, or the clean route alone on a model without mixture BN
        (which has no other)."""
        return self.trained_branches if has_mixture_bn(self.attack_module()) else ('clean',)

    def prepare_distributed(self, device_ids: Optional[list] = None, **ddp_kwargs) -> 'AdversarialClassificationTask':
        """Wrap the model in DDP; with a mixture-BN model and single-route passes, finding unused parameters."""
        if has_mixture_bn(self.trainable_module) and not self.uses_both_branches:
            ddp_kwargs.setdefault('find_unused_parameters', True)
        return super().prepare_distributed(device_ids=device_ids, **ddp_kwargs)

    def attack_module(self) -> nn.Module:
        """The unwrapped model the attack runs on (no DDP reducer or compiled graph in the attack loop)."""
        return unwrap_model(self.trainable_module)

    def mixed_rows(self, batch_size: int) -> int:
        """How many rows of a loader batch of `batch_size` Mixup/CutMix mix (timm's mixing needs an even count)."""
        return batch_size

    def mix(self, input: torch.Tensor, target: torch.Tensor):
        """Apply Mixup/CutMix when configured; the attack then sees the mixed images and the soft target."""
        if self.mixup_fn is None:
            return input, target
        return self.mixup_fn(input, target)

    def adversarial(self, input: torch.Tensor, target: torch.Tensor, branch: Optional[str] = None) -> torch.Tensor:
        """Adversarial copies of `input` made against the model (on the `branch` route when given).

        Targeted attacks draw their targets from the hard labels (the dominant class of a soft target); the loss
        is the per-sample cross-entropy on the given (possibly soft) target.
        """
        model = self.attack_module()
        labels = hard_labels(target) if self.attack.targeted else target
        if branch is None:
            return self.attack(model, input, labels)
        with route(model, branch):
            return self.attack(model, input, labels)

    def finalize_gradients(self) -> None:
        """Called by the training loop after the backward pass and before clipping and the optimizer step.

        A no-op here; methods that shape their gradients (Fast AdvProp's per-group rescaling) override it.
        """

    def loss_parts(self, **parts: torch.Tensor) -> Dict[str, torch.Tensor]:
        """Detached copies of the named loss components, for logging."""
        return {name: value.detach() for name, value in parts.items()}
