"""A study's findings judged in direction and in size (`timm_advnorm.study.findings`), their summary with its
denominators, the spec keys that declare them, and a study's results put on the record (`--record`)."""
import math
from pathlib import Path

import pytest
import yaml

from timm_advnorm.study.cells import Cell
from timm_advnorm.study.findings import check_finding, number_digits
from timm_advnorm.study.record import record_study
from timm_advnorm.study.spec import Expected, Finding, load_study
from timm_advnorm.study.table import CellResult, summarize_findings
from timm_advnorm.commands.study import main

BN, NO_BN = {'family': 'bn'}, {'family': 'plain'}


def _results(values: dict):
    """Cells and their results: `values` maps (family, seed) to (metric value, clean accuracy)."""
    cells, results = [], {}
    for (family, seed), (value, clean) in values.items():
        cell = Cell(id=f'{family}-{seed}', labels={'family': family}, seed=seed, run_dir=Path('/nonexistent'),
                    train_argv=(), validate_argv=())
        cells.append(cell)
        results[cell.id] = CellResult(cell=cell, metrics={'attack:bim': value, 'clean': clean}, samples=1000,
                                      robust='', vanilla_epochs=None, train_seconds=None)
    return cells, results


def _finding(measure='gap', value=None, se=0.0, tolerance=None, direction=True, lower=BN):
    return Finding(claim='c', paper='p', metric='attack:bim', higher=NO_BN, lower={} if measure == 'value' else lower,
                   source='Table 6', measure=measure, expected=None if value is None else Expected(value, se),
                   tolerance=tolerance, direction=direction)


SEEDS = {('plain', 0): (60.0, 98.0), ('plain', 1): (64.0, 98.0), ('bn', 0): (20.0, 97.0), ('bn', 1): (26.0, 97.0)}


def test_a_gap_is_paired_by_seed_with_its_standard_error_and_judged_against_the_paper_interval():
    cells, results = _results(SEEDS)
    measured = check_finding(_finding(value=42.0, se=1.0), cells, results)
    ours = measured.ours  # per seed: 40 and 38
    assert (ours.value, ours.n) == (39.0, 2) and ours.se == pytest.approx(1.0)
    assert measured.verdict == 'yes' and measured.size_verdict == 'no'  # |39 - 42| > 1 + 1
    assert check_finding(_finding(value=41.0, se=1.0), cells, results).size_verdict == 'yes'
    assert check_finding(_finding(value=44.0, tolerance=0.15), cells, results).size_verdict == 'yes (within 15%)'
    assert check_finding(_finding(), cells, results).size_verdict == '—'  # no paper value: no size verdict
    assert measured.format_ours() == '39.0 ± 1.0 (n=2)' and measured.format_paper() == '42.0 ± 1.0'
    # a paper value without an uncertainty is written alone, a stated tolerance beside it
    assert check_finding(_finding(value=44.0, tolerance=0.5), cells, results).format_paper() == '44.0 (tolerance 50%)'
    assert check_finding(_finding(value=44.0, se=1.0, tolerance=0.5), cells, results).format_paper() == \
        '44.0 ± 1.0 (tolerance 50%)'


def test_numbers_keep_the_first_digit_of_the_papers_standard_error():
    assert number_digits('clean', 'gap') == 1 and number_digits('clean', 'gap', 0.4) == 1
    assert number_digits('clean', 'gap', 0.05) == 2  # 0.08 ± 0.05, not 0.1 ± 0.1
    assert number_digits('loss:clean', 'gap', 0.03) == 3 and number_digits('clean', 'ratio', 0.0025) == 3
    assert number_digits('clean', 'ratio', 0.00001) == 3  # at most three


def test_a_ratio_a_value_and_a_claim_without_direction():
    cells, results = _results(SEEDS)
    ratio = check_finding(_finding('ratio', 2.5, 0.1), cells, results)
    assert ratio.ours.value == pytest.approx((3.0 + 64 / 26) / 2) and ratio.verdict == 'yes'
    assert ratio.format_ours().endswith('(n=2)') and ratio.digits == 3
    value = check_finding(_finding('value', 61.0, 1.0), cells, results)
    assert value.ours.value == 62.0 and value.ours.se == pytest.approx(2.0) and value.verdict == 'n/a'
    assert value.size_verdict == 'yes'
    same = check_finding(_finding('ratio', 1.0, 0.05, direction=False), cells, results)
    assert same.verdict == 'n/a' and same.size_verdict == 'no'


