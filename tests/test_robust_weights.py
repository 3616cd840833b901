"""Robust weights by tag: ``robust_resnet50.<tag>`` loads a file laid out exactly as the MadryLab ``robustness``
library saves it, from a pre-filled offline Hugging Face cache, strictly, and computes what the original model
(torchvision ResNet-50 behind its input normalizer) computes."""
import hashlib
from pathlib import Path

import pytest
import timm
import torch
import torchvision
from timm.models import get_pretrained_cfg

import timm_advnorm  # noqa: F401  (registers robust_resnet50)
from timm_advnorm.hub import create_model_from_name_or_checkpoint
from timm_advnorm.models.robust_resnet import MADRY_HUB_ID

IMAGENET_MEAN, IMAGENET_STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)
TAGS = ('madry_linf4_in1k', 'madry_linf8_in1k', 'madry_l2_3_in1k')


def _original_model() -> torch.nn.Module:
    """A torchvision ResNet-50 with random weights and non-trivial BN statistics (the authors' architecture)."""
    torch.manual_seed(0)
    model = torchvision.models.resnet50(weights=None)
    with torch.no_grad():
        for module in model.modules():
            if isinstance(module, torch.nn.BatchNorm2d):
                module.running_mean.normal_(0, 0.1)
                module.running_var.uniform_(0.5, 1.5)
    return model.eval()


def _robustness_checkpoint(model: torch.nn.Module, mean=IMAGENET_MEAN, std=IMAGENET_STD) -> dict:
    """What ``robustness.train`` saves: ``DataParallel(AttackerModel).state_dict()`` under ``model``, with the
    classifier, the attacker's copy of it and both input normalizers, beside the optimizer state and epoch."""
    weights = model.state_dict()
    normalizer = dict(new_mean=torch.tensor(mean)[..., None, None], new_std=torch.tensor(std)[..., None, None])
    state = {f'module.normalizer.{k}': v for k, v in normalizer.items()}
    state.update({f'module.model.{k}': v for k, v in weights.items()})
    state.update({f'module.attacker.normalize.{k}': v for k, v in normalizer.items()})
    state.update({f'module.attacker.model.{k}': v for k, v in weights.items()})
    return dict(model=state, optimizer=dict(state={}, param_groups=[dict(lr=0.1, momentum=0.9)]),
                schedule=None, epoch=90, amp='N/A')


def _install(cache: Path, filename: str, checkpoint: dict) -> None:
    """Lay `checkpoint` out as ``filename`` of ``madrylab/robust-imagenet-models`` in a Hugging Face cache."""
    repo = cache / f'models--{MADRY_HUB_ID.replace("/", "--")}'
    commit = hashlib.sha1(filename.encode()).hexdigest()
    snapshot = repo / 'snapshots' / commit
    snapshot.mkdir(parents=True, exist_ok=True)
    torch.save(checkpoint, snapshot / filename)
    (repo / 'refs').mkdir(exist_ok=True)
    (repo / 'refs' / 'main').write_text(commit)


@pytest.fixture(scope='module')
def original():
    return _original_model()


@pytest.fixture
def hub_cache(tmp_path, monkeypatch):
    from huggingface_hub import constants
    monkeypatch.setattr(constants, 'HF_HUB_CACHE', str(tmp_path / 'hub'))
    monkeypatch.setattr(constants, 'HF_HUB_OFFLINE', True)
    return tmp_path / 'hub'


@pytest.mark.parametrize('tag', TAGS)
def test_a_tag_loads_the_authors_file_strictly_and_computes_the_original_function(hub_cache, original, tag):
    name = f'robust_resnet50.{tag}'
    _install(hub_cache, get_pretrained_cfg(name).hf_hub_filename, _robustness_checkpoint(original))
    model = timm.create_model(name, pretrained=True).eval()
    pixels = torch.rand(2, 3, 224, 224, generator=torch.Generator().manual_seed(1))
    cfg = model.pretrained_cfg
    timm_input = (pixels - torch.tensor(cfg['mean'])[:, None, None]) / torch.tensor(cfg['std'])[:, None, None]
    with torch.no_grad():  # the original: AttackerModel normalizes raw [0, 1] pixels, then runs the ResNet
        reference = original((pixels - torch.tensor(IMAGENET_MEAN)[:, None, None]) /
                             torch.tensor(IMAGENET_STD)[:, None, None])
        torch.testing.assert_close(model(timm_input), reference, rtol=1e-4, atol=1e-4)
    assert cfg['input_size'] == (3, 224, 224) and cfg['crop_pct'] == 0.875 and cfg['interpolation'] == 'bilinear'


def test_every_tag_names_its_file_licence_and_published_accuracy():
    names = timm.list_pretrained('robust_resnet50.*')
    assert {f'robust_resnet50.{tag}' for tag in TAGS} <= set(names)
    for name in names:
        cfg = get_pretrained_cfg(name)
        assert cfg.hf_hub_id == MADRY_HUB_ID and cfg.hf_hub_filename.startswith('resnet50_')
        assert cfg.license == 'mit' and any('clean top-1' in note for note in cfg.notes)
    linf4 = get_pretrained_cfg('robust_resnet50.madry_linf4_in1k')
    assert any('34.96% AutoAttack' in note for note in linf4.notes)
    assert timm.create_model('robust_resnet50', pretrained=False).pretrained_cfg['tag'] == 'madry_linf4_in1k'


def test_a_checkpoint_normalizing_otherwise_is_refused(hub_cache, original):
    name = 'robust_resnet50.madry_linf8_in1k'
    _install(hub_cache, get_pretrained_cfg(name).hf_hub_filename,
             _robustness_checkpoint(original, mean=(0.5, 0.5, 0.5), std=(0.5, 0.5, 0.5)))
    with pytest.raises(ValueError, match='normalizes with module.normalizer.new_mean'):
        timm.create_model(name, pretrained=True)


def test_a_file_of_another_layout_is_refused(hub_cache, original):
    name = 'robust_resnet50.madry_l2_3_in1k'
    _install(hub_cache, get_pretrained_cfg(name).hf_hub_filename, dict(model=original.state_dict()))
    with pytest.raises(ValueError, match='Not a MadryLab robustness checkpoint'):
        timm.create_model(name, pretrained=True)


def test_a_file_missing_from_the_offline_cache_is_one_line_saying_how_to_fill_it(hub_cache):
    with pytest.raises(ValueError) as error:
        create_model_from_name_or_checkpoint('robust_resnet50.madry_linf8_in1k', pretrained=True)
    message = str(error.value)
    assert '\n' not in message
    assert f'resnet50_linf_eps8.0.ckpt of hf-hub:{MADRY_HUB_ID}' in message
    assert f'hf download {MADRY_HUB_ID} resnet50_linf_eps8.0.ckpt' in message and 'HF_HUB_OFFLINE=1' in message
