"""The catalogue of bad input (`test_bad_inputs.py`), the last classes of issue #38:

* an ``--attack-kwargs`` key that an option of its own (``--attack-eps``, ...) or the evaluation itself sets: the
  attack got it twice and failed with Python's "multiple values for keyword argument", or one of the two won silently;
* a text file that is not UTF-8 (a config, a recipe, a study spec, a results file, a run's summary saved as Latin-1):
  one line naming the file and the first byte that is not UTF-8, not Python's codec text;
* a built-in dataset rendered into ``--data-dir`` before a later refusal: nothing is left behind.

Every refusal exits with status 2, says what is wrong on one line and creates no file or folder.
"""
import re
from pathlib import Path
from typing import List

import pytest
from test_bad_inputs import Case, case_id, check_refused
from test_bad_inputs_last import _digits_checkpoint

from timm_advnorm.commands.study import run as run_study
from timm_advnorm.eval.schema import read_results
from timm_advnorm.hub import read_eval_results
from timm_advnorm.messages import read_utf8
from timm_advnorm.study.spec import load_study
from timm_advnorm.train.epoch_record import write_summary_row

_OWNED = 'is set by {}, not by --attack-kwargs'
OWNED_KWARGS_CASES: List[Case] = [
    ('validate', lambda tmp, ctx: ctx.validate('--model', 'test_mbn_resnet', '--attacks', 'pgd', '--attack-kwargs',
                                               'eps=8'),
     '--attack-kwargs eps=8: eps ' + _OWNED.format('--attack-eps (0-255 scale)')),
    ('validate', lambda tmp, ctx: ctx.validate('--model', 'test_mbn_resnet', '--attack-kwargs', 'step=2/255'),
     '--attack-kwargs step=2/255: step ' + _OWNED.format('--attack-step (0-255 scale)')),
    ('validate', lambda tmp, ctx: ctx.validate('--model', 'test_mbn_resnet', '--attacks', 'pgd', '--attack-steps', '5',
                                               '--attack-kwargs', 'steps=3'),
     '--attack-kwargs steps=3: steps ' + _OWNED.format('--attack-steps')),
    ('validate', lambda tmp, ctx: ctx.validate('--model', 'test_mbn_resnet', '--attacks', 'pgd', '--attack-kwargs',
                                               'norm=l2'), _OWNED.format('--attack-norm')),
    ('validate', lambda tmp, ctx: ctx.validate('--model', 'test_mbn_resnet', '--attacks', 'pgd', '--attack-kwargs',
                                               'targeted=True'), _OWNED.format('--attack-targeted')),
    ('validate', lambda tmp, ctx: ctx.validate('--model', 'test_mbn_resnet', '--attacks', 'pgd', '--attack-kwargs',
                                               'seed=3'), _OWNED.format('--seed')),
    ('validate', lambda tmp, ctx: ctx.validate('--model', 'test_mbn_resnet', '--attacks', 'pgd', '--attack-kwargs',
                                               'fold_bn=False'), _OWNED.format('--no-fold-bn')),
    ('validate', lambda tmp, ctx: ((tmp / 'c.yaml').write_text('attack_kwargs: {eps: 8}\n'),
                                   ctx.validate('--model', 'test_mbn_resnet', '-c', tmp / 'c.yaml'))[-1],
     '--attack-kwargs eps=8: eps ' + _OWNED.format('--attack-eps (0-255 scale)')),
]

LATIN1 = 'epochs: 1\n# r\xe9sum\xe9\n'.encode('latin-1')  # a Latin-1 "é" at byte 13: 0xe9
_NOT_UTF8 = 'not UTF-8 text (byte 13 is 0xe9); save it as UTF-8'


def _latin1(tmp: Path, name: str) -> Path:
    """A file of text saved as Latin-1."""
    (tmp / name).write_bytes(LATIN1)
    return tmp / name


NOT_UTF8_CASES: List[Case] = [
    ('train', lambda tmp, ctx: ctx.train('-c', _latin1(tmp, 'c.yaml')), f'c.yaml: {_NOT_UTF8}'),
    ('validate', lambda tmp, ctx: ctx.validate('--model', 'test_mbn_resnet', '-c', _latin1(tmp, 'c.yaml')),
     f'c.yaml: {_NOT_UTF8}'),
    ('publish', lambda tmp, ctx: [_digits_checkpoint(tmp), '--inference-branch', 'clean', '--results',
                                  _latin1(tmp, 'r.json'), '--local-dir', tmp / 'x'], f'r.json: {_NOT_UTF8}'),
]

# a built-in dataset given with --data-dir is rendered there once the image size is known; a refusal after it
# (the method's options, the split, a state file) leaves neither the copy nor the folder the command made for it
RENDERED_CASES: List[Case] = [
    ('train', lambda tmp, ctx: ['--dataset', 'digits', '--data-dir', tmp / 'new', '--output', ctx.out, '--epochs', '1',
                                '--workers', '0', '--mixup', '0.5', '-b', '3'],
     'the 3 rows mixed per batch must be even'),
    ('validate', lambda tmp, ctx: ['--model', 'test_mbn_resnet', '--dataset', 'digits', '--data-dir', tmp / 'new',
                                   '--workers', '0', '--attacks', 'fgsm', '--num-samples', '4', '--split', 'nosuch',
                                   '--results-file', ctx.out / 'r.json'], "no folder of split 'nosuch'"),
]

CASES = OWNED_KWARGS_CASES + NOT_UTF8_CASES + RENDERED_CASES


@pytest.mark.parametrize('case', CASES, ids=[case_id(c) for c in CASES])
def test_bad_input_is_one_line_status_2_and_writes_nothing(case, digits_dir, tmp_path, capsys):
    check_refused(case, digits_dir, tmp_path, capsys)


def test_every_reader_of_a_text_file_names_the_file_and_the_byte(tmp_path, capsys):
    """The readers below the commands: a study spec, results (of the demo and of the Hub card), a run's summary."""
    path = _latin1(tmp_path, 'f')
    for read, source in ((load_study, f'study {path}'), (read_results, str(path)), (read_eval_results, str(path)),
                         (read_utf8, str(path))):
        with pytest.raises(ValueError, match=f'^{re.escape(source)}: {re.escape(_NOT_UTF8)}$'):
            read(path)
    with pytest.raises(ValueError, match=re.escape(f'summary.csv: {_NOT_UTF8}')):
        write_summary_row(_latin1(tmp_path, 'summary.csv'), dict(epoch=0))
    assert run_study('prog', [str(path), '--dry-run', '--output', str(tmp_path / 'o')]) == 2
    assert capsys.readouterr().err.strip() == f'prog: error: study {path}: {_NOT_UTF8}'


def test_every_text_read_of_the_package_decodes_utf8_in_one_place():
    """User files are read through `messages.read_utf8` (or `read_text_file`); a plain ``read_text()`` or text-mode
    ``open`` reads in the locale's encoding and fails with Python's codec text. The ones left read the package's own
    files or the system's, or catch the error themselves."""
    package = Path(__file__).resolve().parents[1] / 'timm_advnorm'
    plain = sorted({path.relative_to(package).as_posix() for path in package.rglob('*.py')
                    for line in path.read_text(encoding='utf-8').splitlines()
                    if '.read_text()' in line or ("newline='')" in line and "'w'" not in line)})
    assert plain == ['commands/publish.py', 'eval/protocols/ood.py', 'eval/run/subsets.py', 'study/provenance.py',
                     'train/budget.py', 'train/run_lock.py', 'weights/export.py', 'write_guard.py']