def test_a_ratio_over_a_side_that_scored_zero_has_no_value_and_says_why():
    cells, results = _results({**SEEDS, ('bn', 1): (0.0, 97.0)})
    measured = check_finding(_finding('ratio', 2.5, 0.1), cells, results)
    assert measured.ours is None and measured.format_ours() == '—' and measured.verdict == 'yes'
    assert measured.size_verdict == 'no ratio (the lower side scored 0)'


def test_unpaired_sides_combine_their_standard_errors():
    cells, results = _results({**SEEDS, ('bn', 2): (23.0, 97.0)})
    ours = check_finding(_finding(), cells, results).ours
    higher_se, lower_se = 2.0, math.sqrt(9.0) / math.sqrt(3)
    assert ours.value == pytest.approx(62.0 - 23.0) and ours.se == pytest.approx(math.hypot(higher_se, lower_se))


def test_a_finding_on_a_cell_that_did_not_train_is_not_testable_and_the_summary_gives_denominators():
    cells, results = _results({**SEEDS, ('bn', 1): (26.0, 41.0)})
    untrained = check_finding(_finding(value=40.0), cells, results, min_clean=50.0)
    assert (untrained.verdict, untrained.size_verdict) == ('not testable', 'not testable')
    trained = check_finding(_finding(value=40.0, se=2.0), cells, results, min_clean=30.0)
    unrun = check_finding(_finding(lower={'family': 'other'}), cells, results)
    assert summarize_findings([untrained, trained, unrun]) == (
        '3 findings. Direction held in 1 of 1 with a direction (0 of the 1 within noise); size held in 1 of 1 with a '
        'paper value; 1 not run, 1 not testable (a cell did not train).')


def _spec(tmp_path, **finding) -> Path:
    spec = dict(title='t', paper='p', scales=dict(digits=dict(train={}, validate={}, seeds=[0])),
                grid=[dict(axes=dict(family=['plain', 'bn']))], plot=dict(kind='bar', x='family'),
                findings=[dict(claim='c', paper='p', metric='attack:bim', **finding)], spread='se', min_clean=50)
    path = tmp_path / 'spec.yaml'
    path.write_text(yaml.safe_dump(spec, allow_unicode=True))
    return path


def test_the_spec_declares_measures_paper_values_tolerances_and_directions(tmp_path):
    spec = load_study(_spec(tmp_path, higher=NO_BN, lower=BN, source='Table 6', expect=dict(ratio=3.18, se=0.03),
                            tolerance=0.2, direction=False))
    (finding,) = spec.findings
    assert (finding.measure, finding.expected, finding.tolerance, finding.direction, finding.source) == \
        ('ratio', Expected(3.18, 0.03), 0.2, False, 'Table 6')
    assert (spec.spread, spec.min_clean) == ('se', 50.0)
    value = load_study(_spec(tmp_path, at=NO_BN, expect=dict(value=61))).findings[0]
    assert (value.measure, value.higher, value.lower) == ('value', NO_BN, {})


@pytest.mark.parametrize('finding, message', [
    (dict(higher=NO_BN, lower=BN, expect=dict(gap=1, ratio=2)), 'must give one of gap, ratio, value'),
    (dict(higher=NO_BN, lower=BN, expect=dict(gap='big')), 'expect.gap must be a number'),
    (dict(higher=NO_BN, lower=BN, expect=dict(value=3)), 'a value (expect: {value: ...}) reads one table cell'),
    (dict(at=NO_BN, higher=NO_BN, expect=dict(value=3)), 'either at (one table cell) or higher and lower'),
    (dict(higher=NO_BN, lower=BN, tolerance=-1), 'tolerance must be a positive fraction'),
    (dict(higher=NO_BN, lower=BN, direction='no'), 'direction must be true or false'),
    (dict(higher=NO_BN, lower=BN, sorce='Table 6'), 'unknown keys sorce'),
])
def test_a_malformed_finding_is_refused_naming_the_key(tmp_path, finding, message):
    with pytest.raises(ValueError, match=message.replace('(', r'\(').replace(')', r'\)').replace('{', r'\{')):
        load_study(_spec(tmp_path, **finding))


