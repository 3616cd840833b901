"""Cost of the up-front decode check on an ImageNet-shaped folder: the first check, and a second one the cache answers.

Before training's first step every image of both splits is decoded, to find unreadable files
(`timm_advnorm.data.readable.keep_readable`); its verdicts are cached per file by size and modification time
(`timm_advnorm.data.decode_cache`), so a second run or a resume decodes only the files that are new or changed.
This builds a synthetic ``train/<wnid>/*.JPEG`` folder (``--classes`` x ``--per-class`` small JPEGs, each a few random
base images re-encoded with a row of its own, so no two files are alike) in a temporary folder, then times the check
on it twice, with an empty cache and with the cache the first check wrote, in the check's own code path
(`find_unreadable_across_ranks`, as ``keep_readable`` runs it). Prints a markdown table: seconds, images decoded and
found in the cache, images per second in all and per worker, and the first check's time as a multiple of the cached
one's.

The files are left untouched for `RACY_SECONDS` before the first check: the cache does not record files modified
just before a check (see `timm_advnorm.data.decode_cache`), as a real dataset's are not.

Example:
    nice python benchmarks/bench_decode_check.py                           # 100,000 JPEGs of 64 px
    python benchmarks/bench_decode_check.py --classes 10 --per-class 10 --workers 2
"""
import argparse
import os
import platform
import tempfile
import time
from pathlib import Path
from typing import List, Optional, Tuple

import numpy as np
from PIL import Image
from timm.data import ImageDataset

from timm_advnorm.data.decode_cache import RACY_SECONDS, decode_cache_folder
from timm_advnorm.data.readable import DecodeReport, find_unreadable_across_ranks

from _common import add_record_args, recorded

#: Distinct random base images the files are made from.
_BASES = 16


def get_args_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--classes', type=int, default=1000, help='class folders (ImageNet: 1000)')
    parser.add_argument('--per-class', type=int, default=100, help='JPEGs per class folder')
    parser.add_argument('--size', type=int, default=64, help='side of the square images in pixels')
    parser.add_argument('--workers', type=int, default=0, help='loader processes decoding (0: the main process)')
    parser.add_argument('--root', default=None, help='folder to build the data and cache in (default: a temporary '
                                                     'one, removed at the end)')
    parser.add_argument('--seed', type=int, default=0)
    add_record_args(parser)
    return parser


def write_jpeg_folder(root: Path, classes: int, per_class: int, size: int, seed: int) -> int:
    """Write ``root/train/<wnid>/<wnid>_<i>.JPEG``: `classes` x `per_class` JPEGs of `size` px, each one of a few
    random base images with one row of its own random pixels (so every file differs). Returns the bytes written."""
    rng = np.random.default_rng(seed)
    bases = [np.asarray(Image.fromarray(rng.integers(0, 256, (4, 4, 3), dtype=np.uint8)).resize(
        (size, size), Image.Resampling.BICUBIC)) for _ in range(_BASES)]
    written = 0
    for label in range(classes):
        wnid = f'n{label:08d}'
        folder = root / 'train' / wnid
        folder.mkdir(parents=True, exist_ok=True)
        for index in range(per_class):
            pixels = bases[(label + index) % _BASES].copy()
            pixels[index % size] = rng.integers(0, 256, (size, 3), dtype=np.uint8)
            path = folder / f'{wnid}_{index}.JPEG'
            Image.fromarray(pixels).save(path, quality=85)
            written += path.stat().st_size
    return written


def timed_check(dataset: ImageDataset, workers: int) -> Tuple[float, DecodeReport]:
    """Seconds the whole check takes (stat, cache, decoding, cache write) and its report."""
    start = time.perf_counter()
    found, report = find_unreadable_across_ranks(dataset, range(len(dataset)), workers)
    seconds = time.perf_counter() - start
    if found:
        raise RuntimeError(f'the synthetic folder has unreadable files: {sorted(found.values())[:3]}')
    return seconds, report


def _cpu_name() -> str:
    cpuinfo = Path('/proc/cpuinfo')
    if cpuinfo.exists():
        for line in cpuinfo.read_text().splitlines():
            if line.startswith('model name'):
                return line.split(':', 1)[1].strip()
    return platform.processor() or platform.machine()


def run(args: argparse.Namespace, root: Path) -> List[str]:
    """Build the folder under `root`, check it twice, and return the report's lines."""
    os.environ['TIMM_ADVNORM_DECODE_CACHE'] = str(root / 'decode-cache')
    start = time.perf_counter()
    size_bytes = write_jpeg_folder(root / 'data', args.classes, args.per_class, args.size, args.seed)
    made = time.perf_counter() - start
    time.sleep(RACY_SECONDS)  # files this fresh are not cached (a check while they are written)
    dataset = ImageDataset(str(root / 'data' / 'train'))
    rows = []
    for name in ('first check (empty cache)', 'second check (cached)'):
        seconds, report = timed_check(dataset, args.workers)
        rate = len(dataset) / seconds
        rows.append((name, seconds, report, rate))
    cache_files = list(decode_cache_folder().glob('*.json.gz'))
    cache_bytes = sum(path.stat().st_size for path in cache_files)
    workers = max(args.workers, 1)
    lines = [f'Decode check of {len(dataset):,} JPEGs of {args.size} px ({size_bytes / 2 ** 20:,.0f} MB, written in '
             f'{made:.1f} s), {args.workers} loader worker(s); {_cpu_name()}, {os.cpu_count()} CPUs; '
             f'{time.strftime("%Y-%m-%d")}', '',
             '| check | seconds | decoded | from the cache | images checked/s | per worker |',
             '|---|---|---|---|---|---|']
    for name, seconds, report, rate in rows:
        lines.append(f'| {name} | {seconds:.2f} | {report.decoded:,} | {report.cached:,} | {rate:,.0f} | '
                     f'{rate / workers:,.0f} |')
    lines += ['', f'First check / cached check: {rows[0][1] / rows[1][1]:.1f}x; cache file {cache_bytes / 2 ** 20:.1f} '
                  f'MB.']
    return lines


def main(argv: Optional[List[str]] = None) -> None:
    parser = get_args_parser()
    args = parser.parse_args(argv)
    with recorded('bench_decode_check', parser, args, argv):
        _run(args)


def _run(args: argparse.Namespace) -> None:
    if args.root:
        lines = run(args, Path(args.root))
    else:
        with tempfile.TemporaryDirectory(prefix='bench-decode-check-') as tmp:
            lines = run(args, Path(tmp))
    print('\n'.join(lines))


if __name__ == '__main__':
    main()
