"""The PNG charts of the benchmarks (matplotlib, Agg backend: no display needed)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Tuple

COLORS = {
    "sluice": "#1f77b4",
    "sort": "#ff7f0e",
    "builtin": "#ff7f0e",
    "flink": "#2ca02c",
    "iperf3": "#7f7f7f",
    "sluice-service": "#2ca02c",
}


def _pyplot() -> Any:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _save(fig: Any, path: Path, bottom: float = 0.0) -> Path:
    """Lays out (keeping ``bottom`` of the figure free, e.g. for a shared legend) and writes it."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.tight_layout(rect=(0.0, bottom, 1.0, 1.0))
    fig.savefig(path, dpi=110)
    _pyplot().close(fig)
    return path


@dataclass
class BatchPanel:
    """One row of the batch chart: a setting's heavy job (median, min, max seconds per
    contender), its TPC-H queries' Sluice / sort time ratios and total ratio, and the
    Sluice / sort ratios of executor CPU per GB shuffled (heavy job, TPC-H total)."""

    title: str
    heavy: Optional[Dict[str, Tuple[float, float, float]]]
    queries: Dict[str, float]
    total_ratio: Optional[float]
    heavy_cpu_ratio: Optional[float] = None
    tpch_cpu_ratio: Optional[float] = None


def batch_chart(path: Path, panels: Sequence[BatchPanel], subtitle: str) -> Path:
    """One row per setting. Left: the heavy job's median seconds per contender (whiskers: min and
    max over rounds). Right: each TPC-H query's median time through Sluice as a fraction of the
    sort shuffle's. The titles carry the CPU-per-GB ratios."""
    plt = _pyplot()
    rows = max(1, len(panels))
    fig, axes = plt.subplots(rows, 2, figsize=(13, 4.8 * rows), gridspec_kw={"width_ratios": [1, 3.2]}, squeeze=False)
    for (left, right), panel in zip(axes, panels):
        heavy = panel.heavy
        if heavy:
            names = list(heavy)
            medians = [heavy[n][0] for n in names]
            low = [heavy[n][0] - heavy[n][1] for n in names]
            high = [heavy[n][2] - heavy[n][0] for n in names]
            left.bar(names, medians, yerr=[low, high], capsize=6, color=[COLORS.get(n, "#999") for n in names])
            for i, m in enumerate(medians):
                left.text(i, m / 2, f"{m:.1f} s", ha="center", va="center", color="white", fontweight="bold")
            if "sort" in heavy:
                left.axhline(
                    0.8 * heavy["sort"][0], color="gray", linewidth=0.8, linestyle="--", label="goal: 0.80 x sort"
                )
                left.legend(loc="lower right", fontsize=8)
            left.set_ylabel("seconds (median; whiskers min/max)")
            title = f"heavy job, {panel.title}"
            if panel.heavy_cpu_ratio is not None:
                title += f"\nCPU/GB Sluice/sort: {panel.heavy_cpu_ratio:.2f}"
            left.set_title(title, fontsize=9)
        else:
            left.axis("off")
        if panel.queries:
            labels = list(panel.queries)
            values = [panel.queries[q] for q in labels]
            colors = ["#2ca02c" if v <= 1.0 else "#d62728" for v in values]
            right.bar(labels, values, color=colors)
            right.axhline(1.0, color="black", linewidth=0.8)
            right.axhline(0.8, color="gray", linewidth=0.8, linestyle="--", label="goal for the total: 0.80")
            right.set_ylabel("Sluice time / sort time (median)")
            title = f"TPC-H per query, {panel.title}"
            if panel.total_ratio is not None:
                title += f" (total: {panel.total_ratio:.2f}"
                if panel.tpch_cpu_ratio is not None:
                    title += f"; CPU/GB Sluice/sort: {panel.tpch_cpu_ratio:.2f}"
                title += ")"
            right.set_title(title, fontsize=9)
            right.legend(loc="upper right")
        else:
            right.axis("off")
    fig.suptitle(f"sluice bench batch: Sluice vs Spark's sort shuffle: {subtitle}", fontsize=10)
    return _save(fig, path)


