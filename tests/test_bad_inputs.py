"""The catalogue of bad input: every case of every command exits with status 2, says what is wrong on one line of
stderr (``<command>: error: ...``), shows no traceback, and creates or changes no file.

Each case is ``(command, build, message)``: ``build(tmp, ctx)`` returns the arguments (and may lay out damaged files
under ``tmp``, which are then part of the "before" snapshot); ``message`` must appear in the error line. The commands
run in-process through the same entry point as the console commands (`run`), so a case costs no interpreter start.
"""
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, List, Tuple

import pytest

from snapshots import folder_snapshot
from timm_advnorm.commands.convert import run as run_convert
from timm_advnorm.commands.validate import run as run_validate
from timm_advnorm.commands.publish import run as run_publish
from timm_advnorm.commands.train import run as run_train

COMMANDS = {
    'train': (run_train, 'train_adv.py'),
    'validate': (run_validate, 'validate_adv.py'),
    'publish': (run_publish, 'hub/publish.py'),
    'convert': (run_convert, 'timm-advnorm-convert'),
}


@dataclass
class Context:
    """What the cases build on: the rendered digits and a folder for runs."""

    digits_dir: Path
    out: Path

    def train(self, *extra: str) -> List[str]:
        """A fast digits training command line plus `extra`."""
        return ['--data-dir', str(self.digits_dir), '--output', str(self.out), '--epochs', '1', '--attack-steps', '1',
                '--val-attack-steps', '1', '--num-samples', '16', '--workers', '0', '--log-interval', '0', *extra]

    def validate(self, *extra: str) -> List[str]:
        """A fast digits evaluation command line of a random test_mbn_resnet plus `extra`."""
        return ['--dataset', 'digits', '--data-dir', str(self.digits_dir), '--num-samples', '8', '--workers', '0',
                '--sanity-samples', '0', '--no-progress', '--attacks', 'fgsm', '--results-file',
                str(self.out / 'results.json'), *extra]


Case = Tuple[str, Callable[[Path, Context], List[str]], str]

