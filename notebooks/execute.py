"""Execute a notebook end to end in a chosen folder (``make demo`` runs the quickstart this way).

    python notebooks/execute.py notebooks/quickstart.ipynb demo_out

The kernel's working folder is ``OUT_DIR``, so ``%%dlprof`` run folders (raw nsys files, reports,
``jlprof_run.json``) land there, next to the executed copy of the notebook.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

import nbformat
from jupyter_client import KernelManager
from nbclient import NotebookClient
from nbclient.exceptions import CellExecutionError


def private_kernel(nb: nbformat.NotebookNode, folder: Path) -> KernelManager:
    """The notebook's kernel on IPC sockets in ``folder`` (mode 0700), as jlprof's sidecar:
    no TCP listener that another user of the machine could reach."""
    name = nb.metadata.get("kernelspec", {}).get("name") or "python3"
    return KernelManager(
        kernel_name=name,
        transport="ipc",
        ip=str(folder / "kernel"),
        connection_file=str(folder / "kernel.json"),
    )


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("notebook", type=Path)
    ap.add_argument("out_dir", type=Path)
    ap.add_argument("--timeout", type=int, default=600, help="seconds per cell")
    args = ap.parse_args(argv)
    args.out_dir.mkdir(parents=True, exist_ok=True)
    nb = nbformat.read(args.notebook, as_version=4)
    target = args.out_dir / args.notebook.name
    try:
        with tempfile.TemporaryDirectory(prefix="jlprof-demo-") as sockets:  # mode 0700
            km = private_kernel(nb, Path(sockets))
            client = NotebookClient(
                nb, km=km, timeout=args.timeout, resources={"metadata": {"path": str(args.out_dir)}}
            )
            try:
                client.execute()
            finally:  # a kernel manager given to nbclient is the caller's to shut down
                if km.has_kernel:
                    km.shutdown_kernel()
    except CellExecutionError as exc:
        nbformat.write(nb, target)
        print(
            f"{args.notebook}: a cell failed (partial notebook in {target}):\n{exc}",
            file=sys.stderr,
        )
        return 1
    nbformat.write(nb, target)
    runs = sorted((args.out_dir / "jlprof_runs").glob("*/jlprof_run.json"))
    print(f"executed {target}; {len(runs)} profiled run(s):")
    for manifest in runs:
        files = sorted(p.name for p in manifest.parent.iterdir())
        print(f"  {manifest.parent}: {', '.join(files)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