def test_a_record_copies_what_the_study_wrote_and_drops_what_it_no_longer_writes(tmp_path):
    study_dir, target = tmp_path / 'study', tmp_path / 'docs' / 'results' / 's' / 'mnist'
    study_dir.mkdir()
    for name in ('results.csv', 'grid.csv', 'findings.csv', 'results.md', 'provenance.json', 'cells.log'):
        (study_dir / name).write_text(name)
    target.mkdir(parents=True)
    (target / 'ratios.csv').write_text('an earlier record')
    assert record_study(study_dir, target) == target
    assert sorted(p.name for p in target.iterdir()) == ['findings.csv', 'grid.csv', 'provenance.json', 'results.csv',
                                                         'results.md']
    assert (target / 'grid.csv').read_text() == 'grid.csv'


def test_a_record_that_would_lose_evaluated_cells_is_refused_and_left_as_it_was(tmp_path):
    study_dir, target = tmp_path / 'study', tmp_path / 'record'
    study_dir.mkdir()
    target.mkdir()
    (target / 'results.csv').write_text('family,seed,cell,clean\nbn,0,bn_seed-0,97\nbn,1,bn_seed-1,96\n')
    (study_dir / 'results.csv').write_text('family,seed,cell,clean\nbn,0,bn_seed-0,98\n')  # seed 0 alone
    with pytest.raises(ValueError, match=r'holds 1 evaluated cell\(s\) this study would not record \(bn_seed-1\)'):
        record_study(study_dir, target)
    assert (target / 'results.csv').read_text().endswith('bn,1,bn_seed-1,96\n')
    (study_dir / 'results.csv').write_text('family,seed,cell,clean\nbn,0,bn_seed-0,98\nbn,1,bn_seed-1,95\n')
    record_study(study_dir, target)  # every recorded cell again, rerun or not: replaced
    assert (target / 'results.csv').read_text().endswith('bn,1,bn_seed-1,95\n')


def test_record_with_a_dry_run_is_refused(tmp_path):
    with pytest.raises(SystemExit):
        main(['xie2020', '--dry-run', '--record', str(tmp_path)])


def _record(folder: Path) -> Path:
    """A record of the two-family study of `_spec`, as `write_tables` and `record_study` leave it."""
    folder.mkdir(parents=True)
    (folder / 'findings.csv').write_text(
        'finding,source,metric,measure,paper,paper_se,ours,ours_se,n,held_direction,held_size,tolerance,'
        'paper_printed\n'
        'c,Table 6,attack:bim,gap,42.0,1.0,39.0,1.0,2,yes,no,,66.7 vs 22.9\n'
        'd,§4,attack:bim,gap,,,3.0,0.5,2,yes (within noise),—,,Fig. 2\n'
        'e,§3,attack:bim,gap,18.3,0.0,39.0,1.0,2,yes,no,0.5,39.2 vs 20.9\n')
    (folder / 'grid.csv').write_text(
        'family,seeds_done,seeds,clean_mean,clean_std,clean_se,attack:bim_mean,attack:bim_std,attack:bim_se,'
        'vanilla_epochs,train_seconds\n'
        'plain,2,2,98.0,0.0,0.0,62.0,2.83,2.0,50,10\nbn,2,2,97.0,0.0,0.0,23.0,4.24,3.0,50,10\n')
    (folder / 'provenance.json').write_text(
        '{"command": "timm-advnorm-study s --scale digits", "started": "2026-12-06T18:00:00Z", "wall_s": 90.0, '
        '"commit": "0123456789abcdef", "machine": {"cpu": "CPU", "cores": 2, "threads": 2, "torch": "2", "timm": "1"}, '
        '"invocations": [{"commit": "0123456789abcdef"}]}')
    return folder


