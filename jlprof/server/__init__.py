"""The jlprof Jupyter server extension: the REST API behind the JupyterLab sidebar.

Enabled by ``etc/jupyter/jupyter_server_config.d/jlprof.json`` (shipped in the wheel).
"""

from __future__ import annotations

import os
from typing import Any


def _jupyter_server_extension_points() -> list[dict[str, str]]:
    return [{"module": "jlprof.server"}]


def _load_jupyter_server_extension(serverapp: Any) -> None:
    from jlprof.server.handlers import setup_handlers

    root = os.path.expanduser(serverapp.root_dir)
    setup_handlers(serverapp.web_app, root)
    from jlprof.server.provisioner import install

    install(serverapp.log)  # %dlprof enable|disable restart a kernel under nsys (in place)
    serverapp.log.info("jlprof server extension: profiles API at /jlprof/profiles, root %s", root)
