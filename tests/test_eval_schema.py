"""The typed results schema: what a run writes is what it built, read back to the same layout, key for key."""
import json

import pytest

from timm_advnorm.commands import validate as validate_adv
from timm_advnorm.eval.schema import EvalResults, read_results

pytestmark = pytest.mark.usefixtures('one_thread')


@pytest.mark.parametrize('extra', [
    ['--protocol', 'galloway', '--gammas', '0', '1', '--amp', '--verify-amp', '4'],  # noise, L2, AMP check
    ['--protocol', 'corruptions', '--gammas', '1', '--sanity-samples', '0'],  # corruptions, mCE, no probes
    ['--attacks', 'pgd', '--targeted', '--steps', '1', '2', '--gammas', '0.5']])  # success rates, interpolations
def test_the_results_file_is_the_schema_written_and_reads_back_key_for_key(digits_dir, tmp_path, extra):
    argv = ['--model', 'test_mbn_resnet', '--dataset', 'digits', '--data-dir', str(digits_dir), '--num-samples', '8',
            '-b', '8', '-j', '0', '--sanity-samples', '8', '--sanity-steps', '2', '--sanity-queries', '5', '--reduced',
            '--no-progress', '--results-file', str(tmp_path / 'results.json'), *extra]
    returned = validate_adv.validate(validate_adv.eval_options(validate_adv.parse_args(argv)))
    text = (tmp_path / 'results.json').read_text()
    assert json.dumps(returned.to_dict(), indent=2) + '\n' == text
    read = read_results(tmp_path / 'results.json')
    assert read == returned and json.dumps(read.to_dict(), indent=2) + '\n' == text


def test_reading_names_a_broken_field_and_tolerates_missing_descriptions():
    data = dict(model='m', protocol=dict(name='p'), variants=[dict(name='adv', clean=70, attacks=[
        dict(label='pgd', accuracy=50, eps='16', steps=True, kwargs=[])])])
    results = EvalResults.from_dict(data)
    attack = results.variants[0].attacks[0]
    assert (attack.eps, attack.steps, attack.kwargs, results.split, results.protocol.reduced) == (
        None, None, {}, None, False)
    assert 'success_rate' not in attack.to_dict() and 'eps' not in attack.to_dict()
    for broken, message in ((dict(data, model=None), '"model"'), (dict(data, protocol='p'), '"protocol"'),
                            (dict(data, variants=[dict(name='adv', clean='high', attacks=[])]), 'clean accuracy of adv'),
                            (dict(data, variants=[dict(name='adv', attacks=[dict(label='pgd')])]), 'accuracy of pgd')):
        with pytest.raises(ValueError, match=message):
            EvalResults.from_dict(broken)
