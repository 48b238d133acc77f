"""The jlprof database: a normalised trace saved for fast re-analysis.

A ``.jlprof`` file is a zip (stored, not compressed) of Arrow IPC tables — one per
:class:`~jlprof.engine.trace.Trace` frame — plus ``manifest.json``. Reading it skips
SQLite and the schema probing entirely; ``--database`` accepts it like an nsys export.
"""

from __future__ import annotations

import io
import json
import zipfile
from pathlib import Path

import pandas as pd

from jlprof.engine.trace import Trace
from jlprof.errors import InputError
from jlprof.outputs import written

FORMAT = "jlprof-trace"
VERSION = 1
FRAMES = ("gpu", "api", "nvtx", "marks", "osrt", "gpus")
ZIP_MAGIC = b"PK\x03\x04"


def is_jlprof_db(path: Path) -> bool:
    """True when ``path`` looks like a saved jlprof database (zip with our manifest)."""
    try:
        with path.open("rb") as fh:
            if fh.read(4) != ZIP_MAGIC:
                return False
        with zipfile.ZipFile(path) as z:
            return "manifest.json" in z.namelist()
    except (OSError, zipfile.BadZipFile):
        return False


def save_trace(trace: Trace, path: str | Path) -> Path:
    """Write ``trace`` to ``path`` (conventionally ``*.jlprof``), whole or not at all."""
    import pyarrow as pa
    import pyarrow.feather as feather

    path = Path(path)
    manifest = {
        "format": FORMAT,
        "version": VERSION,
        "meta": trace.meta,
        "source": str(trace.source or ""),
        "warnings": trace.warnings,
    }
    with (
        written(path, "--save_db") as tmp,
        zipfile.ZipFile(tmp, "w", compression=zipfile.ZIP_STORED) as z,
    ):
        z.writestr("manifest.json", json.dumps(manifest))
        for name in FRAMES:
            buf = io.BytesIO()
            feather.write_feather(
                pa.Table.from_pandas(getattr(trace, name), preserve_index=False),
                buf,
                compression="uncompressed",
            )
            z.writestr(f"{name}.arrow", buf.getvalue())
    return path


def load_trace(path: str | Path) -> Trace:
    """Read a trace written by :func:`save_trace`."""
    import pyarrow.feather as feather

    path = Path(path)
    try:
        with zipfile.ZipFile(path) as z:
            manifest = json.loads(z.read("manifest.json"))
            if manifest.get("format") != FORMAT:
                raise InputError(f"{path} is a zip file but not a jlprof database.")
            if manifest.get("version", 0) > VERSION:
                raise InputError(
                    f"{path} was written by a newer jlprof (format {manifest['version']}); "
                    "upgrade jlprof or re-analyse the original nsys export."
                )
            frames = {}
            for name in FRAMES:
                frames[name] = feather.read_table(io.BytesIO(z.read(f"{name}.arrow"))).to_pandas()
    except (zipfile.BadZipFile, KeyError, OSError, ValueError) as exc:
        raise InputError(
            f"{path}: damaged jlprof database ({exc}). Re-create it with "
            "`jlprof --database EXPORT.sqlite --save_db ...`."
        ) from exc
    for name in ("gpu", "api", "nvtx", "marks", "osrt"):
        df = frames[name]
        for col in df.columns:
            if df[col].dtype == object or str(df[col].dtype).startswith(("str", "string")):
                df[col] = df[col].astype(object).astype("category")
    return Trace(
        gpu=frames["gpu"],
        api=frames["api"],
        nvtx=frames["nvtx"],
        marks=frames["marks"],
        osrt=frames["osrt"],
        gpus=frames["gpus"],
        meta=dict(manifest.get("meta", {})),
        source=Path(manifest.get("source") or path),
        warnings=list(manifest.get("warnings", [])),
    )


def read_any(path: str | Path, **kw) -> Trace:
    """An nsys SQLite export or a jlprof database, told apart by their first bytes."""
    from jlprof.engine.read import read_trace

    path = Path(path)
    if path.is_file() and is_jlprof_db(path):
        return load_trace(path)
    return read_trace(path, **kw)


__all__ = ["is_jlprof_db", "load_trace", "pd", "read_any", "save_trace"]
