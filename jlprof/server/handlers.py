"""REST handlers of the jlprof server extension (``/jlprof/profiles``, ``/jlprof/profile``).

Authenticated and authorised like the contents API (the sidebar shows files, so reading
profiles needs the same permission as reading files); every path is confined to the root.
The file system is read in a small thread pool with a time limit, never on the server's event
loop: a slow or hung mount must not freeze Jupyter (its other APIs, every kernel's messages).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import tornado.web
from jupyter_server.auth.decorator import authorized
from jupyter_server.base.handlers import APIHandler
from jupyter_server.utils import url_path_join

from jlprof.server import listing

# Seconds a listing or a description may take before the client gets 504 (the thread is left to
# finish; the pool's few threads bound what a hung file system can hold).
TIMEOUT_S = 20.0
_POOL = ThreadPoolExecutor(max_workers=4, thread_name_prefix="jlprof-listing")


class _ProfilesHandler(APIHandler):
    auth_resource = "contents"

    @property
    def root(self) -> Path:
        return Path(self.settings["jlprof_root"])

    @property
    def _allow_hidden(self) -> bool:
        return bool(getattr(self.contents_manager, "allow_hidden", False))

    def _int_arg(self, name: str, default: int) -> int:
        raw = self.get_query_argument(name, str(default))
        try:
            return int(raw)
        except ValueError as err:
            raise tornado.web.HTTPError(400, f"{name} must be an integer, got {raw!r}") from err

    async def _off_loop(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> None:
        """Run ``fn`` in the pool within :data:`TIMEOUT_S` and send its result as JSON."""
        loop = asyncio.get_running_loop()
        try:
            result = await asyncio.wait_for(
                loop.run_in_executor(_POOL, lambda: fn(*args, **kwargs)), TIMEOUT_S
            )
        except (listing.PathRefused, listing.PathMissing, listing.NotAProfile) as err:
            self._fail(err)
        except asyncio.TimeoutError as err:
            raise tornado.web.HTTPError(
                504, f"reading the profiles took over {TIMEOUT_S:g} s (a slow or hung file system?)"
            ) from err
        # allow_nan=False: bare NaN/Infinity are not JSON; listing keeps only finite numbers
        self.finish(json.dumps(result, allow_nan=False))

    def _fail(self, err: Exception) -> None:
        status = {
            listing.PathRefused: 403,
            listing.PathMissing: 404,
            listing.NotAProfile: 400,
        }[type(err)]
        raise tornado.web.HTTPError(status, str(err)) from err


class ListHandler(_ProfilesHandler):
    """GET ?path=<folder>&offset=&limit=: one page of the profiles under a folder."""

    @tornado.web.authenticated
    @authorized
    async def get(self) -> None:
        rel = self.get_query_argument("path", "")
        offset = self._int_arg("offset", 0)
        limit = self._int_arg("limit", listing.DEFAULT_LIMIT)
        await self._off_loop(
            listing.list_profiles, self.root, rel, offset, limit, allow_hidden=self._allow_hidden
        )


class DescribeHandler(_ProfilesHandler):
    """GET ?path=<file or folder>: the sidebar entry of one profile the user picked."""

    @tornado.web.authenticated
    @authorized
    async def get(self) -> None:
        rel = self.get_query_argument("path")
        await self._off_loop(listing.describe_path, self.root, rel, allow_hidden=self._allow_hidden)


def setup_handlers(web_app: tornado.web.Application, root_dir: str) -> None:
    """Register the handlers under the server's base URL."""
    web_app.settings["jlprof_root"] = root_dir
    base = web_app.settings["base_url"]
    web_app.add_handlers(
        ".*$",
        [
            (url_path_join(base, "jlprof", "profiles"), ListHandler),
            (url_path_join(base, "jlprof", "profile"), DescribeHandler),
        ],
    )
