"""The project stands alone: no file of it reads the ``shared/`` folder that lay beside the repo.

A fresh clone has nothing beside it, so any path into that sibling folder breaks there (the
dashboard notebook once read ``../../shared/data/real``). Real traces come from ``tests/data/real``
through ``tests.fixtures.scenarios.real_data_dir()``. The check is a grep over every file git
tracks (plus untracked files it does not ignore): code, tests, notebooks (outputs too), docs, CI.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SKIP_SUFFIXES = {".xz", ".png", ".jpg", ".gif", ".ico", ".woff", ".woff2", ".sqlite"}
IGNORED_DIRS = {".git", ".venv", "node_modules", ".cache", "build", "dist", "lib"}

# Each pattern is a way code or docs spelled a path into the sibling folder.
SIBLING_PATHS = {
    "relative path": r"\.\./shared\b",  # ../shared, ../../shared/data/real
    "absolute path": r"/work/shared\b",
    "path join from the repo's parents": r"\bparents?\b[^\n]*['\"]shared\b",
    "'shared' / 'data' join": r"['\"]shared['\"]\s*/\s*['\"]data\b",
    "the sibling's real-trace folder": r"\bshared/data/real\b",
}


def project_files() -> list[Path]:
    """Tracked and untracked-not-ignored files; every file but build outputs outside git."""
    try:
        out = subprocess.run(
            ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
            cwd=ROOT, capture_output=True, check=True,
        ).stdout  # fmt: skip
        names = [n for n in out.decode().split("\0") if n]
        return [ROOT / n for n in names if (ROOT / n).is_file()]
    except (OSError, subprocess.CalledProcessError):  # an unpacked sdist: no git
        return [
            p for p in ROOT.rglob("*")
            if p.is_file() and not IGNORED_DIRS & set(p.relative_to(ROOT).parts)
        ]  # fmt: skip


def test_no_file_reads_the_sibling_shared_folder() -> None:
    files = [p for p in project_files() if p.suffix not in SKIP_SUFFIXES]
    assert len(files) > 100, "the grep found (almost) no files: is ROOT the repository?"
    assert ROOT / "notebooks/dashboard.ipynb" in files
    hits = []
    for path in files:
        if path == Path(__file__).resolve():
            continue  # the patterns themselves
        try:
            text = path.read_text(encoding="utf-8")
        except (UnicodeDecodeError, OSError):
            continue
        for what, pattern in SIBLING_PATHS.items():
            for m in re.finditer(pattern, text):
                line = text.count("\n", 0, m.start()) + 1
                hits.append(f"{path.relative_to(ROOT)}:{line}: {what}: {m.group(0)!r}")
    assert not hits, "paths into the sibling shared/ folder:\n" + "\n".join(hits)


def test_the_patterns_catch_what_they_name() -> None:
    """Each pattern matches the spelling it was written for (so the grep above can fail)."""
    samples = {
        "relative path": 'DATA = Path("../../shared/data/real")',
        "absolute path": 'candidates.append("/work/shared/data/real")',
        "path join from the repo's parents": 'Path(__file__).resolve().parents[2] / "shared"',
        "'shared' / 'data' join": 'str(p / "shared" / "data" / "real")',
        "the sibling's real-trace folder": "exports of ``shared/data/real``",
    }
    for what, sample in samples.items():
        assert re.search(SIBLING_PATHS[what], sample), what
    assert not any(re.search(p, 'tmp_path / "shared"') for p in SIBLING_PATHS.values())