def transport_chart(
    path: Path,
    timeouts: Sequence[int],
    series: Dict[str, Sequence[float]],
    flink: Dict[int, float],
    iperf_fraction: Dict[str, float],
    subtitle: str,
) -> Path:
    """The "Latency vs. Throughput" figure of "A Deep-Dive into Flink's Network Stack": throughput per buffer
    timeout as a fraction of
    the 100 ms throughput, Sluice's series beside Flink 1.5's published ratios; on the right,
    Sluice's 100 ms throughput as a fraction of iperf3's."""
    plt = _pyplot()
    fig, (left, right) = plt.subplots(1, 2, figsize=(13, 4.8), gridspec_kw={"width_ratios": [2.4, 1]})
    positions = list(range(len(timeouts)))
    width = 0.8 / (len(series) + 1)
    for i, (name, values) in enumerate(series.items()):
        left.bar(
            [p + i * width for p in positions],
            [(v if v is not None else float("nan")) * 100 for v in values],
            width,
            label=name,
        )
    flink_values = [flink.get(t, float("nan")) * 100 for t in timeouts]
    left.bar(
        [p + len(series) * width for p in positions],
        flink_values,
        width,
        label="Flink 1.5 (Flink blog, 2019; no 10 ms point)",
        color=COLORS["flink"],
    )
    left.axhline(100, color="black", linewidth=0.8)
    left.axhline(90, color="gray", linewidth=0.8, linestyle="--", label="goal at 1 ms: 90 %")
    left.set_xticks([p + width * len(series) / 2 for p in positions])
    left.set_xticklabels([f"{t} ms" for t in timeouts])
    left.set_xlabel("buffer timeout")
    left.set_ylabel("throughput, % of the 100 ms throughput")
    left.set_title("Latency vs. throughput")
    left.set_ylim(0, 135)
    left.legend(fontsize=8, loc="upper left", ncol=2)
    names = list(iperf_fraction)
    right.bar(names, [(iperf_fraction[n] or 0.0) * 100 for n in names], color=COLORS["sluice"])
    right.axhline(100, color=COLORS["iperf3"], linewidth=1.2, label="iperf3 (one TCP connection)")
    right.axhline(80, color="gray", linewidth=0.8, linestyle="--", label="goal: 80 %")
    right.set_ylim(0, max([120.0] + [iperf_fraction[n] * 100 + 25 for n in names if iperf_fraction[n] is not None]))
    right.set_ylabel("% of iperf3's throughput (at 100 ms)")
    right.set_title("one connection vs iperf3")
    right.legend(fontsize=8, loc="upper right")
    right.tick_params(axis="x", labelsize=8)
    fig.suptitle(f"sluice bench transport: {subtitle}", fontsize=10)
    return _save(fig, path)


def latency_chart(path: Path, rows: List[Dict[str, Any]], subtitle: str) -> Path:
    """p50/p99/p99.9 latency through the shuffle (map-side stamp to sink) per configuration and
    rate, Sluice beside built-in."""
    plt = _pyplot()
    configs = sorted({r["config"] for r in rows}, key=lambda c: [r["config"] for r in rows].index(c))
    rates = sorted({int(r["rate"]) for r in rows})
    fig, axes = plt.subplots(1, len(configs), figsize=(4.6 * len(configs), 4.6), squeeze=False)
    for ax, config in zip(axes[0], configs):
        for contender, offset in (("sluice", -0.2), ("builtin", 0.2)):
            for stat, marker in (("p50_ms", "o"), ("p99_ms", "s"), ("p999_ms", "^")):
                xs, ys = [], []
                for i, rate in enumerate(rates):
                    match = [
                        r for r in rows if r["config"] == config and r["contender"] == contender and r["rate"] == rate
                    ]
                    value = match[0].get(f"shuffle_{stat}") if match else None
                    if value is not None and value == value:
                        xs.append(i + offset)
                        ys.append(value)
                ax.scatter(
                    xs,
                    ys,
                    marker=marker,
                    color=COLORS[contender],
                    label=f"{contender} {stat.replace('_ms', '').replace('p999', 'p99.9')}",
                )
        ax.set_yscale("log")
        ax.set_xticks(range(len(rates)))
        ax.set_xticklabels([f"{r / 1000:g}k/s" if r >= 1000 else f"{r}/s" for r in rates])
        ax.set_title(config, fontsize=9)
        ax.set_ylabel("latency through the shuffle, ms (median over rounds)")
        ax.grid(True, which="both", axis="y", alpha=0.3)
    handles, labels = axes[0][0].get_legend_handles_labels()
    fig.legend(handles, labels, fontsize=8, loc="lower center", ncol=6, frameon=False)
    fig.suptitle(f"sluice bench latency: Real-Time Mode groupBy count\n{subtitle}", fontsize=10)
    return _save(fig, path, bottom=0.07)


def memory_chart(path: Path, samples: Dict[str, float], budget_mib: float, subtitle: str) -> Path:
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(11, 4.8))
    names = list(samples)
    ax.bar(
        names,
        list(samples.values()),
        color=[COLORS["sort"] if n.startswith("sort") else COLORS["sluice"] for n in names],
    )
    ax.axhline(budget_mib, color="#d62728", linestyle="--", label=f"budget (network_memory) {budget_mib:.0f} MiB")
    for i, v in enumerate(samples.values()):
        ax.text(i, v, f"{v:.1f}", ha="center", va="bottom")
    ax.set_ylabel("MiB per executor (max over executors and rounds)")
    ax.legend(loc="upper left")
    ax.tick_params(axis="x", labelsize=7.5)
    fig.suptitle(f"sluice bench memory: {subtitle}", fontsize=10)
    return _save(fig, path)


