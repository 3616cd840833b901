"""Robust-evaluation throughput: our PGD evaluation against torchattacks' PGD, same model, batch and budget.

What is compared (images per second for the whole evaluation of a batch: attack + scoring):

* **torchattacks PGD** (baseline; dev dependency, ``pip install torchattacks --no-deps``): last iterate, every
  sample attacked for every iteration. With ``set_normalization_used`` torchattacks 3.5 takes and returns
  *normalized* inputs (it un-normalizes internally); the model is passed as is, not wrapped in a fresh
  ``nn.Sequential`` (whose default ``training=True`` torchattacks would restore onto the model after the call);
* **torchattacks PGD, channels_last model** (reference, CPU runs without ``--channels-last``): the baseline on a
  channels_last copy of the model, the layout our folded copy uses on the CPU; it shows how much of our per-iteration
  gain a torchattacks user would get by converting the model;
* **ours, last iterate**: our PGD core with input-only gradients and BN folded into the convolutions, otherwise
  the same work as the baseline (isolates the per-iteration cost);
* **ours, evaluation**: what ``validate_adv.py`` runs (`RobustEvaluator` + `AttackStage`): clean pass first,
  only correctly classified samples attacked, best iterate (a sample counts as broken as soon as any iterate fools
  it) and fooled samples dropped from the batch, BN folded, input-only gradients.

Fairness: same ε, step, iterations and random start; ours is at least as strong (best iterate: its robust accuracy
can only be lower, and the table prints both accuracies to show it). The evaluation's speed-up grows with how fast
samples are fooled: a non-robust model loses most samples in the first iterations, a robust one keeps them all and
only the per-iteration savings remain. The default model is therefore *trained* briefly on the built-in digits so
that PGD fools it gradually, not a random-init network (which every attack breaks in one step).

A second table times an iteration sweep as `xie2020` runs it (targeted PGD, ε=16, step 1, `--sweep` budgets; the
same per-sample targets for every method): torchattacks runs each budget as its own attack, our evaluation runs the
longest once and reads the shorter budgets off it, or (``--separate-budgets``) runs each on its own.

Measurements are interleaved round by round, the median per method is reported. Prints markdown tables.

Example:
    python benchmarks/bench_eval.py                                   # CPU, resnet10t trained on digits
    python benchmarks/bench_eval.py --device cuda --amp --channels-last --model resnet26 --img-size 64 \\
        --batch-size 256 --steps 20
"""
import argparse
import copy
import logging
import statistics
import tempfile
from typing import Callable, Dict, Optional, Tuple

import timm
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset

import timm_advnorm  # noqa: F401  (registers our models)
from timm_advnorm.attacks import PGD, InputSpace
from timm_advnorm.data import prepare_digits
from timm_advnorm.eval.run.data import IndexedSubset, target_offsets
from timm_advnorm.eval.run.evaluator import RobustEvaluator
from timm_advnorm.eval.plan.stage_plan import build_plan
from timm_advnorm.eval.protocols.protocol import AttackSpec, Protocol
from timm_advnorm.eval.run.records import ResultTable
from timm_advnorm.eval.plan.stages import EvalContext
from timm_advnorm.eval.plan.variants import Variant

from _common import add_device_args, add_record_args, add_timing_args, apply_run_args, measure, recorded, \
    torchattacks_pgd

_logger = logging.getLogger('bench_eval')

BASELINE = 'torchattacks PGD (last iterate)'
SWEEP_BASELINE = 'torchattacks, each budget its own run'


def get_args_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--model', default='resnet10t', help='timm model name')
    parser.add_argument('--img-size', type=int, default=32)
    parser.add_argument('--batch-size', type=int, default=128)
    parser.add_argument('--train-steps', type=int, default=200,
                        help='SGD steps on the digits before measuring (0: random init)')
    parser.add_argument('--eps', type=float, nargs='+', default=[4.0, 8.0, 16.0],
                        help='Linf budgets on the 0-255 scale (one table block each: the model is fooled more often '
                             'at larger budgets)')
    parser.add_argument('--step', type=float, default=1.0, help='step on the 0-255 scale (Xie & Yuille: 1)')
    parser.add_argument('--steps', type=int, default=20, help='PGD iterations (NoFrost evaluates 20)')
    parser.add_argument('--sweep', type=int, nargs='*', default=[20, 100],
                        help='iteration budgets of the xie2020-style sweep table (none: skip it)')
    add_device_args(parser, amp_help='bf16 autocast (ours and the baseline)')
    add_timing_args(parser)
    parser.add_argument('--seed', type=int, default=0)
    add_record_args(parser)
    return parser


