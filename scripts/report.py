#!/usr/bin/env python3
"""Writes a self-contained HTML report of one DetOps run record, optionally against a baseline.

Sections: the run's provenance, the correctness summary (failing tests listed), with --baseline the
comparison (each benchmark's ratio, coloured by verdict, with its p-value; correctness changes; output
movement), a chart of time per benchmark (log scale, median with the q1-q3 range), achieved bandwidth
as a fraction of the device copy bandwidth, the DRAM traffic measured by the hardware-metrics pass
(detops_bench --detops_metrics) or why it was not measured, and a table of every benchmark. No network, no JavaScript:
inline CSS and SVG only.

  scripts/report.py results/runs/<run>/record.json [--baseline BASE.json] [-o report.html]

Exit codes as scripts/compare.py: 0 written, 2 unreadable, invalid or incomparable records. The report is
written whatever the comparison decides; scripts/compare.py is the gate.
"""
import argparse
import collections
import html
import math
import pathlib
import sys

import numpy as np

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
import compare  # noqa: E402

DTYPE_COLOURS = {"fp64": "#6a3d9a", "fp32": "#1f78b4", "fp16": "#2ca02c", "bf16": "#e6550d"}
DTYPE_ORDER = {"fp64": 0, "fp32": 1, "fp16": 2, "bf16": 3}
OTHER_COLOUR = "#555555"
VERDICT_COLOURS = {"SAME": "#8c8c8c", "FASTER": "#2ca02c", "SLOWER": "#d62728", "UNSURE": "#f0a202"}
DASH = ' stroke-dasharray="4 3"'
GATES_YES = "<b style='color:#d62728'>yes</b>"
OUTCOME_COLOURS = {"passed": "#2ca02c", "failed": "#d62728", "errors": "#d62728", "skipped": "#8c8c8c"}

CSS = """
body { font: 14px/1.45 system-ui, -apple-system, "Segoe UI", Roboto, sans-serif; color: #1d1d1f; margin: 0;
       background: #f6f7f9; }
main { max-width: 1360px; margin: 0 auto; padding: 24px 24px 64px; }
h1 { font-size: 26px; margin: 0 0 4px; }
h2 { font-size: 19px; margin: 36px 0 10px; border-bottom: 2px solid #d9dce1; padding-bottom: 4px; }
h3 { font-size: 15px; margin: 18px 0 6px; }
.sub { color: #555; margin-bottom: 18px; }
section { background: #fff; border: 1px solid #e1e4e8; border-radius: 8px; padding: 4px 20px 18px; margin-top: 18px; }
section > h2 { border: none; margin-top: 14px; }
.prov { display: grid; grid-template-columns: repeat(3, 1fr); gap: 4px 24px; }
.prov div { padding: 3px 0; border-bottom: 1px solid #f0f1f3; display: grid; grid-template-columns: 118px 1fr;
            gap: 8px; overflow-wrap: anywhere; }
.prov b { color: #555; font-weight: 600; }
.pills { display: flex; gap: 10px; flex-wrap: wrap; margin: 8px 0 12px; }
.pill { padding: 6px 14px; border-radius: 16px; color: #fff; font-weight: 600; }
.note { color: #555; }
.warn { color: #a15c00; }
table { border-collapse: collapse; width: 100%; font-size: 12px; }
th, td { padding: 3px 6px; border-bottom: 1px solid #eceef1; text-align: left; vertical-align: top; }
th { background: #f0f2f5; position: sticky; top: 0; white-space: nowrap; }
th.sort::after { content: " \\25B4\\25BE"; color: #9aa0a6; font-size: 10px; }
td.num, th.num { text-align: right; font-variant-numeric: tabular-nums; white-space: nowrap; }
tr:nth-child(even) td { background: #fafbfc; }
.verdict { font-weight: 700; padding: 1px 6px; border-radius: 4px; color: #fff; white-space: nowrap; }
.ng { opacity: 0.55; }
.legend { display: flex; gap: 16px; margin: 4px 0 8px; font-size: 12.5px; flex-wrap: wrap; }
.legend span::before { content: ""; display: inline-block; width: 11px; height: 11px; border-radius: 2px;
                       margin-right: 5px; vertical-align: -1px; background: var(--c); }
svg text { font: 11px system-ui, sans-serif; fill: #333; }
svg .grp { font-weight: 700; font-size: 12px; }
code { font-size: 12px; }
.scroll { overflow-x: auto; }
.shape { color: #666; font: 11px ui-monospace, monospace; }
.fail-msg { color: #7a1f1f; font-family: ui-monospace, monospace; font-size: 11.5px; }
"""


def esc(x):
    return html.escape(str(x), quote=True)


def fmt_bytes(n):
    if n is None:
        return "?"
    for unit, f in (("GiB", 2 ** 30), ("MiB", 2 ** 20), ("KiB", 2 ** 10)):
        if n >= f:
            return f"{n / f:.3g} {unit}"
    return f"{n} B"


def fmt_rate(bps):
    return "?" if bps is None else f"{bps / 1e12:.3g} TB/s" if bps >= 1e12 else f"{bps / 1e9:.3g} GB/s"


def dtype_colour(dtype):
    return DTYPE_COLOURS.get(dtype, OTHER_COLOUR)