def scale_chart(path: Path, groups: Dict[str, Dict[str, Optional[float]]], subtitle: str) -> Path:
    """Median seconds per configuration, Sluice beside sort (and Sluice read through its node
    service, ``sluice-service``, when it ran), one panel per group (size, partitions, and the wide,
    growth and extreme shapes when they ran). A contender whose job failed has no bar (NaN), and
    says so where its bar would be."""
    plt = _pyplot()
    panels = [
        ("data size (16 maps x 16 reduces)", [k for k in groups if k.startswith("size")]),
        ("partitions, maps x reduces (data x1)", [k for k in groups if k.startswith("parts")]),
        ("wide shapes, 2 slots per executor", [k for k in groups if k.startswith("wide")]),
        ("map tasks into 1,000 reducers, 2 slots per executor", [k for k in groups if k.startswith("growth")]),
        ("extreme shapes, 2 slots per executor", [k for k in groups if k.startswith("extreme")]),
    ]
    panels = [p for p in panels if p[1]] or panels[:1]
    fig, axes = plt.subplots(1, len(panels), figsize=(6 * len(panels), 4.6), squeeze=False)
    for ax, (title, keys) in zip(axes[0], panels):
        positions = list(range(len(keys)))
        contenders = ["sluice", "sort"] + [c for c in ("sluice-service",) if any(c in groups[k] for k in keys)]
        width = 0.8 / len(contenders)
        for i, contender in enumerate(contenders):
            heights = [_number(groups[k].get(contender)) for k in keys]
            xs = [p + (i - (len(contenders) - 1) / 2) * width for p in positions]
            ax.bar(xs, heights, width, label=contender, color=COLORS[contender])
            for x, h in zip(xs, heights):
                if h != h:
                    ax.text(x, 0, "did not\ncomplete", ha="center", va="bottom", fontsize=7, color=COLORS[contender])
        ax.set_xlim(-0.6, len(keys) - 0.4)  # a bar that did not complete still has its place
        ax.set_xticks(positions)
        ax.set_xticklabels(keys, fontsize=8)
        ax.set_ylabel("seconds (median)")
        ax.set_title(f"cost as it grows: {title}", fontsize=10)
        ax.legend()
    fig.suptitle(f"sluice bench scale: {subtitle}", fontsize=10)
    return _save(fig, path)


def simulated_chart(
    path: Path,
    counts: List[int],
    figures: Dict[str, List[float]],
    ratios: Dict[str, float],
    target: float,
    subtitle: str,
) -> Path:
    """Per-executor figures against the number of simulated executors (one line each: flat is the
    goal), and index bytes read over needed per index cache size against the goal."""
    plt = _pyplot()
    fig, (left, right) = plt.subplots(1, 2, figsize=(12, 4.6))
    for name, values in figures.items():
        left.plot(counts, values, marker="o", label=name)
    left.set_xscale("log", base=2)
    left.set_xticks(counts)
    left.set_xticklabels([str(c) for c in counts])
    left.set_yscale("symlog", linthresh=1.0)
    left.set_ylim(bottom=0)
    left.set_xlabel("executors")
    left.set_ylabel("per executor")
    left.set_title("what one executor holds as the cluster widens", fontsize=10)
    left.legend(fontsize=8)
    names = list(ratios)
    right.bar(names, [ratios[n] for n in names], color=COLORS["sluice"])
    right.axhline(target, color="#d62728", linestyle="--", label=f"goal {target}")
    for i, n in enumerate(names):
        right.text(i, ratios[n], f"{ratios[n]:.2f}", ha="center", va="bottom")
    right.set_xlabel("index cache size")
    right.set_ylabel("index bytes read / needed")
    right.set_title("index reads, 2 executors", fontsize=10)
    right.legend()
    fig.suptitle(f"sluice bench scale --simulated: {subtitle}", fontsize=10)
    return _save(fig, path)


def _number(value: Optional[float]) -> float:
    return float("nan") if value is None else float(value)


