"""``python -m timm_advnorm.convert <format> SRC DST``: see `timm_advnorm.convert.cli`."""
import sys

from .cli import run

if __name__ == '__main__':
    sys.exit(run('python -m timm_advnorm.convert'))