class Row:
    """What the report shows about one benchmark of the record."""

    def __init__(self, b):
        self.key, self.op, self.case, self.dtype, self.direction = b.key, b.op, b.case, b.dtype, b.direction
        d = b.detops
        reps = b.repetition_medians_ms
        stats = d.get("stats_ms")
        if stats:
            self.min, self.q1, self.median, self.q3, self.max = (stats[k] for k in ("min", "q1", "median", "q3", "max"))
            self.rel_stdev, self.count = stats.get("rel_stdev"), stats.get("count")
        elif len(reps):
            self.min, self.q1, self.median, self.q3, self.max = (float(v) for v in np.percentile(reps, [0, 25, 50, 75, 100]))
            self.rel_stdev = float(np.std(reps, ddof=1) / np.mean(reps)) if len(reps) > 1 else None
            self.count = len(reps)
        else:
            self.min = self.q1 = self.median = self.q3 = self.max = self.rel_stdev = self.count = None
        self.repetitions = len(reps)
        self.shape = d.get("shape", "")
        self.stop_reason = d.get("stop_reason", "")
        self.bandwidth = d.get("achieved_bandwidth_bytes_per_second")
        self.bandwidth_fraction = d.get("bandwidth_fraction")
        self.kernels = d.get("kernels_per_call")
        self.discarded = (d.get("discarded_throttled") or 0) + (d.get("discarded_dropped_records") or 0)
        self.error = b.error
        hw = d.get("hardware_metrics")
        self.hw = hw if isinstance(hw, dict) else None


def sort_key(r):
    return (r.op, r.case, DTYPE_ORDER.get(r.dtype, 9), r.dtype, r.direction != "fwd")


# ---------------------------------------------------------------------------------------------------
# SVG charts


def log_ticks(lo, hi):
    """Tick values 1, 2, 5 x 10^k inside [lo, hi]."""
    ticks = []
    for k in range(math.floor(math.log10(lo)) - 1, math.ceil(math.log10(hi)) + 1):
        for m in (1, 2, 5):
            v = m * 10.0 ** k
            if lo <= v <= hi:
                ticks.append(v)
    return ticks


def tick_text(v):
    return f"{v:g}"


def grouped_rows(rows):
    groups = collections.OrderedDict()
    for r in rows:
        groups.setdefault(r.op, []).append(r)
    return groups


def time_chart(rows, width=1160, label_w=330, row_h=17, group_h=22):
    """Per benchmark: the median as a dot, q1-q3 as a thick whisker, min-max as a thin line; log x axis."""
    rows = [r for r in rows if r.median]
    if not rows:
        return "<p class='note'>No timings in this record.</p>"
    lo = min(r.min for r in rows) / 1.25
    hi = max(r.max for r in rows) * 1.25
    plot_w = width - label_w - 70
    groups = grouped_rows(rows)
    height = 34 + len(rows) * row_h + len(groups) * group_h + 10

    def x(v):
        return label_w + (math.log10(v) - math.log10(lo)) / (math.log10(hi) - math.log10(lo)) * plot_w

    out = [f"<svg width='{width}' height='{height}' viewBox='0 0 {width} {height}' role='img' "
           f"aria-label='time per benchmark, log scale'>"]
    for t in log_ticks(lo, hi):
        out.append(f"<line x1='{x(t):.1f}' y1='22' x2='{x(t):.1f}' y2='{height - 6}' stroke='#e3e5e8'/>"
                   f"<text x='{x(t):.1f}' y='15' text-anchor='middle'>{tick_text(t)}</text>")
    out.append(f"<text x='{label_w + plot_w + 8}' y='15'>ms</text>")
    y = 30
    for op, members in groups.items():
        out.append(f"<text class='grp' x='4' y='{y + 15}'>{esc(op)}</text>")
        y += group_h
        for r in members:
            c = dtype_colour(r.dtype)
            cy = y + row_h / 2
            label = f"{r.case} · {r.dtype} · {r.direction}"
            out.append(f"<g><title>{esc(r.key)}: median {r.median:.4g} ms, q1-q3 {r.q1:.4g}-{r.q3:.4g}, "
                       f"min-max {r.min:.4g}-{r.max:.4g}</title>")
            out.append(f"<text x='{label_w - 8}' y='{cy + 4:.1f}' text-anchor='end'>{esc(label)}</text>")
            out.append(f"<line x1='{x(r.min):.1f}' y1='{cy:.1f}' x2='{x(r.max):.1f}' y2='{cy:.1f}' stroke='{c}' "
                       f"stroke-opacity='0.45'/>")
            out.append(f"<line x1='{x(r.q1):.1f}' y1='{cy:.1f}' x2='{max(x(r.q3), x(r.q1) + 1):.1f}' y2='{cy:.1f}' "
                       f"stroke='{c}' stroke-width='6' stroke-opacity='0.55'/>")
            out.append(f"<circle cx='{x(r.median):.1f}' cy='{cy:.1f}' r='3.6' fill='{c}'/>")
            out.append(f"<text x='{x(r.max) + 6:.1f}' y='{cy + 4:.1f}' fill='#666'>{r.median:.3g}</text></g>")
            y += row_h
    out.append("</svg>")
    return "\n".join(out)