def cluster_chart(
    path: Path,
    ratios: Dict[str, Dict[str, Optional[float]]],
    fractions: Dict[str, Dict[str, Optional[float]]],
    series: Dict[str, Dict[str, Dict[str, Any]]],
    configured: Dict[str, float],
    link_job: str,
    subtitle: str,
) -> Path:
    """Left: Sluice's median time over the sort shuffle's per job (and all jobs) at each link rate.
    Middle: the rate each contender's traffic reached while ``link_job``'s reduce stage read, as
    a fraction of the configured rate. Right, one panel per rate: the first worker link's received
    rate over the job's run (0 = the reduce stage's start; shaded: the stage), Sluice and sort."""
    plt = _pyplot()
    rates = list(ratios)
    fig, axes = plt.subplots(1, 2 + len(series), figsize=(5.2 * (2 + len(series)), 4.6), squeeze=False)
    left, middle, *right = axes[0]
    jobs = list(next(iter(ratios.values()), {}))
    width = 0.8 / max(1, len(rates))
    for i, rate in enumerate(rates):
        values = [_number(ratios[rate].get(j)) for j in jobs]
        left.bar([p + (i - (len(rates) - 1) / 2) * width for p in range(len(jobs))], values, width, label=rate)
    left.set_xticks(range(len(jobs)))
    left.set_xticklabels(jobs)
    left.axhline(1.0, color="black", linewidth=0.8)
    left.axhline(0.9, color="gray", linewidth=0.8, linestyle="--", label="goal: 0.90")
    left.set_ylabel("Sluice time / sort time (median)")
    left.set_title("time against the sort shuffle, per link rate")
    left.legend(fontsize=8)
    for i, contender in enumerate(("sluice", "sort")):
        values = [_number(fractions[r].get(contender)) for r in rates]
        middle.bar(
            [p + (i - 0.5) * 0.4 for p in range(len(rates))], values, 0.4, label=contender, color=COLORS[contender]
        )
    middle.set_xticks(range(len(rates)))
    middle.set_xticklabels(rates)
    middle.axhline(0.9, color="gray", linewidth=0.8, linestyle="--", label="goal: 0.90")
    middle.set_ylim(0, 1.05)
    middle.set_ylabel("received rate while reading / link rate (median)")
    middle.set_title(f"link use in the {link_job} job's reduce stage")
    middle.legend(fontsize=8)
    for ax, rate in zip(right, series):
        for contender, s in series[rate].items():
            host = sorted(s["gbps"])[0]
            ax.plot(s["t"], s["gbps"][host], label=f"{contender} ({host})", color=COLORS.get(contender, "#999"))
            ax.axvspan(*s["reduce_stage"], color=COLORS.get(contender, "#999"), alpha=0.08)
        ax.axhline(configured[rate] / 1e9, color="gray", linewidth=0.8, linestyle="--", label=f"configured {rate}")
        ax.set_xlabel(f"seconds from the {link_job} job's reduce stage start")
        ax.set_ylabel("received Gbit/s (0.1 s samples)")
        ax.set_title(f"{rate}: one worker link, last round", fontsize=10)
        ax.legend(fontsize=8)
    fig.suptitle(f"sluice bench cluster: Sluice vs Spark's sort shuffle on dev/cluster: {subtitle}", fontsize=10)
    return _save(fig, path)


def allocation_chart(
    path: Path,
    seconds: Dict[str, Tuple[float, float, float]],
    labels: Dict[str, str],
    timelines: Dict[str, List[List[float]]],
    subtitle: str,
) -> Path:
    """Left: each contender's executor-seconds over the bursty job (median; whiskers: min and max
    over rounds). Right: the live executors over the job's run, each contender's last round."""
    plt = _pyplot()
    fig, (left, right) = plt.subplots(1, 2, figsize=(13, 4.8), gridspec_kw={"width_ratios": [1, 1.6]})
    names = list(seconds)
    colors = [COLORS.get(n, "#2ca02c" if n.endswith("service") else "#9467bd") for n in names]
    medians = [seconds[n][0] for n in names]
    low = [seconds[n][0] - seconds[n][1] for n in names]
    high = [seconds[n][2] - seconds[n][0] for n in names]
    left.bar([labels[n].replace(" + ", " +\n") for n in names], medians, yerr=[low, high], capsize=6, color=colors)
    for i, m in enumerate(medians):
        left.text(i, m / 2, f"{m:.0f} s", ha="center", va="center", color="white", fontweight="bold")
    left.set_ylabel("executor-seconds during the job (median; whiskers min/max)")
    left.tick_params(axis="x", labelsize=8)
    left.set_title("what the bursty job's executors cost", fontsize=10)
    for name, color in zip(names, colors):
        steps = timelines.get(name)
        if steps:
            right.step([s[0] for s in steps], [s[1] for s in steps], where="post", label=labels[name], color=color)
    right.set_xlabel("seconds from the job's start")
    right.set_ylabel("live executors")
    right.yaxis.get_major_locator().set_params(integer=True)
    right.set_title("live executors over the job (last round)", fontsize=10)
    right.legend(fontsize=8)
    fig.suptitle(f"sluice bench allocation: dynamic allocation on dev/cluster: {subtitle}", fontsize=10)
    return _save(fig, path)
