#!/usr/bin/env python3
"""bench_summary.py OUTDIR: issue 28's GPU targets against the figures in
OUTDIR/bench-*.jsonl and prof-*.jsonl (tests/bench/bench_gpu's lines, as
tests/gpu/run.sh writes them). One row per measured figure: what, the
figure, the target, met or not. A file or point that is missing is said,
never filled in."""
import glob
import json
import os
import sys


def load(path):
    with open(path) as f:
        return [json.loads(line) for line in f if line.startswith("{")]


def rows_for(name, points):
    """(what, figure, target, met) for one file's points. A profiled
    file's steps are slowed by the timer (each op waited for): only its
    attention figures count."""
    out = []
    for p in points:
        kind = p.get("point")
        if "skipped" in p:
            out.append((f"{name} decode b{p['batch']} ctx {p['context']}",
                        "skipped: " + p["skipped"], "", ""))
        elif kind == "prefill" and "attention_ms" in p:  # profiled: the split
            out.append((f"{name} prefill {p['tokens']}: attention / matmul",
                        f"{p['attention_ms']:.0f} / {p['matmul_ms']:.0f} ms of {p['ms']:.0f}",
                        "", ""))
        elif kind == "decode" and "attention_pct_peak" in p:
            if p["context"] >= 4096:  # the target is at 4k
                out.append((f"{name} attention b{p['batch']} ctx {p['context']}",
                            f"{p['attention_pct_peak']:.1f}% ({p['attention_gbs']:.0f} GB/s, "
                            f"{p['attention_ms']:.2f} ms)", ">= 70%",
                            p["attention_pct_peak"] >= 70))
        elif kind == "decode" and p["batch"] == 1:
            out.append((f"{name} decode b1 ctx {p['context']} (HBM)",
                        f"{p['pct_peak_bw']:.1f}% ({p['gbs']:.0f} GB/s, "
                        f"{p['step_ms_1row']:.2f} ms)", ">= 70%",
                        p["pct_peak_bw"] >= 70))
        elif kind == "prefill":
            out.append((f"{name} prefill {p['tokens']} (BF16 peak)",
                        f"{p['pct_peak_bf16']:.1f}% ({p['tflops']:.2f} TFLOP/s, "
                        f"{p['tok_s']:.0f} tok/s)", ">= 60%", p["pct_peak_bf16"] >= 60))
        elif kind == "overlap":
            out.append((f"{name} two streams together / apart",
                        f"{p['ratio']:.3f}", "<= 0.75", p["ratio"] <= 0.75))
    return out


def main():
    if len(sys.argv) != 2:
        print("usage: bench_summary.py OUTDIR", file=sys.stderr)
        return 2
    files = sorted(glob.glob(os.path.join(sys.argv[1], "bench-*.jsonl")) +
                   glob.glob(os.path.join(sys.argv[1], "prof-*.jsonl")))
    rows = []
    for path in files:
        name = os.path.basename(path)[:-len(".jsonl")]
        points = load(path)
        if not points:
            rows.append((name, "no figures (see the log)", "", ""))
        rows.extend(rows_for(name, points))
    print(f"{'figure':48} {'measured':40} {'target':8} met")
    for what, fig, target, met in rows:
        mark = "" if met == "" else ("yes" if met else "NO")
        print(f"{what:48} {fig:40} {target:8} {mark}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