def bandwidth_chart(rows, copy_bandwidth, width=1160, label_w=330, row_h=17, group_h=22):
    rows = [r for r in rows if r.bandwidth_fraction is not None]
    if not rows:
        return "<p class='note'>No benchmark declares the bytes it moves: no bandwidth figures.</p>"
    top = max(1.0, max(r.bandwidth_fraction for r in rows)) * 1.05
    plot_w = width - label_w - 90
    groups = grouped_rows(rows)
    height = 34 + len(rows) * row_h + len(groups) * group_h + 10

    def x(f):
        return label_w + f / top * plot_w

    out = [f"<svg width='{width}' height='{height}' viewBox='0 0 {width} {height}' role='img' "
           f"aria-label='achieved bandwidth as a fraction of the device copy bandwidth'>"]
    for t in np.arange(0.0, top + 1e-9, 0.1):
        strong = abs(t - 1.0) < 1e-9
        out.append(f"<line x1='{x(t):.1f}' y1='22' x2='{x(t):.1f}' y2='{height - 6}' stroke='{'#999' if strong else '#e3e5e8'}'"
                   f"{DASH if strong else ''}/>"
                   f"<text x='{x(t):.1f}' y='15' text-anchor='middle'>{t * 100:.0f}%</text>")
    y = 30
    for op, members in groups.items():
        out.append(f"<text class='grp' x='4' y='{y + 15}'>{esc(op)}</text>")
        y += group_h
        for r in members:
            c = dtype_colour(r.dtype)
            out.append(f"<g><title>{esc(r.key)}: {fmt_rate(r.bandwidth)} = {r.bandwidth_fraction * 100:.1f}% of "
                       f"{fmt_rate(copy_bandwidth)}</title>")
            out.append(f"<text x='{label_w - 8}' y='{y + row_h / 2 + 4:.1f}' text-anchor='end'>"
                       f"{esc(f'{r.case} · {r.dtype} · {r.direction}')}</text>")
            out.append(f"<rect x='{label_w}' y='{y + 3}' width='{max(x(r.bandwidth_fraction) - label_w, 1):.1f}' "
                       f"height='{row_h - 6}' fill='{c}' fill-opacity='0.8' rx='2'/>")
            out.append(f"<text x='{x(r.bandwidth_fraction) + 5:.1f}' y='{y + row_h / 2 + 4:.1f}' fill='#666'>"
                       f"{r.bandwidth_fraction * 100:.1f}% · {fmt_rate(r.bandwidth)}</text></g>")
            y += row_h
    out.append("</svg>")
    return "\n".join(out)


def centred_log_chart(groups, extent, plot_w, aria, ticks, right_title, draw_row, width, label_w, row_h, group_h):
    """The frame both ratio charts share: rows grouped by op on a log axis centred on 1 (x(1) = mid), grid
    lines at ticks [(value, stroke, dashed, label or None)], a title over the right-hand column, and
    draw_row(out, row, y, cy, x, mid) for each row's label, bar and value."""
    mid = label_w + plot_w / 2
    height = 34 + sum(len(m) for m in groups.values()) * row_h + len(groups) * group_h + 10

    def x(ratio):
        return mid + math.log(ratio) / extent * plot_w / 2

    out = [f"<svg width='{width}' height='{height}' viewBox='0 0 {width} {height}' role='img' aria-label='{aria}'>"]
    for t, stroke, dashed, text in ticks:
        if abs(math.log(t)) > extent:
            continue
        out.append(f"<line x1='{x(t):.1f}' y1='22' x2='{x(t):.1f}' y2='{height - 6}' stroke='{stroke}'"
                   f"{DASH if dashed else ''}/>")
        if text is not None:
            out.append(f"<text x='{x(t):.1f}' y='15' text-anchor='middle'>{text}</text>")
    out.append(f"<text x='{label_w + plot_w + 12}' y='15'>{right_title}</text>")
    y = 30
    for op, members in groups.items():
        out.append(f"<text class='grp' x='4' y='{y + 15}'>{esc(op)}</text>")
        y += group_h
        for r in members:
            draw_row(out, r, y, y + row_h / 2, x, mid)
            y += row_h
    out.append("</svg>")
    return "\n".join(out)


def ratio_chart(cmp_rows, width=1160, label_w=330, row_h=17, group_h=22):
    """Each benchmark's candidate/baseline median ratio on a log axis centred on 1, coloured by verdict."""
    if not cmp_rows:
        return "<p class='note'>No benchmark in common with the baseline.</p>"
    threshold = max(r["threshold"] for r in cmp_rows)
    extent = max(max(abs(math.log(r["ratio"])) for r in cmp_rows if r["ratio"] > 0), math.log(threshold)) * 1.3
    plot_w = width - label_w - 230
    groups = collections.OrderedDict()
    for r in sorted(cmp_rows, key=lambda r: (r["op"], r["case"], DTYPE_ORDER.get(r["dtype"], 9), r["dtype"],
                                              r["direction"] != "fwd")):
        groups.setdefault(r["op"], []).append(r)
    ticks = []
    for t in (0.5, 0.67, 0.8, 0.9, 1 / threshold, 1.0, threshold, 1.1, 1.25, 1.5, 2.0):
        special = t in (1 / threshold, threshold)
        ticks.append((t, "#333" if t == 1.0 else "#c9ccd1" if special else "#eceef1", special,
                      f"{t:.3g}x" if not special or t == threshold else None))

    def draw_row(out, r, y, cy, x, mid):
        c = VERDICT_COLOURS[r["verdict"]]
        opacity = 0.85 if r["gating"] else 0.4
        x0, x1 = sorted((mid, x(r["ratio"])))
        gating = "" if r["gating"] else " (not gating)"
        out.append(f"<g><title>{esc(r['benchmark'])}: {r['baseline_median_ms']:.4g} -> {r['candidate_median_ms']:.4g} ms, "
                   f"ratio {r['ratio']:.3f}, p {compare.fmt_p(r['p_value'])}, {r['verdict']}{gating}</title>")
        label = f"{r['case']} · {r['dtype']} · {r['direction']}"
        out.append(f"<text x='{label_w - 8}' y='{cy + 4:.1f}' text-anchor='end'>{esc(label)}</text>")
        out.append(f"<rect x='{x0:.1f}' y='{y + 3}' width='{max(x1 - x0, 1.5):.1f}' height='{row_h - 6}' fill='{c}' "
                   f"fill-opacity='{opacity}' rx='2'/>")
        out.append(f"<text x='{label_w + plot_w + 12}' y='{cy + 4:.1f}'>{r['ratio']:.3f} · p {compare.fmt_p(r['p_value'])} · "
                   f"<tspan fill='{c}' font-weight='700'>{r['verdict']}</tspan>{esc(gating)}</text></g>")

    return centred_log_chart(groups, extent, plot_w, "candidate / baseline median ratio per benchmark", ticks,
                             "ratio · p-value · verdict", draw_row, width, label_w, row_h, group_h)


