"""The learning stage's part of BENCHMARKS.md (targets, findings, tables), from learning.json;
its prose is bench/templates/learning.md."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from bench.markdown import hand_written, pct, prose, table

# What was tried on the loop and measured by hand (A/B runs of patched copies): prose that the
# generated tables cannot carry, put after them verbatim.
FINDINGS = Path(__file__).with_name("LEARNING_FINDINGS.md")

FREE_PRECISION = 0.95
GAIN = 0.10
# No cap on the share of these turns sent to the teacher: every turn of this curve is a fallback,
# where the agent could not find its tool, and those are what the teacher budget is for (the
# share rations disagreements on turns that worked); the curve table shows the share.
DECLINES = 0.05


def _curves(learn: dict[str, Any], method: str) -> list[dict[str, Any]]:
    """The runs over the whole curve (no sensitivity variants) of one embedder."""
    return [r for r in learn["runs"] if r["method"] == method and not r["variant"]]


def _one(learn: dict[str, Any], method: str, loop: str, arm: str) -> dict[str, Any] | None:
    return next((r for r in _curves(learn, method) if (r["loop"], r["arm"]) == (loop, arm)), None)


def methods(learn: dict[str, Any]) -> list[str]:
    return list(dict.fromkeys(r["method"] for r in learn["runs"]))


def _dip(run: dict[str, Any]) -> float:
    """The lowest point of the curve against its start (negative: below the no-learning line)."""
    start: float = run["points"][0]["top1"]
    lowest: float = min(p["top1"] for p in run["points"])
    return lowest - start


def _row(name: str, measured: float | None, limit: float, *, lower: bool, unit: str) -> list[str]:
    if measured is None:
        return [name, "n/a", _fmt(limit, unit), "**no**", "not measured"]
    ok = measured <= limit + 1e-9 if lower else measured >= limit - 1e-9
    gap = abs(measured - limit)
    return [
        name,
        _fmt(measured, unit),
        ("<= " if lower else ">= ") + _fmt(limit, unit),
        "yes" if ok else "**no**",
        "" if ok else f"by {_fmt(gap, unit)}",
    ]


def _fmt(value: float, unit: str) -> str:
    # Two decimals where one would round a real miss (5.03% against 5%) to nothing.
    digits = 2 if 0 < abs(100 * value) < 0.1 else 1
    return f"{100 * value:.{digits}f} points" if unit == "points" else f"{100 * value:.{digits}f}%"


def targets(learn: dict[str, Any], method: str) -> list[list[str]]:
    """The learning loop's targets for one embedder, measured on its v2 runs."""
    on = _one(learn, method, "v2", "teacher on")
    off = _one(learn, method, "v2", "teacher off")
    rows: list[list[str]] = []
    if on is not None:
        a = on["audit"]
        rows += [
            _row(f"{method}, teacher on: held-out top-1 gain", on["gain_top1"], GAIN, lower=False, unit="points"),
            _row(f"{method}, teacher on: free-tier label precision", a["free_precision"], FREE_PRECISION, lower=False, unit="%"),
            _row(f"{method}, teacher on: teacher declines (true tool not shown) per call", a["decline_rate"], DECLINES, lower=True, unit="%"),
        ]  # fmt: skip
    if off is not None:
        rows += [
            _row(f"{method}, teacher off: free-tier label precision", off["audit"]["free_precision"], FREE_PRECISION, lower=False, unit="%"),
            _row(f"{method}, teacher off: lowest point against no learning", _dip(off), 0.0, lower=False, unit="points"),
        ]  # fmt: skip
    return rows


