"""``%dlprof enable``/``disable`` through jlprof's kernel provisioner (in-place mode)."""

from __future__ import annotations

import shutil
import time

import pytest
from jupyter_client.manager import KernelManager
from jupyter_client.provisioning.factory import KernelProvisionerFactory

from jlprof.magics import inplace
from jlprof.server import provisioner


def test_the_magic_and_the_provisioner_share_one_protocol() -> None:
    assert inplace.PROVISIONER_ENV == provisioner.PROVISIONER_ENV
    assert inplace.REQUEST_PREFIX == provisioner.REQUEST_PREFIX
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
