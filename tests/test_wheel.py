"""``pip install jlprof`` from the wheel is complete: a user without node gets the JupyterLab
extension, the server extension, the magics and the CLI.

Builds the wheel with ``python -m build`` (or takes ``$JLPROF_WHEEL``), installs it NOT editable
with JupyterLab into a clean virtual environment, and runs everything with a PATH that holds only
that environment's ``bin``: no node, no jlpm, nothing of the development checkout. The
labextension inside the wheel is the prebuilt one (``jlprof/labextension``, made by ``make
install``). About two minutes, mostly pip unpacking JupyterLab (pip's cache is used).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import venv
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
ANSI = re.compile(r"\x1b\[[0-9;]*m")
KERNEL_CHECK = """
import json, sys
from jupyter_client.manager import start_new_kernel
km, kc = start_new_kernel(kernel_name="python3")
out = []
code = ("%load_ext jlprof\\nimport jlprof\\n"
        "print(jlprof.__file__, 'DlprofMagics' in get_ipython().magics_manager.registry)")
try:
    reply = kc.execute_interactive(code, timeout=120, output_hook=out.append)
finally:
    kc.stop_channels()
    km.shutdown_kernel(now=True)
texts = [m["content"].get("text") or m["content"].get("evalue") for m in out
         if m["msg_type"] in ("stream", "error")]
print(json.dumps({"status": reply["content"]["status"], "output": "".join(map(str, texts))}))
"""

pytestmark = pytest.mark.slow


def build_wheel(dist: Path) -> Path:
    given = os.environ.get("JLPROF_WHEEL")
    if given:
        return Path(given)
    assert (ROOT / "jlprof/labextension/static/style.js").exists(), (
        "the prebuilt labextension is missing: run `make install` (builds it with jlpm) first"
    )
    subprocess.run(
        [sys.executable, "-m", "build", "--wheel", "-o", str(dist), str(ROOT)],
        check=True, capture_output=True, timeout=900,
    )  # fmt: skip
    [wheel] = dist.glob("jlprof-*.whl")
    return wheel


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, str], Path]:
    tmp = tmp_path_factory.mktemp("wheel")
    wheel = build_wheel(tmp / "dist")
    env_dir = tmp / "venv"
    venv.EnvBuilder(with_pip=True).create(env_dir)
    bindir = env_dir / "bin"
    pip = [str(bindir / "python"), "-m", "pip", "install", "-q", "--no-compile"]
    subprocess.run([*pip, str(wheel), "jupyterlab"], check=True, capture_output=True, timeout=900)
    home = tmp / "home"  # no user config or kernels of this machine
    home.mkdir()
    env = {"PATH": str(bindir), "HOME": str(home), "LANG": "C.UTF-8", "NO_COLOR": "1"}
    assert shutil.which("node", path=env["PATH"]) is None
    return bindir, env, home


def run(bindir: Path, env: dict[str, str], cwd: Path, *argv: str) -> str:
    proc = subprocess.run(
        [str(bindir / argv[0]), *argv[1:]],
        env=env, cwd=cwd, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    out = ANSI.sub("", proc.stdout + proc.stderr)
    assert proc.returncode == 0, out
    return out


def test_the_wheel_holds_the_prebuilt_labextension(installed) -> None:
    bindir, _, _ = installed
    share = bindir.parent / "share/jupyter/labextensions/jlprof"
    assert (share / "package.json").exists() and (share / "install.json").exists()
    assert list((share / "static").glob("remoteEntry.*.js"))
    assert (bindir.parent / "etc/jupyter/jupyter_server_config.d/jlprof.json").exists()


def test_the_wheel_installs_the_inplace_kernelspec(installed) -> None:
    """``jlprof-inplace`` (the notebook's kernel under nsys launch) is listed by Jupyter."""
    bindir, env, home = installed
    listed = run(bindir, env, home, "jupyter", "kernelspec", "list")
    assert re.search(r"jlprof-inplace\s+\S+/share/jupyter/kernels/jlprof-inplace", listed), listed
    spec = json.loads(
        (bindir.parent / "share/jupyter/kernels/jlprof-inplace/kernel.json").read_text()
    )
    assert spec["display_name"] == "Python 3 (jlprof, in place)"
    assert spec["argv"][1:3] == ["-m", "jlprof.sidecar.inplace"]


def test_jupyterlab_lists_both_extensions_enabled_and_ok(installed) -> None:
    bindir, env, home = installed
    labext = run(bindir, env, home, "jupyter", "labextension", "list")
    assert re.search(r"jlprof v\S+ enabled OK \(python, jlprof\)", labext), labext
    server = run(bindir, env, home, "jupyter", "server", "extension", "list")
    assert re.search(r"jlprof\.server\s+enabled", server), server
    assert re.search(r"jlprof\.server\s+OK", server), server


def test_load_ext_in_a_kernel_and_the_cli(installed) -> None:
    bindir, env, home = installed
    out = run(bindir, env, home, "python", "-c", KERNEL_CHECK)
    result = json.loads(next(ln for ln in out.splitlines() if ln.startswith('{"status"')))
    assert result["status"] == "ok", result
    where, registered = result["output"].split()
    assert Path(where).is_relative_to(bindir.parent) and registered == "True"  # not the checkout
    assert "usage: jlprof" in run(bindir, env, home, "jlprof", "--help")
