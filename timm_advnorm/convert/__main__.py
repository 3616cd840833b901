"""``python -m timm_advnorm.convert <format> SRC DST``: see `timm_advnorm.commands.convert`."""
import sys

from ..commands.convert import run

if __name__ == '__main__':
    sys.exit(run('python -m timm_advnorm.convert'))