# ---------------------------------------------------------------------------------------------------
# Sections


def provenance_section(p, validation, path):
    gpu = p["gpu"]
    s = p["settings"]
    ki = p["kernel_images"]
    items = [
        ("GPU", f"{gpu.get('name', '?')} (sm_{str(gpu.get('compute_capability', '?')).replace('.', '')}, "
                f"{gpu.get('sm_count', '?')} SMs)"),
        ("GPU memory", f"{fmt_bytes(gpu.get('memory_bytes'))}, ECC {'on' if gpu.get('ecc_enabled') else 'off'}, "
                       f"L2 {fmt_bytes(gpu.get('l2_cache_bytes'))}"),
        ("clocks", f"SM default {gpu.get('default_sm_clock_mhz', '?')} / max {gpu.get('max_sm_clock_mhz', '?')} MHz, "
                   f"memory {gpu.get('memory_clock_mhz', '?')} MHz"),
        ("power limit", f"{gpu.get('power_limit_w')} W" if gpu.get("power_limit_w") is not None else "unknown"),
        ("driver", f"{p['driver_version']} (driver API {compare.cuda_version_text(p['cuda_driver_api_version'])})"),
        ("CUDA runtime", compare.cuda_version_text(p["cuda_runtime_version"])),
        ("nvcc", f"{p['nvcc_version']}"),
        ("nvcc flags", f"{p['nvcc_flags']}"),
        ("archs", f"CUDA {p['cuda_archs']}, SASS {p['sass_archs']}"),
        ("kernel images", f"{ki.get('sass', '?')} from SASS, {ki.get('ptx_jit', '?')} JIT from PTX"),
        ("libtorch", f"{p['libtorch_version']} (CUDA {p['libtorch_cuda_version']})"),
        ("CUPTI", f"{p['cupti_version']}"),
        ("git", f"{(p['git_sha'] or '?')[:12]}{' (dirty)' if p['git_dirty'] else ''}"),
        ("timer", f"{p['timer']}" + (f" — {p['timer_note']}" if p.get("timer_note") else "")),
        ("copy bandwidth", fmt_rate(p["copy_bandwidth"])),
        ("L2", "cold (flushed before each sample)" if s.get("cold_l2") else "warm"),
        ("stopping", f">= {s.get('min_samples', '?')} samples, >= {s.get('min_gpu_time_s', '?')} s GPU time, "
                     f"rel. stdev < {s.get('max_rel_stdev', '?')}, timeout {s.get('timeout_s', '?')} s"),
        ("repetitions", f"{s.get('repetitions', '?')}, throttle limit {s.get('throttle_fraction', '?')} of default clock"),
        ("host / date", f"{p['host']} / {p['date']}"),
        ("record", f"{path} ({'complete' if p['complete'] else 'INCOMPLETE' if p['complete'] is False else 'completeness unknown'}"
                   f"; schema {validation})"),
    ]
    cells = "".join(f"<div><b>{esc(k)}</b><span>{esc(v)}</span></div>" for k, v in items)
    return f"<section id='provenance'><h2>Provenance</h2><div class='prov'>{cells}</div></section>"


def correctness_section(rec):
    c = rec.get("correctness")
    if not isinstance(c, dict):
        return "<section id='correctness'><h2>Correctness</h2><p class='note'>This record has no correctness results.</p></section>"
    summary = c.get("summary", {})
    pills = "".join(f"<span class='pill' style='background:{OUTCOME_COLOURS[k]}'>{summary.get(k, 0)} {k}</span>"
                    for k in ("passed", "failed", "errors", "skipped"))
    tests = c.get("tests", [])
    per_op = collections.defaultdict(collections.Counter)
    for t in tests:
        per_op[t["name"].split(".")[0]][t["outcome"]] += 1
    outcomes = ("passed", "mismatch", "error", "skipped", "not_supported")
    table = ["<table><tr><th>op</th>" + "".join(f"<th class='num'>{o}</th>" for o in outcomes) + "</tr>"]
    for op in sorted(per_op):
        table.append(f"<tr><td>{esc(op)}</td>" + "".join(f"<td class='num'>{per_op[op][o]}</td>" for o in outcomes) + "</tr>")
    table.append("</table>")
    failing = [t for t in tests if t["outcome"] in compare.FAILING_OUTCOMES]
    if failing:
        items = "".join(f"<tr><td><code>{esc(t['name'])}</code></td><td>{esc(t['outcome'])}</td>"
                        f"<td class='fail-msg'>{esc((t.get('message') or '')[:400])}</td></tr>" for t in failing)
        fail_html = (f"<h3 id='failing-tests'>Failing tests ({len(failing)})</h3>"
                     f"<table><tr><th>test</th><th>outcome</th><th>message</th></tr>{items}</table>")
    else:
        fail_html = "<h3 id='failing-tests'>Failing tests</h3><p>None.</p>"
    return (f"<section id='correctness'><h2>Correctness</h2><div class='pills'>{pills}</div>"
            f"{''.join(table)}{fail_html}</section>")


