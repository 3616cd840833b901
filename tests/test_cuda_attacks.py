"""CUDA tier: attacks on CUDA. PGD, APGD and Square against their float64 CPU runs from the same random start, PGD's
memory flat in its iterations by ``torch.cuda.max_memory_allocated``, and an evaluation's sanity checks. The same checks
run on the CPU in ``test_device_checks.py``."""
import pytest
import torch

import device_checks as checks

pytestmark = [pytest.mark.cuda, pytest.mark.usefixtures('no_tf32')]

CUDA = torch.device('cuda')


@pytest.mark.parametrize('name', checks.ATTACKS)
def test_an_attack_on_cuda_matches_its_cpu_run(name, two_branches):
    checks.check_attack_matches_the_cpu(CUDA, name, two_branches)


def test_pgd_20_peaks_where_pgd_2_does():
    checks.check_attack_memory_stays_flat(CUDA)


def test_an_evaluation_on_cuda_passes_its_sanity_checks():
    checks.check_sanity_checks_pass(CUDA, *checks.honest_digits_classifier())
