"""The plots of a bench/compare run, drawn with matplotlib into PNG files beside the report:
throughput against outstanding requests, latency CDFs, YCSB throughput, throughput against value
size, throughput against shards, durable puts. Each is meant to be read instead of a table.
"""

import math

import matplotlib

matplotlib.use("Agg")  # files only, no display

import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter  # noqa: E402

from report import SYSTEMS, find, size_label  # noqa: E402

# One look per system in every plot: Ferrite warm colours, Redis blues, memcached green, the
# limits grey and dotted.
STYLE = {
    "ferrite": {"color": "#d9480f", "linestyle": "-", "marker": "o", "linewidth": 2.4},
    "ferrite-sync": {"color": "#d9480f", "linestyle": "-", "marker": "o", "linewidth": 2.4},
    "ferrite-async": {"color": "#f59f00", "linestyle": "--", "marker": "s", "linewidth": 1.8},
    "ferrite-resp": {"color": "#f59f00", "linestyle": "-", "marker": "s", "linewidth": 1.8},
    "redis": {"color": "#1971c2", "linestyle": "-", "marker": "^", "linewidth": 1.8},
    "redis-everysec": {"color": "#74c0fc", "linestyle": "--", "marker": "v", "linewidth": 1.5},
    "redis-always": {"color": "#15317e", "linestyle": "--", "marker": "D", "linewidth": 1.5},
    "memcached": {"color": "#2f9e44", "linestyle": "-", "marker": "P", "linewidth": 1.5},
    "limit": {"color": "#495057", "linestyle": ":", "marker": "x", "linewidth": 1.8},
    "limit-resp": {"color": "#adb5bd", "linestyle": ":", "marker": "+", "linewidth": 1.8},
}

DPI = 110


def si(value, _position=None):
    """1200 -> 1.2k, 350000 -> 350k, 2000000 -> 2M."""
    for scale, unit in ((1e6, "M"), (1e3, "k")):
        if abs(value) >= scale:
            text = f"{value / scale:.1f}".rstrip("0").rstrip(".")
            return f"{text}{unit}"
    return f"{value:.0f}" if abs(value) >= 10 else f"{value:g}"


def log_axis(axis, formatter, steps=False):
    """A log axis labelled with `formatter`; with `steps`, ticks at 1, 2 and 5 of each decade too,
    so a range narrower than a decade still has labels."""
    if steps:
        axis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
    axis.set_major_formatter(FuncFormatter(formatter))
    axis.set_minor_formatter(NullFormatter())


def finish(fig, path, legend_handles=None, legend_columns=4):
    if legend_handles:
        handles, labels = legend_handles
        fig.legend(handles, labels, loc="lower center", ncol=legend_columns, frameon=False, fontsize=9)
    fig.savefig(path, dpi=DPI)
    plt.close(fig)


def collect_legend(axes):
    seen = {}
    for ax in axes:
        for handle, label in zip(*ax.get_legend_handles_labels()):
            seen.setdefault(label, handle)
    return list(seen.values()), list(seen.keys())


def throughput_vs_outstanding(doc, path):
    rows, s = doc["rows"], doc["settings"]["small-ops"]
    systems = [name for name in STYLE if any(r["scenario"] == "small-ops" and r["system"] == name for r in rows)]
    fig, axes = plt.subplots(1, 2, figsize=(11, 5), sharey=True)
    for ax, op in zip(axes, ("put", "get")):
        for system in systems:
            points = [(o, find(rows, "small-ops", system, op=op, outstanding=o)) for o in s["outstanding"]]
            points = [(o, row["ops_per_s"]) for o, row in points if row]
            if points:
                ax.plot(*zip(*points), label=SYSTEMS[system], **STYLE[system])
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xticks(s["outstanding"])
        log_axis(ax.xaxis, lambda v, _p: f"{v:.0f}")
        log_axis(ax.yaxis, si, steps=True)
        ax.set_title(f"{op}: {s['value_size']} B values, one connection")
        ax.set_xlabel("requests in flight (outstanding / pipeline depth)")
        ax.grid(True, which="major", alpha=0.3)
    axes[0].set_ylabel("operations per second (log)")
    fig.suptitle("Small operations: throughput against concurrency", fontweight="bold")
    fig.tight_layout(rect=(0, 0.1, 1, 0.97))
    finish(fig, path, collect_legend(axes))


def durable_puts(doc, path):
    """Durable puts: throughput and p50 latency against requests in flight."""
    rows, s = doc["rows"], doc["settings"]["durability"]
    systems = [name for name in ("ferrite-sync", "ferrite-async", "redis-always", "redis")
               if any(r["scenario"] == "durability" and r["system"] == name for r in rows)]
    fig, axes = plt.subplots(1, 2, figsize=(11, 5))
    for ax, field, title in ((axes[0], "ops_per_s", "throughput"), (axes[1], "p50_us", "p50 latency")):
        for system in systems:
            points = [(o, find(rows, "durability", system, op="put", outstanding=o)) for o in s["outstanding"]]
            points = [(o, row[field]) for o, row in points if row and row.get(field)]
            if points:
                ax.plot(*zip(*points), label=SYSTEMS[system], **STYLE[system])
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xticks(s["outstanding"])
        log_axis(ax.xaxis, lambda v, _p: f"{v:.0f}")
        log_axis(ax.yaxis, si, steps=True)
        ax.set_title(f"{title}: {s['value_size']} B values, {s['key_size']} B keys")
        ax.set_xlabel("requests in flight")
        ax.grid(True, which="major", alpha=0.3)
    axes[0].set_ylabel("puts per second (log)")
    axes[1].set_ylabel("microseconds (log)")
    fig.suptitle("Durable puts: Ferrite sync and async, Redis AOF always and without persistence", fontweight="bold")
    fig.tight_layout(rect=(0, 0.1, 1, 0.97))
    finish(fig, path, collect_legend(axes))


