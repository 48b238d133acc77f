"""DLProf's reports as functions of an engine :class:`~jlprof.engine.analysis.Analysis`.

``tables`` builds the reports, ``expert``/``expert_pytorch`` the expert systems' findings,
``catalog`` picks a report by name, ``writers`` writes them, ``html`` the notebook summary.
"""

# the report names of the guide's ch. 15 (--reports), in the order they are written
REPORTS = (
    "summary",
    "detail",
    "iteration",
    "kernel",
    "tensor",
    "op_type",
    "group_node",
    "expert_systems",
)
# jlprof's analyses beyond DLProf (reports/analyses.py, docs/analyses.md): written when named;
# ``--reports all`` stays DLProf's eight (guide §10.1.1), so a DLProf script gets DLProf's files
ANALYSES = ("idle_causes", "launch_stats", "iteration_outliers", "roofline", "gpu_metrics")
# other tools' tables, written when named: PyProf's per-kernel table (reports/prof.py,
# docs/kernels.md)
OTHER_TOOLS = ("prof",)
# the reports that read every GPU row or API call, which a windowed profile does not keep
# (jlprof.profile.load_windowed): the command reads the whole trace for them (launch_stats
# and idle_causes are made by the windowed engine when asked)
EVERY_ROW = ("prof",)
# what --reports accepts (guide §10.1.1 calls the op type report "node_op", ch. 15 "op_type";
# a report's file is named after the word given, guide §10.1.3)
REPORT_NAMES = (*REPORTS[:5], "node_op", *REPORTS[5:], *ANALYSES, *OTHER_TOOLS)
ALIASES = {"node_op": "op_type"}