def comparison_section(result):
    rows = result["benchmarks"]["rows"]
    counts = collections.Counter(r["verdict"] for r in rows)
    head = [f"<p>Against <b>{esc(result['baseline']['label'])}</b>.</p>"]
    if result["cross_build"]:
        head.append(f"<p>Cross-build: {esc(result['baseline']['build'])} → {esc(result['candidate']['build'])}</p>")
    for w in result["warnings"]:
        head.append(f"<p class='warn'>warning: {esc(w)}</p>")
    for n in result["notes"]:
        head.append(f"<p class='note'>{esc(n)}</p>")
    pills = "".join(f"<span class='pill' style='background:{VERDICT_COLOURS[v]}'>{counts[v]} {v}</span>"
                    for v in ("SAME", "FASTER", "SLOWER", "UNSURE"))
    verdict = ("<p><b style='color:#d62728'>Regression</b>: exit 1 from scripts/compare.py.</p>" if result["exit_code"] == 1
               else "<p><b style='color:#2ca02c'>No regression</b>.</p>")
    rule = result["rule"]
    rule_text = (f"<p class='note'>SLOWER/FASTER need all of: median ratio beyond {rule['threshold']} (or the per-benchmark "
                 f"threshold), Mann-Whitney p &lt; {rule['alpha']}, [min, q3] overlap ≤ {rule['overlap_fraction'] * 100:g}% "
                 f"of the median. SAME: the ratio is within the threshold. UNSURE: beyond the threshold but not confirmed. Faded bars: fewer than {rule['min_gating_repetitions']} "
                 f"repetitions, not gating.</p>")
    parts = [f"<section id='comparison'><h2>Comparison with the baseline</h2>{''.join(head)}"
             f"<div class='pills'>{pills}</div>{verdict}{rule_text}{ratio_chart(rows)}"]
    bench = result["benchmarks"]
    for label, keys in (("Only in the baseline", bench["only_in_baseline"]), ("Only in this run", bench["only_in_candidate"])):
        if keys:
            parts.append(f"<p class='note'>{label}: {esc(', '.join(keys))}</p>")
    changes = [c for c in result["correctness"]["changes"]]
    parts.append("<h3 id='correctness-changes'>Correctness changes</h3>")
    if changes:
        trs = "".join(f"<tr><td><code>{esc(c['test'])}</code></td><td>{esc(compare.CHANGE_TEXT[c['kind']])}</td>"
                      f"<td>{esc(c['baseline'] or '-')}</td><td>{esc(c['candidate'] or '-')}</td>"
                      f"<td>{GATES_YES if c['gating'] else 'no'}</td>"
                      f"<td class='fail-msg'>{esc((c['detail'] or '')[:300])}</td></tr>" for c in changes)
        parts.append(f"<table><tr><th>test</th><th>change</th><th>baseline</th><th>this run</th><th>gates</th>"
                     f"<th>detail</th></tr>{trs}</table>")
    else:
        parts.append("<p>None.</p>" + "".join(f"<p class='note'>{esc(n)}</p>" for n in result["correctness"]["notes"]))
    outputs = result["outputs"]
    if result["cross_build"] or outputs["available"]:
        parts.append("<h3 id='output-movement'>Outputs between the builds</h3>")
        for m in outputs["missing"]:
            parts.append(f"<p class='warn'>Output dumps missing: {esc(m)}</p>")
        if outputs["rows"]:
            trs = "".join(f"<tr><td>{esc(g['op'])}</td><td>{esc(g['device'])}</td><td>{esc(g['dtype'])}</td>"
                          f"<td class='num'>{g['compared']}</td><td class='num'>{g['identical']}</td>"
                          f"<td class='num'>{g['max_abs_diff']:.3g}</td><td class='num'>{g['max_diff_over_tolerance']:.3g}</td>"
                          f"<td class='num'>{g['nonfinite_mismatches']}</td></tr>" for g in outputs["rows"])
            parts.append("<table><tr><th>op</th><th>device</th><th>dtype</th><th class='num'>outputs</th>"
                         "<th class='num'>bitwise identical</th><th class='num'>max abs diff</th>"
                         f"<th class='num'>max diff / tolerance</th><th class='num'>non-finite mismatches</th></tr>{trs}</table>")
    parts.append("</section>")
    return "".join(parts)


