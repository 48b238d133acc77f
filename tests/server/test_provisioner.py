"""``%dlprof enable``/``disable`` through jlprof's kernel provisioner (in-place mode)."""

from __future__ import annotations

import shutil
import time

import pytest
from jupyter_client.manager import KernelManager
from jupyter_client.provisioning.factory import KernelProvisionerFactory

from jlprof.magics import inplace
from jlprof.server import provisioner
from jlprof.sidecar import inplace as launcher


def test_the_magic_and_the_provisioner_share_one_protocol() -> None:
    assert inplace.PROVISIONER_ENV == provisioner.PROVISIONER_ENV
    assert inplace.request_path("k") == provisioner.request_path("k")
    assert inplace.request_path("k").name.startswith(launcher.REQUEST_PREFIX)
    assert inplace.OPTS_ENV == provisioner.OPTS_ENV


def test_wrap_only_when_enabled() -> None:
    env: dict[str, str] = {}
    assert provisioner.wrap(["py", "-f", "c.json"], env, {}) == ["py", "-f", "c.json"]
    assert env == {provisioner.PROVISIONER_ENV: "1"}  # the kernel id, when given
    cmd = provisioner.wrap(["py"], env, {"enabled": True, provisioner.OPTS_ENV: "-t nvtx"})
    assert cmd[1:] == ["-m", "jlprof.sidecar.inplace", "--", "py"]
    assert env[provisioner.OPTS_ENV] == "-t nvtx"


def _run(kc, code: str, timeout: float = 60) -> str:
    out: list[str] = []

    def keep(msg):
        if msg["header"]["msg_type"] == "stream":
            out.append(msg["content"]["text"])

    kc.execute_interactive(code, output_hook=keep, timeout=timeout)
    return "".join(out)


def _restart_after_exit(km: KernelManager, timeout: float = 30) -> None:
    """What the server's restarter does when the kernel ends itself."""
    deadline = time.monotonic() + timeout
    while km.is_alive() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not km.is_alive()
    km.restart_kernel(now=True)


@pytest.mark.nsys
@pytest.mark.slow
def test_enable_restarts_the_kernel_under_nsys_and_disable_restores_it(
    tmp_path, monkeypatch
) -> None:
    if shutil.which("nsys") is None:
        pytest.skip("nsys is not on PATH")
    monkeypatch.setenv("JUPYTER_RUNTIME_DIR", str(tmp_path / "runtime"))
    factory = KernelProvisionerFactory.instance()
    before = factory.default_provisioner_name
    try:
        assert provisioner.install()
        km = KernelManager(kernel_name="python3")
        km.start_kernel(cwd=str(tmp_path))
        kc = km.client()
        kc.start_channels()
        kc.wait_for_ready(timeout=60)
        try:
            assert "in place: off" in _run(kc, "%load_ext jlprof\n%dlprof kernel status")
            assert "restarting this kernel under nsys launch" in _run(kc, "%dlprof enable")
            _restart_after_exit(km)
            kc.wait_for_ready(timeout=60)
            status = _run(kc, "%load_ext jlprof\n%dlprof kernel status")
            assert f"nsys session jlprof-{km.kernel_id}" in status and "Launched" in status
            assert "restarting this kernel without nsys" in _run(kc, "%dlprof disable")
            _restart_after_exit(km)
            kc.wait_for_ready(timeout=60)
            assert "in place: off" in _run(kc, "%load_ext jlprof\n%dlprof kernel status")
        finally:
            kc.stop_channels()
            km.shutdown_kernel(now=True)
        assert not provisioner.request_path(km.kernel_id).exists()
    finally:
        factory.default_provisioner_name = before


