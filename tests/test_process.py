"""The ``jlprof`` command's process gives Arrow's freed pages back at once
(:mod:`jlprof.process`); a library user's process keeps its own setting, and so do the
programs the command starts (the environment is as it was)."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

PROBE = textwrap.dedent(
    """
    import os, sys
    if sys.argv[1] == "command":
        import jlprof.cli  # noqa: F401 - what `jlprof` and `python -m jlprof` import first
    else:
        import jlprof.profile  # noqa: F401 - the library, as a notebook imports it
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc

    def rss_mib():
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmRSS"):
                    return int(line.split()[1]) // 1024

    src = pa.array(np.arange(20_000_000, dtype=np.int64))  # 153 MiB
    base = rss_mib()
    for i in range(6):  # buffers made and freed, as a kernel's growing buffers are
        out = pc.add(src, i)
        del out
    kept = rss_mib() - base
    print(pa.default_memory_pool().backend_name, kept, os.environ.get("MIMALLOC_PURGE_DELAY"))
    """
)


def kept_after_frees(how: str) -> tuple[str, int, str]:
    out = subprocess.run(
        [sys.executable, "-c", PROBE, how], capture_output=True, text=True, check=True
    ).stdout.split()
    return out[0], int(out[1]), out[2]


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_the_command_frees_arrow_memory_at_once_and_the_library_does_not_choose():
    backend, kept, env = kept_after_frees("command")
    if backend != "mimalloc":
        pytest.skip(f"Arrow's pool is {backend}: no purge delay to set")
    assert kept < 64, f"{kept} MiB of freed 153 MiB buffers still resident"
    assert env == "None"  # taken out again once Arrow loaded: children get the user's
    _, kept_lib, env_lib = kept_after_frees("library")
    assert env_lib == "None"
    # mimalloc's own default keeps a freed buffer's pages until a later call: the library
    # leaves that as the user's process has it
    assert kept_lib > kept + 100
