#!/usr/bin/env python3
# Plots and a markdown report for ccsim experiments: reads the CSVs that
# `ccsim --out=DIR` wrote and writes DIR/<name>.png and DIR/REPORT.md.
import csv
import collections
import os
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

# Metrics shown in the report tables, in this order, when a run has them.
KEY_METRICS = [
    "completion_us", "completion_over_ideal", "jain", "window_min_over_max",
    "window_tput_gbps", "convergence_max_us", "convergence_mean_us",
    "short_slowdown_p50", "short_slowdown_p99", "slowdown_p99",
    "bottleneck_utilization", "bottleneck_max_queue_kb",
    "bottleneck_avg_queue_kb", "drops", "rtos", "events_per_s", "wall_s",
]


def read_csv(path):
    if not os.path.exists(path):
        return []
    with open(path) as f:
        return list(csv.DictReader(f))


def conf_field(path, key):
    with open(path) as f:
        for line in f:
            line = line.split("#", 1)[0].strip()
            if "=" in line and line.split("=", 1)[0].strip() == key:
                return line.split("=", 1)[1].strip()
    return ""


def fmt(v):
    x = float(v)
    if x == 0:
        return "0"
    if abs(x) >= 1e5 or abs(x) < 1e-2:
        return "%.3g" % x
    return "%.3f" % x if abs(x) < 10 else "%.1f" % x


def smooth(y, n=5):
    """Moving average over n samples (the throughput series are per sample
    period and jumpy at packet granularity)."""
    out, acc = [], 0.0
    for i, v in enumerate(y):
        acc += v
        if i >= n:
            acc -= y[i - n]
        out.append(acc / min(i + 1, n))
    return out


def flow_labels(base, conf):
    """What tells the flows apart: source host, start time and, with RTT
    classes (host_delay_us), the source's access-link delay."""
    delays = [d.strip() for d in conf_field(conf, "host_delay_us").split(",")
              if d.strip()] if conf else []
    labels = {}
    for r in read_csv(base + "__fct.csv"):
        src = int(r["src"])
        label = f"h{src}, start {float(r['start_us']) / 1000:g} ms"
        if src < len(delays):
            label += f", {delays[src]} us link"
        labels[int(r["flow"])] = label
    return labels


def plot(out, name, runs, conf=None):
    has_fct = any(
        any(float(r["slowdown"]) > 0 and float(r["bytes"]) > 0
            for r in read_csv(os.path.join(out, f"{name}__{tag}__fct.csv")))
        for tag in runs)
    cols = 4 if has_fct else 3
    # Shared time axes, and one scale down the throughput and queue columns:
    # controllers compare at a glance (the window/rate column mixes units).
    fig, axes = plt.subplots(len(runs), cols, figsize=(4.6 * cols, 2.6 * len(runs)),
                             squeeze=False, sharex="col")
    desc = conf_field(conf, "description") if conf else ""
    fig.suptitle(f"{name}: {desc}" if desc else name, fontsize=11)
    for i, tag in enumerate(runs):
        base = os.path.join(out, f"{name}__{tag}")
        run = tag.replace("__", "/")
        flows = collections.defaultdict(lambda: ([], [], []))
        for r in read_csv(base + "__flows.csv"):
            x, y, w = flows[int(r["flow"])]
            x.append(float(r["t_us"]) / 1000)
            y.append(float(r["tput_gbps"]))
            cw = float(r["cwnd_bytes"])
            rate = float(r["rate_gbps"])
            w.append(rate if rate > 0 else (cw / 1024 if 0 <= cw < 1e12 else float("nan")))
        labels = flow_labels(base, conf)
        shown = sorted(flows)[:16]
        ax = axes[i][0]
        for fid in shown:
            x, y, _ = flows[fid]
            ax.plot(x, smooth(y), lw=0.8, label=labels.get(fid, f"flow {fid}"))
        ax.set_title(f"{run}: throughput (5-sample mean)", fontsize=9)
        ax.set_ylabel("Gb/s")
        if 0 < len(shown) <= 8:
            ax.legend(fontsize=6)
        ax = axes[i][1]
        is_rate = any(float(r["rate_gbps"]) > 0
                      for r in read_csv(base + "__flows.csv")[:50])
        for fid in shown:
            x, _, w = flows[fid]
            ax.plot(x, w, lw=0.8)
        ax.set_title(f"{run}: {'rate (Gb/s)' if is_rate else 'cwnd (KB)'}",
                     fontsize=9)
        queues = collections.defaultdict(lambda: ([], []))
        for r in read_csv(base + "__queue.csv"):
            x, y = queues[r["port"]]
            x.append(float(r["t_us"]) / 1000)
            y.append(float(r["queue_kb"]))
        ax = axes[i][2]
        top = sorted(queues, key=lambda p: -max(queues[p][1]))[:3]
        for p in top:
            ax.plot(*queues[p], lw=0.8, label=p)
        ax.set_title(f"{run}: largest switch queues", fontsize=9)
        ax.set_ylabel("KB")
        if top:
            ax.legend(fontsize=6)
        if has_fct:
            sd = sorted(float(r["slowdown"]) for r in read_csv(base + "__fct.csv")
                        if float(r["slowdown"]) > 0)
            ax = axes[i][3]
            if sd:
                ax.plot(sd, [(k + 1) / len(sd) for k in range(len(sd))])
                ax.set_xscale("log")
            ax.set_title(f"{run}: FCT slowdown CDF", fontsize=9)
    for c in (0, 2):
        top = max(axes[i][c].get_ylim()[1] for i in range(len(runs)))
        for i in range(len(runs)):
            axes[i][c].set_ylim(0, top)
    for c in range(3):
        axes[-1][c].set_xlabel("time (ms)")
    if has_fct:
        axes[-1][3].set_xlabel("FCT / unloaded FCT")
    fig.tight_layout(rect=(0, 0, 1, 1 - 0.35 / (2.6 * len(runs))))
    png = os.path.join(out, f"{name}.png")
    fig.savefig(png, dpi=90)
    plt.close(fig)
    return os.path.basename(png)


