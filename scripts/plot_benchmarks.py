#!/usr/bin/env python3
"""Draws the offloading plots of docs/benchmarks.md as plain SVG (no plotting
library needed).

  scripts/plot_benchmarks.py --offload OFFLOAD.json --plan-sim PLAN_SIM.csv --out docs/img

OFFLOAD.json is the output of scripts/bench_offload.sh; PLAN_SIM.csv the
--csv file of build/bin/plan_sim. Writes offload_modes.svg (images/s per mode)
and planner_vs_oracle.svg (planner and FastFlow's rule against the oracle).
"""
import argparse
import csv
import json
import math
import os
import sys

FONT = 'font-family="sans-serif" font-size="12"'


def esc(text):
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def bars(result, path):
    # One sweep run per mode; the modes run again in rounds show their median.
    rates = dict(result["sweep_rates"])
    medians = {m: sorted(v)[len(v) // 2] for m, v in result.get("round_rates", {}).items()}
    rates.update(medians)
    rates = sorted(rates.items(), key=lambda kv: kv[1])
    best = result["best_static"]
    row, left, width = 20, 230, 420
    height = row * len(rates) + 60
    top = max(v for _, v in rates)
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{left + width + 80}" '
           f'height="{height}" {FONT}>',
           f'<text x="10" y="18" font-weight="bold">images/s per mode '
           f'({result["cpu_per_host"]} core per host'
           + (f', {result["bandwidth_mbit"]:.0f} Mbit/s links' if result.get("bandwidth_mbit")
              else '') + ')</text>']
    for i, (mode, v) in enumerate(rates):
        y = 30 + i * row
        colour = ("#d62728" if mode == "auto" else "#2ca02c" if mode == best
                  else "#7f7f7f" if mode == "off" else "#1f77b4")
        w = width * v / top
        label = mode + (" *" if mode in medians else "")
        out.append(f'<text x="{left - 6}" y="{y + 13}" text-anchor="end">{esc(label)}</text>')
        out.append(f'<rect x="{left}" y="{y}" width="{w:.1f}" height="{row - 4}" '
                   f'fill="{colour}"/>')
        out.append(f'<text x="{left + w + 4:.1f}" y="{y + 13}">{v:.0f}</text>')
    out.append(f'<text x="10" y="{height - 8}">red: auto; green: best static; grey: off; '
               f'*: median of {result.get("rounds", 1)} interleaved runs, others one run</text>')
    out.append("</svg>")
    with open(path, "w") as f:
        f.write("\n".join(out) + "\n")


def scatter(rows, path):
    size, pad = 420, 60
    lo = min(min(r["oracle"], r["planner"], r["fastflow"]) for r in rows)
    hi = max(max(r["oracle"], r["planner"], r["fastflow"]) for r in rows)
    llo, lhi = math.floor(math.log10(lo)), math.ceil(math.log10(hi))

    def pos(v):
        return (math.log10(v) - llo) / (lhi - llo) * size

    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{size + 2 * pad}" '
           f'height="{size + 2 * pad}" {FONT}>',
           f'<text x="10" y="18" font-weight="bold">throughput chosen vs the oracle '
           f'({len(rows)} scenarios, samples/s)</text>',
           f'<rect x="{pad}" y="{pad}" width="{size}" height="{size}" fill="none" '
           f'stroke="#999"/>',
           f'<line x1="{pad}" y1="{pad + size}" x2="{pad + size}" y2="{pad}" stroke="#999" '
           f'stroke-dasharray="4"/>']
    for e in range(llo, lhi + 1):
        p = pos(10 ** e)
        out.append(f'<text x="{pad + p:.1f}" y="{pad + size + 16}" '
                   f'text-anchor="middle">1e{e}</text>')
        out.append(f'<text x="{pad - 6}" y="{pad + size - p + 4:.1f}" '
                   f'text-anchor="end">1e{e}</text>')
    for key, colour in (("fastflow", "#ff7f0e"), ("planner", "#1f77b4")):
        for r in rows:
            x, y = pad + pos(r["oracle"]), pad + size - pos(r[key])
            out.append(f'<circle cx="{x:.1f}" cy="{y:.1f}" r="1.6" fill="{colour}" '
                       f'fill-opacity="0.5"/>')
    out.append(f'<text x="{pad + size / 2}" y="{pad + size + 36}" text-anchor="middle">'
               f'oracle (best single cut, 1% fraction grid)</text>')
    out.append(f'<text x="{pad}" y="{pad - 10}">blue: prepflow planner; orange: FastFlow\'s '
               f'rule; dashed: equal to the oracle</text>')
    out.append("</svg>")
    with open(path, "w") as f:
        f.write("\n".join(out) + "\n")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--offload", help="bench_offload.sh JSON output")
    ap.add_argument("--plan-sim", help="plan_sim --csv file")
    ap.add_argument("--out", default="docs/img")
    a = ap.parse_args()
    if not a.offload and not a.plan_sim:
        ap.error("give --offload and/or --plan-sim")
    os.makedirs(a.out, exist_ok=True)
    if a.offload:
        with open(a.offload) as f:
            result = json.loads(f.read().strip().splitlines()[-1])
        bars(result, os.path.join(a.out, "offload_modes.svg"))
    if a.plan_sim:
        with open(a.plan_sim) as f:
            rows = [{k: float(v) for k, v in r.items()} for r in csv.DictReader(f)]
        rows = [r for r in rows if min(r["oracle"], r["planner"], r["fastflow"]) > 0]
        rows = rows[::max(1, len(rows) // 1000)]  # a thousand points read as well as all
        scatter(rows, os.path.join(a.out, "planner_vs_oracle.svg"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
