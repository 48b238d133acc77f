"""``jlprof view PROFILE``: the dashboard and the Viewer panels in a browser, without Jupyter.

DLProf users ran ``dlprofviewer dlprof_dldb.sqlite`` and opened port 8000; this is the same
for a jlprof database, an nsys export or a run folder (``jlprof_runs/<id>/``): a Bokeh server
app (:mod:`jlprof.widgets.app`), bound to 127.0.0.1 unless ``--address`` says otherwise, with
Bokeh's own ``--allow-websocket-origin`` and signed session ids (``--session-ids signed``,
secret from ``BOKEH_SECRET_KEY``); bound to loopback, it prints the ``ssh -L`` line that
reaches it from another machine, and ``--address``. ``--export-html FILE`` writes a static,
self-contained HTML copy instead (BokehJS inlined: it opens with no network), whole or not at
all.

The profile is read once; each browser session gets a shallow copy of the Analysis (its own
key node and range, the shared correlation and caches), so two tabs do not move each
other's slider.
"""

from __future__ import annotations

import argparse
import copy
import errno
import os
import socket
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from jlprof.errors import InputError, JlprofError, OutputError
from jlprof.outputs import written

if TYPE_CHECKING:
    from jlprof.profile import Profile

DEFAULT_PORT = 8000  # the DLProf Viewer's port
DEFAULT_ADDRESS = "127.0.0.1"
LOOPBACK = ("127.0.0.1", "localhost", "::1")
SESSION_IDS = ("unsigned", "signed", "external-signed")  # as `bokeh serve --session-ids`
VIEW_OPTIONS = ("key_node", "iter_start", "iter_stop")  # rows of jlprof.options.OPTIONS


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(
        prog="jlprof view",
        description="Show a profile's dashboard and DLProf Viewer panels in a browser "
        "(a Bokeh server app; no Jupyter needed), or write it as one static HTML file.",
    )
    ap.add_argument(
        "profile",
        help="a jlprof database (.jlprof), an nsys export (.sqlite, .nsys-rep) or a run folder "
        "(jlprof_runs/<id>/)",
    )
    ap.add_argument(
        "--port",
        type=int,
        default=DEFAULT_PORT,
        help=f"port to serve on (default {DEFAULT_PORT}; 0: any free port)",
    )
    ap.add_argument(
        "--address",
        default=DEFAULT_ADDRESS,
        help=f"address to bind (default {DEFAULT_ADDRESS}: this machine only; 0.0.0.0 serves "
        "every interface, so anyone who can reach it sees the profile)",
    )
    ap.add_argument(
        "--allow-websocket-origin",
        action="append",
        metavar="HOST[:PORT]",
        help="a host the page may be loaded from, as Bokeh's option (repeatable; default: the "
        "address and port served)",
    )
    ap.add_argument(
        "--session-ids",
        choices=SESSION_IDS,
        default="unsigned",
        help="Bokeh's session-id policy: 'signed' needs BOKEH_SECRET_KEY (see `bokeh secret`)",
    )
    ap.add_argument("--show", action="store_true", help="open the page in a browser")
    ap.add_argument(
        "--export-html",
        metavar="FILE",
        help="write a static, self-contained HTML copy of the viewer to FILE and exit",
    )
    # DLProf's aggregation options, from the one option table (changeable in the page)
    from jlprof.options import CLI, OPTIONS

    for o in OPTIONS:
        if o.name in VIEW_OPTIONS:
            ap.add_argument(*o.flags, **o.kwargs(CLI))
    return ap


def resolve(path: str | os.PathLike[str]) -> Path:
    """The file to load for ``path``: itself, or the profile a run folder's manifest names."""
    from jlprof.runs import MANIFEST, run_database

    p = Path(path)
    if not p.exists():
        raise InputError(
            f"{p}: no such file or folder; give a .jlprof database, an nsys export (.sqlite) "
            "or a run folder (jlprof_runs/<id>/)."
        )
    if p.is_dir() and not (p / MANIFEST).is_file():
        raise InputError(
            f"{p} is a folder without {MANIFEST}: not a jlprof run folder. Give the folder of "
            "one run (jlprof_runs/<id>/) or a profile file in it."
        )
    return run_database(p)


def load_profile(
    path: str | os.PathLike[str],
    key_node: str | None = None,
    iter_start: int | None = None,
    iter_stop: int | None = None,
) -> Profile:
    import jlprof

    target = resolve(path)
    try:
        return jlprof.load(target, key_node=key_node, iter_start=iter_start, iter_stop=iter_stop)
    except JlprofError:
        raise
    except Exception as exc:  # a file that is no profile at all (truncated, another format)
        raise InputError(
            f"{target}: cannot be read as a profile ({type(exc).__name__}: {exc}); give a "
            ".jlprof database or an nsys SQLite export (nsys export --type sqlite)."
        ) from exc


