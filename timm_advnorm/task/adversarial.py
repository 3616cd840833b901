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

* **Options**: `add_args` declares the method's own options in its "Method <name>" argument group; `check_args`
  refuses combinations it cannot train, before anything is built; `borrowed_options` and `attack_options` name the
  other options a run of it uses (`task.options`: a model card's recipe lists these, no other method's).
* **Construction**: `from_args` builds the task from the parsed options: the training attack (`attack_from_args`,
  the ``--attack`` of the attack registry), the method's options (`options_from_args`), the shared criterion
  settings.
* **Run**: `batch_scale` (loader rows per configured batch row), `mixed_rows`, `passes_per_image` (the cost model),
  `validated_branches`, `default_eval_metric`, `finalize_gradients`, and `prepare_distributed` (which tells DDP
  whether some parameters go unused in a step).
"""
import argparse
from typing import Any, Callable, Dict, Optional, Protocol, Tuple

import torch
import torch.nn as nn
from timm.task import ClassificationTask
from timm.utils.model import unwrap_model

from ..attacks.base import Attack, hard_labels
from ..attacks.registry import create_training_attack
from ..attacks.space import InputSpace
from ..layers.routing import has_mixture_bn, route

__all__ = ['AdversarialClassificationTask', 'ArgumentGroup', 'MixFn', 'TRAINING_ATTACK_OPTIONS']

MixFn = Callable[[torch.Tensor, torch.Tensor], tuple]

#: The shared options (argparse destinations) `AdversarialClassificationTask.attack_from_args` makes the training
#: attack from.
TRAINING_ATTACK_OPTIONS = (
    'attack', 'attack_eps', 'attack_step', 'attack_steps', 'attack_norm', 'attack_targeted', 'attack_clean_start_prob',
    'attack_clean_start_mode', 'attack_step_rule', 'attack_bn_stats')


class ArgumentGroup(Protocol):
    """What `AdversarialClassificationTask.add_args` declares options in: argparse's ``add_argument``."""

    def add_argument(self, *flags: str, **kwargs: Any) -> Any:
        ...


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
    #: Options another method declares (in its `add_args`) that this one reads too, as argparse destinations
    #: (``('alpha',)`` for a method weighting its clean loss with mixed's ``--alpha``).
    borrowed_options: Tuple[str, ...] = ()

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
        """Declare the method's own command-line options in `group`, its "Method <name>" group of the training
        command; none by default.

        The shared options (the attack and its budget, Mixup, label smoothing, the seed) are the command's, and an
        option another method declares may be read without declaring it again: every registered method's options are
        on the parser whichever method runs. A subclass that does not override this declares its parent's options
        again, which the command skips.
        """

    @classmethod
    def check_args(cls, args: argparse.Namespace) -> None:
        """Refuse option combinations the method cannot train, before anything is built; none by default.

        Raises:
            ValueError: One line naming the options.
        """

    @classmethod
    def attack_options(cls, args: argparse.Namespace) -> Tuple[str, ...]:
        """The shared training-attack options a run with `args` uses: by default every one `attack_from_args`
        reads (`TRAINING_ATTACK_OPTIONS`); a method that runs no attack, or its own, names fewer."""
        return TRAINING_ATTACK_OPTIONS

    @classmethod
    def from_args(
            cls,
            args: argparse.Namespace,
            model: nn.Module,
            space: InputSpace,
            *,
            num_classes: int,
            mixup_fn: Optional[MixFn] = None,
            amp_dtype: Optional[torch.dtype] = None,
            device: Optional[torch.device] = None,
            verbose: bool = True,
    ) -> 'AdversarialClassificationTask':
        """The task the training command's parsed options describe, for `model`.

        Args:
            args: The parsed options, after the distributed set-up (``rank``, ``distributed``).
            model: The model to train, on its device.
            space: The model's input normalization (budgets are on the 0-255 scale).
            num_classes: Classes of the run.
            mixup_fn: Mixup/CutMix, when the options ask for it (the criterion then takes soft targets).
            amp_dtype: Autocast dtype of the run, which attacks run their forwards under; None for fp32.
            device: The training device.
            verbose: Whether this process logs (rank 0).
        """
        criterion_kwargs = dict(smoothing=args.smoothing, soft_targets=mixup_fn is not None)
        return cls(model, **cls.kwargs_from_args(args, space, num_classes=num_classes, amp_dtype=amp_dtype),
                   mixup_fn=mixup_fn, criterion_kwargs=criterion_kwargs, device=device, verbose=verbose)

    @classmethod
    def kwargs_from_args(cls, args: argparse.Namespace, space: InputSpace, *, num_classes: int,
                         amp_dtype: Optional[torch.dtype] = None) -> Dict[str, Any]:
        """The constructor's method-specific keyword arguments (`from_args` adds the shared ones): the training
        attack (`attack_from_args`) and the method's own options (`options_from_args`).

        Override where the constructor takes others (Fast AdvProp runs its own attack inside the training pass).
        """
        return {'attack': cls.attack_from_args(args, space, amp_dtype), **cls.options_from_args(args)}

    @classmethod
    def options_from_args(cls, args: argparse.Namespace) -> Dict[str, Any]:
        """Constructor keyword arguments from the method's own options (those `add_args` declares); none by default."""
        return {}

    @classmethod
    def attack_from_args(cls, args: argparse.Namespace, space: InputSpace,
                         amp_dtype: Optional[torch.dtype] = None) -> Optional[Attack]:
        """The training attack the shared options describe: ``--attack`` from the attack registry with the options it
        takes (budget, step and its rule, iterations, threat model, targets, clean starts and how they are drawn, BN
        statistics), returning the last iterate, seeded per process. None for a method that runs no attack."""
        return create_training_attack(
            args.attack, space=space, eps=args.attack_eps, step=args.attack_step, steps=args.attack_steps,
            norm=args.attack_norm, targeted=args.attack_targeted, random_start=True,
            clean_start_prob=args.attack_clean_start_prob, clean_start_mode=args.attack_clean_start_mode,
            step_rule=args.attack_step_rule, best_iterate=False,
            bn_stats=args.attack_bn_stats, autocast_dtype=amp_dtype, seed=args.seed + args.rank)

    @property
    def attack_steps(self) -> int:
        """Forward+backward passes the attack spends per attacked image (0 without an attack)."""
        return 0 if self.attack is None else int(getattr(self.attack, 'steps', 1))

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