def _digits(img_size: int, model: nn.Module) -> Tuple[Tuple[torch.Tensor, torch.Tensor], Tuple[torch.Tensor, ...]]:
    """Train and validation digits as normalized tensors (the model's own eval transform)."""
    from timm.data import create_dataset, create_transform, resolve_data_config

    config = resolve_data_config(dict(input_size=(3, img_size, img_size), crop_pct=1.0), model=model)
    root = prepare_digits(tempfile.gettempdir() + f'/timm_advnorm_bench_digits_{img_size}px', img_size=img_size)
    splits = []
    for split in ('train', 'validation'):
        dataset = create_dataset('', root=str(root), split=split, transform=create_transform(**config))
        x = torch.stack([dataset[i][0] for i in range(len(dataset))])
        y = torch.tensor([dataset[i][1] for i in range(len(dataset))])
        splits.append((x, y))
    return splits[0], splits[1], config


def _train(model: nn.Module, x: torch.Tensor, y: torch.Tensor, steps: int, batch_size: int, device) -> None:
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9, weight_decay=1e-4)
    generator = torch.Generator().manual_seed(0)
    model.train()
    for _ in range(steps):
        index = torch.randint(0, len(x), (batch_size,), generator=generator)
        loss = F.cross_entropy(model(x[index].to(device)), y[index].to(device))
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
    model.eval()


def main(argv=None) -> None:
    parser = get_args_parser()
    args = parser.parse_args(argv)
    with recorded('bench_eval', parser, args, argv, args.device):
        _run(args)


def _run(args: argparse.Namespace) -> None:
    logging.basicConfig(level=logging.INFO, format='%(message)s')
    device, memory_format, amp_dtype = apply_run_args(args)

    model = timm.create_model(args.model, num_classes=10).to(device)
    (x_train, y_train), (x_val, y_val), config = _digits(args.img_size, model)
    _train(model, x_train, y_train, args.train_steps, 64, device)
    model.to(memory_format=memory_format)
    space = InputSpace.from_data_config(config)
    x = x_val[:args.batch_size].to(device).contiguous(memory_format=memory_format)
    y = y_val[:args.batch_size].to(device)

    def score(x_adv: torch.Tensor, classes: Optional[torch.Tensor] = None) -> float:
        """Share of `x_adv` classified as `classes` (default: the labels, i.e. accuracy)."""
        with torch.no_grad(), torch.autocast(device.type, dtype=amp_dtype, enabled=amp_dtype is not None):
            return (model(x_adv).argmax(dim=1) == (y if classes is None else classes)).float().mean().item()

    print(f'\n{args.model} trained {args.train_steps} steps on digits, {args.img_size}px, batch {len(x)}, '
          f'{device.type}, threads {torch.get_num_threads()}, amp {args.amp}, channels_last {args.channels_last}; '
          f'PGD-{args.steps}, step {args.step:g}/255, random start; clean accuracy {100 * score(x):.1f}%; '
          f'median of {args.rounds} rounds\n')
    print('| eps | method | images/s | × torchattacks | robust accuracy (%) |')
    print('|---:|---|---:|---:|---:|')
    for eps in args.eps:
        methods = _methods(model, space, x, y, eps, args, amp_dtype, device, score)
        times, accuracy = measure(methods, device, args.warmup, args.rounds)
        base = statistics.median(times[BASELINE])
        for name, values in times.items():
            seconds = statistics.median(values)
            print(f'| {eps:g} | {name} | {len(x) / seconds:.1f} | {base / seconds:.2f} | '
                  f'{100 * accuracy[name]:.1f} |')
    if args.sweep:
        _sweep_table(model, space, x, y, args, amp_dtype, device, score)


