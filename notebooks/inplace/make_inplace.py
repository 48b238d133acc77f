"""Write the in-place mode's nbval notebooks (kernel ``jlprof-inplace``): ``inplace.ipynb``
(profiles of an NVTX loop) and ``plain_inplace.ipynb`` (``notebooks/plain_kernel.ipynb``'s checks
in ``%%dlprof`` cells run in place).

    JUPYTER_PATH=jupyter-config python notebooks/inplace/make_inplace.py --execute

They are run by ``tests/magics/test_inplace.py`` (nbval on the ``jlprof-inplace`` kernel), not by
``make test``'s nbval run, which uses the current environment's plain kernel.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

import nbformat

HERE = Path(__file__).parent
IGNORE = {"tags": ["nbval-ignore-output"]}
CELLS = [
    ("%load_ext jlprof", {}),
    ("%dlprof kernel status", IGNORE),
    (
        "import time\n\nimport nvtx\n\n"
        "steps = 5  # defined before profiling, used in the profiled cell\n\n\n"
        "def step():\n"
        '    with nvtx.annotate("train_step"), nvtx.annotate("optimizer_step"):\n'
        "        time.sleep(0.002)",
        {},
    ),
    (
        "%%dlprof --key_node=optimizer_step --reports=summary,kernel\n"
        'for i in range(steps):\n    step()\nprint("steps", i + 1)',
        IGNORE,
    ),
    ('print("instances", _dlprof.iterations.instances)', {}),
    (
        'ops = _dlprof.report("detail")\n'
        'print(sorted(set(ops["Op Name"])), sorted(ops["No. Calls"]))',
        {},
    ),
    ("%dlprof start --key_node=optimizer_step -o spanned", IGNORE),
    ("for _ in range(3):\n    step()", {}),
    ("step()\nstep()", {}),
    ("%dlprof stop", IGNORE),
    ('print("spanned instances", spanned.iterations.instances)', {}),
    ('print("state kept", steps, i)', {}),
]

# notebooks/plain_kernel.ipynb's checks, each inside a %%dlprof cell of the kernel itself
SERVER = """import http.server
import threading


class Hello(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200)
        self.end_headers()
        self.wfile.write(b"hello from a server in this kernel")

    def log_message(self, *args):
        pass


server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Hello)
threading.Thread(target=server.serve_forever, daemon=True).start()
port = server.server_address[1]
print("server up")"""
NETWORK = """%%dlprof -v quiet
import socket
import urllib.request

print(urllib.request.urlopen(f"http://localhost:{port}/", timeout=10).read().decode())
found = socket.getaddrinfo("localhost", port, socket.AF_INET)
print("localhost is", sorted({a[4][0] for a in found}))
try:
    input("your name? ")
except Exception as exc:
    print(f"input(): {type(exc).__name__}: {exc}")"""
CHILDREN = """%%dlprof -v quiet
import multiprocessing
import subprocess

import torch
from torch.utils.data import DataLoader

subprocess.run(["echo", "echo from a subprocess"], check=True)


def hello(i):
    print(f"multiprocessing worker {i} (fork)", flush=True)


for i in range(2):
    p = multiprocessing.get_context("fork").Process(target=hello, args=(i,))
    p.start()
    p.join()


def first_says_hello(worker_id):
    if worker_id == 0:
        print("DataLoader worker 0 started", flush=True)


loader = DataLoader(list(range(8)), batch_size=2, num_workers=2, worker_init_fn=first_says_hello)
print("DataLoader sum", int(sum(batch.sum() for batch in loader)))"""
TQDM_GLOO = """%%dlprof -v quiet
import torch.distributed as dist
from tqdm.auto import tqdm

for _ in tqdm(range(5), desc="epoch"):
    pass
with socket.socket() as s:
    s.bind(("127.0.0.1", 0))
    free = s.getsockname()[1]
dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{free}", rank=0, world_size=1)
total = torch.ones(3)
dist.all_reduce(total)
print("gloo all_reduce:", total.tolist())
dist.destroy_process_group()"""
FIGURE = """%%dlprof -v quiet
try:
    import matplotlib.pyplot as plt
except ImportError:
    print("matplotlib is not installed: no figure")
else:
    fig, ax = plt.subplots(figsize=(3, 2))
    ax.plot([1, 4, 9])
    plt.show()"""
PLAIN_CELLS = [
    ("%load_ext jlprof", {}),
    (SERVER, {}),
    (NETWORK, {}),
    (CHILDREN, {}),
    (TQDM_GLOO, {}),
    (FIGURE, {}),
    (
        "import os\n\n"
        'print("profiled in place:", type(_dlprof).__name__, "JLPROF_NSYS_SESSION" in os.environ)\n'
        "server.shutdown()",
        {},
    ),
]
NOTEBOOKS = {"inplace.ipynb": CELLS, "plain_inplace.ipynb": PLAIN_CELLS}


def build(cells: list[tuple[str, dict]]) -> nbformat.NotebookNode:
    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = {
        "name": "jlprof-inplace",
        "display_name": "Python 3 (jlprof, in place)",
        "language": "python",
    }
    nb.cells = [nbformat.v4.new_code_cell(src, metadata=dict(md)) for src, md in cells]
    return nb


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--execute", action="store_true", help="run it and store the outputs")
    ap.add_argument("names", nargs="*", help=f"some of {sorted(NOTEBOOKS)}; default: all")
    args = ap.parse_args()
    for name, cells in NOTEBOOKS.items():
        if args.names and name not in args.names:
            continue
        write(name, build(cells), execute=args.execute)
    return 0


def write(name: str, nb: nbformat.NotebookNode, *, execute: bool) -> None:
    if execute:
        from nbclient import NotebookClient

        with tempfile.TemporaryDirectory() as tmp:  # run folders land there, not in the repo
            NotebookClient(nb, timeout=300, resources={"metadata": {"path": tmp}}).execute()
        for cell in nb.cells:
            cell.metadata.pop("execution", None)
            if "nbval-ignore-output" in cell.metadata.get("tags", []):
                cell.outputs = []  # live widgets, inline BokehJS: megabytes nbval never compares
        nb.metadata.pop("widgets", None)  # their saved state, for the outputs just dropped
    nbformat.write(nb, HERE / name)


if __name__ == "__main__":
    sys.exit(main())