def speedup_chart(entries, width=1160, label_w=330, row_h=17, group_h=22):
    """Speed-up over torchvision (torchvision ms / DetOps ms) per entry on a log axis centred on 1x; green when
    DetOps is faster, red when slower; entries without a torchvision time are listed as 'none'."""
    timed = [e for e in entries if e.get("speedup")]
    extent = max([abs(math.log(e["speedup"])) for e in timed] + [math.log(2)]) * 1.15
    plot_w = width - label_w - 200
    groups = collections.OrderedDict()
    for e in entries:
        groups.setdefault(e["op"], []).append(e)
    ticks = [(t, "#333" if t == 1.0 else "#eceef1", False, f"{t:g}x")
             for t in (0.1, 0.25, 0.5, 1.0, 2.0, 4.0, 10.0, 30.0, 100.0)]

    def draw_row(out, e, y, cy, x, mid):
        label = f"{e['case']} · {e['dtype']} · {e['direction']}"
        out.append(f"<text x='{label_w - 8}' y='{cy + 4:.1f}' text-anchor='end'>{esc(label)}</text>")
        sp = e.get("speedup")
        if sp:
            c = "#2ca02c" if sp >= 1 else "#d62728"
            x0, x1 = sorted((mid, x(sp)))
            out.append(f"<g><title>{esc(e['op'])}/{esc(label)}: torchvision {e['torchvision_ms']:.4g} ms, DetOps "
                       f"{e['detops_ms']:.4g} ms</title><rect x='{x0:.1f}' y='{y + 3}' width='{max(x1 - x0, 1.5):.1f}' "
                       f"height='{row_h - 6}' fill='{c}' fill-opacity='0.85' rx='2'/>"
                       f"<text x='{label_w + plot_w + 12}' y='{cy + 4:.1f}'>{sp:.2f}x</text></g>")
        else:
            why = e.get("error") or e.get("torchvision_note") or "no torchvision time"
            out.append(f"<text x='{label_w + plot_w + 12}' y='{cy + 4:.1f}' fill='#888'><title>{esc(why)}</title>"
                       f"{'error' if e.get('error') else 'none'}</text>")

    return centred_log_chart(groups, extent, plot_w, "speed-up over torchvision per op, case, dtype and direction",
                             ticks, "speed-up", draw_row, width, label_w, row_h, group_h)


def peers_section(record):
    """'Against torchvision': the peer runner's table (scripts/peer_bench.py) and speed-up bars."""
    entries = record.get("peers") or []
    if not entries:
        return ("<section id='peers'><h2>Against torchvision</h2><p class='note'>No peer entries in this record "
                "(scripts/peer_bench.py did not run: no torchvision, or no GPU).</p></section>")

    def ms(v):
        return "none" if v is None else f"{v:.4g}"

    trs = []
    for e in entries:
        if e.get("error"):
            err = f"<span class='fail-msg'>error: {esc(e['error'])}</span>"
        elif e.get("max_abs_error") is not None:
            tol = e.get("tolerance") or {}
            err = f"{e['max_abs_error']:.3g}" + (f" <small>(atol {tol['atol']:g})</small>" if "atol" in tol else "")
        else:
            err = esc(e.get("check") or "-")
        tv_err = (f"{e['torchvision_max_abs_error']:.3g}" if e.get("torchvision_max_abs_error") is not None
                  else esc(e.get("torchvision_check") or "-"))
        sp = "none" if not e.get("speedup") else f"{e['speedup']:.2f}x"
        tv = ms(e.get("torchvision_ms"))
        if e.get("torchvision_ms") is None and e.get("torchvision_note"):
            tv = f"<span title='{esc(e['torchvision_note'])}'>none</span>"
        peer = f"<div class='shape'>vs {esc(e['peer'])}</div>" if e.get("peer_kind") == "plain PyTorch" else ""
        trs.append(f"<tr><td>{esc(e['op'])}{peer}</td><td>{esc(e['case'])}<div class='shape'>{esc(e.get('shape', ''))}</div></td>"
                   f"<td>{esc(e['dtype'])}</td><td>{esc(e['direction'])}</td><td class='num'>{tv}</td>"
                   f"<td class='num'>{ms(e.get('detops_ms'))}</td><td class='num'>{sp}</td><td class='num'>{err}</td>"
                   f"<td class='num'>{tv_err}</td></tr>")
    timer = esc(entries[0].get("timer", ""))
    return (f"<section id='peers'><h2>Against torchvision</h2><p class='note'>Both ops timed in the same process on the "
            f"same CUDA inputs ({timer}; cold L2, median kernel time per call). Speed-up = torchvision ms / DetOps ms; "
            f"none: torchvision has no kernel for that dtype. Max error: DetOps against the truth; torchvision's: "
            f"torchvision in the dtype under test against the same truth, where that truth is in another dtype "
            f"(docs/peers.md). An op marked 'vs plain PyTorch: ...' (mmcv's ops) is compared with that plain-PyTorch "
            f"form, in the torchvision columns.</p>"
            f"{speedup_chart(entries)}<div class='scroll'><table id='peer-table'><tr><th>op</th><th>case</th><th>dtype</th>"
            f"<th>dir</th><th class='num'>torchvision ms</th><th class='num'>DetOps ms</th><th class='num'>speed-up</th>"
            f"<th class='num'>max error</th><th class='num'>torchvision's max error</th></tr>{''.join(trs)}</table></div>"
            f"</section>")


def _finite(v):
    return v if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) else None


