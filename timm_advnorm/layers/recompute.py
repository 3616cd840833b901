"""What a layer needs to behave under gradient checkpointing: knowing when its forward is a recomputation, and which
of its settings the original forward ran with.

Gradient checkpointing (timm's ``set_grad_checkpointing``, `torch.utils.checkpoint`) runs a block's forward once
without keeping its activations, then again during the backward pass to rebuild them. The recomputation runs *inside
the backward*: outside any context manager the original forward ran in (a mixture-BN ``route`` block), and as a
second forward of a batch a batch norm has already counted in its running statistics.

* **Detection.** A forward that runs while the autograd engine executes a backward (`torch._C._current_graph_task_id`
  is not -1) is a recomputation: neither variant of `torch.utils.checkpoint` runs forwards there otherwise. The
  engine's current node (`torch._C._current_autograd_node`) is the node of the original forward whose saved
  activations the recomputation rebuilds.
* **Position.** Autograd numbers nodes in creation order (a per-thread counter, `torch._C._autograd._get_sequence_nr`
  the next number). A setting stamped with the counter when it changes (`PositionedHistory`) can be looked up at the
  number of the node being recomputed: the value it had when the original forward built that node. Exact as long as
  a setting does not change in the middle of a forward (routes change around model calls, never inside them).
"""
import bisect
from typing import Generic, List, Optional, TypeVar

import torch

__all__ = ['PositionedHistory', 'autograd_position', 'is_recomputing', 'recomputed_position']

T = TypeVar('T')


def is_recomputing() -> bool:
    """Whether the running forward is a gradient-checkpointing recomputation (it runs inside a backward pass).

    False while compiling: a compiled graph recomputes inside its own backward graph, where module state is not read
    again and running-statistics updates stay in the forward graph.
    """
    return not torch.compiler.is_compiling() and torch._C._current_graph_task_id() != -1


def autograd_position() -> int:
    """The creation number the next autograd node of this thread gets."""
    return torch._C._autograd._get_sequence_nr()


def recomputed_position() -> Optional[int]:
    """Creation number of the node whose backward is running (the node a recomputation rebuilds activations for);
    None outside a node's backward."""
    node = torch._C._current_autograd_node()
    return None if node is None else node._sequence_nr()


class PositionedHistory(Generic[T]):
    """The values of a setting, each stamped with the autograd position at which it took effect.

    Keeps the last `max_len` changes: far more than the graphs alive between two optimizer steps need (a training step
    changes a mixture-BN route a handful of times), and a lookup before the oldest one kept raises rather than guess.

    Args:
        initial: The value the setting has had so far.
        max_len: Changes to keep.
    """

    def __init__(self, initial: T, max_len: int = 64):
        self._positions: List[int] = [-1]
        self._values: List[T] = [initial]
        self.max_len = max_len

    @property
    def current(self) -> T:
        """The value set last."""
        return self._values[-1]

    def set(self, value: T) -> None:
        """Record `value` as the setting from the next autograd node of this thread on."""
        position = autograd_position()
        if self._positions[-1] == position:  # no node was built under the previous value: replace it
            self._values[-1] = value
        elif self._values[-1] != value:
            self._positions.append(position)
            self._values.append(value)
            del self._positions[:-self.max_len], self._values[:-self.max_len]

    def at(self, position: int) -> T:
        """The value the setting had when the autograd node numbered `position` was built.

        Raises:
            RuntimeError: The node is older than the changes kept.
        """
        index = bisect.bisect_right(self._positions, position) - 1
        if index < 0:
            raise RuntimeError(f'Gradient checkpointing: the graph being recomputed is older than the last '
                               f'{self.max_len} changes of the setting it ran with; back-propagate each graph before '
                               f'building many others.')
        return self._values[index]