# Each engineer's area keeps its own list; the test runs them all.
ARGUMENT_CASES: List[Case] = [
    ('train', lambda tmp, ctx: ctx.train('--attack-steps', '0'), '--attack-steps'),
    ('train', lambda tmp, ctx: ctx.train('--model', 'no_such_model'), 'Unknown model'),
    ('train', lambda tmp, ctx: ctx.train('--eval-metric', 'accuracy'), '--eval-metric'),
    ('train', lambda tmp, ctx: ctx.train('--pretrained'), 'has no pretrained weights'),
    ('train', lambda tmp, ctx: ctx.train('-c', 'no_such_recipe'), 'no_such_recipe'),
    ('validate', lambda tmp, ctx: ctx.validate(), 'give --model, --checkpoint, or both'),
    ('validate', lambda tmp, ctx: ctx.validate('--model', 'test_mbn_resnet', '--protocol', 'xie2020'),
     'either --protocol or --attacks'),
    ('validate', lambda tmp, ctx: ctx.validate('--model', 'test_mbn_resnet', '--gammas', '2'), 'gamma'),
    ('publish', lambda tmp, ctx: [str(tmp / 'missing.pth.tar'), '--local-dir', str(tmp / 'export')], 'missing'),
    ('publish', lambda tmp, ctx: [str(tmp / 'missing.pth.tar')], '--repo-id'),
    ('convert', lambda tmp, ctx: ['nofrost', str(tmp / 'missing.pth'), str(tmp / 'out')], 'missing'),
    ('convert', lambda tmp, ctx: ['no-such-format', 'a', 'b'], 'no-such-format'),
]
TRAINING_CASES: List[Case] = [
    ('train', lambda tmp, ctx: ((tmp / 'last.pth.tar').write_text('epoch: 3\n'),
                                ctx.train('--resume', tmp / 'last.pth.tar'))[-1], 'last.pth.tar: not a checkpoint'),
    # every numeric option: finite and in its range, said by the parser before anything is built
    ('train', lambda tmp, ctx: ctx.train('--lr', 'nan'), 'argument --lr: must be a number > 0, got nan'),
    ('train', lambda tmp, ctx: ctx.train('--attack-eps', 'nan'), 'argument --attack-eps: must be a number >= 0'),
    ('train', lambda tmp, ctx: ctx.train('--weight-decay', '-0.0005'), 'argument --weight-decay: must be'),
    ('train', lambda tmp, ctx: ctx.train('--warmup-lr', 'inf'), 'argument --warmup-lr: must be a number >= 0, got inf'),
    ('train', lambda tmp, ctx: ctx.train('--mixup', '-1'), 'argument --mixup: must be a number >= 0, got -1'),
    ('train', lambda tmp, ctx: ctx.train('--method', 'fast_advprop', '--p-adv', '1.5'),
     'argument --p-adv: must be a number in (0, 1), got 1.5'),
    ('train', lambda tmp, ctx: ctx.train('--method', 'mixed', '--clean-ratio', '2'),
     'argument --clean-ratio: must be a number in [0, 1], got 2'),
    ('train', lambda tmp, ctx: ctx.train('--momentum', '1'), 'argument --momentum: must be a number in [0, 1)'),
    ('train', lambda tmp, ctx: ctx.train('--smoothing', 'nan'), 'argument --smoothing: must be'),
    ('train', lambda tmp, ctx: ctx.train('--epochs', '0'), 'argument --epochs: must be an integer >= 1, got 0'),
    ('train', lambda tmp, ctx: ctx.train('--num-samples', '0'), 'argument --num-samples: must be an integer >= 1'),
    ('train', lambda tmp, ctx: ctx.train('--val-attack-step', '0'), 'argument --val-attack-step: must be a number > 0'),
    # budgets and steps are on the 0-255 scale: a [0, 1]-scale value would attack with next to nothing
    ('train', lambda tmp, ctx: ctx.train('--attack-eps', '0.031'),
     'argument --attack-eps: got 0.031, but budgets are on the 0-255 scale; did you mean 8 (= 8/255)?'),
    ('train', lambda tmp, ctx: ctx.train('--val-attack-eps', '0.03'),
     'argument --val-attack-eps: got 0.03, but budgets are on the 0-255 scale; did you mean 7.65 (= 7.65/255)?'),
    ('train', lambda tmp, ctx: ctx.train('--attack-step', '0.0078'),
     'argument --attack-step: got 0.0078, but steps are on the 0-255 scale; did you mean 2 (= 2/255)?'),
    ('train', lambda tmp, ctx: ctx.train('--val-attack-step', '0.01'),
     'argument --val-attack-step: got 0.01, but steps are on the 0-255 scale; did you mean 2.55 (= 2.55/255)?'),
    ('train', lambda tmp, ctx: ((tmp / 'c.yaml').write_text('attack_eps: 0.0314\n'), ctx.train('-c', tmp / 'c.yaml'))[-1],
     'budgets are on the 0-255 scale; did you mean 8 (= 8/255)?'),
    ('train', lambda tmp, ctx: ctx.train('--clip-grad', '-1'), 'argument --clip-grad: must be a number > 0'),
    ('train', lambda tmp, ctx: ctx.train('--seed', '-1'), 'argument --seed: must be an integer in [0, 4294967295]'),
    ('train', lambda tmp, ctx: ctx.train('--skip-nonfinite', '-1'), 'argument --skip-nonfinite: must be an integer'),
    ('train', lambda tmp, ctx: ctx.train('--scale', '0.9', '0.1'), '--scale is a range'),
    ('train', lambda tmp, ctx: ctx.train('--method', 'nofrost', '--model', 'test_nfr_resnet', '--adv-weight', '2'),
     'adv_weight (λ) must be in [0, 1], got 2.0'),
    # the training attack is a training attack of the attack registry, and one the method can run
    ('train', lambda tmp, ctx: ctx.train('--attack', 'mifgsm'),
     "argument --attack: 'mifgsm' is an evaluation attack (best iterate, fooled samples dropped, running statistics)"),
    ('train', lambda tmp, ctx: ((tmp / 'c.yaml').write_text('attack: apgd-ce\n'), ctx.train('-c', tmp / 'c.yaml'))[-1],
     "key attack: invalid value \"apgd-ce\": 'apgd-ce' is an evaluation attack"),
    ('train', lambda tmp, ctx: ctx.train('--method', 'fast_advprop', '--attack', 'fgsm'),
     '--attack fgsm does not apply'),
    # a run that would make no optimizer step: the digits' training split is smaller than one batch
    ('train', lambda tmp, ctx: ctx.train('-b', '4096'), 'fewer than one batch of 4096'),
    # where the data or the device is not: one line, not an AssertionError of timm's
    ('train', lambda tmp, ctx: ctx.train('--dataset', '', '--data-dir', tmp / 'no_such_folder'),
     'no_such_folder does not exist'),
    ('train', lambda tmp, ctx: ctx.train('--device', 'cuda:99'), '--device cuda:99: '),
]
FILE_AND_CONFIG_CASES: List[Case] = [
    # Damaged weights, for every command that reads them: build writes the file under tmp, then returns the argv.
    # A torch.save zip archive cut short keeps its first header (b'PK\x03\x04') and loses the directory at its end; a
    # cut safetensors file keeps its header (8-byte length, JSON) and loses tensor bytes.
    ('validate', lambda tmp, ctx: ((tmp / 'empty.pth').write_bytes(b''),
                                   ctx.validate('--checkpoint', tmp / 'empty.pth'))[-1],
     'empty.pth: empty file (0 bytes)'),
    ('validate', lambda tmp, ctx: ((tmp / 'last.pth.tar').write_bytes(b'PK\x03\x04' + bytes(60)),
                                   ctx.validate('--checkpoint', tmp / 'last.pth.tar'))[-1], 'last.pth.tar: truncated'),
    ('validate', lambda tmp, ctx: ((tmp / 'notes.pth').write_text('model: resnet50\n'),
                                   ctx.validate('--checkpoint', tmp / 'notes.pth'))[-1],
     "notes.pth: not a checkpoint: a text file, beginning 'model: resnet50'"),
    ('validate', lambda tmp, ctx: ((tmp / 'w.safetensors').write_bytes(
        (55).to_bytes(8, 'little') + b'{"w":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}}' + bytes(8)),
        ctx.validate('--checkpoint', tmp / 'w.safetensors'))[-1], 'w.safetensors: truncated: 71 of the 79 bytes'),
    ('validate', lambda tmp, ctx: ((tmp / 'export').mkdir(),
                                   (tmp / 'export' / 'config.json').write_text('{\n  "architecture": oops\n}\n'),
                                   (tmp / 'export' / 'model.safetensors').write_bytes(b''),
                                   ctx.validate('--checkpoint', tmp / 'export'))[-1],
     'config.json: not valid JSON at line 2, column 19'),
    ('validate', lambda tmp, ctx: ((tmp / 'export').mkdir(),
                                   (tmp / 'export' / 'config.json').write_text('{\n  "architecture": oops\n}\n'),
                                   (tmp / 'export' / 'model.safetensors').write_bytes(b''),
                                   ctx.validate('--model', f'local-dir:{tmp / "export"}'))[-1],
     'export/config.json: not valid JSON at line 2'),
    ('validate', lambda tmp, ctx: ((tmp / 'export').mkdir(),
                                   (tmp / 'export' / 'config.json').write_text('{"architecture": "test_mbn_resnet"}'),
                                   (tmp / 'export' / 'model.safetensors').write_bytes((55).to_bytes(8, 'little')),
                                   ctx.validate('--model', f'local-dir:{tmp / "export"}'))[-1],
     'export/model.safetensors: only 8 bytes: truncated'),
    ('train', lambda tmp, ctx: ((tmp / 'empty.pth').write_bytes(b''),
                                ctx.train('--initial-checkpoint', tmp / 'empty.pth'))[-1], 'empty.pth: empty file'),
    ('train', lambda tmp, ctx: ((tmp / 'best.pth.tar').write_bytes(b'PK\x03\x04' + bytes(60)),
                                ctx.train('--initial-checkpoint', tmp / 'best.pth.tar'))[-1],
     'best.pth.tar: truncated'),
    ('train', lambda tmp, ctx: ((tmp / 'page.safetensors').write_text('<!DOCTYPE html><html>Sign in</html>'),
                                ctx.train('--initial-checkpoint', tmp / 'page.safetensors'))[-1],
     'page.safetensors: not a checkpoint: a text file'),
    ('train', lambda tmp, ctx: ((tmp / 'export').mkdir(),
                                (tmp / 'export' / 'config.json').write_text('{"architecture": "test_mbn_resnet"}'),
                                (tmp / 'export' / 'model.safetensors').write_bytes(
                                    (55).to_bytes(8, 'little') + b'{"w":{"dtype":"F32","shape":[4],'
                                    b'"data_offsets":[0,16]}}'),
                                ctx.train('--initial-checkpoint', f'local-dir:{tmp / "export"}'))[-1],
     'model.safetensors: truncated: 63 of the 79 bytes'),
    ('publish', lambda tmp, ctx: ((tmp / 'last.pth.tar').write_bytes(b'PK\x03\x04' + bytes(60)),
                                  [tmp / 'last.pth.tar', '--local-dir', tmp / 'out'])[-1], 'last.pth.tar: truncated'),
    ('publish', lambda tmp, ctx: ((tmp / 'empty.safetensors').write_bytes(b''),
                                  [tmp / 'empty.safetensors', '--local-dir', tmp / 'out'])[-1],
     'empty.safetensors: empty file'),
    ('publish', lambda tmp, ctx: ((tmp / 'args.yaml').write_text('epochs: 3\n'),
                                  [tmp / 'args.yaml', '--model', 'test_mbn_resnet', '--local-dir', tmp / 'out'])[-1],
     "args.yaml: not a checkpoint: a text file, beginning 'epochs: 3'"),
    ('publish', lambda tmp, ctx: ((tmp / 'export').mkdir(),
                                  (tmp / 'export' / 'config.json').write_text('{"architecture": "test_mbn_resnet",}'),
                                  (tmp / 'export' / 'model.safetensors').write_bytes(b''),
                                  [f'local-dir:{tmp / "export"}', '--local-dir', tmp / 'out'])[-1],
     'export/config.json: not valid JSON at line 1, column 36'),
    ('convert', lambda tmp, ctx: ((tmp / 'best_RA.pth').write_bytes(b'PK\x03\x04' + bytes(60)),
                                  ['nofrost', tmp / 'best_RA.pth', tmp / 'out'])[-1], 'best_RA.pth: truncated'),
    ('convert', lambda tmp, ctx: ((tmp / 'checkpoint.pth.tar').write_text('Not Found'),
                                  ['fast-advprop', tmp / 'checkpoint.pth.tar', tmp / 'out'])[-1],
     "checkpoint.pth.tar: not a checkpoint: a text file, beginning 'Not Found'"),
    ('convert', lambda tmp, ctx: ((tmp / 'R152.npz').write_bytes(b''),
                                  ['tensorpack-resnet', tmp / 'R152.npz', tmp / 'out'])[-1],
     'R152.npz: not an npz archive (as tensorpack writes): an empty file'),
    ('convert', lambda tmp, ctx: ((tmp / 'R152.npz').write_bytes(b'PK\x03\x04' + bytes(60)),
                                  ['tensorpack-resnet', tmp / 'R152.npz', tmp / 'out'])[-1], 'R152.npz: truncated'),
    # -c YAML configs: each value held to its option's type, count and choices, as on the command line
    ('train', lambda tmp, ctx: ((tmp / 'c.yaml').write_text('epochs: 2.5\n'), ctx.train('-c', tmp / 'c.yaml'))[-1],
     'key epochs: invalid value 2.5'),
    ('train', lambda tmp, ctx: ((tmp / 'c.yaml').write_text('lr: [0.1, 0.01]\n'), ctx.train('-c', tmp / 'c.yaml'))[-1],
     'key lr: expected a single float value, got [0.1, 0.01]'),
    ('train', lambda tmp, ctx: ((tmp / 'c.yaml').write_text('method: advprop\n'), ctx.train('-c', tmp / 'c.yaml'))[-1],
     'key method: invalid choice: "advprop" (choose from'),
    ('train', lambda tmp, ctx: ((tmp / 'c.yaml').write_text('pretrained: "yes"\n'),
                                ctx.train('-c', tmp / 'c.yaml'))[-1], 'key pretrained: expected true or false'),
    ('train', lambda tmp, ctx: ((tmp / 'c.yaml').write_text('- epochs: 1\n- lr: 0.1\n'),
                                ctx.train('-c', tmp / 'c.yaml'))[-1], 'must map argument names to values, got a list'),
    ('train', lambda tmp, ctx: ((tmp / 'c.yaml').write_text('scale: 0.5\n'), ctx.train('-c', tmp / 'c.yaml'))[-1],
     'key scale: expected a list of 2 float values, got 0.5'),
    ('train', lambda tmp, ctx: ((tmp / 'c.yaml').write_text('epochs: 1\nlr: [0.1\n'),
                                ctx.train('-c', tmp / 'c.yaml'))[-1], 'is not valid YAML: expected'),
    ('validate', lambda tmp, ctx: ((tmp / 'c.yaml').write_text('sanity_steps: [1, 2]\n'),
                                   ctx.validate('--model', 'test_mbn_resnet', '-c', tmp / 'c.yaml'))[-1],
     'key sanity_steps: expected a single int value, got [1, 2]'),
    ('validate', lambda tmp, ctx: ((tmp / 'c.yaml').write_text('gammas: [0.5, half]\n'),
                                   ctx.validate('--model', 'test_mbn_resnet', '-c', tmp / 'c.yaml'))[-1],
     'key gammas: invalid float value: "half"'),
    ('validate', lambda tmp, ctx: ((tmp / 'c.yaml').write_text('attack_norm: l1\n'),
                                   ctx.validate('--model', 'test_mbn_resnet', '-c', tmp / 'c.yaml'))[-1],
     'key attack_norm: invalid choice: "l1" (choose from linf, l2)'),
    ('validate', lambda tmp, ctx: ((tmp / 'c.yaml').write_text('just a sentence\n'),
                                   ctx.validate('--model', 'test_mbn_resnet', '-c', tmp / 'c.yaml'))[-1],
     'must map argument names to values, got a str'),
    ('validate', lambda tmp, ctx: ((tmp / 'c.yaml').write_text('gamas: [0.5]\n'),
                                   ctx.validate('--model', 'test_mbn_resnet', '-c', tmp / 'c.yaml'))[-1],
     'unknown key(s) in'),
    # argparse's errors: one line with a --help hint, never the usage block (sub-commands included)
    ('train', lambda tmp, ctx: ctx.train('--epochs', 'x'), '(see --help)'),
    ('validate', lambda tmp, ctx: ctx.validate('--model', 'test_mbn_resnet', '--num-samples', 'all'), '(see --help)'),
    ('publish', lambda tmp, ctx: [tmp / 'ckpt.pth.tar', '--branch', 'both'],
     "argument --branch: invalid choice: 'both' (choose from 'clean', 'adv') (see --help)"),
    ('convert', lambda tmp, ctx: ['nofrost', tmp / 'best_RA.pth'],
     'required: DST (see timm-advnorm-convert nofrost --help)'),
    ('convert', lambda tmp, ctx: ['fast-advprop', tmp / 'a.pth.tar', tmp / 'out', '--branch', 'mixed'],
     "argument --branch: invalid choice: 'mixed'"),
]
EVALUATION_AND_PUBLISHING_CASES: List[Case] = [
    # validate: protocol and attack options, refused before the model is evaluated
    ('validate', lambda tmp, ctx: ctx.validate('--model', 'test_mbn_resnet', '--attack-eps', '0.031'),
     'argument --attack-eps: got 0.031, but budgets are on the 0-255 scale; did you mean 8 (= 8/255)?'),
    ('validate', lambda tmp, ctx: ctx.validate('--model', 'test_mbn_resnet', '--eps', '0.5'),
     'argument --eps: got 0.5, but budgets are on the 0-255 scale; did you mean 128 (= 128/255)?'),
    ('validate', lambda tmp, ctx: ctx.validate('--model', 'test_mbn_resnet', '--attack-step', '0.0078'),
     'argument --attack-step: got 0.0078, but steps are on the 0-255 scale; did you mean 2 (= 2/255)?'),
    ('validate', lambda tmp, ctx: ((tmp / 'v.yaml').write_text('attack_step: 0.003\n'),
                                   ctx.validate('--model', 'test_mbn_resnet', '-c', tmp / 'v.yaml'))[-1],
     'steps are on the 0-255 scale; did you mean 0.765 (= 0.765/255)?'),
    ('validate', lambda tmp, ctx: ctx.validate('--model', 'test_mbn_resnet', '--attack-eps', '-1'),
     'argument --attack-eps: must be a number >= 0, got -1'),
    ('validate', lambda tmp, ctx: ctx.validate('--model', 'test_mbn_resnet', '--attacks', 'pgd', '--attack-kwargs',
                                               'bogus=1'), 'rejected'),
    ('validate', lambda tmp, ctx: ctx.validate('--model', 'test_mbn_resnet', '--max-steps', '0'),
     'would cap no attack'),
    ('validate', lambda tmp, ctx: ctx.validate('--model', 'test_mbn_resnet', '--metrics', 'nosuch'),
     "Unknown metric 'nosuch'"),
    ('validate', lambda tmp, ctx: ctx.validate('--model', 'test_mbn_resnet', '--metric-samples', '0'),
     'argument --metric-samples: must be an integer >= 1, got 0'),
    ('validate', lambda tmp, ctx: ctx.validate('--model', 'test_mbn_resnet', '--sanity-queries', '0'),
     'argument --sanity-queries: must be an integer >= 1, got 0'),
    ('validate', lambda tmp, ctx: ctx.validate('--model', 'test_mbn_resnet', '--verify-amp', '4', '--amp',
                                               '--amp-tolerance', '2'),
     'argument --amp-tolerance: must be a number in [0, 1]'),
    ('validate', lambda tmp, ctx: ctx.validate('--model', 'test_mbn_resnet', '--crop-pct', '0'),
     'argument --crop-pct: must be a number > 0, got 0'),
    ('validate', lambda tmp, ctx: ctx.validate('--model', 'test_mbn_resnet', '--std', '0', '0', '0'),
     'argument --std: must be a number > 0, got 0'),
    ('validate', lambda tmp, ctx: ctx.validate('--model', 'test_mbn_resnet', '--img-size', '-4'),
     'argument --img-size: must be an integer >= 1, got -4'),
    ('validate', lambda tmp, ctx: ctx.validate('--model', 'test_mbn_resnet', '--gammas', '0.5', '1.5',
                                               '--results-file', tmp / 'out' / 'deep' / 'results.json'), 'gamma'),
    ('validate', lambda tmp, ctx: ctx.validate('--model', 'test_mbn_resnet', '--plot-dir', tmp / 'out' / 'plots',
                                               '--bn-layer', 'layer9.0.bn1'), 'no mixture-BN layer of that name'),
    # validate: outputs that cannot be written, found before the evaluation
    ('validate', lambda tmp, ctx: ((tmp / 'out').mkdir(), (tmp / 'out' / 'results.csv').write_text('mine\n'),
                                   ctx.validate('--model', 'test_mbn_resnet'))[-1], 'exists; pass --overwrite'),
    ('validate', lambda tmp, ctx: ((tmp / 'r.json').mkdir(),
                                   ctx.validate('--model', 'test_mbn_resnet', '--results-file', tmp / 'r.json'))[-1],
     'r.json: it is a folder'),
    ('validate', lambda tmp, ctx: ((tmp / 'afile').write_text(''), ctx.validate(
        '--model', 'test_mbn_resnet', '--results-file', tmp / 'afile' / 'sub' / 'r.json'))[-1], 'is not a folder'),
    ('validate', lambda tmp, ctx: ((tmp / 'plots').write_text(''), ctx.validate(
        '--model', 'test_mbn_resnet', '--plot-dir', tmp / 'plots'))[-1], 'plots: it is not a folder'),
    ('validate', lambda tmp, ctx: ctx.validate('--model', 'test_mbn_resnet', '--resume-state', tmp),
     'is a folder, not a state file'),
    # validate: data that is missing or cannot be read
    ('validate', lambda tmp, ctx: ctx.validate('--model', 'test_mbn_resnet', '--dataset', '', '--data-dir',
                                               tmp / 'imagenet'), 'imagenet not found'),
    ('validate', lambda tmp, ctx: ctx.validate('--model', 'test_mbn_resnet', '--split', 'test'),
     "no folder of split 'test'"),
    ('validate', lambda tmp, ctx: ((tmp / 'images' / 'validation' / 'cat').mkdir(parents=True),
                                   (tmp / 'images' / 'validation' / 'cat' / 'a.png').write_bytes(b'<html>'),
                                   ctx.validate('--model', 'test_mbn_resnet', '--dataset', '', '--data-dir',
                                                tmp / 'images', '--num-classes', '1'))[-1],
     '1 of the 1 images to evaluate in'),
    ('validate', lambda tmp, ctx: ((tmp / 'images' / 'validation' / 'cat').mkdir(parents=True),
                                   (tmp / 'images' / 'validation' / 'cat' / 'a.jpg').write_bytes(b'\xff\xd8\xff'),
                                   ctx.validate('--model', 'test_mbn_resnet', '--dataset', '', '--data-dir',
                                                tmp / 'images', '--num-classes', '1', '--skip-bad-images'))[-1],
     'none of the images in'),
    # validate: out-of-distribution sets, each from its own folder of class folders named by wnid
    ('validate', lambda tmp, ctx: ['--model', 'test_mbn_resnet', '--dataset', 'digits', '--data-dir', ctx.digits_dir,
                                   '--protocol', 'nofrost-star', '--imagenet-sketch-dir', tmp],
     'give its folder (one folder per class, named by wnid) with --imagenet-r-dir'),
    ('validate', lambda tmp, ctx: ['--model', 'test_mbn_resnet', '--protocol', 'imagenet-r', '--imagenet-r-dir', tmp,
                                   '--imagenet-a-dir', tmp], '--imagenet-a-dir is read by --protocol imagenet-a'),
    ('validate', lambda tmp, ctx: ['--model', 'test_mbn_resnet', '--protocol', 'imagenet-r', '--imagenet-r-dir', tmp,
                                   '--data-dir', ctx.digits_dir], '--data-dir would not be used'),
    ('validate', lambda tmp, ctx: ['--model', 'test_mbn_resnet', '--num-classes', '10', '--protocol', 'imagenet-a',
                                   '--imagenet-a-dir', tmp], "the model has 10 classes, not ImageNet's 1000"),
    ('validate', lambda tmp, ctx: ((tmp / 'val' / 'n01440764').mkdir(parents=True),
                                   ['--model', 'test_mbn_resnet', '--protocol', 'imagenet-r', '--imagenet-r-dir',
                                    tmp / 'val', '--results-file', ctx.out / 'r.json'])[-1],
     'is not ImageNet-R: it needs one folder per class named by its wnid'),
    ('validate', lambda tmp, ctx: ['--model', 'test_mbn_resnet', '--protocol', 'imagenet-sketch',
                                   '--imagenet-sketch-dir', tmp / 'sketch'], 'sketch: no such folder'),
    # publish: everything checked before the checkpoint is read (the missing one is never the error named) and
    # before anything is written
    ('publish', lambda tmp, ctx: [tmp / 'last.pth.tar', '--inference-branch', 'adv', '--repo-id', 'org/m',
                                  '--local-dir', tmp / 'out'], 'Set HF_TOKEN'),
    ('publish', lambda tmp, ctx: ((tmp / 'r.json').write_text(
        '{"model": "m", "protocol": {"name": "xie2020", "reduced": true}, "results": [{"name": "pgd", "acc": 50}]}'),
        [tmp / 'last.pth.tar', '--results', tmp / 'r.json', '--local-dir', tmp / 'out'])[-1],
     'pass --allow-reduced-results'),
    ('publish', lambda tmp, ctx: [tmp / 'last.pth.tar', '--results', tmp / 'r.json', '--local-dir', tmp / 'out'],
     'Results file not found'),
    ('publish', lambda tmp, ctx: ((tmp / 'r.json').write_text('{"model": '),
                                  [tmp / 'last.pth.tar', '--results', tmp / 'r.json', '--local-dir', tmp / 'out'])[-1],
     'r.json is not JSON'),
    ('publish', lambda tmp, ctx: [tmp / 'last.pth.tar', '--branch', 'adv', '--inference-branch', 'clean',
                                  '--local-dir', tmp / 'out'], 'cannot be another'),
    ('publish', lambda tmp, ctx: [tmp / 'last.pth.tar', '--repo-id', 'org/m', '--dry-run'], 'give --local-dir'),
    ('publish', lambda tmp, ctx: [tmp / 'last.pth.tar', '--repo-id', 'just-a-name', '--local-dir', tmp / 'out',
                                  '--dry-run'], 'must be org/name'),
    ('publish', lambda tmp, ctx: [tmp / 'last.pth.tar', '--private', '--local-dir', tmp / 'out'],
     '--private and --revision apply to the Hub repository'),
    ('publish', lambda tmp, ctx: ((tmp / 'out').write_text(''), [tmp / 'last.pth.tar', '--local-dir', tmp / 'out'])[-1],
     'exists and is not a folder'),
    ('publish', lambda tmp, ctx: ((tmp / 'out').mkdir(), (tmp / 'out' / 'README.md').write_text('mine'),
                                  [tmp / 'last.pth.tar', '--local-dir', tmp / 'out'])[-1],
     'is not empty: pass --overwrite'),
    ('publish', lambda tmp, ctx: [tmp / 'last.pth.tar', '--local-dir', tmp / 'out', '--card-template',
                                  tmp / 'card.md'], 'card.md'),
]

