"""Mixture batch normalization: separate BN statistics for clean and adversarial images.

Xie & Yuille, *Intriguing properties of adversarial training at scale* (ICLR 2020) and Xie et al., *AdvProp*
(CVPR 2020) show that clean and adversarial images come from two domains whose mixture a single BN estimates
badly; a BN per domain fixes it.

`MixtureBatchNorm2d` *is* the clean (main) BN, so its keys match timm's plain BN and a checkpoint minus the
``adv_bn.*`` keys loads strictly into the plain timm model. The child ``adv_bn`` holds the adversarial statistics
and affine parameters. Which branch a forward uses is an explicit per-module route (see `routing.py`):

* ``clean`` / ``adv``: the whole batch through one branch;
* ``split``: one fused forward over ``cat([clean, adv])``; the first ``n_clean`` rows use the clean BN, the rest the
  adversarial BN (full-batch convolutions, no second pass; in CPU training both blocks are normalized into one output,
  `split_batch_norm`);
* ``interleaved``: the same fused forward for equal halves laid out as pairs ``(clean_0, adv_0, clean_1, ...)``
  (`routing.interleave`). In NCHW memory the pairs make one batch of twice the channels, so both branches run as a
  single batch norm with no split or concatenation copies: the fastest way to train mixture BN;
* ``mix``: ``(1 - gamma) * clean_bn(x) + gamma * adv_bn(x)`` (feature interpolation, an inference tool).

Gradient checkpointing recomputes a forward during the backward pass, outside the ``route`` block the original
forward ran in: every change of a layer's route is stamped with its autograd position (`recompute.PositionedHistory`),
so a recomputation runs on the route the original forward built its nodes with, and it leaves the running statistics
(and ``num_batches_tracked``) alone, since the original forward already counted the batch.
"""
import weakref
from typing import Optional, Tuple

import torch
import torch.nn as nn
import torch.nn.functional as F
from timm.layers import create_act_layer, get_act_layer
from timm.models import register_notrace_module

from .idle_branch import join_idle
from .recompute import PositionedHistory, is_recomputing, recomputed_position
from .split_batch_norm import BlockNorm, split_batch_norm

__all__ = ['MixtureBatchNorm2d', 'MixtureBatchNormAct2d', 'ROUTES']

#: The routes a mixture BN layer runs (see the module's docstring); `timm_advnorm.layers.route` sets one.
ROUTES: Tuple[str, ...] = ('clean', 'adv', 'split', 'interleaved', 'mix')

RouteSetting = Tuple[str, int, float]
_ROUTE_FIELDS = ('route', 'n_clean', 'gamma')
# Route changes of each layer since its first one, outside the module: copies, pickles and scripted models get none.
_ROUTE_HISTORIES: 'weakref.WeakKeyDictionary[MixtureBatchNorm2d, PositionedHistory[RouteSetting]]' = \
    weakref.WeakKeyDictionary()


def _cat_branches(clean: Optional[torch.Tensor], adv: Optional[torch.Tensor]) -> Optional[torch.Tensor]:
    """The two branches' per-channel tensors as one, in the channel order of an interleaved batch."""
    if clean is None or adv is None:
        return None
    return torch.cat([clean, adv])