def _sweep_table(model, space, x, y, args, amp_dtype, device, score) -> None:
    budgets = sorted(set(args.sweep))
    targets = (y + target_offsets(len(x), 10, args.seed).to(device)) % 10  # what the evaluator draws
    specs = tuple(AttackSpec(f'pgd-t-{n}', PGD.Config.of(steps=n, step=1.0, step_rule='max', targeted=True), 16.0)
                  for n in budgets)
    protocol = Protocol('sweep', 'sweep', 'bench', specs)

    def torchattacks_each() -> Tuple[Tuple[float, float], ...]:
        results = []
        for n in budgets:
            attack = torchattacks_pgd(model, space, 16.0, max(1.0, 16.0 / n), n)
            attack.set_mode_targeted_by_label(quiet=True)
            with torch.autocast(device.type, dtype=amp_dtype, enabled=amp_dtype is not None):
                x_adv = attack(x, targets)
            results.append((score(x_adv), score(x_adv, targets)))
        return tuple(results)

    def ours(share_budgets: bool) -> Callable[[], Tuple[Tuple[float, float], ...]]:
        def run() -> Tuple[Tuple[float, float], ...]:
            table = ResultTable(_evaluate(model, protocol, space, x, y, args, amp_dtype, device, share_budgets))
            return tuple((float(table.column('model', spec.label, 'correct').mean()),
                          float(table.column('model', spec.label, 'success').mean())) for spec in specs)
        return run

    methods = {SWEEP_BASELINE: torchattacks_each, 'ours, each budget its own run': ours(False),
               'ours, one run read at every budget': ours(True)}
    times, results = measure(methods, device, args.warmup, args.rounds)
    base = statistics.median(times[SWEEP_BASELINE])
    print(f'\nTargeted PGD sweep, eps 16, step 1, budgets {budgets}: images/s for the whole sweep; accuracy and '
          f'attack-success rate (%) per budget\n')
    print(f'| method | images/s | × torchattacks | {" | ".join(f"PGD-{n} acc. / success" for n in budgets)} |')
    print('|---|---:|---:|' + '---:|' * len(budgets))
    for name, values in times.items():
        seconds = statistics.median(values)
        cells = ' | '.join(f'{100 * acc:.1f} / {100 * hit:.1f}' for acc, hit in results[name])
        print(f'| {name} | {len(x) / seconds:.1f} | {base / seconds:.2f} | {cells} |')


def _evaluate(model, protocol, space, x, y, args, amp_dtype, device, share_budgets: bool = True):
    """Records of what ``validate_adv.py`` runs for `protocol` on the batch (no sanity probes)."""
    plan = build_plan(protocol, sanity_samples=0, share_budgets=share_budgets)
    ctx = EvalContext(space, (3, args.img_size, args.img_size), autocast_dtype=amp_dtype)
    loader = DataLoader(IndexedSubset(TensorDataset(x, y), range(len(x)), range(len(x))), batch_size=len(x))
    evaluator = RobustEvaluator(model, [Variant('model')], plan.stages, ctx, 10, len(x), args.seed, device,
                                channels_last=args.channels_last)
    return evaluator.run(loader)


def _methods(model, space, x, y, eps, args, amp_dtype, device, score) -> Dict[str, Callable[[], float]]:
    """Each method attacks and scores the batch, returning its robust accuracy."""
    def torchattacks_method(attacked: nn.Module) -> Callable[[], float]:
        attack = torchattacks_pgd(attacked, space, eps, args.step, args.steps)

        def run() -> float:
            with torch.autocast(device.type, dtype=amp_dtype, enabled=amp_dtype is not None):
                x_adv = attack(x, y)  # normalized in, normalized out
            return score(x_adv)
        return run

    ours_last = PGD(space, eps=eps, step=args.step, steps=args.steps, step_rule='fixed', best_iterate=False,
                    autocast_dtype=amp_dtype, seed=args.seed)

    def ours_last_iterate() -> float:
        return score(ours_last(model, x, y))

    spec = AttackSpec('pgd', PGD.Config.of(steps=args.steps, step=args.step, step_rule='fixed'), eps)
    protocol = Protocol('bench', 'bench', 'bench', (spec,))

    def ours_evaluation() -> float:
        records = _evaluate(model, protocol, space, x, y, args, amp_dtype, device)
        return float(ResultTable(records).column('model', 'pgd', 'correct').mean())

    methods = {BASELINE: torchattacks_method(model)}
    if device.type == 'cpu' and not args.channels_last:
        channels_last_model = copy.deepcopy(model).to(memory_format=torch.channels_last)
        methods['torchattacks PGD, channels_last model (reference)'] = torchattacks_method(channels_last_model)
    methods['ours, last iterate (BN folded, input grads)'] = ours_last_iterate
    methods['ours, evaluation (best iterate + pruning + BN folded)'] = ours_evaluation
    return methods


if __name__ == '__main__':
    main()
