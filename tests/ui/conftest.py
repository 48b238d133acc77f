"""Fixtures for browser tests: a real JupyterLab (``lab_server``) and Chromium (``page``)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.ui.lab import (
    CHROMIUM,
    CHROMIUM_ARGS,
    LabServer,
    chromium_available,
    screenshot,
    start_lab,
    stop_lab,
)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if "tests/ui/" in str(item.fspath).replace("\\", "/"):
            item.add_marker(pytest.mark.ui)


@pytest.fixture(scope="session")
def lab_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LabServer]:
    pytest.importorskip("jupyterlab", reason="install the 'ui' extra: pip install -e .[ui]")
    base = tmp_path_factory.mktemp("lab")
    root = base / "root"
    root.mkdir()
    server = start_lab(root, base / "jupyterlab.log")
    try:
        yield server
    finally:
        stop_lab(server)


@pytest.fixture(scope="session")
def browser() -> Iterator[Any]:
    sync_api = pytest.importorskip(
        "playwright.sync_api", reason="install the 'ui' extra: pip install -e .[ui]"
    )
    if not chromium_available():
        pytest.fail(f"Chromium not found at {CHROMIUM}: apt-get install chromium")
    with sync_api.sync_playwright() as pw:
        chromium = pw.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS)
        try:
            yield chromium
        finally:
            chromium.close()


@pytest.fixture
def page(browser: Any, request: pytest.FixtureRequest) -> Iterator[Any]:
    context = browser.new_context(viewport={"width": 1400, "height": 900})
    pg = context.new_page()
    pg.set_default_timeout(60_000)
    try:
        yield pg
    finally:
        name = request.node.name.replace("/", "_").replace("[", "-").rstrip("]")
        try:
            screenshot(pg, name)
        finally:
            context.close()


def write_notebook(root: Path, relpath: str, cells: list[str]) -> Path:
    """Write a notebook of code cells under the server root (nbformat 4)."""
    import nbformat

    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(src) for src in cells]
    nb.metadata["kernelspec"] = {
        "name": "python3",
        "display_name": "Python 3",
        "language": "python",
    }
    path = root / relpath
    path.parent.mkdir(parents=True, exist_ok=True)
    nbformat.write(nb, path)
    return path