@register_notrace_module
class MixtureBatchNorm2d(nn.BatchNorm2d):
    """BatchNorm2d with a second, adversarial set of statistics and affine parameters.

    Args:
        num_features: Number of channels.
        eps: Added to the variance for numerical stability.
        momentum: Running-statistics momentum (None: cumulative average), shared by both branches.
        affine: Learn per-branch scale and shift.
        track_running_stats: Keep running statistics in both branches.

    Attributes:
        adv_bn: The adversarial branch, a plain `nn.BatchNorm2d`.
        route: One of `ROUTES`; set it through `timm_advnorm.layers.route`, not by hand.
        n_clean: Rows routed to the clean branch under the ``split`` route (the ``interleaved`` route needs none).
        gamma: Weight of the adversarial branch under the ``mix`` route.
    """

    route: str
    n_clean: int
    gamma: float

    def __init__(
            self,
            num_features: int,
            eps: float = 1e-5,
            momentum: Optional[float] = 0.1,
            affine: bool = True,
            track_running_stats: bool = True,
            device=None,
            dtype=None,
    ):
        super().__init__(
            num_features, eps=eps, momentum=momentum, affine=affine,
            track_running_stats=track_running_stats, device=device, dtype=dtype)
        self.adv_bn = nn.BatchNorm2d(
            num_features, eps=eps, momentum=momentum, affine=affine,
            track_running_stats=track_running_stats, device=device, dtype=dtype)
        self.route = 'clean'
        self.n_clean = 0
        self.gamma = 0.0

    def copy_clean_to_adv(self) -> None:
        """Make the adversarial branch an exact copy of the clean one (statistics and affine parameters)."""
        with torch.no_grad():
            for name in ('weight', 'bias', 'running_mean', 'running_var', 'num_batches_tracked'):
                src, dst = getattr(self, name), getattr(self.adv_bn, name)
                if src is not None and dst is not None:
                    dst.copy_(src)

    def __setattr__(self, name: str, value) -> None:
        """Set an attribute; once built, a change of the route, `n_clean` or `gamma` is stamped with its autograd
        position, so that a checkpointing recomputation finds the route its original forward ran on."""
        if name not in _ROUTE_FIELDS or 'gamma' not in self.__dict__:
            super().__setattr__(name, value)
            return
        history = _ROUTE_HISTORIES.get(self)
        if history is None:
            history = _ROUTE_HISTORIES[self] = PositionedHistory(self._route_setting())
        super().__setattr__(name, value)
        history.set(self._route_setting())

    def _route_setting(self) -> RouteSetting:
        return self.route, self.n_clean, self.gamma

    def _recomputed_route_setting(self) -> RouteSetting:
        """The route, `n_clean` and `gamma` the forward being recomputed ran with."""
        history = _ROUTE_HISTORIES.get(self)
        position = recomputed_position()
        if history is None or position is None:  # never re-routed since built or copied: the route it has
            return self._route_setting()
        return history.at(position)

    def _step_momentum(self, num_batches_tracked: Optional[torch.Tensor], count_batch: bool) -> float:
        """This forward's running-statistics momentum, counting the batch in training when `count_batch`
        (`nn.BatchNorm2d`'s rules)."""
        momentum = 0.0 if self.momentum is None else self.momentum
        if self.training and self.track_running_stats and num_batches_tracked is not None:
            if count_batch:
                num_batches_tracked.add_(1)
            momentum = 1.0 / float(num_batches_tracked) if self.momentum is None else self.momentum
        return momentum

    def _counted(self, stats: Optional[torch.Tensor], count_batch: bool) -> Optional[torch.Tensor]:
        """`stats` for a forward that may update them; a throw-away copy (the same saved tensors for autograd) for a
        training forward that must not count its batch."""
        if stats is None or count_batch or not self.training:
            return stats
        return stats.clone()

    def _branch_norm(
            self,
            x: torch.Tensor,
            weight: Optional[torch.Tensor],
            bias: Optional[torch.Tensor],
            running_mean: Optional[torch.Tensor],
            running_var: Optional[torch.Tensor],
            momentum: float,
            count_batch: bool,
    ) -> torch.Tensor:
        """Batch norm with one branch's tensors, its running statistics updated only when `count_batch`."""
        return self._batch_norm(x, weight, bias, self._counted(running_mean, count_batch),
                                self._counted(running_var, count_batch), momentum)

    def _batch_norm(
            self,
            x: torch.Tensor,
            weight: Optional[torch.Tensor],
            bias: Optional[torch.Tensor],
            running_mean: Optional[torch.Tensor],
            running_var: Optional[torch.Tensor],
            momentum: float,
    ) -> torch.Tensor:
        """Batch norm of `x` with the given tensors: batch statistics in training, running ones in eval."""
        use_batch_stats = self.training or (running_mean is None and running_var is None)
        keep_stats = not self.training or self.track_running_stats
        return F.batch_norm(
            x,
            running_mean if keep_stats else None,
            running_var if keep_stats else None,
            weight,
            bias,
            use_batch_stats,
            momentum,
            self.eps,
        )

    def _clean(self, x: torch.Tensor, count_batch: bool, join_adv: bool = False) -> torch.Tensor:
        momentum = self._step_momentum(self.num_batches_tracked, count_batch)
        bias = self._joined_bias(self.bias, self.adv_bn.weight, self.adv_bn.bias) if join_adv else self.bias
        return self._branch_norm(x, self.weight, bias, self.running_mean, self.running_var, momentum, count_batch)

    def _adv(self, x: torch.Tensor, count_batch: bool, join_clean: bool = False) -> torch.Tensor:
        bn = self.adv_bn
        momentum = self._step_momentum(bn.num_batches_tracked, count_batch)
        bias = self._joined_bias(bn.bias, self.weight, self.bias) if join_clean else bn.bias
        return self._branch_norm(x, bn.weight, bias, bn.running_mean, bn.running_var, momentum, count_batch)

    def _joins_idle_branch(self) -> bool:
        """Whether a forward through one branch puts the other branch's parameters in the graph (at zero gradient):
        in training forwards that build a graph, so that every parameter gets a gradient (see `idle_branch`)."""
        if torch.jit.is_scripting():
            return False
        return self.training and self.affine and torch.is_grad_enabled()

    @torch.jit.unused
    def _joined_bias(self, bias: Optional[torch.Tensor], idle_weight: Optional[torch.Tensor],
                     idle_bias: Optional[torch.Tensor]) -> Optional[torch.Tensor]:
        return join_idle(bias, idle_weight, idle_bias)

    def _interleaved(self, x: torch.Tensor, count_batch: bool) -> torch.Tensor:
        """Even rows through the clean branch, odd rows through the adversarial one, as one batch norm."""
        batch, channels, height, width = x.shape
        if batch % 2:
            raise ValueError(f'interleaved route: the batch of {batch} rows is not clean/adversarial pairs.')
        adv_bn = self.adv_bn
        momentum_clean = self._step_momentum(self.num_batches_tracked, count_batch)
        momentum_adv = self._step_momentum(adv_bn.num_batches_tracked, count_batch)
        if not x.is_contiguous() or momentum_clean != momentum_adv:
            # channels_last memory (or branches at different cumulative-average counts): one call per branch
            return torch.stack([
                self._branch_norm(x[0::2], self.weight, self.bias, self.running_mean, self.running_var,
                                  momentum_clean, count_batch),
                self._branch_norm(x[1::2], adv_bn.weight, adv_bn.bias, adv_bn.running_mean, adv_bn.running_var,
                                  momentum_adv, count_batch),
            ], dim=1).flatten(0, 1)
        running_mean = _cat_branches(self.running_mean, adv_bn.running_mean)
        running_var = _cat_branches(self.running_var, adv_bn.running_var)
        out = self._batch_norm(
            x.view(batch // 2, 2 * channels, height, width),
            _cat_branches(self.weight, adv_bn.weight),
            _cat_branches(self.bias, adv_bn.bias),
            running_mean,
            running_var,
            momentum_clean,
        )
        if count_batch and self.training and self.track_running_stats:
            with torch.no_grad():
                for stats, clean, adv in ((running_mean, self.running_mean, adv_bn.running_mean),
                                          (running_var, self.running_var, adv_bn.running_var)):
                    if stats is not None and clean is not None and adv is not None:
                        clean.copy_(stats[:channels])
                        adv.copy_(stats[channels:])
        # Not a view for autograd: the in-place residual add and activation that follow would otherwise make
        # autograd rebuild the whole output in backward (a full extra copy per layer).
        return torch.ops.aten._unsafe_view(out, [batch, channels, height, width])

    def _split(self, x: torch.Tensor, n_clean: int, count_batch: bool) -> torch.Tensor:
        """The first `n_clean` rows (at least one, not all) through the clean branch, the rest through the adversarial
        one."""
        if not torch.jit.is_scripting():
            if self._fuses_split(x):
                return self._fused_split(x, n_clean, count_batch)
        x_clean, x_adv = torch.split(x, [n_clean, x.shape[0] - n_clean])
        return torch.cat([self._clean(x_clean, count_batch), self._adv(x_adv, count_batch)])

    @torch.jit.unused
    def _fuses_split(self, x: torch.Tensor) -> bool:
        """Whether the split route normalizes both blocks into one output (`split_batch_norm`): in training on the
        CPU, where it was measured (on CUDA, batch norm runs cuDNN's kernels, which it would bypass), outside
        `torch.compile` (which fuses the concatenation itself)."""
        return self.training and x.device.type == 'cpu' and not torch.compiler.is_compiling()

    @torch.jit.unused
    def _fused_split(self, x: torch.Tensor, n_clean: int, count_batch: bool) -> torch.Tensor:
        """`split_batch_norm` with each branch's tensors; running statistics as `_branch_norm` treats them."""
        blocks = []
        for bn in (self, self.adv_bn):
            running_mean, running_var = (bn.running_mean, bn.running_var) if self.track_running_stats else (None, None)
            blocks.append(BlockNorm(bn.weight, bn.bias, self._counted(running_mean, count_batch),
                                    self._counted(running_var, count_batch),
                                    self._step_momentum(bn.num_batches_tracked, count_batch)))
        return split_batch_norm(x, n_clean, blocks[0], blocks[1], self.eps)

    def _normalize(self, x: torch.Tensor, route: str, n_clean: int, gamma: float, count_batch: bool) -> torch.Tensor:
        """`x` normalized on `route`; in training, the batch is counted in the running statistics when `count_batch`."""
        join = self._joins_idle_branch()
        if route == 'clean':
            return self._clean(x, count_batch, join)
        if route == 'adv':
            return self._adv(x, count_batch, join)
        if route == 'split':
            if n_clean > x.shape[0]:
                raise ValueError('split route: n_clean is larger than the batch.')
            if n_clean == 0:  # an empty half must not count a batch in its statistics
                return self._adv(x, count_batch, join)
            if n_clean == x.shape[0]:
                return self._clean(x, count_batch, join)
            return self._split(x, n_clean, count_batch)
        if route == 'interleaved':
            return self._interleaved(x, count_batch)
        if route == 'mix':
            return torch.lerp(self._clean(x, count_batch), self._adv(x, count_batch), gamma)
        # raised here rather than validated on assignment: TorchScript keeps the route as a plain attribute
        raise ValueError(f'Unknown route {route}, expected clean, adv, split, interleaved or mix.')

    @torch.jit.unused
    def _recompute(self, x: torch.Tensor) -> torch.Tensor:
        """A checkpointing recomputation of this layer: the original forward's route, the running statistics (and
        ``num_batches_tracked``) untouched, since the original forward counted the batch already."""
        route, n_clean, gamma = self._recomputed_route_setting()
        return self._normalize(x, route, n_clean, gamma, False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self._check_input_dim(x)
        if not torch.jit.is_scripting():
            if is_recomputing():
                return self._recompute(x)
        return self._normalize(x, self.route, self.n_clean, self.gamma, True)

    def extra_repr(self) -> str:
        return super().extra_repr() + f', route={self.route}'


@register_notrace_module
class MixtureBatchNormAct2d(MixtureBatchNorm2d):
    """`MixtureBatchNorm2d` followed by drop and activation, a drop-in for timm's `BatchNormAct2d`.

    Keeps timm's `BatchNormAct2d` child names (``drop``, ``act``) so state-dict keys are unchanged.
    """

    def __init__(
            self,
            num_features: int,
            eps: float = 1e-5,
            momentum: Optional[float] = 0.1,
            affine: bool = True,
            track_running_stats: bool = True,
            apply_act: bool = True,
            act_layer=nn.ReLU,
            act_kwargs: Optional[dict] = None,
            inplace: bool = True,
            drop_layer: Optional[type] = None,
            device=None,
            dtype=None,
    ):
        super().__init__(
            num_features, eps=eps, momentum=momentum, affine=affine,
            track_running_stats=track_running_stats, device=device, dtype=dtype)
        self.drop = drop_layer() if drop_layer is not None else nn.Identity()
        act_layer = get_act_layer(act_layer)
        if act_layer is not None and apply_act:
            self.act = create_act_layer(act_layer, inplace=inplace, **(act_kwargs or {}))
        else:
            self.act = nn.Identity()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.act(self.drop(super().forward(x)))
