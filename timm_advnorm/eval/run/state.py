"""A resumable evaluation: finished work appended, record by record, to a JSON-lines state file.

PGD-2000 over 50 000 ImageNet images takes days; a preempted job must resume where it stopped, not restart. Each
finished (variant, stage, batch) record is appended as one line with a single ``write`` on a file opened with
``O_APPEND`` and then ``fsync``-ed, so a crash leaves at most one partial last line. Loading drops that line (and cuts
it off the file), so the work it described simply runs again. A file whose header line was never completely written
(left empty or cut short by a full disk or a kill while the evaluation started) holds no work and is replaced.

The first line holds a fingerprint of the evaluation (`evaluation_fingerprint`: model and the digest of its weights,
data and subset, protocol, batch size, ...): a state file is only ever resumed by the evaluation that wrote it.
"""
import hashlib
import json
import logging
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any, Dict, List, Mapping, Optional, Sequence, Tuple, Union

import torch

from ...signals import interrupts_between_steps
from ...weights.digest import tensors_digest
from ...write_guard import atomic_write, check_creatable, check_names, reported_write
from .records import Record

if TYPE_CHECKING:
    from ..options import EvalOptions
    from ..plan.stage_plan import EvalPlan
    from ..plan.variants import Variant
    from ..protocols.protocol import Protocol
    from .build import DataRun
    from .distributed import DistributedInfo

__all__ = ['EvalState', 'check_state_path', 'state_path', 'open_state', 'weights_digest', 'evaluation_fingerprint']

_logger = logging.getLogger(__name__)

_FORMAT = 'timm_advnorm.eval.state/1'
# How every state file begins: the first key of its header line (`EvalState._header`).
_HEADER_START = json.dumps({'format': _FORMAT}, separators=(',', ':'))[:-1].encode()
# What a failed write leaves for the user.
_KEPT = 'the state file keeps every finished record: rerun to resume'


def check_state_path(path: Union[str, Path]) -> None:
    """Check up front that `path` can serve as a state file: an existing file that can be read and appended to,
    or a new file in a folder that can be written (created with the file, not by this check).

    Raises:
        ValueError: `path` is a folder, or it or its folder cannot be used.
    """
    path = Path(path)
    check_names(path)  # before the checks below stat it
    if path.is_dir():
        raise ValueError(f'{path} is a folder, not a state file.')
    if path.exists():
        if not os.access(path, os.R_OK | os.W_OK):
            raise ValueError(f'{path}: the state file cannot be read and appended to (permission denied).')
    else:
        check_creatable(path, kind='file')


def state_path(resume_state: str, dist_info: 'DistributedInfo') -> str:
    """This process's state file of ``--resume-state`` `resume_state` (one per rank under torchrun)."""
    return resume_state + (f'.rank{dist_info.rank}' if dist_info.distributed else '')


def weights_digest(model: torch.nn.Module) -> str:
    """SHA-256 of the model's state dict (names, dtypes, shapes and bytes): the identity of the weights evaluated.

    Hashing the loaded weights rather than the checkpoint file covers every source with one rule: a file overwritten
    in place, an export folder, an ``hf-hub:`` name whose revision moved, ``--use-ema``, ``--branch``, a seeded
    random initialization. A file's size and mtime would be cheaper but say nothing about hub or pretrained weights;
    the hash costs one pass over the weights in memory (about a second per GB), nothing next to an evaluation long
    enough to need ``--resume-state``, and is only computed with it.
    """
    return tensors_digest(model.state_dict().items())  # in the model's order, as state files were first written


def _subset_digest(indices: Sequence[int]) -> str:
    """SHA-256 of a subset's dataset indices: the subset's identity in a fingerprint."""
    return hashlib.sha256(json.dumps(indices).encode()).hexdigest()


