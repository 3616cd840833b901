"""The GPU kit's parts (``scripts/gpu_check.py`` is its command): the wheels a bare machine lacks, the stages, running
them within a budget, and the files a window brings back."""
