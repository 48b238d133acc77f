"""Every report's columns in the guide's order (ch. 10, copied here as data), jlprof's extra
columns after DLProf's; the summary CSV laid out as the guide's §10.2 tables."""

from __future__ import annotations

import pytest

import jlprof
from jlprof.reports.writers import read_summary_csv, summary_csv
from tests.fixtures.loops import small_training_export

STATS = ["Total", "Avg.", "Min", "Max"]


def _stats(label: str) -> list[str]:
    return [f"{s} {label} (ns)" for s in STATS]


# the guide's column tables; (PyTorch) marks "This column only exists for PyTorch runs"
GUIDE_COLUMNS = {
    "detail": ["Op ID", "Op Name", "Direction (PyTorch)", "Op Type", "No. Calls",
               "TC Eligibility", "Using TC", *_stats("CPU Time"), *_stats("GPU Time"),
               *_stats("CPU Overhead Time"), *_stats("GPU Idle Time"), "Data Type",
               "Input Shapes", "Stack Trace (PyTorch)"],  # §10.3
    "iteration": ["Iteration", "Op ID", "Op Name", "Direction (PyTorch)", "Op Type",
                  "Kernel Name", "Device ID", "GPU Start Time (ns)", "GPU Time (ns)",
                  "API Call Start (ns)", "API Call Time (ns)", "Uses TC", "Grid X", "Grid Y",
                  "Grid Z", "Block X", "Block Y", "Block Z", "Data Type", "Input Shapes",
                  "Parameters", "Output Shapes", "Long Kernel Name"],  # §10.4
    "kernel": ["Kernel Name", "Op ID", "Op Name", "Direction (PyTorch)", "Uses TC",
               *_stats("GPU Time"), *_stats("API Time")],  # §10.5
    "tensor": ["Op ID", "Op Name", "Direction (PyTorch)", "Op Type", "Uses TC",
               "Total GPU Time", "TC GPU Time", "Non-TC GPU Time", "TC Utilization (%)",
               "Total Kernel Count", "TC Kernel Count", "TC Kernel Names",
               "Non-TC Kernel Count", "Non-TC Kernel Names"],  # §10.6
    "op_type": ["Op Name", "No. Nodes", "No. Calls", "TC Eligibility", "Using TC",
                *_stats("CPU Time"), *_stats("GPU Time"), *_stats("CPU Overhead Time"),
                *_stats("GPU Idle Time")],  # §10.7
    "group_node": ["Name", "No. Calls Aggregated", "No. TC Eligibility Ops",
                   "No. Node Ops Using TC", *_stats("CPU Time"), *_stats("GPU Time"),
                   *_stats("CPU Overhead Time"), *_stats("GPU Idle Time")],  # §10.8
    "expert_systems": ["Problem", "Recommendation"],  # §10.9
}  # fmt: skip

# §10.2: the summary's tables and their rows, in the guide's order
GUIDE_SUMMARY = {
    "System Config": ["Profile Name", "GPU Count", "GPU Name(s)", "CPU Model",
                      "GPU Driver Version", "Framework", "CUDA Version", "cuDNN Version",
                      "NSys Version", "DLProf Version", "DLProf Build"],
    "Summary Report": ["Wall Clock Time (ns)", "Tensor Core Kernel Utilization %",
                       "GPU Utilization %", "Tensor Core Kernel Duration %",
                       "Non-Tensor Core Kernel Duration %", "Memory Duration %",
                       "Dataloader Duration %", "I/O Duration %", "CPU Duration %",
                       "Other Duration %"],
    "Iterations": ["Total Iterations", "Aggregated Iterations", "Start Iteration",
                   "Stop Iteration", "Average Iteration Time (ns)",
                   "Iteration Time Standard Deviation (ns)"],
    "All Ops": ["All Op", "Ops Using TC", "Op eligible for TC but not using", "All other ops"],
    "All Kernels": ["All Kernels", "Kernels Using TC", "Memory", "All other kernels"],
}  # fmt: skip
SUMMARY_COLUMNS = {
    "All Ops": ["GPU Time (ns)", "CPU Time (ns)", "# Ops"],
    "All Kernels": ["GPU Time (ns)", "CPU Time (ns)", "# Kernels"],
}


@pytest.fixture(scope="module")
def export(tmp_path_factory):
    return small_training_export(tmp_path_factory.mktemp("layout") / "run.sqlite")


@pytest.mark.parametrize("mode", ["simple", "pytorch"])
@pytest.mark.parametrize("report", sorted(GUIDE_COLUMNS))
def test_columns_in_the_guides_order(export, mode, report) -> None:
    prof = jlprof.load(export, key_node="optimizer_step", mode=mode)
    want = [
        c.removesuffix(" (PyTorch)")
        for c in GUIDE_COLUMNS[report]
        if mode == "pytorch" or not c.endswith(" (PyTorch)")
    ]
    got = list(prof.report(report).columns)
    assert got[: len(want)] == want  # DLProf's columns first, in its order; jlprof's after


def test_summary_csv_is_the_guides_tables(export) -> None:
    prof = jlprof.load(export, key_node="optimizer_step", profile_name="run 1")
    text = summary_csv(prof.summary())
    blocks = text.strip("\n").split("\n\n")
    assert [b.splitlines()[0] for b in blocks] == list(GUIDE_SUMMARY)  # titles, in order
    back = read_summary_csv(text)
    for table, rows in GUIDE_SUMMARY.items():
        assert list(back[table]) == rows, table
    for table, cols in SUMMARY_COLUMNS.items():
        assert blocks[list(GUIDE_SUMMARY).index(table)].splitlines()[1] == "," + ",".join(cols)
        for row in back[table].values():
            assert list(row) == cols
    # the values are the summary's, as text
    s = prof.summary()
    assert back["Iterations"]["Total Iterations"] == str(s["Iterations"]["Total Iterations"])
    assert back["All Kernels"]["Memory"]["# Kernels"] == str(
        s["All Kernels"]["Memory"]["# Kernels"]
    )


def test_profile_name_hidden_when_unspecified(export) -> None:
    """§10.2: "The user-specified name of the profile (hidden if unspecified)"."""
    assert "Profile Name" not in jlprof.load(export).summary()["System Config"]
    named = jlprof.load(export, profile_name="run1").summary()["System Config"]
    assert named["Profile Name"] == "run1"


def test_written_summary_csv(export, tmp_path) -> None:
    prof = jlprof.load(export, key_node="optimizer_step")
    (path,) = prof.write_reports(tmp_path, ["summary"], ["csv"])
    assert path.name == "dlprof_summary.csv"
    assert read_summary_csv(path.read_text())["Iterations"]["Total Iterations"] == "6"
