"""``%dlprof`` takes DLProf's grammar and notes as the CLI does (one table, one tokenizer)."""

from __future__ import annotations

from tests.fixtures.loops import small_training_export


def test_space_separated_lists_and_notes(shell, tmp_path) -> None:
    db = small_training_export(tmp_path / "run.sqlite")
    out = shell.line(
        f"--database {db} --output_path grammar --reports kernel tensor node_op -- "
        "--file_formats json csv -- --detailed_mode false --key_op optimizer_step -o g"
    )
    assert "Traceback" not in out.stderr, out.stderr
    names = {p.name for p in (shell.cwd / "grammar").iterdir()}
    want = {f"dlprof_{r}.{e}" for r in ("kernel", "tensor", "node_op") for e in ("csv", "json")}
    assert want <= names and "dlprof_summary.csv" not in names
    said = out.stdout + out.stderr
    assert "--detailed_mode has no effect" in said
    assert shell.ns["g"].key_node == "optimizer_step"


def test_simple_mode_writes_the_kernel_report_only(shell, tmp_path) -> None:
    db = small_training_export(tmp_path / "run.sqlite")
    out = shell.line(f"--database={db} --output_path=simple -m simple --reports=all -o s")
    assert "Traceback" not in out.stderr, out.stderr
    names = {p.name for p in (shell.cwd / "simple").iterdir()} - {"jlprof_run.json"}
    assert names == {"dlprof_kernel.csv"}
