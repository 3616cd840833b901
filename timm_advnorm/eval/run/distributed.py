"""Sharded evaluation under ``torchrun``: one process per device, each on a disjoint shard, results gathered.

Each rank evaluates its own contiguous run of whole batches of the seeded subset (`data.shard_range`) and keeps its
own state file; at the end every rank's per-sample records are gathered (``all_gather_object``: works with NCCL and
gloo) and rank 0 summarizes them exactly as it would a single-process run.
"""
import logging
import os
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Iterator, List

import torch
import torch.distributed as dist

from .records import Record

__all__ = ['DistributedInfo', 'init_distributed', 'gather_records', 'cleanup_distributed', 'primary_first']

_logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class DistributedInfo:
    """Where this process stands: rank, world size and the device it evaluates on."""

    rank: int = 0
    world_size: int = 1
    device: torch.device = torch.device('cpu')

    @property
    def distributed(self) -> bool:
        return self.world_size > 1

    @property
    def is_primary(self) -> bool:
        return self.rank == 0


def init_distributed(device: str = 'cuda') -> DistributedInfo:
    """Join the process group set up by ``torchrun`` (env ``WORLD_SIZE`` > 1), else a single process.

    CUDA ranks use NCCL and device ``cuda:LOCAL_RANK``; CPU ranks use gloo.

    Args:
        device: Requested device type or name (``cuda``, ``cpu``, ``cuda:1``).

    Raises:
        ValueError: CUDA requested but not available.
    """
    world_size = int(os.environ.get('WORLD_SIZE', '1'))
    requested = torch.device(device)
    if requested.type == 'cuda' and not torch.cuda.is_available():
        raise ValueError(f'device {device!r} requested but CUDA is not available; use --device cpu')
    if world_size <= 1:
        return DistributedInfo(device=requested)
    local_rank = int(os.environ.get('LOCAL_RANK', '0'))
    if requested.type == 'cuda':
        requested = torch.device('cuda', local_rank)
        torch.cuda.set_device(requested)
    backend = 'nccl' if requested.type == 'cuda' else 'gloo'
    if not dist.is_initialized():
        dist.init_process_group(backend=backend)
    info = DistributedInfo(rank=dist.get_rank(), world_size=dist.get_world_size(), device=requested)
    _logger.info('Rank %d of %d on %s (%s).', info.rank, info.world_size, info.device, backend)
    return info


@contextmanager
def primary_first(info: DistributedInfo) -> Iterator[None]:
    """Run the body on rank 0 first, then on the other ranks (e.g. rendering a dataset once, not racing)."""
    if info.distributed and not info.is_primary:
        dist.barrier()
    yield
    if info.distributed and info.is_primary:
        dist.barrier()


def gather_records(records: List[Record], info: DistributedInfo) -> List[Record]:
    """Every rank's records, on every rank (a no-op in a single process)."""
    if not info.distributed:
        return records
    gathered: List[List[Record]] = [[] for _ in range(info.world_size)]
    dist.all_gather_object(gathered, records)
    return [record for part in gathered for record in part]


def cleanup_distributed(info: DistributedInfo) -> None:
    """Leave the process group after a barrier (so no rank exits while others still gather)."""
    if info.distributed and dist.is_initialized():
        dist.barrier()
        dist.destroy_process_group()