NINES = [50, 90, 99, 99.9, 99.99, 99.999]


def nines(percentile):
    """Percentile on a 'number of nines' scale, so the tail gets room: 90 -> 1, 99 -> 2, ..."""
    return -math.log10(max(1e-5, 1.0 - percentile / 100.0))


def cdf_panel(ax, curves, title):
    for system, cdf in curves:
        if not cdf:
            continue
        xs = [max(0.1, us) for us, _ in cdf]
        ys = [nines(p) for _, p in cdf]
        style = dict(STYLE[system], marker=None)
        ax.step(xs, ys, where="post", label=SYSTEMS[system], **style)
    ax.set_xscale("log")
    log_axis(ax.xaxis, lambda v, _p: f"{v:g}")
    ax.set_yticks([nines(p) for p in NINES])
    ax.set_yticklabels([f"{p:g}%" for p in NINES])
    ax.set_ylim(0, nines(99.999) + 0.1)
    ax.set_xlabel("latency (us, log)")
    ax.set_title(title, fontsize=10)
    ax.grid(True, which="major", alpha=0.3)


def latency_cdfs(doc, path):
    rows = doc["rows"]
    panels = []
    if "small-ops" in doc["scenarios"]:
        for op in ("put", "get"):
            curves = [(system, (find(rows, "small-ops", system, op=op, outstanding=1) or {}).get("cdf"))
                      for system in STYLE]
            panels.append((curves, f"small-ops {op}, 1 outstanding"))
    if "ycsb" in doc["scenarios"]:
        s = doc["settings"]["ycsb"]
        distribution = "zipfian" if "zipfian" in s["distributions"] else s["distributions"][0]
        for op in ("get", "put"):
            curves = []
            for system in STYLE:
                row = find(rows, "ycsb", system, workload="A", distribution=distribution)
                curves.append((system, ((row or {}).get("by_op", {}).get(op) or {}).get("cdf")))
            panels.append((curves, f"YCSB A ({distribution}) {op}, {s['clients']}x{s['outstanding']} in flight"))
    panels = [panel for panel in panels if any(cdf for _, cdf in panel[0])]
    if not panels:
        return False
    columns = 2
    rows_ = math.ceil(len(panels) / columns)
    fig, axes = plt.subplots(rows_, columns, figsize=(11, 4.3 * rows_ + 0.8), squeeze=False)
    flat = [ax for row in axes for ax in row]
    for ax, (curves, title) in zip(flat, panels):
        cdf_panel(ax, curves, title)
    for ax in flat[len(panels):]:
        ax.axis("off")
    for row in axes:
        row[0].set_ylabel("percentile")
    fig.suptitle("Latency distributions (further left is faster; the tail is at the top)", fontweight="bold")
    fig.tight_layout(rect=(0, 0.08, 1, 0.97))
    finish(fig, path, collect_legend(flat))
    return True


def ycsb_bars(doc, path):
    rows, s = doc["rows"], doc["settings"]["ycsb"]
    systems = [name for name in ("ferrite", "ferrite-resp", "redis", "redis-always", "limit", "limit-resp")
               if any(r["scenario"] == "ycsb" and r["system"] == name for r in rows)]
    distributions = s["distributions"]
    fig, axes = plt.subplots(len(distributions), 1, figsize=(11, 3.8 * len(distributions) + 0.9), squeeze=False)
    width = 0.8 / max(1, len(systems))
    for ax, distribution in zip((row[0] for row in axes), distributions):
        for index, system in enumerate(systems):
            xs, ys = [], []
            for position, letter in enumerate(s["workloads"]):
                row = find(rows, "ycsb", system, workload=letter.upper(), distribution=distribution)
                if row:
                    xs.append(position + (index - (len(systems) - 1) / 2) * width)
                    ys.append(row["ops_per_s"])
            style = STYLE[system]
            hatch = "//" if system.startswith("limit") else None
            ax.bar(xs, ys, width, label=SYSTEMS[system], color=style["color"], hatch=hatch,
                   edgecolor="white" if not hatch else "#212529", linewidth=0.5)
        ax.set_xticks(range(len(s["workloads"])))
        ax.set_xticklabels([f"YCSB {letter.upper()}" for letter in s["workloads"]])
        ax.yaxis.set_major_formatter(FuncFormatter(si))
        ax.set_ylabel("operations per second")
        ax.set_title(f"{distribution} keys", fontsize=10)
        ax.grid(True, axis="y", alpha=0.3)
    fig.suptitle(f"YCSB core workloads: {s['keys']:,} records of {s['value_size']} B, "
                 f"{s['clients']} connections x {s['outstanding']} outstanding", fontweight="bold")
    fig.tight_layout(rect=(0, 0.07, 1, 0.97))
    finish(fig, path, collect_legend([row[0] for row in axes]), legend_columns=6)


