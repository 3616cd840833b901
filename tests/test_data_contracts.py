"""Data contracts, checked before the first step of training or evaluation: both splits have the same classes, numbered
alike (or as a ``--class-map`` says); the model has the data's classes; no folder or image is reached twice through
symbolic links and no link loops; an unreadable image is an error naming it, unless ``--skip-bad-images``."""
import logging
import os
from pathlib import Path
from typing import Dict, List

import pytest
from PIL import Image

from timm_advnorm.data.folders import check_num_classes, scan_image_folder, split_class_map
from timm_advnorm.commands.train import parse_args as parse_train_args
from timm_advnorm.commands.train import train_options
from timm_advnorm.commands.validate import run as run_validate
from timm_advnorm.train.build import build_training
from timm_advnorm.commands.train import run as run_train

pytestmark = pytest.mark.usefixtures('one_thread')

#: Images per class folder in the tiny folders.
PER_CLASS = 4


def _class_folder(folder: Path, shade: int) -> None:
    folder.mkdir(parents=True)
    for i in range(PER_CLASS):
        Image.new('RGB', (16, 16), (shade, 40 * i, 100)).save(folder / f'{i}.png')


def _image_folder(root: Path, splits: Dict[str, str]) -> Path:
    """``root/<split>/<class>/<i>.png`` for each split and its classes (one letter each), every class its own colour."""
    for split, classes in splits.items():
        for name in classes:
            _class_folder(root / split / name, 20 * (ord(name) - ord('a')))
    return root


def _train_argv(data: Path, out: Path, *extra) -> List[str]:
    argv = ['--dataset', '', '--data-dir', data, '--model', 'test_mbn_resnet', '--img-size', 16, '--epochs', 1,
            '--attack-steps', 1, '--val-attack-steps', 1, '--num-samples', 4, '-b', 4, '--workers', 0,
            '--log-interval', 0, '--output', out, *extra]
    return [str(a) for a in argv]


def _validate_argv(out: Path, *extra) -> List[str]:
    argv = ['--num-samples', 8, '--workers', 0, '--sanity-samples', 0, '--no-progress', '--attacks', 'fgsm',
            '--gammas', 1, '--results-file', out / 'results.json', *extra]
    return [str(a) for a in argv]


def _error(run, prog: str, argv: List[str], capsys) -> str:
    """The one error line of a refused command (status 2, no traceback)."""
    capsys.readouterr()
    status = run(prog, argv)
    err = capsys.readouterr().err
    errors = [line for line in err.splitlines() if 'error' in line.lower()]
    assert status == 2 and 'Traceback' not in err and len(errors) == 1, err
    assert errors[0].startswith(f'{prog}: error: '), err
    return errors[0]


@pytest.fixture(scope='module')
def three_class_checkpoint(tmp_path_factory, one_thread) -> Path:
    """The last checkpoint of a one-epoch run on three classes (a, b, c)."""
    root = tmp_path_factory.mktemp('three')
    data = _image_folder(root / 'data', {'train': 'abc', 'validation': 'abc'})
    assert run_train('train_adv.py', _train_argv(data, root / 'runs', '--num-classes', 3)) == 0
    (run_dir,) = (root / 'runs').iterdir()
    return run_dir / 'last.pth.tar'


# the folder scan

def test_the_scan_counts_the_images_of_each_class_as_timm_labels_them(tmp_path):
    data = _image_folder(tmp_path, {'train': 'ab'})
    (data / 'train' / 'a' / 'notes.txt').write_text('not an image')
    outside = _image_folder(tmp_path / 'elsewhere', {'c': 'x'})  # a class folder linked in from another disk is fine
    os.symlink(outside / 'c' / 'x', data / 'train' / 'x')
    scan = scan_image_folder(data / 'train')
    assert scan.images == {'a': PER_CLASS, 'b': PER_CLASS, 'x': PER_CLASS} and scan.classes == ['a', 'b', 'x']


@pytest.mark.parametrize('target', ['..', '.', '../..'])
def test_a_link_to_an_enclosing_folder_is_a_loop_named_by_its_link(tmp_path, target):
    data = _image_folder(tmp_path, {'train': 'ab'})
    os.symlink(target, data / 'train' / 'a' / 'loop')
    with pytest.raises(ValueError, match=f'{data / "train" / "a" / "loop"} is a symbolic link to .* encloses it'):
        scan_image_folder(data / 'train')


