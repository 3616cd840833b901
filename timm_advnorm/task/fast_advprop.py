"""Fast AdvProp (Mei et al., ICLR 2022): AdvProp at the cost of vanilla training.

Its five ingredients, each here:

1. **Decoupled batches.** A loader batch of ``B / (1 - p_adv)`` rows: the first ``1 - p_adv`` share are clean rows
   for the clean BN, the rest (``p_adv`` = 0.2) are attacked and feed the adversarial BN (`batch_scale`).
2. **PGD-1 with gradient reuse.** The attack's forward/backward over the noisy rows (random start in the ε-box,
   untargeted, BN on batch statistics) is fused with the clean rows' training forward/backward: one backward yields
   the input gradient for the attack *and* parameter gradients for training (Shafahi et al.'s "free" reuse). Only
   where the gradient comes from differs from PGD: the start and the steps are PGD's own (`PGDGeometry`). The
   backward computes the input gradient of the attacked rows alone (`input_gradient.rows_gradient`).
   Every batch starts at random by default, as in Algorithm 1; the released code starts the whole batch from the
   clean images when ``torch.randn(1) <= prob_start_from_clean`` (default 0.2), in about 58% of the steps (Φ(0.2)):
   clean-start mode ``per_batch_randn`` (``--attack-clean-start-mode per_batch_randn``) does the same.
3. **Shuffle BN.** Before their training forward, adversarial rows are shuffled across ranks with one permutation
   shared by every rank, so no rank normalizes adversarial images with the statistics of the batch they were made
   from (label leaking, paper §3.2.1 and Fig. 2). A single process has no other rank to shuffle with.
4. **Re-balancing.** Every image of the batch has the same importance (paper §3.2.2): a clean row weighs 1, a
   noisy row β = 0.5 and an adversarial row β = 0.5, so an attacked image, seen twice, weighs as much as a clean
   one. The loss is the importance-weighted mean over all rows (`importance`), as in the released code (per-sample
   losses summed with these weights): clean rows, being 1 - p_adv of the batch, keep most of the weight.
5. **Synchronized update speed.** Shared parameters see every row, clean-BN parameters the clean rows only and
   adversarial-BN parameters the noisy and adversarial rows, so their gradients would stand 1 : (1 - p_adv) : p_adv.
   Each group's gradient is divided by the share of the importance reaching it (`group_scales`, applied by
   `finalize_gradients`), making each an importance-weighted mean over its own rows: the released code's division
   of every parameter's gradient by its ``_params_count``.

Mixup/CutMix apply to the clean rows only; adversarial rows keep their one-hot (smoothed) targets. With equal-budget
training, the script divides epochs by `passes_per_image` = ``p_adv * K + 1``.
"""
import logging
from contextlib import nullcontext
from dataclasses import dataclass
from typing import Any, ContextManager, Dict, List, Optional, Tuple

import torch
import torch.distributed as dist
import torch.nn as nn
from timm.data.mixup import mixup_target

from ..attacks.pgd import PGDGeometry, check_clean_start
from ..attacks.space import InputSpace
from ..layers.mixture_bn import MixtureBatchNorm2d
from ..layers.routing import has_mixture_bn, route
from ..layers.sync_mixture_bn import SyncMixtureBatchNorm2d
from ..arg_types import open_fraction, positive_float
from .adversarial import AdversarialClassificationTask, MixFn, TrainingContext
from .input_gradient import RowsGradient, rows_gradient
from .method_options import MethodOptions, option, shared_option
from .registry import register_task
from .training_attack import TrainingAttackOptions

__all__ = ['FastAdvPropOptions', 'FastAdvPropTask', 'parameter_groups', 'shuffle_across_ranks']

_logger = logging.getLogger(__name__)


def parameter_groups(model: nn.Module) -> Dict[str, List[nn.Parameter]]:
    """Split parameters into ``clean`` (clean-BN affine), ``adv`` (adversarial-BN affine) and ``shared`` (the rest)."""
    clean, adv = [], []
    for m in model.modules():
        if isinstance(m, MixtureBatchNorm2d):
            clean.extend(p for p in (m.weight, m.bias) if p is not None)
            adv.extend(p for p in (m.adv_bn.weight, m.adv_bn.bias) if p is not None)
    specific = {id(p) for p in clean + adv}
    shared = [p for p in model.parameters() if id(p) not in specific]
    return {'shared': shared, 'clean': clean, 'adv': adv}


