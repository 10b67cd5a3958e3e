"""What a run prints and writes: the text table, report.md beside the paper's figures, and plots."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from commands.bench.frontier import frontier_lines, plot_frontier
from commands.bench.memory import format_memory
from commands.bench.stats import ratio_text
from runtime.decode.drafts import KINDS


def num_text(x: float | None, width: int, digits: int) -> str:
    text = "-" if x is None else f"{x:.{digits}f}"
    return text.ljust(-width) if width < 0 else text.rjust(width)


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{x:.0%}"


def _cap_source(cap: dict[str, Any]) -> str:
    """The source a cap is for: a lookup kind in its own word, else the draft tier."""
    kind = KINDS.get(str(cap.get("source")))
    return kind.summary_word if kind is not None and not kind.decodes else "draft tier"


def _end_to_end_cap(cap: dict[str, Any]) -> str:
    return f", {cap['end_to_end']:.2f}x end to end" if cap.get("end_to_end") else ""


def format_table(result: dict[str, Any]) -> str:
    lines = []
    for workload, rows in result["summary"].items():
        lines.append(f"\n{workload}  (baseline {result['baseline']}; medians, min-max)")
        lines.append(
            f"{'config':<18} {'tok/s':>7} {'range':>13} {'speed-up':>9} {'end-to-end':>10} {'vs Q4':>6} {'TTFT':>6} "
            f"{'predicted':>9} {'cap':>6} {'effic.':>6} {'accept':>7} {'overhead':>8} {'same text':>9} {'agree':>6} "
            f"{'accuracy':>8} {'CPU s/tok':>9} {'top-1':>6} {'KL':>7}"
        )
        for name, e in rows.items():
            t = e["tok_per_s"]
            pred = f"{e['predicted_speedup']:.2f}x" if e["predicted_speedup"] else "-"
            acc = f"{e['acceptance']:.0%}" if e["acceptance"] is not None else "-"
            ovh = f"{e['overhead']['median']:.1%}" if e["overhead"] else "-"
            cap = e.get("cap")
            lines.append(
                f"{name:<18} {num_text(t and t['median'], 7, 2)} "
                f"{num_text(t and t['min'], 6, 1)}-{num_text(t and t['max'], -6, 1)} "
                f"{num_text(e['speedup_vs_baseline'], 8, 2)}x "
                f"{num_text(e.get('latency_speedup_vs_baseline'), 9, 2)}x {num_text(e.get('vs_q4'), 5, 2)}x "
                f"{num_text(e.get('ttft_vs_baseline'), 5, 2)}x "
                f"{pred:>9} {num_text(cap and cap['speedup'], 5, 2)}x {num_text(e.get('latency_efficiency'), 6, 2)} "
                f"{acc:>7} {ovh:>8} {_pct(e['fidelity']['exact_match_rate']):>9} "
                f"{_pct(e['fidelity']['token_agreement']):>6} {_pct(e['accuracy']):>8} "
                f"{num_text((e.get('cpu_s_per_token') or {}).get('median'), 9, 3)} "
                f"{num_text((e.get('quality') or {}).get('top1'), 6, 3)} "
                f"{num_text((e.get('quality') or {}).get('kl_mean'), 7, 4)}"
            )
        # The user's numbers with their 90% intervals over prompts; "no measurable difference" where 1.0 is in.
        for name, e in rows.items():
            if name == result["baseline"]:
                continue
            vs_q4 = f", vs plain Q4_K_M {ratio_text(e['vs_q4'], e.get('vs_q4_ci'))}" if e.get("vs_q4") else ""
            lines.append(
                f"  {name}: end-to-end {ratio_text(e.get('latency_speedup_vs_baseline'), e.get('latency_ci'))}{vs_q4}, "
                f"decode {ratio_text(e['speedup_vs_baseline'], e.get('speedup_ci'))}, "
                f"TTFT {ratio_text(e.get('ttft_vs_baseline'), e.get('ttft_ci'))}"
                + (f"; cap {e['cap']['speedup']:.2f}x at k = {e['cap']['k']} ({_cap_source(e['cap'])} acceptance "
                   f"{e['cap']['acceptance']:.0%})" + _end_to_end_cap(e['cap']) if e.get("cap") else "")
            )
        share = result["routing"].get(workload, {})
        lines.append("routing: " + ", ".join(f"{lvl} {share.get(lvl, 0):.0%}" for lvl in ("low", "medium", "high")))
    costs = result["batch_cost_ms"]
    f16 = costs.get("f16", {})
    if f16:
        lines.append("")
        # Each tier's own verify curve, up to the batch it may verify exactly (a bounded tier stops earlier).
        for tier, row in costs.items():
            if len(row) > 1:
                curve = ", ".join(f"v({n})={t / row[1]:.2f}" for n, t in row.items())
                lines.append(f"batch cost v(n) of {tier}: {curve}")
        for tier, row in costs.items():
            if tier != "f16":
                lines.append(f"draft cost c of {tier}: {row[1] / f16[1]:.2f}")
    lines.append(f"peak RSS {result['peak_rss_mb']:.0f} MB")
    if result.get("memory"):
        lines += ["", format_memory(result["memory"])]
    if result.get("energy"):
        lines.append(f"energy: {result['energy']}")
    for name, why in (result.get("skipped") or {}).items():
        lines.append(f"skipped {name}: {why}")
    return "\n".join(lines)


# The paper (Qwen2.5-7B, its own hardware): latency baseline -> SpecQuant, acceptance, routing.
PAPER = {
    "mmlu": {"baseline_s": 4.07, "specquant_s": 3.01, "speedup": 1.35, "acceptance": 0.661},
    "alpaca": {"baseline_s": 6.42, "specquant_s": 4.50, "speedup": 1.43, "acceptance": 0.609},
    "gsm8k": {"baseline_s": 8.83, "specquant_s": 6.43, "speedup": 1.37, "acceptance": 0.579},
}
PAPER_ROUTING = {"low": 0.28, "medium": 0.52, "high": 0.20}


def headline_config(result: dict[str, Any]) -> str:
    """The configuration that stands for SpecQuant in the report: a routed preset if one ran."""
    names = [c["name"] for c in result["configs"]]
    for preferred in ("auto", "fast", "balanced", "exact", "paper"):
        if preferred in names:
            return preferred
    return names[-1]


def _times(x: float | None) -> str:
    return "-" if x is None else f"{x:.2f}x"


def _fmt(x: float | None, spec: str) -> str:
    return "-" if x is None else format(x, spec)


def write_report(result: dict[str, Any], path: Path) -> None:
    """report.md: Table I (latency, speed-up), Table II (accuracy, fidelity, acceptance), routing; the
    paper's figures beside ours, for a different model and hardware."""
    ours, base = headline_config(result), result["baseline"]
    model = result["model"].get("name", "?")
    recon = " (f16 reconstructed from a quantized release)" if result["model"].get("reconstructed") else ""
    m = result["machine"]
    lines = [
        f"# SpecQuant benchmark: {model}{recon}",
        "",
        f"Machine: {m['cpu']}, {m['physical_cores']} cores, {m['ram_total_gb']} GB RAM, GPUs: "
        f"{', '.join(g['name'] for g in m['gpus']) or 'none'}. "
        f"llama-cpp-python {result['versions'].get('llama-cpp-python')}.",
        f"Baseline `{base}`; SpecQuant row `{ours}`; {result['max_tokens']} new tokens; medians over prompts.",
        "The paper's figures are for Qwen2.5-7B on its own hardware: compare shapes, not numbers.",
        "",
        "## Table I: latency and speed-up",
        "",
        "| workload | baseline latency (s) | SpecQuant latency (s) | end-to-end (90% interval) "
        "| speed-up (decode tok/s) | cost model's cap | efficiency | paper: baseline -> SpecQuant (s) "
        "| paper speed-up |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for workload, rows in result["summary"].items():
        b, o, p = rows.get(base, {}), rows.get(ours, {}), PAPER.get(workload)
        paper = f"{p['baseline_s']} -> {p['specquant_s']}" if p else "-"
        cap = o.get("cap")
        lines.append(
            f"| {workload} | {_fmt((b.get('latency_s') or {}).get('median'), '.2f')} | "
            f"{_fmt((o.get('latency_s') or {}).get('median'), '.2f')} | "
            f"{ratio_text(o.get('latency_speedup_vs_baseline'), o.get('latency_ci'))} | "
            f"{_times(o.get('speedup_vs_baseline'))} | {_times(cap and cap['speedup'])} | "
            f"{_fmt(o.get('latency_efficiency'), '.2f')} | {paper} | {_times(p and p['speedup'])} |"
        )
    lines += [
        "",
        "## Table II: accuracy, fidelity and acceptance",
        "",
        "| workload | baseline accuracy | SpecQuant accuracy | same text as baseline | token agreement | acceptance "
        "| paper acceptance |",
        "|---|---|---|---|---|---|---|",
    ]
    for workload, rows in result["summary"].items():
        b, o, p = rows.get(base, {}), rows.get(ours, {}), PAPER.get(workload)
        fid = o.get("fidelity") or {}
        lines.append(
            f"| {workload} | {_pct(b.get('accuracy'))} | {_pct(o.get('accuracy'))} | "
            f"{_pct(fid.get('exact_match_rate'))} | {_pct(fid.get('token_agreement'))} | {_pct(o.get('acceptance'))} "
            f"| {_pct(p and p['acceptance'])} |"
        )
    lines += ["", "## Routing", "", "| workload | low | medium | high |", "|---|---|---|---|"]
    for workload, share in result["routing"].items():
        lines.append(f"| {workload} | {share['low']:.0%} | {share['medium']:.0%} | {share['high']:.0%} |")
    lines.append(
        f"| paper (all) | {PAPER_ROUTING['low']:.0%} | {PAPER_ROUTING['medium']:.0%} | {PAPER_ROUTING['high']:.0%} |"
    )
    lines += ["", *frontier_lines(result)]
    lines += ["", "## All configurations", "", "```", format_table(result).strip(), "```", ""]
    if result.get("interrupted"):
        lines.insert(2, "**Interrupted: partial results.**\n")
    path.write_text("\n".join(lines))


def write_plots(result: dict[str, Any], out: Path) -> list[Path]:
    """tok/s per configuration per workload, acceptance against speed-up, and the frontier (speed against
    plain Q4_K_M over agreement, per workload) (needs matplotlib)."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return []
    workloads = list(result["summary"])
    names = [c["name"] for c in result["configs"]]
    fig, ax = plt.subplots(figsize=(max(6, 1.2 * len(names) * len(workloads) / 2), 4))
    width = 0.8 / max(len(names), 1)
    for j, name in enumerate(names):
        vals = [((result["summary"][w].get(name) or {}).get("tok_per_s") or {}).get("median") or 0 for w in workloads]
        ax.bar([i + j * width for i in range(len(workloads))], vals, width, label=name)
    ax.set_xticks([i + 0.4 - width / 2 for i in range(len(workloads))], workloads)
    ax.set_ylabel("decode tok/s (median)")
    ax.legend(fontsize=7, ncol=2)
    fig.tight_layout()
    speed = out / "tok_per_s.png"
    fig.savefig(speed, dpi=120)
    plt.close(fig)
    fig, ax = plt.subplots(figsize=(5, 4))
    for w in workloads:
        for name, e in result["summary"][w].items():
            if e.get("acceptance") is not None and e.get("speedup_vs_baseline") is not None:
                ax.scatter(e["acceptance"], e["speedup_vs_baseline"], label=f"{w}: {name}", s=18)
    for r in (result.get("sweep") or {}).get("rows", []):
        if r["measured_speedup"] is not None:
            ax.scatter(r["acceptance"], r["measured_speedup"], marker="x", color="black", s=18)
    ax.axhline(1.0, color="grey", lw=0.8)
    ax.set_xlabel("acceptance")
    ax.set_ylabel("speed-up vs baseline")
    ax.legend(fontsize=6)
    fig.tight_layout()
    scatter = out / "acceptance_vs_speedup.png"
    fig.savefig(scatter, dpi=120)
    plt.close(fig)
    frontier = plot_frontier(result, out, plt)
    return [speed, scatter] + ([frontier] if frontier else [])