def test_a_loop_through_two_links_outside_the_split_is_found(tmp_path):
    data = _image_folder(tmp_path, {'train': 'ab'})
    (tmp_path / 'x').mkdir()
    (tmp_path / 'y').mkdir()
    os.symlink(tmp_path / 'y', tmp_path / 'x' / 'to_y')
    os.symlink(tmp_path / 'x', tmp_path / 'y' / 'to_x')
    os.symlink(tmp_path / 'x', data / 'train' / 'a' / 'x')
    with pytest.raises(ValueError, match=f'{data / "train" / "a" / "x" / "to_y" / "to_x"} is a symbolic link to '
                                         f'{tmp_path / "x"}, a folder that encloses it'):
        scan_image_folder(data / 'train')


def test_a_folder_reached_twice_names_both_paths(tmp_path):
    data = _image_folder(tmp_path, {'train': 'ab'})
    os.symlink('b', data / 'train' / 'c')
    with pytest.raises(ValueError, match=f'{data / "train" / "b"} and {data / "train" / "c"} are the same folder'):
        scan_image_folder(data / 'train')


def test_an_image_reached_twice_names_both_paths(tmp_path):
    data = _image_folder(tmp_path, {'train': 'ab'})
    os.symlink('../b/0.png', data / 'train' / 'a' / 'copy.png')
    with pytest.raises(ValueError, match=f'{data / "train" / "b" / "0.png"} and {data / "train" / "a" / "copy.png"} '
                                         'are the same image'):
        scan_image_folder(data / 'train')
    (data / 'train' / 'a' / 'copy.png').unlink()
    Image.new('RGB', (4, 4)).save(tmp_path / 'outside.png')
    for name in ('a', 'b'):
        os.symlink(tmp_path / 'outside.png', data / 'train' / name / 'outside.png')
    with pytest.raises(ValueError, match='are the same image'):
        scan_image_folder(data / 'train')


def test_an_empty_split_is_refused(tmp_path):
    (tmp_path / 'train' / 'a').mkdir(parents=True)
    with pytest.raises(ValueError, match='no images under'):
        scan_image_folder(tmp_path / 'train')


# the class map of both splits

def test_both_splits_get_the_training_splits_class_indices(tmp_path):
    data = _image_folder(tmp_path, {'train': 'abc', 'validation': 'acb'})
    assert split_class_map(scan_image_folder(data / 'train'), scan_image_folder(data / 'validation')) == dict(
        a=0, b=1, c=2)


@pytest.mark.parametrize('splits, named', [
    ({'train': 'abc', 'validation': 'abd'}, ["validation has 'd'", "train has 'c'"]),
    ({'train': 'abc', 'validation': 'bc'}, ["train has 'a'"]),
    ({'train': 'bc', 'validation': 'abc'}, ["validation has 'a'"]),
])
def test_splits_with_other_classes_are_refused_naming_them(tmp_path, splits, named):
    data = _image_folder(tmp_path, splits)
    with pytest.raises(ValueError, match='other class folders') as error:
        split_class_map(scan_image_folder(data / 'train'), scan_image_folder(data / 'validation'))
    assert all(text in str(error.value) for text in named), error.value


def test_a_class_map_numbers_both_splits_and_names_the_folders_it_leaves_out(tmp_path, caplog):
    data = _image_folder(tmp_path, {'train': 'abc', 'validation': 'bd'})
    (tmp_path / 'map.txt').write_text('c\nb\na\n')
    scans = scan_image_folder(data / 'train'), scan_image_folder(data / 'validation')
    with caplog.at_level(logging.WARNING):
        assert split_class_map(*scans, str(tmp_path / 'map.txt')) == dict(c=0, b=1, a=2)
    assert f"maps no class of 1 image folder(s) of {data / 'validation'}, whose {PER_CLASS} images are left out: " \
           "'d'" in caplog.text
    with pytest.raises(ValueError, match='--class-map .*missing.txt'):
        split_class_map(*scans, str(tmp_path / 'missing.txt'))


def test_the_model_must_have_the_datas_classes_unless_a_class_map_says_which():
    check_num_classes(3, dict(a=0, b=1, c=2), False, '--num-classes')
    with pytest.raises(ValueError, match=r'the model has 4 classes \(--num-classes\) but the data has 3 classes'):
        check_num_classes(4, dict(a=0, b=1, c=2), False, '--num-classes')
    check_num_classes(1000, dict(a=7, b=999), True, 'the checkpoint x')  # some of an ImageNet model's classes
    with pytest.raises(ValueError, match=r'has 10 classes \(the checkpoint x\) but the --class-map gives class '
                                         r'index 999'):
        check_num_classes(10, dict(a=7, b=999), True, 'the checkpoint x')


# training

