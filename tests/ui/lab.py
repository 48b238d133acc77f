"""A real JupyterLab server and headless Chromium for the browser tests.

Shared by every UI test (dashboard, JupyterLab extension): one server per test session,
loopback only, a random token, its root a temporary folder. Chromium is Debian's
(``/usr/bin/chromium``) driven by Playwright; no browser is ever downloaded.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

CHROMIUM = os.environ.get("JLPROF_CHROMIUM", "/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
ARTIFACTS = Path(__file__).resolve().parents[2] / "test-artifacts" / "ui"

# JavaScript: querySelectorAll through Bokeh's nested shadow roots, for page.evaluate
DEEP = """(root, sel) => {
    const out = [];
    const walk = (r) => {
        out.push(...r.querySelectorAll(sel));
        for (const el of r.querySelectorAll('*')) if (el.shadowRoot) walk(el.shadowRoot);
    };
    walk(root);
    return out;
}"""

# JavaScript: what a jlprof dashboard element shows (null when there is none): its cards
# (title -> [value, note]), the kernel table's title and drawn rows (the table with a yes/no TC
# column; the op tree's has counts), its drawn Bokeh canvases and its text
DASHBOARD = f"""(dash) => {{
    if (!dash) return null;
    const cards = {{}};
    for (const c of dash.querySelectorAll('.jlprof-cards > div')) {{
        const [title, value, note] = [...c.children].map(e => e.innerText.trim());
        cards[title] = [value, note];
    }}
    const titles = ({DEEP})(dash, 'div').map(e => e.innerText || '')
        .filter(t => /^Kernels \\(all ops\\): \\d+ rows$/.test(t.trim()));
    const rows = ({DEEP})(dash, '.slick-row')
        .map(r => [...r.querySelectorAll('.slick-cell')].map(c => c.innerText.trim()))
        .filter(r => r.length === 6 && (r[5] === 'yes' || r[5] === 'no'));
    return {{cards, kernel_title: titles.length ? titles[0].trim() : '', rows,
             canvases: ({DEEP})(dash, 'canvas').length, text: dash.innerText}};
}}"""

# JavaScript: every BokehJS view on the page (plots, their renderers and annotations, ...)
BOKEH_VIEWS = """() => {
    const views = [];
    const walk = (v) => {
        views.push(v);
        for (const c of v.child_views ?? []) walk(c);
        for (const r of v.renderer_views?.values() ?? []) walk(r);
    };
    for (const root of Bokeh.index.roots ?? Object.values(Bokeh.index)) walk(root);
    return views;
}"""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class LabServer:
    """A running JupyterLab: ``url`` ends with '/', ``root`` is its root folder."""

    url: str
    token: str
    root: Path
    proc: subprocess.Popen[bytes]
    log: Path
    env: dict[str, str] = field(default_factory=dict)

    def api(
        self, path: str, method: str = "GET", body: Any = None, *, token: bool = True
    ) -> tuple[int, Any]:
        """Call the server's REST API; returns (HTTP status, decoded JSON or text)."""
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(self.url + path.lstrip("/"), data=data, method=method)
        if token:
            req.add_header("Authorization", f"token {self.token}")
        if data is not None:
            req.add_header("Content-Type", "application/json")
        try:
            with urllib.request.urlopen(req, timeout=30) as resp:
                status, raw = resp.status, resp.read()
        except urllib.error.HTTPError as err:
            status, raw = err.code, err.read()
        try:
            return status, json.loads(raw or b"null")
        except ValueError:
            return status, raw.decode(errors="replace")

    def lab_url(self, relpath: str = "") -> str:
        """The JupyterLab URL opening ``relpath`` (a notebook), token included."""
        tail = f"lab/tree/{relpath}" if relpath else "lab"
        return f"{self.url}{tail}?token={self.token}"

    def log_tail(self, lines: int = 40) -> str:
        text = self.log.read_text(errors="replace") if self.log.exists() else ""
        return "\n".join(text.splitlines()[-lines:])


