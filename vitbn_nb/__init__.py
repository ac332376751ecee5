"""vitbn_nb: the helper package of vitbn-book, a reproduction book for "BatchNorm in Vision Transformers".

``python -m vitbn_nb --help`` lists the commands; ``CONTRIBUTING.md`` maps the modules.
"""

import os

__version__ = "0.1.0"

# cuBLAS reads its workspace setting once, when it starts: set here, on the package's import, it holds whichever
# module (or notebook) starts CUDA first. ":4096:8" is the setting cuBLAS needs for deterministic results.
os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