def hardware_metrics_section(rows):
    """The hardware-metrics pass (docs/benchmarks.md, "Hardware metrics"): per measured benchmark the DRAM
    bytes read and written by one op call, the throughput over the profiled range and over the timed median,
    and the % of peak; the benchmarks without figures are listed with the status and reason the record gives,
    never with numbers."""
    head = "<section id='hardware-metrics'><h2>DRAM traffic (hardware metrics)</h2>"
    with_hw = [r for r in rows if r.hw is not None]
    if not with_hw:
        return head + ("<p class='note'>This record has no hardware_metrics entries (no DetOps measurement, or "
                       "written before the metrics pass existed).</p></section>")
    measured = [r for r in with_hw if r.hw.get("status") == "measured"]
    not_measured = [r for r in with_hw if r.hw.get("status") != "measured"]
    if not measured and all(r.hw.get("reason") == "not requested" for r in not_measured):
        return head + ("<p class='note'>Not measured: this run did not ask for them (<code>detops_bench "
                       "--detops_metrics</code> adds a CUPTI range-profiler pass after each benchmark's timing).</p>"
                       "</section>")
    parts = [head]
    if measured:
        l2 = sorted({str(r.hw.get("l2", "?")) for r in measured})
        parts.append("<p class='note'>CUPTI range profiler, one op call per range, in a pass after the timed samples "
                     f"(L2: {esc(', '.join(l2))}, as in the samples). The range ends after a device synchronization, so "
                     "its duration includes launch gaps and that latency: the throughput over the range is a lower "
                     "bound; 'at median' divides the same bytes by the timed median kernel time. % of peak: "
                     "dram__throughput.avg.pct_of_peak_sustained_elapsed over the range. With a cold L2 the flush's "
                     "dirty lines can be written back during the call and count as written bytes.</p>")
        trs = []
        for r in measured:
            h = r.hw
            read, written = _finite(h.get("dram_bytes_read")), _finite(h.get("dram_bytes_write"))
            dur = _finite(h.get("duration_ns"))
            pct = _finite(h.get("dram_pct_of_peak"))
            title = f"{r.key}: read {read} B, written {written} B, range {dur} ns, {h.get('passes', '?')} passes"
            trs.append(f"<tr id='hw-{esc(r.key.replace('/', '-'))}' title='{esc(title)}'><td>{esc(r.op)}</td>"
                       f"<td>{esc(r.case)}</td><td>{esc(r.dtype)}</td><td>{esc(r.direction)}</td>"
                       f"<td class='num'>{esc(fmt_bytes(read))}</td><td class='num'>{esc(fmt_bytes(written))}</td>"
                       f"<td class='num'>{'?' if dur is None else f'{dur / 1e3:.4g}'}</td>"
                       f"<td class='num'>{esc(fmt_rate(_finite(h.get('dram_throughput_bytes_per_second'))))}</td>"
                       f"<td class='num'>{esc(fmt_rate(_finite(h.get('dram_throughput_at_median_bytes_per_second'))))}</td>"
                       f"<td class='num'>{'n/a' if pct is None else f'{pct:.1f}%'}</td>"
                       f"<td class='num'>{esc(h.get('passes', '?'))}</td></tr>")
        parts.append("<div class='scroll'><table id='hardware-metrics-table'><tr><th>op</th><th>case</th><th>dtype</th>"
                     "<th>dir</th><th class='num'>DRAM read</th><th class='num'>DRAM written</th>"
                     "<th class='num'>range us</th><th class='num'>DRAM rate over range</th>"
                     "<th class='num'>at median</th><th class='num'>% of peak</th><th class='num'>passes</th></tr>"
                     f"{''.join(trs)}</table></div>")
    if not_measured:
        groups = collections.OrderedDict()
        for r in not_measured:
            groups.setdefault((str(r.hw.get("status", "?")), str(r.hw.get("reason", "no reason recorded"))), []).append(r.key)
        lead = "Not measured" if measured else "Not measured for any benchmark"
        items = "".join(f"<li><b>{esc(status)}</b> ({len(keys)} benchmark{'s' if len(keys) != 1 else ''}): "
                        f"<span class='fail-msg'>{esc(reason)}</span><div class='shape'>{esc(', '.join(keys))}</div></li>"
                        for (status, reason), keys in groups.items())
        parts.append(f"<h3>{lead}</h3><ul id='hardware-metrics-missing'>{items}</ul>")
    parts.append("</section>")
    return "".join(parts)


def legend():
    return "<div class='legend'>" + "".join(f"<span style='--c:{c}'>{d}</span>" for d, c in DTYPE_COLOURS.items()) + "</div>"