def shuffle_across_ranks(
        tensors: Tuple[torch.Tensor, ...],
        seed: int,
        group=None,
) -> Tuple[torch.Tensor, ...]:
    """Gather rows from every rank, permute them with one permutation shared by all ranks, return this rank's share.

    Every rank draws the same permutation from a generator seeded with `seed` (vary it per step), so the union of
    the returned shares is exactly the union of the inputs: no row lost, none duplicated. Rows keep their alignment
    across `tensors` (inputs with their targets). Every rank must hold the same number of rows.
    """
    world_size = dist.get_world_size(group)
    rank = dist.get_rank(group)
    n = tensors[0].shape[0]
    generator = torch.Generator().manual_seed(seed)
    permutation = torch.randperm(n * world_size, generator=generator)
    mine = permutation[rank * n:(rank + 1) * n].to(tensors[0].device)
    shuffled = []
    for t in tensors:
        gathered = [torch.empty_like(t) for _ in range(world_size)]
        dist.all_gather(gathered, t.contiguous(), group=group)
        shuffled.append(torch.cat(gathered)[mine])
    return tuple(shuffled)


@dataclass(frozen=True)
class FastAdvPropOptions(MethodOptions):
    """Fast AdvProp's batch split, row weights (β of the adversarial rows is NoFrost's ``--adv-weight``) and two
    switches; its attack's budget, step and iterations are the shared training-attack options."""

    p_adv: float = option(0.2, type=open_fraction, help='Fast AdvProp: attacked share of the batch.')
    noise_weight: float = option(0.5, type=positive_float, help='Fast AdvProp: β of the noisy rows.')
    adv_weight: float = shared_option('nofrost', 0.5)
    shuffle_bn: bool = option(True, help='Fast AdvProp: shuffle adversarial rows across ranks before their forward.')
    rescale_grads: bool = option(True, help='Fast AdvProp: per-group gradient rescaling (synchronized update speed).')


def _several_processes() -> bool:
    """Whether this process trains with others (a process group of more than one)."""
    return dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1