def start_lab(root: Path, log: Path, timeout_s: float = 90.0) -> LabServer:
    """Start ``python -m jupyterlab`` on loopback and wait until its API answers."""
    token = secrets.token_hex(16)
    port = _free_port()
    env = dict(os.environ)
    # A private Jupyter config/data/runtime so the user's settings never leak in.
    home = root.parent / f"{root.name}-jupyter"
    for sub in ("config", "runtime"):
        (home / sub).mkdir(parents=True, exist_ok=True)
    env.update(
        JUPYTER_CONFIG_DIR=str(home / "config"),
        JUPYTER_RUNTIME_DIR=str(home / "runtime"),
        JUPYTER_PLATFORM_DIRS="1",
        PYTHONUNBUFFERED="1",
    )
    cmd = [
        sys.executable,
        "-m",
        "jupyterlab",
        "--no-browser",
        "--ip=127.0.0.1",
        f"--port={port}",
        "--ServerApp.port_retries=0",
        f"--IdentityProvider.token={token}",
        f"--ServerApp.root_dir={root}",
        "--ServerApp.disable_check_xsrf=False",
        "--LabApp.news_url=",
        # window.jupyterapp lets tests call JupyterLab's own commands (as Galata does)
        "--LabApp.expose_app_in_browser=True",
        "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate",
    ]
    if os.geteuid() == 0:
        cmd.append("--allow-root")
    fh = log.open("wb")
    proc = subprocess.Popen(
        cmd, cwd=root, env=env, stdout=fh, stderr=subprocess.STDOUT, start_new_session=True
    )
    server = LabServer(f"http://127.0.0.1:{port}/", token, root, proc, log, env)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"JupyterLab exited with {proc.returncode}:\n{server.log_tail()}")
        try:
            status, _ = server.api("api/status")
            if status == 200:
                return server
        except OSError:
            pass
        time.sleep(0.3)
    stop_lab(server)
    raise RuntimeError(f"JupyterLab did not answer within {timeout_s:.0f} s:\n{server.log_tail()}")


def stop_lab(server: LabServer) -> None:
    """Shut the server (and the kernels it started) down; kill what lingers."""
    if server.proc.poll() is None:
        try:
            server.api("api/shutdown", method="POST")
            server.proc.wait(timeout=15)
        except (OSError, subprocess.TimeoutExpired):
            pass
    if server.proc.poll() is None:
        os.killpg(server.proc.pid, signal.SIGTERM)
        try:
            server.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            os.killpg(server.proc.pid, signal.SIGKILL)
            server.proc.wait()


def chromium_available() -> bool:
    return shutil.which(CHROMIUM) is not None or Path(CHROMIUM).exists()


# ---- page helpers -----------------------------------------------------------------------
def wait_idle(page: Any, timeout_ms: int = 60_000) -> None:
    """Wait until the notebook's kernel reports idle (JupyterLab's kernel status indicator)."""
    page.wait_for_function(
        """() => {
            const el = document.querySelector('.jp-Notebook-ExecutionIndicator');
            return el && el.getAttribute('data-status') === 'idle';
        }""",
        timeout=timeout_ms,
    )


def open_notebook(page: Any, lab: LabServer, relpath: str, timeout_ms: int = 90_000) -> None:
    """Open ``relpath`` (relative to the server root) and wait for an idle kernel.

    The saved workspace is dropped first: documents an earlier test left open would be restored
    too, and ``relpath`` might then sit in a background tab (its outputs hidden)."""
    lab.api("lab/api/workspaces/default", method="DELETE")
    page.goto(lab.lab_url(relpath), wait_until="domcontentloaded")
    page.wait_for_selector(".jp-NotebookPanel .jp-Cell", timeout=timeout_ms)
    # The indicator can read idle before the session has a kernel; running cells then opens
    # JupyterLab's "Select Kernel" dialog and the run never finishes. Wait for a real kernel.
    page.wait_for_function(
        """() => {
            const w = window.jupyterapp && window.jupyterapp.shell.currentWidget;
            const k = w && w.sessionContext && w.sessionContext.session
                && w.sessionContext.session.kernel;
            return !!k && k.connectionStatus === 'connected' && k.status === 'idle';
        }""",
        timeout=timeout_ms,
    )
    wait_idle(page, timeout_ms)


def run_all_cells(page: Any, timeout_ms: int = 180_000) -> None:
    """Run every cell through JupyterLab's own command and wait for the kernel to finish.

    Waits for the session's kernel connection first: on a loaded machine the status shows
    'idle' before the kernel is connected, and a run issued then is silently dropped. The
    shown notebook is activated first: JupyterLab restores the tabs of earlier tests, and the
    command runs the notebook tracker's current one. Then waits until every code cell has an
    execution count.
    """
    page.wait_for_function(
        """() => {
            const w = window.jupyterapp && window.jupyterapp.shell.currentWidget;
            const k = w && w.sessionContext && w.sessionContext.session
                && w.sessionContext.session.kernel;
            return k && k.connectionStatus === 'connected' && k.status === 'idle';
        }""",
        timeout=timeout_ms,
    )
    page.evaluate(
        """() => {
            const app = window.jupyterapp;
            const w = app.shell.currentWidget;
            app.shell.activateById(w.id);
            w.content.activate();
            return app.commands.execute('notebook:run-all-cells');
        }"""
    )
    page.wait_for_function(
        "() => [...document.querySelectorAll("
        "'.jp-NotebookPanel:not(.lm-mod-hidden) .jp-CodeCell .jp-InputPrompt')]"
        ".every(e => /\\[\\d+\\]/.test(e.innerText))",
        timeout=timeout_ms,
    )
    wait_idle(page, timeout_ms)


def screenshot(page: Any, name: str) -> Path:
    """Save a full-page screenshot under ``test-artifacts/ui/`` and return its path."""
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    path = ARTIFACTS / f"{name}.png"
    page.screenshot(path=str(path), full_page=True)
    return path
