"""The model, wrapping and step of timm's ``train.py`` on a mixture-BN model, run under ``torchrun``.

timm's ``train.py`` (``--device-modules timm_advnorm --model mbn_*``) imports the plugin, creates the model with
`timm.create_model`, wraps it in a plain `DistributedDataParallel` (no ``find_unused_parameters``), builds its
optimizer with `create_optimizer_v2` and trains with a soft-target cross entropy. The wheel of timm does not ship that
script, so this file runs the same calls for a few steps; each rank writes its final weights' sum to ``argv[1]``.
"""
import importlib
import sys

import torch
import torch.nn.functional as F
from timm.loss import SoftTargetCrossEntropy
from timm.models import create_model
from timm.optim import create_optimizer_v2
from timm.utils.distributed import init_distributed_device_so
from torch.nn.parallel import DistributedDataParallel

importlib.import_module('timm_advnorm')  # what --device-modules timm_advnorm does


def main(output: str, model_name: str = 'test_mbn_resnet', steps: int = 3) -> None:
    info = init_distributed_device_so(device='cpu')
    torch.manual_seed(0)
    model = create_model(model_name, num_classes=10)
    model = DistributedDataParallel(model)  # as timm's train.py: broadcast_buffers on, no find_unused_parameters
    optimizer = create_optimizer_v2(model, opt='sgd', lr=0.1, weight_decay=1e-4, momentum=0.9)
    criterion = SoftTargetCrossEntropy()
    generator = torch.Generator().manual_seed(info['global_rank'])
    for _ in range(steps):
        images = torch.randn(4, 3, 32, 32, generator=generator)
        target = F.one_hot(torch.randint(0, 10, (4,), generator=generator), 10).float()
        loss = criterion(model(images), target)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    total = sum(float(p.detach().double().sum()) for p in model.module.parameters())
    with open(f'{output}.rank{info["global_rank"]}', 'w') as f:
        f.write(repr(total))
    torch.distributed.destroy_process_group()


if __name__ == '__main__':
    main(sys.argv[1])