def evaluation_fingerprint(options: 'EvalOptions', model_name: str, weights: str, protocol: 'Protocol',
                           variants: Sequence['Variant'], plan: 'EvalPlan', runs: Sequence['DataRun'],
                           data_config: Mapping[str, Any], dist_info: 'DistributedInfo') -> Dict[str, Any]:
    """What makes two evaluations the same one: `EvalState` refuses to resume a state file written by another.

    The model (name, source, digest of its weights, construction arguments), the data (dataset, resolved root,
    split, class map, seeded subset, preprocessing; each out-of-distribution set's folder and subset), the attacks,
    and how the work is cut (batch size, ranks). An evaluation without out-of-distribution sets has the fingerprint
    it had before they existed, so that its state file still resumes.
    """
    model, data, runtime = options.model, options.data, options.runtime
    ood = {run.name: dict(folder=str(Path(run.folder).resolve()), subset=_subset_digest(run.indices))
           for run in runs if run.name}
    return dict(model=model_name, source=model.name or '', weights=weights,
                checkpoint=str(Path(model.checkpoint).resolve()) if model.checkpoint else '',
                pretrained=model.pretrained, use_ema=model.use_ema, branch=model.branch,
                model_kwargs=dict(model.kwargs), num_classes=model.num_classes,
                dataset=data.dataset, data_dir=str(Path(data.data_dir).resolve()) if data.data_dir else '',
                split=data.split, class_map=data.class_map, protocol=protocol.to_dict(),
                variants=[v.name for v in variants], subset=_subset_digest(runs[0].indices), seed=runtime.seed,
                stages=[[s.name, s.limit, getattr(s, 'source', None)] for s in plan.stages],
                batch_size=runtime.batch_size, amp=runtime.autocast,
                data_config={k: list(v) if isinstance(v, tuple) else v for k, v in data_config.items()},
                rank=dist_info.rank, world_size=dist_info.world_size, **(dict(ood=ood) if ood else {}))


def _canonical(value: Any) -> Any:
    """JSON round trip, so tuples and lists (and int/float keys) compare as they will be stored."""
    return json.loads(json.dumps(value, sort_keys=True))


