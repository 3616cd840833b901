"""What a folder holds, to show that a refused or failed command changed nothing in it."""
import hashlib
from pathlib import Path
from typing import Dict


def folder_snapshot(folder: Path) -> Dict[str, str]:
    """Every file and folder under `folder` (hidden ones included) with a digest of its bytes (folders: '')."""
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest() if p.is_file() else ''
            for p in sorted(folder.rglob('*'))}
