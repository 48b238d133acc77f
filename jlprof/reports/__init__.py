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
    # jlprof's analyses beyond DLProf (reports/analyses.py, docs/analyses.md)
    "idle_causes",
    "launch_stats",
    "iteration_outliers",
    "roofline",
)