def test_a_document_block_is_generated_from_the_record_and_a_stale_one_is_found(tmp_path, monkeypatch):
    from timm_advnorm.study import document
    _spec(tmp_path, higher=NO_BN, lower=BN)
    monkeypatch.setattr(document, 'load_study', lambda name: load_study(tmp_path / f'{name}.yaml'))
    _record(tmp_path / 'results' / 'spec' / 'digits')
    page = tmp_path / 'README.md'
    page.write_text('intro\n<!-- study-results: spec/digits -->\nold numbers\n<!-- /study-results -->\nafter\n')
    assert document.update_document(page, tmp_path / 'results', check=True) == ['spec/digits']
    assert 'old numbers' in page.read_text()  # a check leaves the page as it is
    assert document.update_document(page, tmp_path / 'results') == ['spec/digits']
    text = page.read_text()
    assert text.startswith('intro\n<!-- study-results: spec/digits -->\nRecorded by `timm-advnorm-study s --scale '
                           'digits` in 1 invocation(s) from 2026-12-06T18:00:00Z, 1.5 min of wall time in all, at '
                           'commit(s) 0123456789ab, on CPU (2 cores; cells one at a time on 2 torch threads), '
                           'torch 2, timm 1.') and text.endswith('after\n')
    assert ('3 findings. Direction held in 3 of 3 with a direction (1 of the 3 within noise); size held in 0 of 2 with '
            'a paper value; 0 not run, 0 not testable (a cell did not train).') in text
    assert '| c | Table 6 | gap 42.0 ± 1.0 | 39.0 ± 1.0 (n=2) | yes | no |' in text
    assert '| e | §3 | gap 18.3 (tolerance 50%) | 39.0 ± 1.0 (n=2) | yes | no |' in text  # no paper SE: none written
    assert '| d | §4 | Fig. 2 | 3.0 ± 0.5 (n=2) | yes (within noise) | — |' in text
    assert '| bn | 2 | 97.0 ± 0.0 | 23.0 ± 3.0 |' in text  # the study's spread is se: ± the standard error
    assert document.update_document(page, tmp_path / 'results', check=True) == []


def test_a_record_says_how_many_of_its_cells_no_listed_invocation_ran(tmp_path):
    from timm_advnorm.study.document import _provenance
    record = _record(tmp_path / 'record')
    (record / 'provenance.json').write_text(
        '{"command": "c", "started": "2026-12-07T08:34:09Z", "wall_s": 36000.0, "commit": "0123456789abcdef", '
        '"machine": {"cpu": "CPU", "cores": 2, "threads": 2, "torch": "2", "timm": "1"}, "invocations": '
        '[{"commit": "0123456789abcdef", "cells_run": ["b"]}, {"commit": "fedcba9876543210", "cells_run": [], '
        '"jobs": 2, "cell_threads": 1}]}')
    (record / 'results.csv').write_text('family,seed,cell\nplain,0,a\nbn,0,b\nplain,1,c\n')
    text = _provenance(record)
    assert 'in 2 invocation(s) from 2026-12-07T08:34:09Z, 10.0 h of wall time in all, at commit(s) 0123456789ab, ' \
           'fedcba987654' in text
    # each way the invocations computed their cells: an older one on the process's threads, --jobs 2 on one each
    assert '(2 cores; cells one at a time on 2 torch threads or 2 at a time on 1 torch thread each)' in text
    assert text.endswith(' 2 of its 3 cells ran in invocations it does not list (their time and commits are not '
                         'counted above).')


def test_a_block_without_a_record_is_refused_naming_the_command(tmp_path):
    from timm_advnorm.study import document
    page = tmp_path / 'README.md'
    page.write_text('<!-- study-results: xie2020/mnist -->\n<!-- /study-results -->\n')
    with pytest.raises(ValueError, match='no recorded results in .* \\(run timm-advnorm-study xie2020 --scale mnist '
                                         '--record'):
        document.update_document(page, tmp_path / 'results')