@register_task('fast_advprop')
class FastAdvPropTask(AdversarialClassificationTask):
    """Fast AdvProp training step on a mixture-BN model.

    Args:
        model: A mixture-BN model.
        space: Input normalization of the model (budgets are on the 0-255 scale).
        eps: L∞ budget of the PGD attack (paper: 1.0).
        step: Attack step size (paper: ε, i.e. ``δ' = δ + ε·sign(g)``); defaults to `eps`.
        steps: K, attack iterations reusing their gradients (paper: 1).
        p_adv: Share of the loader batch that is attacked (paper: 0.2).
        noise_weight: β, the importance of a noisy (intermediate) row relative to a clean row's 1, split evenly
            across the K iterates (paper: 0.5).
        adv_weight: β, the importance of an adversarial row (paper: 0.5).
        shuffle_bn: Shuffle adversarial rows across ranks before their training forward.
        rescale_grads: Divide each parameter group's gradient by the share of the importance reaching it.
        num_classes: Classes, to one-hot the adversarial rows' targets when Mixup makes the clean ones soft.
        label_smoothing: Smoothing of those one-hot targets (match the Mixup's).
        seed: Seeds the random start (with the step counter and the rank: every sample its own start) and the shuffle
            permutation (with the step counter: the same on every rank).
        clean_start_prob: Probability of starting the attack from the clean images instead (Algorithm 1: 0).
        clean_start_mode: How clean starts are drawn (`attacks.pgd.CLEAN_START_MODES`); ``per_batch_randn`` is the
            released code's rule (whole batch, ``randn() <= 0.2``) and uses no probability.
    """

    trained_branches = ('clean', 'adv')
    default_eval_metric = 'top1'  # inference on the clean branch; the paper reports clean accuracy
    supports_loss_scaling = False  # the fused clean + attack pass back-propagates inside `forward`, unscaled
    options_class = FastAdvPropOptions

    def __init__(
            self,
            model: nn.Module,
            space: InputSpace,
            eps: float = 1.0,
            step: Optional[float] = None,
            steps: int = 1,
            p_adv: float = 0.2,
            noise_weight: float = 0.5,
            adv_weight: float = 0.5,
            shuffle_bn: bool = True,
            rescale_grads: bool = True,
            num_classes: Optional[int] = None,
            label_smoothing: float = 0.0,
            seed: int = 0,
            clean_start_prob: float = 0.0,
            clean_start_mode: str = 'per_sample',
            **kwargs,
    ):
        if not has_mixture_bn(model):
            raise ValueError('Fast AdvProp needs a mixture-BN model (e.g. mbn_resnet50).')
        if not 0.0 < p_adv < 1.0:
            raise ValueError(f'p_adv must be in (0, 1), got {p_adv}.')
        if steps < 1:
            raise ValueError(f'steps must be >= 1, got {steps}.')
        if noise_weight <= 0 or adv_weight < 0:
            raise ValueError(f'noise_weight must be > 0 (the attack steps along the gradient of the weighted noisy '
                             f'loss) and adv_weight >= 0, got {noise_weight} and {adv_weight}.')
        check_clean_start(clean_start_prob, clean_start_mode)
        super().__init__(model, attack=None, **kwargs)
        self.space = space
        self.eps = eps
        self.step = eps if step is None else step
        self.steps = steps
        self.p_adv = p_adv
        self.noise_weight = noise_weight
        self.adv_weight = adv_weight
        self.shuffle_bn = shuffle_bn
        self.num_classes = num_classes
        self.label_smoothing = label_smoothing
        self.seed = seed
        self.clean_start_prob = clean_start_prob
        self.clean_start_mode = clean_start_mode
        self.step_count = 0
        self.group_scales: Dict[str, float] = {}
        self.rescale_grads = rescale_grads
        self._groups = parameter_groups(model)

    @classmethod
    def check_options(cls, options: FastAdvPropOptions, attack_options: TrainingAttackOptions) -> None:
        """Its attack is its released code's PGD: no other ``--attack``, no other ``--attack-norm``, and clean starts
        as Algorithm 1 (none) or as its released code (``per_batch_randn``): it takes no clean-start probability."""
        if attack_options.attack != 'pgd':
            raise ValueError(f"Fast AdvProp's attack is its own gradient-reuse PGD (its released code): --attack "
                             f"{attack_options.attack} does not apply.")
        if attack_options.attack_norm != 'linf':
            raise ValueError(f"Fast AdvProp's attack is L-inf PGD (its released code): --attack-norm "
                             f"{attack_options.attack_norm} does not apply.")
        if attack_options.attack_clean_start_mode == 'per_batch':
            raise ValueError("Fast AdvProp takes no clean-start probability (--attack-clean-start-prob): use "
                             "--attack-clean-start-mode per_sample (Algorithm 1, always a random start) or "
                             "per_batch_randn (its released code).")

    @classmethod
    def used_attack_options(cls, options: FastAdvPropOptions) -> Tuple[str, ...]:
        """Those `task_kwargs` reads, and the attack and norm `check_options` holds to its PGD."""
        return 'attack', 'attack_eps', 'attack_step', 'attack_steps', 'attack_norm', 'attack_clean_start_mode'

    @classmethod
    def from_options(cls, model: nn.Module, options: FastAdvPropOptions, attack_options: TrainingAttackOptions,
                     context: TrainingContext, *, mixup_fn: Optional[MixFn] = None,
                     device: Optional[torch.device] = None, verbose: bool = True) -> 'FastAdvPropTask':
        """As the base class's, and says when shuffle BN cannot prevent label leaking (one process, or statistics
        synchronized across processes)."""
        distributed = _several_processes()
        synchronized = any(isinstance(m, SyncMixtureBatchNorm2d) for m in model.modules())
        if verbose and options.shuffle_bn and (not distributed or synchronized):
            _logger.warning('Fast AdvProp %s: adversarial rows are normalized with statistics of the batch they were '
                            'made from, so shuffle BN cannot prevent label leaking (Mei et al. Sec. 3.2.1).',
                            'with --sync-bn' if distributed else 'in one process (shuffle BN needs torchrun)')
        return super().from_options(model, options, attack_options, context, mixup_fn=mixup_fn, device=device,
                                    verbose=verbose)

    @classmethod
    def task_kwargs(cls, options: FastAdvPropOptions, attack_options: TrainingAttackOptions,
                    context: TrainingContext) -> Dict[str, Any]:
        """No attack object: the shared budget, step and iterations configure the PGD run inside the training pass."""
        return dict(space=context.space, eps=attack_options.attack_eps, step=attack_options.attack_step,
                    steps=attack_options.attack_steps, num_classes=context.num_classes,
                    label_smoothing=context.smoothing, seed=context.seed,
                    clean_start_mode=attack_options.attack_clean_start_mode, **cls.method_kwargs(options))

    @property
    def attack_steps(self) -> int:
        return self.steps

    def _set_attack_steps(self, steps: int) -> None:
        self.steps = steps

    @property
    def passes_per_image(self) -> float:
        return self.p_adv * self.steps + 1.0

    @property
    def batch_scale(self) -> float:
        """Loader batch size over the clean-BN batch size: ``1 / (1 - p_adv)``."""
        return 1.0 / (1.0 - self.p_adv)

    def importance(self, n_clean: int, n_adv: int) -> Dict[str, float]:
        """Share of the batch's total importance held by the clean, noisy and adversarial rows (sums to 1)."""
        parts = {'clean': float(n_clean), 'noise': self.noise_weight * n_adv, 'adv': self.adv_weight * n_adv}
        total = sum(parts.values())
        return {name: part / total for name, part in parts.items()}

    def scales_for(self, n_clean: int, n_adv: int) -> Dict[str, float]:
        """Per-group gradient factor: one over the share of the importance whose rows reach the group."""
        share = self.importance(n_clean, n_adv)
        return {'shared': 1.0, 'clean': 1.0 / share['clean'], 'adv': 1.0 / (share['noise'] + share['adv'])}

    @torch.no_grad()
    def finalize_gradients(self) -> None:
        """Synchronize update speed: scale each parameter group's accumulated gradient by its `group_scales` factor.

        Runs once after both backward passes (and after DDP's all-reduce, which commutes with the scaling), with the
        factors of the last batch's split.
        """
        if not self.rescale_grads:
            return
        for name, params in self._groups.items():
            grads = [p.grad for p in params if p.grad is not None]
            if grads and self.group_scales[name] != 1.0:  # the shared group, nearly every parameter, stays as it is
                torch._foreach_mul_(grads, self.group_scales[name])

    def split_sizes(self, batch_size: int) -> Tuple[int, int]:
        """Clean and attacked rows of a loader batch: the ``p_adv`` share is attacked, at least one row each.

        Raises:
            ValueError: The batch leaves no clean row.
        """
        n_adv = max(1, int(round(self.p_adv * batch_size)))
        if batch_size - n_adv < 1:
            raise ValueError(f'Fast AdvProp needs clean and attacked rows in every batch: a batch of {batch_size} at '
                             f'p_adv={self.p_adv} leaves no clean row.')
        return batch_size - n_adv, n_adv

    def mixed_rows(self, batch_size: int) -> int:
        """Only the clean rows are mixed."""
        return self.split_sizes(batch_size)[0]

    def split_batch(self, input: torch.Tensor, target: torch.Tensor):
        """Clean rows first, then the ``p_adv`` share to attack (`split_sizes`)."""
        n_clean, _ = self.split_sizes(input.shape[0])
        return input[:n_clean], target[:n_clean], input[n_clean:], target[n_clean:]

    def get_task_state(self, module: Optional[nn.Module] = None, ema: bool = False) -> Dict[str, Any]:
        """The step counter, which seeds the random starts and the shuffle: a resumed run continues the sequence."""
        return {} if ema else {'step_count': self.step_count}

    def load_task_state(self, state: Optional[Dict[str, Any]], strict: bool = True, module: Optional[nn.Module] = None,
                        ema: bool = False) -> None:
        if state and not ema:
            self.step_count = int(state.get('step_count', 0))

    def _adv_targets(self, target: torch.Tensor, soft_like: torch.Tensor) -> torch.Tensor:
        if soft_like.ndim == target.ndim:
            return target
        num_classes = self.num_classes or soft_like.shape[1]
        return mixup_target(target, num_classes, lam=1.0, smoothing=self.label_smoothing)

    def _geometry(self, x: torch.Tensor) -> PGDGeometry:
        """The L∞ ball and step of the attack on rows like `x` (the released code's: no step rule)."""
        return PGDGeometry.build(self.space, self.eps, self.step, 'linf', x)

    def _random_start(self, x: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
        """PGD's random start in the ε-box, none for the rows that start clean (`clean_start_mode`): the
        perturbation, not yet clipped to valid pixels."""
        return self._geometry(x).random_start(x, self.clean_start_prob, generator, self.clean_start_mode)

    def _noisy_rows_gradient(self, input: torch.Tensor, rows: slice) -> ContextManager[RowsGradient]:
        """The attack's gradient to the noisy rows of a training forward's input, its share at the first convolution
        computed for those rows alone (`rows_gradient`); a compiled model gets autograd's, since the hooks this needs
        would be baked into its graph."""
        module = self.trainable_module
        if isinstance(module, nn.parallel.DistributedDataParallel):
            module = module.module
        if hasattr(module, '_orig_mod'):  # torch.compile's wrapper
            return nullcontext(RowsGradient(input, rows))
        return rows_gradient(self.attack_module(), input, rows)

    def _distributed(self) -> bool:
        return self.shuffle_bn and _several_processes()

    def forward(self, input: torch.Tensor, target: torch.Tensor) -> Dict[str, torch.Tensor]:
        """Runs the fused clean + attack pass (its backward included) and returns the adversarial loss to back-prop.

        Parameter gradients of the clean and noisy rows are already accumulated when this returns; the caller's
        ``loss.backward()`` adds the adversarial rows' gradients before the optimizer step.
        """
        model = self.attack_module()
        self.step_count += 1
        rank = dist.get_rank() if dist.is_available() and dist.is_initialized() else 0
        generator = torch.Generator().manual_seed((self.seed * 1_000_003 + self.step_count) * 4099 + rank)
        x_clean, y_clean, x_att, y_att = self.split_batch(input, target)
        x_clean, y_clean = self.mix(x_clean, y_clean)
        y_att = self._adv_targets(y_att, y_clean)
        n_clean = x_clean.shape[0]
        share = self.importance(n_clean, x_att.shape[0])
        self.group_scales = self.scales_for(n_clean, x_att.shape[0])

        geometry = self._geometry(x_att)
        x_noisy = geometry.clip(x_att + self._random_start(x_att, generator))
        noise_share = share['noise'] / self.steps
        loss_noise_total = torch.zeros((), device=input.device)
        for k in range(self.steps):
            with self.no_sync():  # forward included: DDP decides at the forward whether the backward all-reduces
                if k == 0:
                    fused = torch.cat([x_clean, x_noisy]).requires_grad_(True)
                    with self._noisy_rows_gradient(fused, slice(n_clean, None)) as noisy_gradient:
                        with route(model, 'split', n_clean=n_clean):
                            output = self.trainable_module(fused)
                    out_clean, out_noisy = output[:n_clean], output[n_clean:]
                    loss_clean = self.criterion(out_clean, y_clean)
                    weighted_clean = share['clean'] * loss_clean
                else:
                    x_noisy.requires_grad_(True)
                    with self._noisy_rows_gradient(x_noisy, slice(None)) as noisy_gradient:
                        with route(model, 'adv'):
                            out_noisy = self.trainable_module(x_noisy)
                loss_noisy = self.criterion(out_noisy, y_att)
                reused = noise_share * loss_noisy + (weighted_clean if k == 0 else 0.0)
                reused.backward()
            x_noisy = geometry.step(x_noisy.detach(), x_att, noisy_gradient())
            loss_noise_total = loss_noise_total + loss_noisy.detach() / self.steps

        x_adv, y_adv = x_noisy, y_att
        if self._distributed():
            x_adv, y_adv = shuffle_across_ranks((x_adv, y_adv), seed=self.seed * 7919 + self.step_count)
        with route(model, 'adv'):
            out_adv = self.trainable_module(x_adv)
        loss_adv = self.criterion(out_adv, y_adv)
        loss = share['adv'] * loss_adv
        total = weighted_clean.detach() + share['noise'] * loss_noise_total + loss.detach()
        return {'loss': loss, 'output': out_clean,
                **self.loss_parts(loss_total=total, loss_clean=loss_clean, loss_noise=loss_noise_total,
                                  loss_adv=loss_adv)}
