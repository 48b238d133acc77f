"""Turn ``jlprof.torch`` on inside a profiled program without editing it (``-m pytorch``).

``jlprof --mode=pytorch python train.py`` runs the program with ``jlprof/torch/_site`` first on
``PYTHONPATH``. Its ``sitecustomize`` (which then runs the one it shadows, if any) installs an
import hook that calls :func:`jlprof.torch.init` as soon as ``import torch`` has finished, on the
importing thread. Programs that never import torch are untouched; a failure to annotate is a
warning on stderr, never a crash of the user's program.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

SITE_DIR = Path(__file__).resolve().parent / "_site"
ENV_FLAG = "JLPROF_TORCH_AUTO"


def pytorch_env(base: Mapping[str, str] | None = None) -> dict[str, str]:
    """Environment additions for a profiled child: our site dir first on PYTHONPATH, the flag."""
    env = os.environ if base is None else base
    old = env.get("PYTHONPATH", "")
    path = str(SITE_DIR) + (os.pathsep + old if old else "")
    # the child must import jlprof itself too (it may run from another directory)
    pkg_root = str(Path(__file__).resolve().parents[2])
    if pkg_root not in path.split(os.pathsep):
        path += os.pathsep + pkg_root
    return {"PYTHONPATH": path, ENV_FLAG: "1"}
