"""Attacks report their progress from inside (sub-attack, target class, restart, iteration or query) to a callback
the evaluator passes, and the evaluation's bar shows it: a long attack never looks hung, and attack code prints
nothing."""
import pytest
import torch
import torch.nn as nn

from timm_advnorm.attacks import AttackProgress, InputSpace, attack_context, create_attack, square
from timm_advnorm.attacks.registry import attack_config
from timm_advnorm.eval.plan.stages import AttackStage, CleanStage, EvalContext
from timm_advnorm.eval.plan.variants import Variant
from timm_advnorm.eval.protocols.protocol import AttackSpec
from timm_advnorm.eval.run import evaluator as evaluator_module
from timm_advnorm.eval.run.evaluator import RobustEvaluator

pytestmark = pytest.mark.usefixtures('one_thread')

SPACE = InputSpace()
NUM_CLASSES = 5


@pytest.fixture(scope='module')
def tiny():
    """A tiny classifier and 4 images it classifies as their labels (so that every attack runs on all of them)."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(3, 4, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(2), nn.Flatten(),
                          nn.Linear(16, NUM_CLASSES)).eval()
    x = torch.randn(4, 3, 8, 8)
    with torch.no_grad():
        y = model(x).argmax(1)
    return model, x, y


def _parts(events):
    """The parts reported, in the order they started."""
    return list(dict.fromkeys(event.part for event in events))


def test_autoattack_reports_each_sub_attack_target_and_restart(tiny, capsys):
    model, x, y = tiny
    # ε = 0: no sample can be fooled, so every component runs on every sample to its last iteration or query
    attack = create_attack('autoattack', space=SPACE, eps=0.0, steps=3, n_target_classes=2, n_queries=6, seed=0)
    events = []
    attack.progress = events.append
    attack(model, x, y)
    assert {event.attack for event in events} == {'autoattack'}
    assert _parts(events) == ['apgd-ce restart 1/1', 'apgd-t target 1/2, restart 1/1', 'apgd-t target 2/2, restart 1/1',
                              'fab-t target 1/2, restart 1/1', 'fab-t target 2/2, restart 1/1', 'square restart 1/1']
    apgd_t = [(e.done, e.total, e.unit) for e in events if e.part == 'apgd-t target 2/2, restart 1/1']
    assert apgd_t == [(0, 3, 'it'), (1, 3, 'it'), (2, 3, 'it')]
    assert [(e.done, e.unit) for e in events if e.part.startswith('square')] == [(q, 'queries') for q in range(2, 6)]
    assert events[0].text() == 'autoattack: apgd-ce restart 1/1, 0/3 it'
    assert capsys.readouterr() == ('', '')


def test_square_reports_each_query_block_of_each_restart(tiny):
    model, x, y = tiny
    events = []
    with attack_context(model):
        square(model, x, y, space=SPACE, eps=0.0, n_queries=5, n_restarts=2, progress=events.append)
    assert _parts(events) == ['restart 1/2', 'restart 2/2']
    assert [(e.done, e.total) for e in events] == [(q, 5) for q in (2, 3, 4)] * 2
    assert AttackProgress('square', 'restart 1/2', 3, 5, 'queries').text() == 'square: restart 1/2, 3/5 queries'


class _Bar:
    """Stands in for tqdm: records its postfixes."""

    def __init__(self):
        self.postfixes = []

    def set_postfix_str(self, text, refresh=True):
        self.postfixes.append(text)

    def update(self, n):
        pass


def test_the_evaluation_bar_shows_where_the_running_attack_is(tiny, monkeypatch):
    model, x, y = tiny
    monkeypatch.setattr(evaluator_module, 'ATTACK_REPORT_INTERVAL', 0.0)
    spec = AttackSpec('aa', attack_config('autoattack', steps=2, n_target_classes=2, n_queries=4), 0.0)
    bar = _Bar()
    evaluator = RobustEvaluator(model, [Variant('model')], [CleanStage(), AttackStage(spec)],
                                EvalContext(SPACE, (3, 8, 8)), NUM_CLASSES, len(x), seed=0,
                                device=torch.device('cpu'), bar=bar)
    evaluator.run([(x, y, torch.arange(len(x)))])
    assert 'model/aa | autoattack: apgd-ce restart 1/1, 0/2 it' in bar.postfixes
    assert 'model/aa | autoattack: square restart 1/1, 3/4 queries' in bar.postfixes