CASES = ARGUMENT_CASES + TRAINING_CASES + FILE_AND_CONFIG_CASES + EVALUATION_AND_PUBLISHING_CASES


def case_id(case: Case) -> str:
    return f'{case[0]}-{case[2][:40]}'


def check_refused(case: Case, digits_dir: Path, tmp_path: Path, capsys) -> None:
    """Run `case`: one ``<prog>: error:`` line holding its message, exit status 2, no file created or changed."""
    command, build, message = case
    run, prog = COMMANDS[command]
    ctx = Context(digits_dir=digits_dir, out=tmp_path / 'out')
    argv = [str(a) for a in build(tmp_path, ctx)]
    before, digits_before = folder_snapshot(tmp_path), folder_snapshot(digits_dir)
    capsys.readouterr()
    try:
        status = run(prog, argv)
    except SystemExit as e:  # argparse's usage errors and --help exit from inside
        status = e.code
    err = capsys.readouterr().err
    errors = [line for line in err.splitlines() if 'error' in line.lower()]
    assert status == 2, err
    assert 'Traceback' not in err, err
    assert len(errors) == 1 and errors[0].startswith(f'{prog}: error:'), err
    assert message in errors[0], errors[0]
    assert folder_snapshot(tmp_path) == before, 'bad input must not create or change a file'
    assert folder_snapshot(digits_dir) == digits_before


@pytest.mark.parametrize('case', CASES, ids=[case_id(c) for c in CASES])
def test_bad_input_is_one_line_status_2_and_writes_nothing(case, digits_dir, tmp_path, capsys):
    check_refused(case, digits_dir, tmp_path, capsys)


def test_the_catalogue_covers_every_command():
    assert {case[0] for case in CASES} == set(COMMANDS)