def export_html(profile: Profile, out: str | os.PathLike[str], title: str) -> Path:
    """Write the static viewer to ``out`` atomically (no partial file on failure)."""
    from jlprof.widgets.app import static_document_html

    page = static_document_html(profile, title=title)
    target = Path(out)
    if not target.parent.is_dir():
        raise OutputError(f"{target.parent}: no such folder for --export-html; create it first.")
    with written(target) as tmp:
        tmp.write_text(page, encoding="utf-8")
    return target


def make_server(profile: Profile, args: argparse.Namespace, title: str) -> Any:
    """A Bokeh server with the viewer app at '/', listening (not yet started)."""
    from bokeh.application import Application
    from bokeh.application.handlers.function import FunctionHandler
    from bokeh.server.server import Server

    from jlprof.widgets.app import add_to

    def session(doc: Any) -> None:
        add_to(doc, copy.copy(profile), title=title)

    port = args.port or _free_port(args.address)
    opts: dict[str, Any] = {"port": port, "address": args.address}
    # Bokeh's default allows pages from localhost:PORT only; 127.0.0.1 is the same machine
    origins = args.allow_websocket_origin or [f"localhost:{port}", f"127.0.0.1:{port}"] + (
        [f"{args.address}:{port}"] if args.address not in LOOPBACK else []
    )
    if args.session_ids != "unsigned":
        if not os.environ.get("BOKEH_SECRET_KEY"):
            raise JlprofError(
                "--session-ids signed needs a secret in BOKEH_SECRET_KEY: run `bokeh secret` "
                "and export its output."
            )
        opts.update(sign_sessions=True, secret_key=os.environ["BOKEH_SECRET_KEY"],
                    generate_session_ids=args.session_ids == "signed")  # fmt: skip
    try:
        server = Server({"/": Application(FunctionHandler(session))}, **opts,
                        allow_websocket_origin=origins)  # fmt: skip
    except OSError as exc:
        if exc.errno in (errno.EADDRINUSE, errno.EACCES):
            why = "is in use" if exc.errno == errno.EADDRINUSE else "needs more privileges"
            raise JlprofError(
                f"port {port} on {args.address} {why}: pick another with --port N "
                "(--port 0: any free port)."
            ) from exc
        if exc.errno == errno.EADDRNOTAVAIL:
            raise JlprofError(
                f"cannot bind {args.address}: not an address of this machine; use --address "
                "127.0.0.1 (default) or one of this machine's addresses."
            ) from exc
        raise
    return server


def _free_port(address: str) -> int:
    """A port free on ``address`` now (for --port 0: the allowed origins need the number)."""
    with socket.socket() as s:
        s.bind((address if address not in ("", "0.0.0.0") else "", 0))
        return int(s.getsockname()[1])


def remote_hint(address: str, port: int, host: str | None = None) -> list[str]:
    """How to reach a viewer bound to this machine only from another one (an SSH tunnel, or
    ``--address``); nothing when it already listens on another address."""
    if address not in LOOPBACK:
        return []
    host = host or socket.gethostname()
    return [
        f"jlprof view: from another machine, tunnel the port: ssh -L {port}:localhost:{port} "
        f"{host} (then open http://localhost:{port}/ there)",
        "jlprof view: or serve every interface with --address 0.0.0.0 (anyone who can reach "
        "this machine then sees the profile)",
    ]


def main(argv: list[str]) -> int:
    """``jlprof view ...`` (argv without 'view'); the exit status."""
    args = build_parser().parse_args(argv)
    try:
        profile = load_profile(args.profile, args.key_node, args.iter_start, args.iter_stop)
        title = Path(args.profile).resolve().name
        if args.export_html:
            out = export_html(profile, args.export_html, title)
            print(f"jlprof: wrote {out}")
            return 0
        server = make_server(profile, args, title)
    except JlprofError as exc:
        print(f"jlprof: error: {exc}", file=sys.stderr)
        return 2
    port = server.port
    host = "localhost" if args.address in ("127.0.0.1", "localhost") else args.address
    url = f"http://{host}:{port}/"
    print(f"jlprof view: serving {title} at {url} (Ctrl+C to stop)", flush=True)
    for line in remote_hint(args.address, port):
        print(line, flush=True)
    server.start()
    if args.show:
        server.io_loop.add_callback(server.show, "/")
    try:
        server.io_loop.start()
    except KeyboardInterrupt:
        print("jlprof view: stopped", file=sys.stderr)
    return 0