SERVER_CHECK = r"""
import asyncio, json, sys, uuid
from tornado.httpclient import AsyncHTTPClient, HTTPRequest
from tornado.websocket import websocket_connect

BASE, TOKEN = sys.argv[1], sys.argv[2]
HDR = {"Authorization": f"token {TOKEN}"}


async def execute(ws, code):
    mid = uuid.uuid4().hex
    msg = {"header": {"msg_id": mid, "msg_type": "execute_request", "username": "t",
                      "session": "s", "version": "5.3", "date": ""},
           "parent_header": {}, "metadata": {}, "channel": "shell",
           "content": {"code": code, "silent": False, "store_history": False,
                       "user_expressions": {}, "allow_stdin": False}}
    await ws.write_message(json.dumps(msg))
    out = []
    while True:
        raw = await asyncio.wait_for(ws.read_message(), 60)
        if raw is None:
            return "".join(out)
        m = json.loads(raw)
        if m.get("parent_header", {}).get("msg_id") != mid:
            continue
        if m["msg_type"] == "stream":
            out.append(m["content"]["text"])
        if m["msg_type"] == "status" and m["content"]["execution_state"] == "idle":
            return "".join(out)


async def session(kid):
    url = BASE.replace("http", "ws") + f"api/kernels/{kid}/channels"
    for _ in range(120):
        try:
            ws = await websocket_connect(HTTPRequest(url, headers=HDR))
            text = await execute(ws, "%load_ext jlprof\n%dlprof kernel status")
            if text:
                return ws, text
            ws.close()
        except Exception:
            pass
        await asyncio.sleep(0.5)
    raise RuntimeError("kernel not back")


async def main():
    http = AsyncHTTPClient()
    r = await http.fetch(BASE + "api/kernels", method="POST", body="{}", headers=HDR)
    kid = json.loads(r.body)["id"]
    ws, before = await session(kid)
    enable = await execute(ws, "%dlprof enable")
    await asyncio.sleep(4)  # the kernel ends itself; the server's restarter starts it again
    ws, after = await session(kid)
    print(json.dumps({"id": kid, "before": before, "enable": enable, "after": after}))
    await http.fetch(BASE + f"api/kernels/{kid}", method="DELETE", headers=HDR)


asyncio.run(main())
"""


@pytest.mark.nsys
@pytest.mark.slow
def test_enable_through_a_real_jupyter_server(tmp_path) -> None:
    """The server extension makes the provisioner the default, the kernel ends itself on
    ``%dlprof enable`` and the server's restarter brings it back under nsys."""
    import json
    import os
    import socket
    import subprocess
    import sys
    from pathlib import Path

    if shutil.which("nsys") is None:
        pytest.skip("nsys is not on PATH")
    root = Path(__file__).resolve().parents[2]
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(root), os.environ.get("PYTHONPATH", "")]),
        "JUPYTER_RUNTIME_DIR": str(tmp_path / "runtime"),
    }
    log = (tmp_path / "server.log").open("w")  # a file: a full pipe would stall the server
    server = subprocess.Popen(
        [sys.executable, "-m", "jupyter", "server", "--no-browser", f"--port={port}",
         "--allow-root", "--ServerApp.ip=127.0.0.1", "--IdentityProvider.token=t42",
         f"--ServerApp.root_dir={tmp_path}"],
        env=env, stdout=log, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    try:
        base = f"http://127.0.0.1:{port}/"
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            with socket.socket() as s:
                if s.connect_ex(("127.0.0.1", port)) == 0:
                    break
            time.sleep(0.3)
        proc = subprocess.run(
            [sys.executable, "-c", SERVER_CHECK, base, "t42"],
            env=env, capture_output=True, text=True, timeout=240,
        )  # fmt: skip
        if proc.returncode != 0:
            text = (tmp_path / "server.log").read_text()
            pytest.fail(proc.stderr[-2000:] + "\n--- server ---\n" + text[-3000:])
        got = json.loads(proc.stdout.strip().splitlines()[-1])
        assert "in place: off" in got["before"]
        assert "restarting this kernel under nsys launch" in got["enable"]
        assert f"nsys session jlprof-{got['id']}"[:55] in got["after"]
        assert "Launched" in got["after"]
    finally:
        server.terminate()
        try:
            server.wait(20)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()
        log.close()