BUCKETS = ["10k", "100k", "1m", "10m", "big"]
BUCKET_LABELS = ["<=10KB", "<=100KB", "<=1MB", "<=10MB", ">10MB"]


def plot_buckets(out, name, runs, metrics, desc):
    """FCT slowdown by flow size, one line per run (p95 solid, p50 dashed),
    as HPCC's and DCQCN's papers plot it; None when no run has buckets."""
    if not any(f"slowdown_p95_{b}" in metrics[t] for t in runs for b in BUCKETS):
        return None
    variants = sorted({t.split("__")[1] if "__" in t else "" for t in runs})
    fig, axes = plt.subplots(1, len(variants), figsize=(5 * len(variants), 3.4),
                             squeeze=False, sharey=True)
    fig.suptitle(f"{name}: FCT slowdown by flow size" + (f" ({desc})" if desc else ""),
                 fontsize=10)
    for j, v in enumerate(variants):
        ax = axes[0][j]
        for t in runs:
            if (t.split("__")[1] if "__" in t else "") != v:
                continue
            cc = t.split("__")[0]
            for pct, style in (("p95", "-"), ("p50", "--")):
                xs, ys = [], []
                for k, b in enumerate(BUCKETS):
                    val = metrics[t].get(f"slowdown_{pct}_{b}")
                    if val is not None:
                        xs.append(k)
                        ys.append(float(val))
                line, = ax.plot(xs, ys, style, marker="o", ms=3,
                                label=f"{cc} {pct}" if pct == "p95" else None)
                if pct == "p95":
                    color = line.get_color()
                else:
                    line.set_color(color)
        ax.set_xticks(range(len(BUCKETS)))
        ax.set_xticklabels(BUCKET_LABELS, fontsize=7)
        ax.set_yscale("log")
        ax.set_title(v or "all runs", fontsize=9)
        ax.set_xlabel("flow size")
        ax.legend(fontsize=6)
    axes[0][0].set_ylabel("FCT slowdown (p95 solid, p50 dashed)")
    fig.tight_layout(rect=(0, 0, 1, 0.92))
    png = os.path.join(out, f"{name}_fct_buckets.png")
    fig.savefig(png, dpi=90)
    plt.close(fig)
    return os.path.basename(png)


def main():
    out, configs = sys.argv[1], sys.argv[2:]
    lines = ["# ccsim experiments", "",
             "Generated by `make experiments` (tools/run_experiments.sh); "
             "every number comes from the CSVs next to this file.", ""]
    overall = []
    for cfg in configs:
        name = conf_field(cfg, "name") or os.path.basename(cfg)[:-5]
        desc = conf_field(cfg, "description")
        summary = read_csv(os.path.join(out, f"{name}__summary.csv"))
        checks = read_csv(os.path.join(out, f"{name}__checks.csv"))
        runs = []
        metrics = collections.defaultdict(dict)
        for r in summary:
            tag = r["cc"] + (f"__{r['variant']}" if r["variant"] else "")
            if tag not in runs:
                runs.append(tag)
            metrics[tag][r["metric"]] = r["value"]
        # A known miss (a target the file marks as missed by its controller)
        # is reported, not failed; met, it fails until the mark goes.
        misses = sum(c["result"] == "KNOWN MISS" for c in checks)
        ok = all(c["result"] in ("PASS", "KNOWN MISS") for c in checks)
        verdict = ("no checks" if not checks else "PASS" if ok else "FAIL") + \
            (f" ({misses} known miss{'es' if misses > 1 else ''})" if misses else "")
        if not summary:
            verdict = "FAIL (no results; see %s.log)" % name
        overall.append((name, verdict))
        lines += [f"## {name}: {verdict}", "", desc, "",
                  f"Config: `{cfg}`; reproduce: `build/bin/ccsim --config={cfg}`", ""]
        if not summary:
            continue
        shown = [m for m in KEY_METRICS if any(m in metrics[t] for t in runs)]
        lines.append("| run | " + " | ".join(shown) + " |")
        lines.append("|---" * (len(shown) + 1) + "|")
        def cell(t, m):
            # Several seeds: the mean +- its 95% confidence half-width.
            if m not in metrics[t]:
                return ""
            ci = metrics[t].get(m + "__ci95")
            return fmt(metrics[t][m]) + (f" ± {fmt(ci)}" if ci is not None else "")
        for t in runs:
            lines.append(f"| {t.replace('__', '/')} | " +
                         " | ".join(cell(t, m) for m in shown) + " |")
        lines += ["", "| target | actual | result |", "|---|---|---|"]
        for c in checks:
            lines.append(f"| {c['check']} | {fmt(c['actual'])} | {c['result']} |")
        lines += ["", f"![{name}]({plot(out, name, runs, cfg)})", ""]
        buckets = plot_buckets(out, name, runs, metrics, desc)
        if buckets:
            lines += [f"![{name} by flow size]({buckets})", ""]
    lines[4:4] = ["| experiment | result |", "|---|---|"] + \
        [f"| {n} | {v} |" for n, v in overall] + [""]
    with open(os.path.join(out, "REPORT.md"), "w") as f:
        f.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
