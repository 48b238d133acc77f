"""The kernel provisioner behind ``%dlprof enable``/``disable`` (in-place mode).

jupyter_client's local provisioner, with one difference: at each (re)start of a Python kernel it
reads ``<runtime dir>/jlprof-inplace-<kernel id>.json`` (written by the magic) and, when in-place
mode is on, wraps the launch command: ``python -m jlprof.sidecar.inplace -- <command>``, which
starts the kernel under ``nsys launch``. Interrupts then go as messages, so nsys never sees the
notebook's SIGINT. Made the server's default by the server extension when the default is still
jupyter_client's own.
"""

from __future__ import annotations

import contextlib
import json
import sys
from importlib.metadata import EntryPoint
from typing import Any

from jupyter_client.provisioning import LocalProvisioner
from jupyter_client.provisioning.factory import KernelProvisionerFactory

from jlprof.sidecar.inplace import OPTS_ENV, PROVISIONER_ENV, request_path

NAME = "jlprof-inplace-provisioner"


def read_request(kernel_id: str) -> dict[str, Any]:
    """What the magic asked for this kernel ({} when nothing, or unreadable)."""
    with contextlib.suppress(OSError, ValueError):
        data = json.loads(request_path(kernel_id).read_text())
        if isinstance(data, dict):
            return data
    return {}


def wrap(
    cmd: list[str], env: dict[str, str], request: dict[str, Any], kernel_id: str = "1"
) -> list[str]:
    """The launch command for this start: under the launcher when in-place mode is on."""
    env[PROVISIONER_ENV] = kernel_id
    if not request.get("enabled"):
        return cmd
    env[OPTS_ENV] = str(request.get(OPTS_ENV, ""))
    return [sys.executable, "-m", "jlprof.sidecar.inplace", "--", *cmd]


class InPlaceProvisioner(LocalProvisioner):  # type: ignore[misc]
    """LocalProvisioner that starts the kernel under nsys when ``%dlprof enable`` asked."""

    async def pre_launch(self, **kwargs: Any) -> dict[str, Any]:
        kwargs = await super().pre_launch(**kwargs)
        spec = self.kernel_spec
        if getattr(spec, "language", "").lower() != "python":
            return kwargs
        env = kwargs.setdefault("env", {})
        request = read_request(self.kernel_id)
        kwargs["cmd"] = wrap(list(kwargs["cmd"]), env, request, self.kernel_id)
        if request.get("enabled"):
            spec.interrupt_mode = "message"
        return kwargs

    async def cleanup(self, restart: bool = False) -> None:
        if not restart:  # the kernel is gone for good: so is its request
            with contextlib.suppress(OSError):
                request_path(self.kernel_id).unlink()
        await super().cleanup(restart=restart)


def install(log: Any = None) -> bool:
    """Make this provisioner the server's default when the default is jupyter_client's own."""
    factory = KernelProvisionerFactory.instance()
    if factory.default_provisioner_name != "local-provisioner":
        if log is not None:
            log.info(
                "jlprof: default kernel provisioner %s kept; %%dlprof enable needs %s",
                factory.default_provisioner_name,
                NAME,
            )
        return False
    factory.provisioners.setdefault(
        NAME,
        EntryPoint(
            name=NAME,
            value="jlprof.server.provisioner:InPlaceProvisioner",
            group=KernelProvisionerFactory.GROUP_NAME,
        ),
    )
    factory.default_provisioner_name = NAME
    return True