def findings(learn: dict[str, Any]) -> list[str]:
    out = []
    for method in methods(learn):
        v1 = _one(learn, method, "v1", "teacher on")
        v2 = _one(learn, method, "v2", "teacher on")
        off1 = _one(learn, method, "v1", "teacher off")
        off2 = _one(learn, method, "v2", "teacher off")
        if not (v1 and v2 and off1 and off2):
            continue
        a1, a2 = v1["audit"], v2["audit"]
        out.append(
            _text(
                "v1_against_v2",
                method=method,
                v1_gain=f"{100 * v1['gain_top1']:+.1f}",
                v2_gain=f"{100 * v2['gain_top1']:+.1f}",
                v1_free=pct(a1["free_precision"]),
                v2_free=pct(a2["free_precision"]),
                v1_asked=pct(a1["escalated_share"]),
                v2_asked=pct(a2["escalated_share"]),
                v1_declines=pct(a1["decline_rate"]),
                v2_declines=pct(a2["decline_rate"]),
                **_fitted(v2["fit"]),
            )
        )
        out.append(
            _text(
                "free_tier_alone",
                method=method,
                v1_gain=f"{100 * off1['gain_top1']:+.1f}",
                v1_free=pct(off1["audit"]["free_precision"]),
                v1_lowest=f"{100 * _dip(off1):+.1f}",
                v2_gain=f"{100 * off2['gain_top1']:+.1f}",
                v2_free=pct(off2["audit"]["free_precision"]),
                v2_lowest=f"{100 * _dip(off2):+.1f}",
            )
        )
    return out


def _text(block: str, /, **values: object) -> str:
    return prose("learning", block, **values)


def _fitted(fit: dict[str, Any]) -> dict[str, str]:
    """What v2 had chosen at the end of a run, as the prose names it."""
    fold = fit["fold"]
    return {
        "weight": f"{fold['description_weight']:g}",
        "shrink": f"{fold['shrink']:g}",
        "source": fold["source"],
        "floor": _floor(fit),
        "depth": str(fit["teacher"]["depth"]),
    }


def _floor(fit: dict[str, Any]) -> str:
    floor = fit["free_tier"].get("margin_floor")
    return "none (never labels)" if floor is None else f"{floor:.3f}"


def section(learn: dict[str, Any]) -> str:
    steps = learn["steps"]
    rows = []
    fits = []
    for method in methods(learn):
        for r in sorted(_curves(learn, method), key=lambda r: (r["loop"], r["arm"])):
            by_step = {p["observed"]: p for p in r["points"]}
            a = r["audit"]
            rows.append(
                [method, r["loop"], r["arm"]]
                + [pct(by_step[s]["top1"]) if s in by_step else "" for s in steps]
                + [
                    pct(r["final"]["recall5"]),
                    f"{100 * r['gain_top1']:+.1f}",
                    f"{100 * _dip(r):+.1f}",
                    f"{a['free_labels']} / {pct(a['free_precision'])}",
                    "off" if r["arm"] == "teacher off" else f"{a['escalated']} ({pct(a['escalated_share'])}%)",
                    "" if r["arm"] == "teacher off" else f"{a['teacher_declines']} ({pct(a['decline_rate'])}%)",
                ]
            )  # fmt: skip
            if r["loop"] == "v2":
                f = r["fit"]
                fits.append(
                    [
                        method,
                        r["arm"],
                        f["labels"],
                        f"{f['fold']['description_weight']:g} / {f['fold']['shrink']:g} ({f['fold']['source']})",
                        _floor(f),
                        (
                            f"{f['teacher']['depth']} (recall {pct(f['teacher']['measured_recall'])}%)"
                            if f["teacher"].get("measured_recall") is not None
                            else "what the token budget buys (prior)"
                        ),
                    ]
                )
    bound = ", ".join(f"{k} {pct(v['top1'])}%" for k, v in learn.get("truth_bound", {}).items())
    head = (
        ["embedder", "loop", "arm"]
        + [f"top-1 % @{s}" for s in steps]
        + ["recall@5 % end", "gain", "lowest", "free labels / right %", "to teacher", "declines"]
    )
    fit_head = ["embedder", "arm", "trusted labels", "description weight / shrink",
                "free-tier floor", "teacher depth"]  # fmt: skip
    curve = _text(
        "curve",
        used_tool=learn["used_tool"],
        curve=table(head, rows, "lll" + "r" * (len(steps) + 6)),
        bound=bound,
        fits=table(fit_head, fits),
    )
    parts = [curve, _splits(learn), _sensitivity(learn), _knobs(learn), hand_written(FINDINGS)]
    return "\n\n".join(parts)