class EvalState:
    """Append-only record store backing one evaluation.

    Args:
        path: The state file; created when missing.
        fingerprint: JSON-serialisable description of the evaluation; must match the file's.

    Raises:
        ValueError: The file belongs to another evaluation, is not a state file, or holds a line that is not a
            record (the message names the file and the line).
    """

    def __init__(self, path: Union[str, Path], fingerprint: Mapping[str, Any]):
        self.path = Path(path)
        self.fingerprint = _canonical(dict(fingerprint))
        self._records: Dict[Tuple[str, str, int], Record] = {}
        data = self.path.read_bytes() if self.path.exists() else None
        if data is None:
            with reported_write(self.path, _KEPT):
                self.path.parent.mkdir(parents=True, exist_ok=True)
            self._append_line(self._header(), create=True)
        elif _interrupted_header(data):
            _logger.warning('%s: replacing a state file whose first line was never completely written (%d bytes); it '
                            'held no evaluated work.', self.path, len(data))
            atomic_write(self.path, lambda tmp: tmp.write_bytes(_line(self._header())))
        else:
            self._load(data)

    def _header(self) -> Dict[str, Any]:
        """The first line of the state file: its format and the evaluation's fingerprint."""
        return {'format': _FORMAT, 'fingerprint': self.fingerprint}

    def _load(self, data: bytes) -> None:
        good_end = 0
        lines = data.split(b'\n')
        complete, tail = lines[:-1], lines[-1]  # `tail` is non-empty only if the last write was cut short
        for number, line in enumerate(complete):
            try:
                entry = json.loads(line)
            except ValueError:  # not JSON, or not UTF-8
                if number == len(complete) - 1 and not tail:
                    break  # a damaged last line: treat like a cut-short write
                raise ValueError(f'{self.path}: line {number + 1} is not valid JSON; the state file is corrupted.')
            if number == 0:
                self._check_header(entry)
            else:
                self._records[self._record_key(entry, number + 1)] = entry
            good_end += len(line) + 1
        if good_end == 0:
            raise ValueError(f'{self.path} holds no evaluation state header.')
        if good_end < len(data):
            _logger.warning('%s: dropping %d bytes of an interrupted write.', self.path, len(data) - good_end)
            with open(self.path, 'r+b') as f:
                f.truncate(good_end)
                os.fsync(f.fileno())
        _logger.info('Resuming from %s: %d finished records.', self.path, len(self._records))

    def _record_key(self, entry: Any, line: int) -> Tuple[str, str, int]:
        """The (variant, stage, start) key of the record on `line`; an error naming the line if it is no record.

        Checked on loading, so a damaged or hand-edited file fails here with its line number, not later in the
        evaluation with a bare ``KeyError``.
        """
        fields = (('variant', str), ('stage', str), ('start', int), ('columns', dict))
        if not (isinstance(entry, dict) and all(isinstance(entry.get(k), t) for k, t in fields)):
            raise ValueError(f'{self.path}: line {line} is not an evaluation record (needs '
                             f'{", ".join(k for k, _ in fields)}); the state file is corrupted.')
        return entry['variant'], entry['stage'], entry['start']

    def _check_header(self, header: Any) -> None:
        """Refuse a file that is no state file, or the state of another evaluation (naming what differs)."""
        if not isinstance(header, dict) or header.get('format') != _FORMAT:
            found = header.get('format') if isinstance(header, dict) else None
            raise ValueError(f'{self.path} is not an evaluation state file (format {found!r}).')
        stored = header.get('fingerprint')
        stored = stored if isinstance(stored, dict) else {}
        if stored != self.fingerprint:
            keys = sorted(k for k in set(stored) | set(self.fingerprint) if stored.get(k) != self.fingerprint.get(k))
            raise ValueError(f'{self.path} was written by a different evaluation (differs in: {", ".join(keys)}); '
                             'use another --resume-state path or delete it.')

    def _append_line(self, entry: Mapping[str, Any], create: bool = False) -> None:
        """Append `entry` as one line, durably; an OS error (a full disk) is a `WriteError` naming the file, which
        keeps the lines before (a cut-short line is dropped when the file is loaded)."""
        flags = os.O_WRONLY | os.O_APPEND | (os.O_CREAT | os.O_EXCL if create else 0)
        with reported_write(self.path, _KEPT):
            fd = os.open(self.path, flags, 0o644)
            try:
                unwritten = memoryview(_line(entry))
                while unwritten:  # a write cut short by a full disk returns fewer bytes before the next one fails
                    unwritten = unwritten[os.write(fd, unwritten):]
                os.fsync(fd)
            finally:
                os.close(fd)

    def get(self, variant: str, stage: str, start: int) -> Optional[Record]:
        """The stored record of (variant, stage, batch start), or None when that work has not finished."""
        return self._records.get((variant, stage, int(start)))

    def append(self, record: Record) -> None:
        """Persist a finished record (durably, before returning).

        A signal is held until both the file and the count hold the record, so that the line an interrupted
        evaluation reports counts exactly what the file keeps."""
        with interrupts_between_steps():
            self._append_line(record)
            self._records[(record['variant'], record['stage'], record['start'])] = record

    def records(self) -> List[Record]:
        """Every stored record."""
        return list(self._records.values())

    def __len__(self) -> int:
        return len(self._records)


def _line(entry: Mapping[str, Any]) -> bytes:
    """`entry` as one line of the state file."""
    return (json.dumps(entry, separators=(',', ':')) + '\n').encode()


def _interrupted_header(data: bytes) -> bool:
    """Whether `data`, a state file's content, is a header line whose writing was cut short (empty included): no
    complete line, and the beginning every state file has. Any other content is refused, never replaced."""
    return b'\n' not in data and (_HEADER_START.startswith(data) or data.startswith(_HEADER_START))


def open_state(path: str, fingerprint: Mapping[str, Any]) -> EvalState:
    """The state file at `path`, created or resumed; a file that cannot be read or written is a usage error."""
    try:
        return EvalState(path, fingerprint)
    except OSError as e:
        raise ValueError(f'cannot use the state file {path}: {e.strerror or e}') from e
