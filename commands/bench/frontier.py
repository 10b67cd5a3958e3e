"""The frontier (#61): each configuration's speed against plain Q4_K_M, what people run instead, beside what
its words are worth: each tier's figures against F16 (runtime.plan.quality, where that module is present) and,
per workload, its tokens' agreement with the baseline's. `frontier_lines` for the report, `plot_frontier` for
the picture of speed against agreement."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from commands.bench.stats import ratio_text


def tier_quality(model: Any, measure: bool = True, log=print) -> dict[str, dict[str, Any]] | None:
    """Each tier's figures against F16 (top-1 agreement, mean KL divergence, perplexity ratio) from
    runtime.plan.quality, measured if none are saved and `measure`; None where that module is absent (it
    lands apart) or the measurement fails (said in one line)."""
    try:
        from runtime.plan import quality
    except ImportError:
        return None
    try:
        figures = quality.load_or_measure(model) if measure else quality.cached(model)
    except Exception as e:  # the speeds stand without the quality figures
        log(f"quality figures not measured: {e}")
        return None
    if not figures:
        return None
    keep = ("top1", "kl_mean", "ppl_ratio")
    return {tier: {k: t.get(k) for k in keep} for tier, t in figures.get("tiers", {}).items()}


def _num(x: float | None, spec: str) -> str:
    return "-" if x is None else format(x, spec)


def frontier_lines(result: dict[str, Any]) -> list[str]:
    """report.md's frontier table: per workload and configuration, end to end against plain Q4_K_M and against
    the baseline (plain F16), the slowest prompt against Q4_K_M, the same text and token agreement as the
    baseline, and the answering tier's top-1 agreement and KL divergence against F16."""
    base, ref = result["baseline"], result.get("reference")
    lines = [
        "## The frontier: speed against what the words are worth",
        "",
        f"End to end against plain Q4_K_M (`{ref or 'not run'}`) and against `{base}`, paired per prompt (median, "
        "90% interval; the slowest prompt); the text against the baseline's; the answering tier against F16 on "
        "the reference text (top-1 agreement, mean KL divergence)"
        + ("." if result.get("quality") else "; quality figures not measured in this run."),
        "",
        f"| workload | configuration | vs plain Q4_K_M | slowest prompt | vs {base} | same text as {base} "
        "| token agreement | tier | top-1 vs F16 | KL vs F16 |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for workload, rows in result["summary"].items():
        for name, e in rows.items():
            fid, q = e.get("fidelity") or {}, e.get("quality") or {}
            lines.append(
                f"| {workload} | {name} | {ratio_text(e.get('vs_q4'), e.get('vs_q4_ci'))} | "
                f"{_num(e.get('vs_q4_min'), '.2f')}x | "
                f"{ratio_text(e.get('latency_speedup_vs_baseline'), e.get('latency_ci'))} | "
                f"{_num(fid.get('exact_match_rate'), '.0%')} | {_num(fid.get('token_agreement'), '.0%')} | "
                f"{q.get('tier', '-')} | {_num(q.get('top1'), '.3f')} | {_num(q.get('kl_mean'), '.4f')} |"
            )
    return [*lines, ""]


def plot_frontier(result: dict[str, Any], out: Path, plt: Any) -> Path | None:
    """frontier.png: per workload, each configuration's end-to-end speed against plain Q4_K_M (up) over its
    tokens' agreement with the baseline's (right); None when no configuration has both."""
    workloads = [w for w, rows in result["summary"].items()
                 if any(e.get("vs_q4") is not None and (e.get("fidelity") or {}).get("token_agreement") is not None
                        for e in rows.values())]
    if not workloads:
        return None
    fig, axes = plt.subplots(1, len(workloads), figsize=(4.5 * len(workloads), 4), squeeze=False)
    for ax, workload in zip(axes[0], workloads, strict=True):
        for name, e in result["summary"][workload].items():
            x, y = (e.get("fidelity") or {}).get("token_agreement"), e.get("vs_q4")
            if x is None or y is None:
                continue
            ax.scatter(x, y, s=18)
            ax.annotate(name, (x, y), fontsize=6, xytext=(3, 3), textcoords="offset points")
        ax.axhline(1.0, color="grey", lw=0.8)  # plain Q4_K_M's speed: the default's floor
        ax.set_title(workload)
        ax.set_xlabel(f"token agreement with {result['baseline']}")
        ax.set_ylabel("end-to-end speed vs plain Q4_K_M")
    fig.tight_layout()
    path = out / "frontier.png"
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path