def _splits(learn: dict[str, Any]) -> str:
    runs = list(learn.get("splits", []))
    for r in learn["runs"]:
        if (
            not r["variant"]
            and r["arm"] == "teacher on"
            and any(s["method"] == r["method"] for s in runs)
        ):
            runs.append({**r, "seed": 0})
    rows = []
    by: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for r in sorted(runs, key=lambda r: (r["method"], r["seed"], r["loop"])):
        a = r["audit"]
        by.setdefault((r["method"], r["loop"]), []).append(r)
        rows.append(
            [r["method"], r["seed"], r["loop"], pct(r["points"][0]["top1"]), pct(r["final"]["top1"]),
             f"{100 * r['gain_top1']:+.1f}", f"{pct(a['escalated_share'])}%",
             f"{a['free_labels']} / {pct(a['free_precision'])}", f"{pct(a['decline_rate'])}%"]
        )  # fmt: skip
    for (method, loop), group in sorted(by.items()):
        rows.append(
            [method, "mean", loop, "", "",
             f"{100 * sum(r['gain_top1'] for r in group) / len(group):+.1f}",
             f"{pct(sum(r['audit']['escalated_share'] for r in group) / len(group))}%", "", ""]
        )  # fmt: skip
    head = ["embedder", "split", "loop", "top-1 % before", "top-1 % after", "gain", "to teacher",
            "free labels / right %", "declines"]  # fmt: skip
    return _text("splits", table=table(head, rows, "lllrrrrrr"))


def _sensitivity(learn: dict[str, Any]) -> str:
    rows = []
    for r in learn["runs"]:
        if not r["variant"]:
            continue
        (name, value), *_ = r["overrides"].items()
        a = r["audit"]
        rows.append(
            [
                r["method"],
                f"{name} = {value:g}",
                r["arm"],
                pct(r["final"]["top1"]),
                f"{100 * r['gain_top1']:+.1f}",
                f"{a['free_labels']} / {pct(a['free_precision'])}",
                *(
                    ("off", "")
                    if r["arm"] == "teacher off"
                    else (f"{pct(a['escalated_share'])}%", f"{pct(a['decline_rate'])}%")
                ),
            ]
        )
    for method in methods(learn):
        for arm in ("teacher on", "teacher off"):
            r = _one(learn, method, "v2", arm)
            if r is not None and rows:
                a = r["audit"]
                rows.append(
                    [method, "defaults (0.95 / 0.95 / 0.25)", arm, pct(r["final"]["top1"]),
                     f"{100 * r['gain_top1']:+.1f}", f"{a['free_labels']} / {pct(a['free_precision'])}",
                     *(("off", "") if arm == "teacher off" else
                       (f"{pct(a['escalated_share'])}%", f"{pct(a['decline_rate'])}%"))]
                )  # fmt: skip
    rows.sort(key=lambda row: (row[0], row[2], row[1]))
    head = ["embedder", "setting", "arm", "top-1 % end", "gain", "free labels / right %",
            "to teacher", "declines"]  # fmt: skip
    return _text("sensitivity", table=table(head, rows, "lllrrrrr"))


def _knobs(learn: dict[str, Any]) -> str:
    out = [_text("knobs")]
    for label, rows_in in learn["knobs"].items():
        top1 = {(r["exemplars"], r["description_weight"]): r["top1"] for r in rows_in}
        sources = list(dict.fromkeys(r["exemplars"] for r in rows_in))
        weights = list(dict.fromkeys(r["description_weight"] for r in rows_in))
        rows = [[src] + [pct(top1[src, w]) for w in weights] for src in sources]
        head = ["exemplars from"] + [f"dw {w:g}" for w in weights]
        out.append(_text("knob", label=label, table=table(head, rows)))
    return "\n\n".join(out)


def defaults(learn: dict[str, Any]) -> list[str]:
    lines = []
    for method in methods(learn):
        on = _one(learn, method, "v2", "teacher on")
        if on is not None:
            f = on["fit"]
            lines.append(_text("fitted", method=method, labels=f["labels"], **_fitted(f)))
    return lines