@pytest.mark.parametrize('splits, extra, message', [
    ({'train': 'abc', 'validation': 'abcd'}, ['--num-classes', 3], "only {data}/validation has 'd'"),
    ({'train': 'abc', 'validation': 'abc'}, ['--num-classes', 4], 'the model has 4 classes (--num-classes) but the '
                                                                 'data has 3 classes'),
    ({'train': 'abc', 'validation': 'abc'}, ['--num-classes', 3, '--class-map', 'missing.txt'], 'missing.txt'),
])
def test_training_refuses_broken_contracts_before_the_run_folder(tmp_path, capsys, splits, extra, message):
    data = _image_folder(tmp_path / 'data', splits)
    error = _error(run_train, 'train_adv.py', _train_argv(data, tmp_path / 'runs', *extra), capsys)
    assert message.format(data=data) in error, error
    assert not (tmp_path / 'runs').exists()


def test_training_refuses_a_link_loop_naming_the_link(tmp_path, capsys):
    data = _image_folder(tmp_path / 'data', {'train': 'ab', 'validation': 'ab'})
    os.symlink('..', data / 'train' / 'b' / 'up')
    error = _error(run_train, 'train_adv.py', _train_argv(data, tmp_path / 'runs', '--num-classes', 2), capsys)
    assert f'{data / "train" / "b" / "up"} is a symbolic link' in error, error
    assert not (tmp_path / 'runs').exists()


def test_training_validates_with_the_class_maps_indices(tmp_path):
    """The validation split lacks class a: without the map its b and c would be classes 0 and 1."""
    data = _image_folder(tmp_path / 'data', {'train': 'abc', 'validation': 'bc'})
    (tmp_path / 'map.txt').write_text('a\nb\nc\n')
    args, text = parse_train_args(_train_argv(data, tmp_path / 'runs', '--num-classes', 3, '--class-map',
                                              tmp_path / 'map.txt'))
    run = build_training(train_options(args), text)
    val_set = run.loader_val.dataset
    assert sorted({target for _, target in val_set.reader.samples}) == [1, 2]
    assert sorted({run.loader_robust.dataset.dataset[i][1] for i in run.loader_robust.dataset.indices}) == [1, 2]


def test_training_refuses_an_unreadable_image_by_name_or_leaves_it_out(tmp_path, capsys, caplog):
    data = _image_folder(tmp_path / 'data', {'train': 'ab', 'validation': 'ab'})
    good = (data / 'train' / 'b' / '1.png').read_bytes()
    (data / 'train' / 'b' / '1.png').write_bytes(good[:60])  # truncated
    (data / 'validation' / 'a' / 'x.png').write_bytes(b'not an image')
    argv = _train_argv(data, tmp_path / 'runs', '--num-classes', 2)
    error = _error(run_train, 'train_adv.py', argv, capsys)
    assert f'1 of the {2 * PER_CLASS} images to train on in {data / "train"} cannot be read: b/1.png (' in error, error
    assert '--skip-bad-images' in error and not (tmp_path / 'runs').exists()

    args, text = parse_train_args(argv + ['--skip-bad-images'])
    with caplog.at_level(logging.WARNING):
        run = build_training(train_options(args), text)
    assert run.train_images == 2 * PER_CLASS - 1 and len(run.loader_val.dataset) == 2 * PER_CLASS
    assert 'b/1.png' not in run.loader_train.dataset.filenames()
    assert 'Skipped 1 unreadable images in' in caplog.text and 'b/1.png (' in caplog.text
    assert 'a/x.png (cannot identify image file)' in caplog.text


def test_training_from_a_checkpoint_of_other_classes_is_refused_naming_both_counts(tmp_path, capsys,
                                                                                   three_class_checkpoint):
    data = _image_folder(tmp_path / 'data', {'train': 'abcd', 'validation': 'abcd'})
    argv = _train_argv(data, tmp_path / 'runs', '--num-classes', 4)
    checkpoint = str(three_class_checkpoint)
    error = _error(run_train, 'train_adv.py', argv + ['--initial-checkpoint', checkpoint], capsys)
    assert 'has 3 classes but num_classes=4' in error, error
    error = _error(run_train, 'train_adv.py', argv + ['--resume', checkpoint], capsys)
    assert 'cannot change --num-classes: 3 -> 4' in error, error
    error = _error(run_train, 'train_adv.py', argv[:-2] + ['--num-classes', '3', '--resume', checkpoint], capsys)
    assert 'the model has 3 classes (--num-classes) but the data has 4 classes' in error, error
    assert not (tmp_path / 'runs').exists()


# evaluation

