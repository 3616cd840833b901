"""Runs at the same time: two evaluations writing one results file, two first uses rendering the digits cache, two
publishes into one folder. Each race is forced (both runs past their checks before either writes), so the tests
are deterministic: the no-overwrite rule must hold however late the loser checked, and the loser loses nothing."""
import errno
import json
import os
import threading
from pathlib import Path

import pytest

from timm_advnorm.commands import validate as validate_adv
from timm_advnorm.data import digits as digits_module
from timm_advnorm.data import prepare_digits
from timm_advnorm.eval import validate as eval_validate
from timm_advnorm.eval.results.files import OutputFiles, check_writable, kept_name
from timm_advnorm.hub import staged_folder

pytestmark = pytest.mark.usefixtures('one_thread')

#: Seconds a forced race waits for its other run before giving up (a run that failed early never arrives).
BARRIER_TIMEOUT = 60


def _text(text: str):
    """A writer for `OutputFiles.publish`."""
    return lambda tmp: tmp.write_text(text)


def _in_threads(*targets):
    """Run each callable in its own thread; returns their results (an exception is returned, not raised)."""
    results = [None] * len(targets)

    def call(i, target):
        try:
            results[i] = target()
        except Exception as e:  # reported to the test
            results[i] = e

    threads = [threading.Thread(target=call, args=(i, t)) for i, t in enumerate(targets)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return results


def test_a_file_published_while_another_run_ran_is_kept_not_replaced(tmp_path):
    path = tmp_path / 'results.json'
    check_writable(path, overwrite=False)  # both runs checked before either wrote
    check_writable(path, overwrite=False)
    first, second = OutputFiles(), OutputFiles()
    assert first.publish(path, _text('first')) == path
    kept = second.publish(path, _text('second'))
    assert kept != path and kept.name.startswith('results.kept-') and kept.suffix == '.json'
    assert path.read_text() == 'first' and kept.read_text() == 'second'
    later = second.publish(tmp_path / 'results.csv', _text('second csv'))  # the rest of the set follows it
    assert later.name == kept.name.replace('.json', '.csv') and not (tmp_path / 'results.csv').exists()
    first.check_nothing_kept()
    with pytest.raises(FileExistsError) as error:
        second.check_nothing_kept()
    assert str(error.value).startswith(f'{path} was written by another run') and f'kept as {kept}, {later}' in str(
        error.value)
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(['results.json', kept.name, later.name])


def test_overwrite_replaces_and_kept_names_keep_their_suffixes(tmp_path):
    path = tmp_path / 'results.json'
    path.write_text('old')
    assert OutputFiles(overwrite=True).publish(path, _text('new')) == path and path.read_text() == 'new'
    assert kept_name(tmp_path / 'results.bn_stats.json', 'ab12').name == 'results.kept-ab12.bn_stats.json'
    assert kept_name(tmp_path / 'accuracy_vs_eps.png', 'ab12').name == 'accuracy_vs_eps.kept-ab12.png'


def test_many_threads_publishing_one_file_lose_nothing(tmp_path):
    path = tmp_path / 'plots' / 'accuracy_vs_eps.png'
    barrier = threading.Barrier(8, timeout=BARRIER_TIMEOUT)

    def run(i):
        def write(tmp):
            tmp.write_text(f'run {i}')
            barrier.wait()  # every run has its file written before any publishes it
        return OutputFiles().publish(path, write)

    written = _in_threads(*[lambda i=i: run(i) for i in range(8)])
    assert all(isinstance(p, Path) for p in written), written
    assert written.count(path) == 1 and len(set(written)) == 8
    assert sorted(p.read_text() for p in written) == [f'run {i}' for i in range(8)]
    assert sorted(path.parent.iterdir()) == sorted(written)  # no temporary file left


def test_without_hard_links_a_file_is_still_never_replaced(tmp_path, monkeypatch):
    def no_links(src, dst):
        raise OSError(errno.EPERM, 'Operation not permitted')

    monkeypatch.setattr(os, 'link', no_links)
    path = tmp_path / 'results.json'
    assert OutputFiles().publish(path, _text('first')) == path
    kept = OutputFiles().publish(path, _text('second'))
    assert path.read_text() == 'first' and kept.read_text() == 'second'
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(['results.json', kept.name])


def test_two_evaluations_racing_for_one_results_file_keep_both(digits_dir, tmp_path, monkeypatch, capsys):
    """Both runs pass the up-front check and evaluate; the first to publish takes the names, the other exits 2 and
    says where it kept its results, under tagged names that keep its files a set."""
    barrier = threading.Barrier(2, timeout=BARRIER_TIMEOUT)
    gather = eval_validate.gather_records

    def gather_then_wait(records, info):
        barrier.wait()  # both evaluations done, neither has written
        return gather(records, info)

    monkeypatch.setattr(eval_validate, 'gather_records', gather_then_wait)
    out = tmp_path / 'out'
    # --no-fold-bn: BN folding traces the model with torch.fx, which patches nn.Module.__call__ process-wide while it
    # traces, so two evaluations in threads of one process would trip each other (runs are processes: they do not)
    argv = ['--model', 'test_mbn_resnet', '--dataset', 'digits', '--data-dir', str(digits_dir), '--num-samples', '8',
            '-j', '0', '--sanity-samples', '0', '--no-progress', '--attacks', 'fgsm', '--gammas', '0', '1',
            '--no-fold-bn', '--results-file', str(out / 'results.json')]
    capsys.readouterr()
    statuses = _in_threads(lambda: validate_adv.run('validate_adv.py', argv),
                           lambda: validate_adv.run('validate_adv.py', argv))
    err = capsys.readouterr().err.strip().splitlines()
    assert sorted(statuses) == [0, 2], (statuses, err)
    assert len(err) == 1 and err[0].startswith('validate_adv.py: error:') and 'kept as' in err[0], err
    names = sorted(p.name for p in out.iterdir())
    tag = next(n for n in names if n.startswith('results.kept-')).split('.')[1]
    assert names == sorted(f'results.{part}' for part in ('json', 'csv', 'bn_stats.json', f'{tag}.json',
                                                          f'{tag}.csv', f'{tag}.bn_stats.json'))
    assert all(str(out / f'results.{tag}.{suffix}') in err[0] for suffix in ('json', 'csv', 'bn_stats.json'))
    kept = json.loads((out / f'results.{tag}.json').read_text())
    assert kept['bn_stats']['file'] == f'results.{tag}.bn_stats.json'  # names its own set
    assert json.loads((out / 'results.json').read_text())['bn_stats']['file'] == 'results.bn_stats.json'


def test_two_first_uses_rendering_the_digits_share_one_cache(tmp_path, monkeypatch):
    """Both runs find no cache and render; one puts its copy in place, the other uses it (it used to die on
    "Directory not empty")."""
    barrier = threading.Barrier(2, timeout=BARRIER_TIMEOUT)
    started = threading.local()
    render = digits_module._render

    def render_after_both_started(image, img_size):
        if not getattr(started, 'value', False):
            started.value = True
            barrier.wait()  # both runs are past the check for a finished cache
        return render(image, img_size)

    monkeypatch.setattr(digits_module, '_render', render_after_both_started)
    root = tmp_path / 'cache' / 'digits-8px'
    roots = _in_threads(lambda: prepare_digits(root, img_size=8), lambda: prepare_digits(root, img_size=8))
    assert roots == [root, root], roots
    assert sorted(p.name for p in root.iterdir()) == ['.complete', 'train', 'validation']
    assert sum(1 for p in root.rglob('*.png')) == 1797
    assert [p.name for p in root.parent.iterdir()] == ['digits-8px']  # no staging folder left behind


def test_a_digits_folder_holding_something_else_is_refused(tmp_path):
    root = tmp_path / 'digits'
    root.mkdir()
    (root / 'mine.txt').write_text('keep')
    with pytest.raises(FileExistsError, match='holds no complete digits dataset'):
        prepare_digits(root, img_size=8)
    assert [p.name for p in root.iterdir()] == ['mine.txt']


def test_two_publishes_into_one_folder_never_replace_each_other(tmp_path):
    target = tmp_path / 'exports' / 'model'
    with pytest.raises(FileExistsError, match='written by another run meanwhile: pass --overwrite'):
        with staged_folder(target) as loser:  # both checked a missing target
            (loser / 'README.md').write_text('loser')
            with staged_folder(target) as winner:
                (winner / 'README.md').write_text('winner')
    assert (target / 'README.md').read_text() == 'winner'
    assert sorted(p.name for p in target.parent.iterdir()) == ['model']  # no staging folder left behind
    with staged_folder(target, overwrite=True) as stage:
        (stage / 'README.md').write_text('replaced')
    assert (target / 'README.md').read_text() == 'replaced'

