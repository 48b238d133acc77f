"""jlprof's auto-enable hook (``jlprof.torch.autoenable``): init() right after ``import torch``."""

import importlib.machinery
import importlib.util
import os
import sys

_HERE = os.path.dirname(os.path.abspath(__file__))


def _chain() -> None:
    """Run the sitecustomize this one shadows (Debian ships one), as Python would have."""
    rest = [p for p in sys.path if os.path.abspath(p or ".") != _HERE]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", rest)
    if spec is not None and spec.loader is not None:
        mod = importlib.util.module_from_spec(spec)
        try:
            spec.loader.exec_module(mod)
        except Exception as e:  # a broken site file must not hide ours
            print(f"jlprof: the shadowed sitecustomize failed: {e}", file=sys.stderr)


def _init_annotation() -> None:
    try:
        import jlprof.torch

        jlprof.torch.init()
    except Exception as e:  # never break the user's program
        print(f"jlprof: PyTorch annotation is off ({type(e).__name__}: {e})", file=sys.stderr)


class _TorchImportHook:
    """Meta-path finder that only wraps torch's loader, then removes itself."""

    def find_spec(self, name, path=None, target=None):
        if name != "torch":
            return None
        sys.meta_path.remove(self)
        spec = importlib.util.find_spec("torch")
        if spec is None or spec.loader is None:
            return spec
        run = spec.loader.exec_module

        def exec_module(module):
            run(module)
            _init_annotation()

        spec.loader.exec_module = exec_module
        return spec


_chain()
if os.environ.get("JLPROF_TORCH_AUTO") == "1":
    if "torch" in sys.modules:
        _init_annotation()
    else:
        sys.meta_path.insert(0, _TorchImportHook())
