"""A/B diff of two profiles on DLProf's op view: tables, CI verdict, markdown, files.

``compare(base, new)`` diffs the ops (matched by op ID where both have it, else by name), the
kernels (by demangled name, as ``nsys stats`` tells kernels apart) and the op types of two
analyses over their aggregated iteration ranges, plus both sides' iteration-time distributions,
and judges the pair as nsys-ai's ``diff`` does (docs/diff.md):

1. **not comparable** when the comparability confidence is below ``MIN_CONFIDENCE`` (a side
   with no ops or no GPU work the other has, iterations found on one side only, few shared ops,
   very different op call counts per iteration: each factor in [0, 1], multiplied);
2. **unchanged** when both sides are the same capture over the same range, or when the median
   iteration time moved less than the noise band (``NOISE_FLOOR_PCT``, or twice the standard
   error of the difference of the medians when that is wider);
3. **regression likely** / **improvement likely** when it moved by at least ``threshold_pct``
   (default ``THRESHOLD_PCT``) up / down; **unchanged** between the band and the threshold.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from jlprof import outputs
from jlprof.engine.analyses.diff import (
    NOISE_NS,
    NOISE_PCT,
    STATUSES,
    diff_totals,
    distribution,
    match_keys,
    median_standard_error,
)
from jlprof.engine.analysis import DEFAULT_PROFILE_NAME
from jlprof.errors import OptionError
from jlprof.outputs import prepare_folder
from jlprof.reports.tables import kernel_frame, op_frame

if TYPE_CHECKING:
    from jlprof.engine.analysis import Analysis

THRESHOLD_PCT = 5.0  # nsys-ai's default step-time regression threshold
NOISE_FLOOR_PCT = 2.0  # nsys-ai's noise floor: one capture per side cannot see below it
MIN_CONFIDENCE = 0.5  # nsys-ai's minimum comparability confidence
VERDICTS = ("regression likely", "improvement likely", "unchanged", "not comparable")
EXIT_REGRESSION = 1  # --fail-on-regression: the verdict is "regression likely"
EXIT_NOT_COMPARABLE = 3  # --fail-on-regression: the pair cannot be judged (2 = jlprof error)
DIFF_TABLES = ("diff", "diff_kernel", "diff_op_type", "diff_iterations", "diff_summary")

OP_COLUMNS = [
    "Op Name",
    "Base GPU Time (ns)",
    "New GPU Time (ns)",
    "Delta GPU Time (ns)",
    "Base Calls",
    "New Calls",
    "Base CPU Time (ns)",
    "New CPU Time (ns)",
    "Status",
]
KERNEL_COLUMNS = [
    "Kernel Name",
    "Base GPU Time (ns)",
    "New GPU Time (ns)",
    "Delta GPU Time (ns)",
    "Base Calls",
    "New Calls",
    "Base API Time (ns)",
    "New API Time (ns)",
    "Status",
    "Long Kernel Name",
]
OP_TYPE_COLUMNS = ["Op Type", *OP_COLUMNS[1:]]
STAT_COLUMNS = {
    "count": "Iterations",
    "total": "Total Time (ns)",
    "mean": "Mean Iteration Time (ns)",
    "median": "Median Iteration Time (ns)",
    "p10": "P10 Iteration Time (ns)",
    "p90": "P90 Iteration Time (ns)",
    "mad": "MAD Iteration Time (ns)",
    "std": "Std. Iteration Time (ns)",
    "min": "Min Iteration Time (ns)",
    "max": "Max Iteration Time (ns)",
}


@dataclass
class DiffResult:
    """The diff of two profiles: DataFrames, the verdict and the evidence behind it."""

    ops: pd.DataFrame  # OP_COLUMNS; index: the match key (op ID where both sides have it)
    kernels: pd.DataFrame  # KERNEL_COLUMNS
    op_types: pd.DataFrame  # OP_TYPE_COLUMNS
    iterations: pd.DataFrame  # Side, Iteration, Iteration Time (ns)
    distributions: pd.DataFrame  # index Base/New; STAT_COLUMNS' values
    verdict: str
    delta_pct: float | None  # median iteration time, new vs base
    noise_pct: float
    threshold_pct: float
    confidence: float
    normalised: bool
    evidence: list[str]
    warnings: list[str]
    sides: dict[str, dict[str, Any]] = field(default_factory=dict)  # Base/New: source, range…

    # ---- CI --------------------------------------------------------------------------------
    def exit_status(self, fail_on_regression: float | None) -> int:
        """0, or ``EXIT_REGRESSION`` / ``EXIT_NOT_COMPARABLE`` when a gate is asked for (the
        verdict is judged against ``threshold_pct``: pass the gate's PCT to ``compare``)."""
        if fail_on_regression is None:
            return 0
        if self.verdict == "regression likely":
            return EXIT_REGRESSION
        if self.verdict == "not comparable":
            return EXIT_NOT_COMPARABLE
        return 0

    def counts(self) -> dict[str, int]:
        """How many ops have each status."""
        vc = self.ops["Status"].value_counts()
        return {s: int(vc.get(s, 0)) for s in STATUSES}

    def normalisation(self) -> str:
        b, n = (int(self.distributions.loc[s, "Iterations"]) for s in ("Base", "New"))
        if self.normalised:
            return (
                f"per iteration: the iteration counts differ (base {b}, new {n}), so every time "
                "and call count is divided by its side's count"
            )
        return f"totals over the aggregated iterations ({b} on each side)"

    def summary(self) -> dict[str, Any]:
        """Verdict, evidence and both sides' iteration statistics, as one JSON-able object."""
        dist = {
            side: {c: _num(self.distributions.loc[side, c]) for c in self.distributions.columns}
            for side in ("Base", "New")
        }
        return {
            "Verdict": self.verdict,
            "Evidence": list(self.evidence),
            "Warnings": list(self.warnings),
            "Median Iteration Time Delta %": _num(self.delta_pct),
            "Regression Threshold %": self.threshold_pct,
            "Noise Band %": round(self.noise_pct, 3),
            "Comparability Confidence": round(self.confidence, 3),
            "Normalised Per Iteration": self.normalised,
            "Normalisation": self.normalisation(),
            "Op Status Counts": self.counts(),
            "Base": {**self.sides.get("Base", {}), "Iteration Times": dist["Base"]},
            "New": {**self.sides.get("New", {}), "Iteration Times": dist["New"]},
        }

    def table(self, name: str) -> pd.DataFrame:
        """One of ``DIFF_TABLES`` as a DataFrame (the summary: Table, Row Name, Column, Value)."""
        if name == "diff":
            return self.ops
        if name == "diff_kernel":
            return self.kernels
        if name == "diff_op_type":
            return self.op_types
        if name == "diff_iterations":
            return self.iterations
        if name == "diff_summary":
            return _tidy(self.summary())
        raise OptionError(f"unknown diff table {name!r}; choose from {', '.join(DIFF_TABLES)}.")

    # ---- files -----------------------------------------------------------------------------
    def write(
        self,
        output_path: str | Path,
        formats: list[str] | tuple[str, ...] = ("csv",),
        profile_name: str = DEFAULT_PROFILE_NAME,
        force: bool = False,
    ) -> list[Path]:
        """Write ``<profile_name>_<table>.<csv|json|parquet>`` for each of ``DIFF_TABLES``; existing
        files kept unless ``force``; each file whole or not at all."""
        from jlprof.reports.encoders import WRITERS
        from jlprof.reports.writers import FORMATS, check_profile_name, report_path

        check_profile_name(profile_name)
        bad = [f for f in formats if f not in FORMATS]
        if bad or not formats:
            raise OptionError(
                f"unknown format {bad[0] if bad else ''!r}; choose from {', '.join(FORMATS)}."
            )
        out = prepare_folder(output_path)
        done = []
        for name in DIFF_TABLES:
            for fmt in dict.fromkeys(formats):
                target = report_path(out, profile_name, name, fmt)
                if target.exists() and not force:
                    continue
                with outputs.written_file(target, background=fmt != "parquet") as f:
                    if name == "diff_summary" and fmt == "json":  # one object, not records
                        f.write(json.dumps(self.summary(), indent=2, default=str).encode())
                    else:
                        WRITERS[fmt](self.table(name), f)
                done.append(target)
        return done

    # ---- display ---------------------------------------------------------------------------
    def to_markdown(self, limit: int = 10) -> str:
        """A pull-request comment: verdict, evidence, iteration times, the biggest op changes."""
        return markdown(self, limit)

    def __repr__(self) -> str:
        d = "n/a" if self.delta_pct is None else f"{self.delta_pct:+.2f}%"
        c = self.counts()
        return (
            f"<jlprof diff: {self.verdict}; median iteration time {d}; ops: "
            f"{c['slower']} slower, {c['faster']} faster, {c['added']} added, "
            f"{c['removed']} removed, {c['unchanged']} unchanged>"
        )


def _num(v: Any) -> Any:
    if v is None:
        return None
    if isinstance(v, (np.integer, int)):
        return int(v)
    f = float(v)
    return int(f) if f.is_integer() and abs(f) < 2**53 else f


def _tidy(obj: dict[str, Any]) -> pd.DataFrame:
    """The summary as rows of Table, Row Name, Column, Value (the summary report's CSV layout)."""
    rows = []
    for table, content in obj.items():
        if isinstance(content, dict):
            for row, val in content.items():
                if isinstance(val, dict):
                    rows += [(table, row, col, v) for col, v in val.items()]
                else:
                    rows.append((table, row, "Value", val))
        elif isinstance(content, list):
            rows += [(table, str(i), "Value", v) for i, v in enumerate(content)]
        else:
            rows.append((table, "", "Value", content))
    return pd.DataFrame(rows, columns=["Table", "Row Name", "Column", "Value"])


# ---- the computation ---------------------------------------------------------------------
def _range(p: Analysis, rng: tuple[int | None, int | None] | None) -> tuple[int, int]:
    if rng is None:
        return p.iter_start, p.iter_stop
    return p.range_of(*rng)


def _rename(df: pd.DataFrame, names: dict[str, str], columns: list[str]) -> pd.DataFrame:
    out = df.rename(columns=names)
    return out[columns]


def _op_diff(ob: pd.DataFrame, on: pd.DataFrame, nb: int, nn: int, norm: bool, **kw):
    bk, nk = match_keys(
        ob["op_id"].to_numpy(object),
        ob["op_name"].to_numpy(object),
        on["op_id"].to_numpy(object),
        on["op_name"].to_numpy(object),
    )
    cols = ["op_name", "calls", "gpu_sum", "cpu_sum"]
    b = ob[cols].assign(key=bk).reset_index(drop=True)
    n = on[cols].assign(key=nk).reset_index(drop=True)
    d = diff_totals(b, n, key="key", labels=["op_name"], values=["gpu_sum", "calls", "cpu_sum"],
                    n_base=nb, n_new=nn, normalise=norm, **kw)  # fmt: skip
    d.index = [k.split(":", 1)[1] for k in d.index]
    d.index.name = "Op Key"
    return _rename(d, _value_names("op_name", "Op Name", "CPU Time"), OP_COLUMNS)


def _value_names(label: str, title: str, second: str) -> dict[str, str]:
    return {
        label: title,
        "base_gpu_sum": "Base GPU Time (ns)",
        "new_gpu_sum": "New GPU Time (ns)",
        "delta_gpu_sum": "Delta GPU Time (ns)",
        "base_calls": "Base Calls",
        "new_calls": "New Calls",
        "base_cpu_sum": f"Base {second} (ns)",
        "new_cpu_sum": f"New {second} (ns)",
        "base_api_sum": f"Base {second} (ns)",
        "new_api_sum": f"New {second} (ns)",
        "status": "Status",
    }


def _op_type_diff(ob: pd.DataFrame, on: pd.DataFrame, nb: int, nn: int, norm: bool, **kw):
    cols = ["op_type", "calls", "gpu_sum", "cpu_sum"]
    d = diff_totals(ob[cols].assign(key=ob["op_type"].astype(str)),
                    on[cols].assign(key=on["op_type"].astype(str)), key="key",
                    labels=["op_type"], values=["gpu_sum", "calls", "cpu_sum"],
                    n_base=nb, n_new=nn, normalise=norm, **kw)  # fmt: skip
    return _rename(d, _value_names("op_type", "Op Type", "CPU Time"), OP_TYPE_COLUMNS).reset_index(
        drop=True
    )


def _kernel_diff(kb: pd.DataFrame, kn: pd.DataFrame, nb: int, nn: int, norm: bool, **kw):
    cols = ["kernel_name", "long_kernel_name", "calls", "gpu_sum", "api_sum"]
    empty = pd.DataFrame({c: pd.Series(dtype=object if "name" in c else np.int64) for c in cols})
    kb = kb[cols] if len(kb) else empty
    kn = kn[cols] if len(kn) else empty
    d = diff_totals(kb.assign(key=kb["long_kernel_name"].astype(str)),
                    kn.assign(key=kn["long_kernel_name"].astype(str)), key="key",
                    labels=["kernel_name", "long_kernel_name"],
                    values=["gpu_sum", "calls", "api_sum"],
                    n_base=nb, n_new=nn, normalise=norm, **kw)  # fmt: skip
    names = _value_names("kernel_name", "Kernel Name", "API Time")
    names["long_kernel_name"] = "Long Kernel Name"
    return _rename(d, names, KERNEL_COLUMNS).reset_index(drop=True)


def _gpu_lanes_busy(p: Analysis) -> int:
    g = p.correlated.gpu
    return int(g["device_id"].nunique()) if len(g) else 0


def compare(
    base: Analysis,
    new: Analysis,
    *,
    base_range: tuple[int | None, int | None] | None = None,
    new_range: tuple[int | None, int | None] | None = None,
    threshold_pct: float = THRESHOLD_PCT,
    noise_pct: float = NOISE_PCT,
    noise_ns: float = NOISE_NS,
) -> DiffResult:
    """Diff ``new`` against ``base`` over their aggregated iteration ranges (module docstring).

    ``base_range``/``new_range``: ``(iter_start, iter_stop)``, None ends meaning the profile's
    own; None: the profile's current range.
    """
    if (
        not isinstance(threshold_pct, (int, float))
        or threshold_pct <= 0
        or not math.isfinite(threshold_pct)
    ):
        raise OptionError(
            f"the regression threshold is a percentage > 0 (e.g. 5), got {threshold_pct!r}."
        )
    (bl, bh), (nl, nh) = _range(base, base_range), _range(new, new_range)
    nb, nn = bh - bl + 1, nh - nl + 1
    norm = nb != nn
    kw = {"noise_pct": noise_pct, "noise_ns": noise_ns}
    ob, on = op_frame(base, bl, bh), op_frame(new, nl, nh)
    ops = _op_diff(ob, on, nb, nn, norm, **kw)
    op_types = _op_type_diff(ob, on, nb, nn, norm, **kw)
    kernels = _kernel_diff(kernel_frame(base, bl, bh), kernel_frame(new, nl, nh), nb, nn, norm,
                           **kw)  # fmt: skip
    db = base.iterations.durations_ns()[bl : bh + 1]
    dn = new.iterations.durations_ns()[nl : nh + 1]
    iterations = pd.DataFrame(
        {
            "Side": ["Base"] * len(db) + ["New"] * len(dn),
            "Iteration": np.concatenate([np.arange(bl, bh + 1), np.arange(nl, nh + 1)]),
            "Iteration Time (ns)": np.concatenate([db, dn]).astype(np.int64),
        }
    )
    sb, sn = distribution(db), distribution(dn)
    distributions = pd.DataFrame(
        {STAT_COLUMNS[k]: [sb[k], sn[k]] for k in STAT_COLUMNS}, index=["Base", "New"]
    )
    same = (
        base is new
        or (
            base.trace.source is not None
            and base.trace.source == new.trace.source
            and base.key_node == new.key_node
            and base.domains == new.domains
        )
    ) and (bl, bh) == (nl, nh)
    warnings, confidence, factors = _comparability(base, new, ob, on, nb, nn)
    delta_pct = None
    if sb["median"] > 0:
        delta_pct = 100.0 * (sn["median"] - sb["median"]) / sb["median"]
    spread = 0.0
    if sb["median"] > 0:
        se = math.hypot(median_standard_error(sb), median_standard_error(sn))
        spread = 100.0 * 2.0 * se / sb["median"]
    band = max(NOISE_FLOOR_PCT, spread)
    verdict = _verdict(delta_pct, confidence, threshold_pct, band, same)
    if (
        verdict == "unchanged"
        and not same
        and delta_pct is not None
        and threshold_pct < band
        and abs(delta_pct) >= threshold_pct
    ):
        warnings.append(
            f"the median iteration time moved {delta_pct:+.2f}%, past the {threshold_pct:g}% "
            f"threshold asked for but inside the ±{band:.2f}% noise band; reported as "
            "unchanged. Repeat the runs (or aggregate more iterations) to tell a change this "
            "small from jitter."
        )
    if same:
        warnings.append(
            "base and new are the same capture over the same iterations: every delta is 0 by "
            "construction, not a measurement of two runs."
        )
    sides = {
        "Base": _side(base, bl, bh),
        "New": _side(new, nl, nh),
    }
    result = DiffResult(
        ops=ops,
        kernels=kernels,
        op_types=op_types,
        iterations=iterations,
        distributions=distributions,
        verdict=verdict,
        delta_pct=delta_pct,
        noise_pct=band,
        threshold_pct=float(threshold_pct),
        confidence=confidence,
        normalised=norm,
        evidence=[],
        warnings=warnings,
        sides=sides,
    )
    result.evidence = _evidence(result, sb, sn, spread, factors)
    return result


def _side(p: Analysis, lo: int, hi: int) -> dict[str, Any]:
    return {
        "Source": str(p.trace.source or ""),
        "Key Node": p.key_node,
        "Start Iteration": lo,
        "Stop Iteration": hi,
        "Total Iterations": p.iterations.count if p.key_node else 0,
    }


def _verdict(
    delta_pct: float | None, confidence: float, threshold: float, band: float, same: bool
) -> str:
    """nsys-ai's order: comparability first, then identity, then the noise band, then the
    threshold (a threshold never concludes inside the noise)."""
    if confidence < MIN_CONFIDENCE or delta_pct is None:
        return "not comparable"
    if same or abs(delta_pct) < band:
        return "unchanged"
    if delta_pct >= threshold:
        return "regression likely"
    if delta_pct <= -threshold:
        return "improvement likely"
    return "unchanged"


def _comparability(
    base: Analysis, new: Analysis, ob: pd.DataFrame, on: pd.DataFrame, nb: int, nn: int
) -> tuple[list[str], float, list[tuple[str, float]]]:
    """Warnings, the comparability confidence in [0, 1] and the factors it is the product of:
    the op-view analogue of nsys-ai's (empty sides, iterations on one side only, workload size,
    shared names)."""
    warnings: list[str] = []
    factors: list[tuple[str, float]] = []
    for label, o in (("base", ob), ("new", on)):
        if len(o) == 0:
            warnings.append(
                f"the {label} profile has no op in its aggregated iterations: nothing to compare "
                "(check that the run executed and the capture holds NVTX ranges)."
            )
            factors.append((f"{label} has ops", 0.0))
    gb, gn = (
        float(ob["gpu_sum"].sum()) if len(ob) else 0.0,
        float(on["gpu_sum"].sum()) if len(on) else 0.0,
    )
    if (gb > 0) != (gn > 0):
        empty = "base" if gb == 0 else "new"
        warnings.append(
            f"the {empty} profile has no GPU work in its ops while the other has: a failed or "
            "incomplete capture, not a change of the workload."
        )
        factors.append((f"{empty} has GPU work", 0.0))
    if bool(base.key_node) != bool(new.key_node):
        which = "base" if base.key_node else "new"
        warnings.append(
            f"iterations were found only in the {which} profile (key node "
            f"{base.key_node or new.key_node!r}); the other is one whole-profile interval, so "
            "iteration times do not compare. Give --key_node present in both."
        )
        factors.append(("iterations on both sides", 0.0))
    elif base.key_node and new.key_node and base.key_node != new.key_node:
        warnings.append(
            f"the key nodes differ (base {base.key_node!r}, new {new.key_node!r}); iterations "
            "may not mean the same work."
        )
    cb = float(ob["calls"].sum()) / max(nb, 1) if len(ob) else 0.0
    cn = float(on["calls"].sum()) / max(nn, 1) if len(on) else 0.0
    if cb > 0 and cn > 0:
        lo, hi = min(cb, cn), max(cb, cn)
        factors.append(("op calls per iteration, fewer/more", lo / hi))
        if hi / lo >= 3.0:
            warnings.append(
                f"op calls per iteration differ a lot (base {cb:.1f}, new {cn:.1f}); the diff "
                "may be dominated by a different workload."
            )
    kb = set(ob["op_name"].astype(str)) if len(ob) else set()
    kn = set(on["op_name"].astype(str)) if len(on) else set()
    if len(kb) > 5 and len(kn) > 5:
        shared = len(kb & kn) / min(len(kb), len(kn))
        factors.append(("shared op names / fewer side's", shared))
        if shared < 0.05:
            warnings.append(
                f"the profiles share almost no op ({len(kb & kn)} of {len(kb)} and {len(kn)}): "
                "are they runs of the same program?"
            )
    lb, ln = _gpu_lanes_busy(base), _gpu_lanes_busy(new)
    if lb and ln and lb != ln:
        warnings.append(f"GPUs with work differ (base {lb}, new {ln}): totals span other hardware.")
    conf = float(np.prod([v for _, v in factors])) if factors else 1.0
    return warnings, max(0.0, min(1.0, conf)), factors


def fmt_ns(ns: float) -> str:
    """A time for people: ns, µs, ms or s with 3 significant-ish digits."""
    a = abs(ns)
    if a >= 1e9:
        return f"{ns / 1e9:.3f} s"
    if a >= 1e6:
        return f"{ns / 1e6:.3f} ms"
    if a >= 1e3:
        return f"{ns / 1e3:.1f} µs"
    return f"{ns:.0f} ns"


def _evidence(
    r: DiffResult, sb: dict, sn: dict, spread: float, factors: list[tuple[str, float]]
) -> list[str]:
    ev = []
    if factors:
        parts = " × ".join(f"{name} {v:.2f}" for name, v in factors)
        ev.append(
            f"comparability {r.confidence:.2f} = {parts} (not comparable below {MIN_CONFIDENCE:g})"
        )
    if r.delta_pct is not None:
        ev.append(
            f"median iteration time {fmt_ns(sb['median'])} -> {fmt_ns(sn['median'])} "
            f"({r.delta_pct:+.2f}%); threshold {r.threshold_pct:g}%, noise band "
            f"±{r.noise_pct:.2f}% (floor {NOISE_FLOOR_PCT:g}%, 2 standard errors of the medians "
            f"{spread:.2f}%)"
        )
    ev.append(
        f"iterations aggregated: base {int(sb['count'])}, new {int(sn['count'])}; values are "
        + r.normalisation()
    )
    unit = " per iteration" if r.normalised else ""
    gb, gn = float(r.ops["Base GPU Time (ns)"].sum()), float(r.ops["New GPU Time (ns)"].sum())
    if gb or gn:
        pct = f" ({100.0 * (gn - gb) / gb:+.2f}%)" if gb else ""
        ev.append(f"GPU time of all ops{unit}: {fmt_ns(gb)} -> {fmt_ns(gn)}{pct}")
    c = r.counts()
    ev.append(
        f"ops: {c['slower']} slower, {c['faster']} faster, {c['added']} added, "
        f"{c['removed']} removed, {c['unchanged']} unchanged (an op is unchanged within "
        f"max({NOISE_PCT:g}% of its base time, {NOISE_NS:g} ns per iteration))"
    )
    moved = r.ops[r.ops["Status"] != "unchanged"]
    if r.verdict == "improvement likely":
        moved = moved.sort_values("Delta GPU Time (ns)", kind="stable")
    top = moved.head(3)
    if len(top):
        parts = [
            f"{name} {'+' if d >= 0 else '-'}{fmt_ns(abs(d))} ({s})"
            for name, d, s in zip(
                top["Op Name"], top["Delta GPU Time (ns)"], top["Status"], strict=True
            )
        ]
        ev.append(f"largest op changes{unit}: " + "; ".join(parts))
    return ev


# ---- markdown ----------------------------------------------------------------------------
def _cell(v: Any) -> str:
    s = str(v).replace("\n", " ").replace("|", "\\|")
    return s if s.strip() else " "


def _row(cells: list[Any]) -> str:
    return "| " + " | ".join(_cell(c) for c in cells) + " |"


def markdown(r: DiffResult, limit: int = 10) -> str:
    """The diff as a GitHub-flavoured markdown comment (tables with escaped ``|``)."""
    icon = {
        "regression likely": "🔴",
        "improvement likely": "🟢",
        "unchanged": "⚪",
        "not comparable": "⚠️",
    }[r.verdict]
    d = "n/a" if r.delta_pct is None else f"{r.delta_pct:+.2f}%"
    lines = [
        f"## jlprof diff: {icon} {r.verdict}",
        "",
        f"Median iteration time **{d}** (regression threshold {r.threshold_pct:g}%, noise band "
        f"±{r.noise_pct:.2f}%, comparability {r.confidence:.2f}). Values are "
        f"{r.normalisation()}.",
        "",
        _row(["Iteration time", "Base", "New", "Delta"]),
        _row(["---", "---:", "---:", "---:"]),
    ]
    dist = r.distributions
    its = [int(dist.loc[s, "Iterations"]) for s in ("Base", "New")]
    lines.append(_row(["Iterations", *its, its[1] - its[0]]))
    for key in ("median", "mean", "p10", "p90", "mad", "std"):
        col = STAT_COLUMNS[key]
        b, n = float(dist.loc["Base", col]), float(dist.loc["New", col])
        label = col.replace(" Iteration Time (ns)", "")
        lines.append(_row([label, fmt_ns(b), fmt_ns(n), fmt_ns(n - b)]))
    lines += ["", "**Evidence**", ""] + [f"- {e}" for e in r.evidence]
    if r.warnings:
        lines += ["", "**Warnings**", ""] + [f"- {w}" for w in r.warnings]
    moved = r.ops[r.ops["Status"] != "unchanged"].head(limit)
    unit = " per iteration" if r.normalised else ""
    lines += ["", f"**Top op changes{unit}** ({len(moved)} of {len(r.ops)} ops)", ""]
    if len(moved):
        lines.append(_row(["Op Name", "Base GPU Time", "New GPU Time", "Delta GPU Time",
                           "Base Calls", "New Calls", "Delta CPU Time", "Status"]))  # fmt: skip
        lines.append(_row(["---", "---:", "---:", "---:", "---:", "---:", "---:", "---"]))
        for _, x in moved.iterrows():
            lines.append(
                _row(
                    [
                        x["Op Name"],
                        fmt_ns(x["Base GPU Time (ns)"]),
                        fmt_ns(x["New GPU Time (ns)"]),
                        _signed(x["Delta GPU Time (ns)"]),
                        _calls(x["Base Calls"]),
                        _calls(x["New Calls"]),
                        _signed(x["New CPU Time (ns)"] - x["Base CPU Time (ns)"]),
                        x["Status"],
                    ]
                )
            )
    else:
        lines.append("No op changed beyond the noise band.")
    src = " vs ".join(
        f"{side.lower()} `{Path(r.sides[side]['Source']).name or '?'}` "
        f"(iterations {r.sides[side]['Start Iteration']}..{r.sides[side]['Stop Iteration']})"
        for side in ("Base", "New")
        if side in r.sides
    )
    if src:
        lines += ["", f"<sub>{src}; generated by jlprof diff</sub>"]
    return "\n".join(lines) + "\n"


def _signed(ns: float) -> str:
    return ("+" if ns >= 0 else "-") + fmt_ns(abs(ns))


def _calls(v: float) -> str:
    f = float(v)
    return str(int(f)) if f.is_integer() else f"{f:.2f}"


__all__ = [
    "DIFF_TABLES",
    "EXIT_NOT_COMPARABLE",
    "EXIT_REGRESSION",
    "KERNEL_COLUMNS",
    "MIN_CONFIDENCE",
    "NOISE_FLOOR_PCT",
    "OP_COLUMNS",
    "OP_TYPE_COLUMNS",
    "THRESHOLD_PCT",
    "VERDICTS",
    "DiffResult",
    "compare",
    "fmt_ns",
    "markdown",
]