def benchmark_table(rows, cmp_by_key):
    heads = ["op", "case / shape", "dtype", "dir", "median ms", "q1 – q3 ms", "rel. sd", "n / reps", "stop", "bandwidth"]
    stop_text = {"converged": "converged", "noise_stopped_improving": "noise flat", "timeout": "timeout",
                 "max_samples": "max samples"}
    numeric = {"median ms", "q1 – q3 ms", "rel. sd", "n / reps", "bandwidth", "base ms", "ratio", "p"}
    if cmp_by_key:
        heads += ["base ms", "ratio", "p", "verdict"]
    out = ["<div class='scroll'><table id='benchmark-table'><tr>" + "".join(
        f"<th class='sort{' num' if h in numeric else ''}'>{esc(h)}</th>" for h in heads) + "</tr>"]
    for r in rows:
        kernels = "" if r.kernels is None else f" · {r.kernels} kernel{'s' if r.kernels != 1 else ''}"
        cells = [esc(r.op), f"{esc(r.case)}<div class='shape'>{esc(r.shape)}{esc(kernels)}</div>", esc(r.dtype),
                 esc(r.direction)]
        if r.error or r.median is None:
            tds = "".join(f"<td>{c}</td>" for c in cells) + \
                f"<td colspan='6' class='fail-msg'>{esc(r.error or 'no timings recorded')}</td>"
        else:
            bw = "" if r.bandwidth is None else fmt_rate(r.bandwidth)
            if r.bandwidth_fraction is not None:
                bw += f" · {r.bandwidth_fraction * 100:.1f}%"
            cells += [f"{r.median:.4g}", f"{r.q1:.4g} – {r.q3:.4g}",
                      "" if r.rel_stdev is None else f"{r.rel_stdev * 100:.2f}%",
                      f"{r.count if r.count is not None else '?'} / {r.repetitions}",
                      f"<span title='{esc(r.stop_reason)}'>{esc(stop_text.get(r.stop_reason, r.stop_reason))}</span>", bw]
            tds = "".join(f"<td class='num'>{c}</td>" if heads[i] in numeric else f"<td>{c}</td>" for i, c in enumerate(cells))
        if cmp_by_key:
            c = cmp_by_key.get(r.key)
            if c is None:
                tds += "<td colspan='4' class='note'>not in the baseline</td>"
            else:
                cls = "verdict" + ("" if c["gating"] else " ng")
                tds += (f"<td class='num'>{c['baseline_median_ms']:.4g}</td><td class='num'>{c['ratio']:.3f}</td>"
                        f"<td class='num'>{compare.fmt_p(c['p_value'])}</td><td><span class='{cls}' "
                        f"style='background:{VERDICT_COLOURS[c['verdict']]}'>{c['verdict']}</span>"
                        f"{'' if c['gating'] else ' <small>not gating</small>'}</td>")
        out.append(f"<tr id='bench-{esc(r.key.replace('/', '-'))}'>{tds}</tr>")
    out.append("</table></div>")
    return "\n".join(out)


def render(record, record_path, result=None):
    p = compare.provenance(record)
    status, _ = compare.validate_record(record)
    benches = compare.extract_benchmarks(record)
    rows = sorted((Row(b) for b in benches.values()), key=sort_key)
    cmp_by_key = {r["benchmark"]: r for r in result["benchmarks"]["rows"]} if result else {}
    title = f"DetOps run {p['run_id']}"
    corr = (record.get("correctness") or {}).get("summary", {})
    subtitle = (f"{p['gpu_name'] or 'unknown GPU'} · {compare.build_label(p)} · git {(p['git_sha'] or '?')[:10]} · "
                f"{len(rows)} benchmarks · {corr.get('passed', 0)} tests passed, "
                f"{corr.get('failed', 0) + corr.get('errors', 0)} failing")
    parts = [f"<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'><title>{esc(title)}</title>"
             f"<style>{CSS}</style></head><body><main>",
             f"<header id='header'><h1>{esc(title)}</h1><div class='sub'>{esc(subtitle)}</div></header>",
             provenance_section(p, status, record_path),
             correctness_section(record)]
    if result:
        parts.append(comparison_section(result))
    parts.append(peers_section(record))
    parts.append(f"<section id='time-chart'><h2>Time per benchmark</h2><p class='note'>GPU time per op call "
                 f"({esc(p['timer'] or 'timer unknown')}), log scale: dot = median, thick bar = q1–q3, thin line = min–max "
                 f"of the samples.</p>{legend()}{time_chart(rows)}</section>")
    parts.append(f"<section id='bandwidth-chart'><h2>Achieved bandwidth</h2><p class='note'>The op's declared minimal DRAM "
                 f"traffic per call over its median time, as a fraction of the device copy bandwidth "
                 f"({esc(fmt_rate(p['copy_bandwidth']))}).</p>{legend()}{bandwidth_chart(rows, p['copy_bandwidth'])}</section>")
    parts.append(hardware_metrics_section(rows))
    parts.append(f"<section id='benchmarks'><h2>Every benchmark</h2>{benchmark_table(rows, cmp_by_key)}</section>")
    parts.append("</main></body></html>\n")
    return "\n".join(parts)


def main(argv=None):
    ap = argparse.ArgumentParser(description="Write a self-contained HTML report of a DetOps run record.")
    ap.add_argument("record", help="record.json of the run")
    ap.add_argument("--baseline", help="a baseline record.json: adds the comparison (as scripts/compare.py)")
    ap.add_argument("--thresholds", help="per-benchmark thresholds file, as scripts/compare.py")
    ap.add_argument("--cross-build", action="store_true", help="as scripts/compare.py")
    ap.add_argument("-o", "--output", help="HTML file to write (default: report.html next to the record)")
    args = ap.parse_args(argv)
    try:
        record = compare.load_record(args.record)
        status, errors = compare.validate_record(record)
        if status == "invalid":
            raise compare.RecordError(f"{args.record} does not match docs/record.schema.json:\n  " + "\n  ".join(errors[:10]))
        result = (compare.compare_records(args.baseline, args.record, args.thresholds, args.cross_build)
                  if args.baseline else None)
    except compare.RecordError as e:
        print(f"report: error: {e}", file=sys.stderr)
        return compare.EXIT_USAGE
    out = pathlib.Path(args.output) if args.output else pathlib.Path(args.record).resolve().parent / "report.html"
    out.write_text(render(record, args.record, result))
    print(out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