def throughput_vs_value_size(doc, path):
    rows, s = doc["rows"], doc["settings"]["values"]
    systems = [name for name in STYLE if any(r["scenario"] == "values" and r["system"] == name for r in rows)]
    fig, axes = plt.subplots(2, 2, figsize=(11, 8.5), sharex=True)
    for column, op in enumerate(("put", "get")):
        for system in systems:
            points = [(size, find(rows, "values", system, op=op, value_size=size)) for size in s["sizes"]]
            points = [(size, row["ops_per_s"]) for size, row in points if row]
            if not points:
                continue
            axes[0][column].plot(*zip(*points), label=SYSTEMS[system], **STYLE[system])
            axes[1][column].plot([p[0] for p in points], [p[0] * p[1] / (1 << 20) for p in points],
                                 label=SYSTEMS[system], **STYLE[system])
        axes[0][column].set_title(f"{op}, {s['outstanding']} outstanding on one connection")
        for row_index, ax in enumerate((axes[0][column], axes[1][column])):
            ax.set_xscale("log", base=2)
            ax.set_yscale("log")
            ax.set_xticks(s["sizes"])
            log_axis(ax.xaxis, lambda v, _p: size_label(int(v)))
            log_axis(ax.yaxis, si, steps=True)
            ax.grid(True, which="major", alpha=0.3)
            if row_index == 1:
                ax.set_xlabel("value size")
                ax.tick_params(axis="x", labelrotation=30)
    axes[0][0].set_ylabel("operations per second (log)")
    axes[1][0].set_ylabel("value bytes per second, MiB/s (log)")
    fig.suptitle("Throughput against value size", fontweight="bold")
    fig.tight_layout(rect=(0, 0.06, 1, 0.97))
    finish(fig, path, collect_legend([axes[0][0], axes[0][1]]))


def throughput_vs_shards(doc, path):
    rows, s = doc["rows"], doc["settings"]["shards"]
    fig, ax = plt.subplots(figsize=(9, 5))
    groups = [(op, count) for op in s["ops"] for count in s["shards"]]
    width = 0.38
    for index, system in enumerate(("ferrite", "limit")):
        xs, ys = [], []
        for position, (op, count) in enumerate(groups):
            row = find(rows, "shards", system, op=op, shards=count)
            if row:
                xs.append(position + (index - 0.5) * width)
                ys.append(row["ops_per_s"])
        hatch = "//" if system == "limit" else None
        bars = ax.bar(xs, ys, width, label=SYSTEMS[system], color=STYLE[system]["color"], hatch=hatch,
                      edgecolor="white" if not hatch else "#212529", linewidth=0.5)
        ax.bar_label(bars, labels=[si(y) for y in ys], fontsize=8, padding=2)
    ax.set_xticks(range(len(groups)))
    ax.set_xticklabels([f"{op}\n{count} shard{'s' if count > 1 else ''}" for op, count in groups])
    ax.yaxis.set_major_formatter(FuncFormatter(si))
    ax.set_ylabel("operations per second")
    ax.grid(True, axis="y", alpha=0.3)
    ax.set_title(f"Throughput against shards (MCAS figure 12): {s['pools']} pools over the shards, "
                 f"{s['clients']} connections x {s['outstanding']} outstanding, {doc['machine']['nproc']} CPUs shared",
                 fontsize=10)
    ax.legend(frameon=False)
    fig.tight_layout()
    finish(fig, path)


def draw(doc, base):
    """Draws every plot the run has data for; returns [(title, path)]."""
    drawn = []
    scenarios = doc["scenarios"]

    def has(scenario):
        return scenario in scenarios and any(row["scenario"] == scenario for row in doc["rows"])

    if has("small-ops"):
        path = f"{base}-throughput-vs-outstanding.png"
        throughput_vs_outstanding(doc, path)
        drawn.append(("Throughput against outstanding requests", path))
    if has("small-ops") or has("ycsb"):
        path = f"{base}-latency-cdf.png"
        if latency_cdfs(doc, path):
            drawn.append(("Latency distributions", path))
    if has("ycsb"):
        path = f"{base}-ycsb.png"
        ycsb_bars(doc, path)
        drawn.append(("YCSB throughput", path))
    if has("values"):
        path = f"{base}-throughput-vs-value-size.png"
        throughput_vs_value_size(doc, path)
        drawn.append(("Throughput against value size", path))
    if has("shards"):
        path = f"{base}-throughput-vs-shards.png"
        throughput_vs_shards(doc, path)
        drawn.append(("Throughput against shards", path))
    if has("durability"):
        path = f"{base}-durable-puts.png"
        durable_puts(doc, path)
        drawn.append(("Durable puts", path))
    return drawn