def test_evaluating_a_checkpoint_of_other_classes_is_one_line_naming_both_counts(tmp_path, capsys, digits_dir,
                                                                                  three_class_checkpoint):
    error = _error(run_validate, 'validate_adv.py', _validate_argv(
        tmp_path / 'out', '--checkpoint', three_class_checkpoint, '--dataset', 'digits', '--data-dir', digits_dir),
        capsys)
    assert f'the model has 3 classes (the checkpoint {three_class_checkpoint}) but the data has 10 classes' in error
    assert not (tmp_path / 'out').exists()


def test_a_class_map_lets_a_model_be_evaluated_on_some_of_its_classes(tmp_path, three_class_checkpoint):
    data = _image_folder(tmp_path / 'data', {'validation': 'bc'})
    (tmp_path / 'map.txt').write_text('a\nb\nc\n')
    argv = _validate_argv(tmp_path / 'out', '--checkpoint', three_class_checkpoint, '--dataset', '', '--data-dir',
                          data, '--class-map', tmp_path / 'map.txt')
    assert run_validate('validate_adv.py', argv) == 0
    assert (tmp_path / 'out' / 'results.json').exists()


def test_evaluation_refuses_a_link_loop_and_a_folder_linked_twice(tmp_path, capsys, three_class_checkpoint):
    data = _image_folder(tmp_path / 'data', {'validation': 'abc'})
    argv = _validate_argv(tmp_path / 'out', '--checkpoint', three_class_checkpoint, '--dataset', '', '--data-dir',
                          data)
    os.symlink('../..', data / 'validation' / 'a' / 'up')
    assert 'a/up is a symbolic link to' in _error(run_validate, 'validate_adv.py', argv, capsys)
    (data / 'validation' / 'a' / 'up').unlink()
    os.symlink('c', data / 'validation' / 'd')
    assert f'{data / "validation" / "c"} and {data / "validation" / "d"} are the same folder' in _error(
        run_validate, 'validate_adv.py', argv, capsys)
    assert not (tmp_path / 'out').exists()


def test_the_decode_check_draws_no_random_number_of_the_run(tmp_path):
    """A run whose images all decode trains as it did before the check: the same shuffles, starts and draws."""
    import torch
    from timm.data import ImageDataset

    from timm_advnorm.data.readable import keep_readable

    dataset = ImageDataset(str(_image_folder(tmp_path, {'train': 'ab'}) / 'train'))
    state = torch.get_rng_state()
    keep_readable(dataset, False, 0, 'train on')
    assert torch.equal(torch.get_rng_state(), state)


def _decode_check_worker(rank: int, port: int, root: str) -> None:
    """One rank of a two-process group: which images it decoded itself, and what it was told is unreadable."""
    import json

    import torch.distributed as dist
    from timm.data import ImageDataset

    from timm_advnorm.data import readable

    decoded = []
    own_check = readable.find_unreadable

    def counting_check(dataset, indices, workers=0):
        decoded.extend(indices)
        return own_check(dataset, indices, workers)

    readable.find_unreadable = counting_check
    dist.init_process_group('gloo', init_method=f'tcp://127.0.0.1:{port}', rank=rank, world_size=2)
    try:
        dataset = ImageDataset(str(Path(root) / 'train'))
        found, _ = readable.find_unreadable_across_ranks(dataset, range(len(dataset)))
    finally:
        dist.destroy_process_group()
    record = dict(decoded=decoded, found={str(i): name for i, (name, _) in found.items()})
    (Path(root) / f'rank{rank}.json').write_text(json.dumps(record))


def test_the_ranks_of_a_distributed_run_share_the_decode_check(tmp_path):
    """Each rank decodes its share of the images, and every rank learns of every unreadable one: a run over many
    GPUs pays one decoding pass, and all ranks refuse or skip the same files."""
    import json

    import torch.multiprocessing as mp
    from ports import free_port

    data = _image_folder(tmp_path, {'train': 'ab'})
    (data / 'train' / 'a' / '0.png').write_bytes(b'not an image')  # index 0: rank 0's share
    (data / 'train' / 'b' / '1.png').write_bytes(b'not an image')  # index PER_CLASS + 1: rank 1's share
    mp.spawn(_decode_check_worker, args=(free_port(), str(data)), nprocs=2, join=True)
    ranks = [json.loads((data / f'rank{r}.json').read_text()) for r in range(2)]
    assert sorted(ranks[0]['decoded'] + ranks[1]['decoded']) == list(range(2 * PER_CLASS))
    assert not set(ranks[0]['decoded']) & set(ranks[1]['decoded'])
    expected = {'0': 'a/0.png', str(PER_CLASS + 1): 'b/1.png'}
    assert ranks[0]['found'] == ranks[1]['found'] == expected
