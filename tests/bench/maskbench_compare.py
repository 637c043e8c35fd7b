#!/usr/bin/env python3
"""MaskBench side by side: Trellis and the peer engines on the same sample and vocabulary.

  maskbench_compare.py [DATA.jsonl.gz] [--model MODEL.gguf] [--limit N] [--timeout S]
                       [--engines xgr,llg,outlines] [--venv DIR] [--trellis PATH] [--out DIR]
                       [--setup] [--skip-peers] [--skip-trellis]

Runs ../shared/tools/maskbench_peers.py (xgrammar, llguidance, outlines-core; MaskBench protocol,
one thread, flexible whitespace) in a venv outside the repository, then `trellis bench maskbench`
on the same data, limit, timeout and model, and prints one markdown table with every engine's
row (MaskBench's rows: TBM and TTFM avg and p25..p100 in microseconds, tokens, schemas, passing,
compile / validation / invalidation errors, timeouts, crashes). Both write their per-schema CSVs
and summaries under --out.

--setup creates the venv (default ~/.cache/trellis/maskbench-venv) and installs what
maskbench_peers.py's docstring lists: gguf, llama-cpp-python, llguidance, outlines-core, xgrammar
(which pulls in torch). Defaults: DATA = ../shared/data/maskbench-dev.jsonl.gz, MODEL = the cached
SmolLM2, TRELLIS = build/trellis, --limit 200 --timeout 30 (the issue's reference run).
The full run is long (the peers' docstring: about an hour for 200 schemas with all three engines
on two cores); run it on a quiet machine.
"""

import argparse
import json
import os
import shutil
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
PEER_PACKAGES = ["gguf", "llama-cpp-python", "llguidance", "outlines-core", "xgrammar"]


def shared_dir():
    env = os.environ.get("TRELLIS_SHARED")
    if env:
        return env
    for up in ("..", os.path.join("..", "..")):
        d = os.path.normpath(os.path.join(ROOT, up, "shared"))
        if os.path.isdir(d):
            return d
    return os.path.normpath(os.path.join(ROOT, "..", "shared"))


def default_model():
    if os.environ.get("TRELLIS_MODEL"):
        return os.environ["TRELLIS_MODEL"]
    cache = os.environ.get("TRELLIS_CACHE") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "trellis")
    return os.path.join(cache, "models", "SmolLM2-135M-Instruct.Q4_1.gguf")


def die(msg):
    sys.stderr.write("maskbench_compare: " + msg + "\n")
    sys.exit(2)


def setup_venv(venv):
    py = os.path.join(venv, "bin", "python")
    if not os.path.exists(py):
        subprocess.check_call([sys.executable, "-m", "venv", venv])
    subprocess.check_call([py, "-m", "pip", "install", "-q", "--upgrade", "pip"])
    subprocess.check_call([py, "-m", "pip", "install", "-q"] + PEER_PACKAGES)


def run_json(cmd, log_path):
    sys.stderr.write("$ " + " ".join(cmd) + "\n")
    with open(log_path, "w") as log:
        p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=log, text=True)
    if p.returncode != 0:
        die("%s failed (exit %d); see %s" % (cmd[0], p.returncode, log_path))
    try:
        return json.loads(p.stdout)
    except ValueError:
        die("%s printed no JSON summary; see %s" % (cmd[0], log_path))


def fmt(key, v):
    if v is None:
        return "-"
    if key.startswith("TBM") or key.startswith("TTFM"):
        return "%.1f" % v if v < 10 else "{:,.0f}".format(v)
    return "{:,}".format(v) if isinstance(v, int) else str(v)


def table(columns):
    """columns: list of (name, summary dict) -> markdown"""
    keys = []
    for _, s in columns:
        for k in s:
            if k not in keys:
                keys.append(k)
    head = ["metric"] + [n for n, _ in columns]
    rows = [head] + [[k] + [fmt(k, s.get(k)) for _, s in columns] for k in keys]
    w = [max(len(r[i]) for r in rows) for i in range(len(head))]
    out = []
    for j, r in enumerate(rows):
        out.append("| " + " | ".join([r[0].ljust(w[0])] + [r[i].rjust(w[i]) for i in range(1, len(r))]) + " |")
        if j == 0:
            out.append("|:" + "-" * (w[0] + 1) + "|" + "|".join("-" * (x + 1) + ":" for x in w[1:]) + "|")
    return "\n".join(out) + "\n"


def main():
    shared = shared_dir()
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[1],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("data", nargs="?", default=os.path.join(shared, "data", "maskbench-dev.jsonl.gz"))
    ap.add_argument("--model", default=default_model())
    ap.add_argument("--limit", type=int, default=200)
    ap.add_argument("--timeout", type=float, default=30.0)
    ap.add_argument("--engines", default=None, help="peer engines (default: every importable one)")
    ap.add_argument("--venv", default=os.path.expanduser("~/.cache/trellis/maskbench-venv"))
    ap.add_argument("--trellis", default=os.path.join(ROOT, "build", "trellis"))
    ap.add_argument("--peers-script", default=os.path.join(shared, "tools", "maskbench_peers.py"))
    ap.add_argument("--out", default="maskbench-compare")
    ap.add_argument("--setup", action="store_true", help="create the venv and install the peers")
    ap.add_argument("--skip-peers", action="store_true")
    ap.add_argument("--skip-trellis", action="store_true")
    a = ap.parse_args()
    if a.setup:
        setup_venv(a.venv)
    for path, what in ((a.data, "data"), (a.model, "model")):
        if not os.path.exists(path):
            die("%s not found: %s" % (what, path))
    os.makedirs(a.out, exist_ok=True)
    columns = []
    common = ["--limit", str(a.limit), "--timeout", str(a.timeout)]
    if not a.skip_peers:
        py = os.path.join(a.venv, "bin", "python")
        if not os.path.exists(py):
            die("no venv at %s (run with --setup)" % a.venv)
        if not os.path.exists(a.peers_script):
            die("peers' runner not found: %s" % a.peers_script)
        cmd = [py, a.peers_script, a.data, "--model", a.model, "--json",
               "--out", os.path.join(a.out, "peers")] + common
        if a.engines:
            cmd += ["--engines", a.engines]
        doc = run_json(cmd, os.path.join(a.out, "peers.log"))
        for key, e in doc.get("engines", {}).items():
            if "summary" in e:
                columns.append((("%s %s" % (e["name"], e.get("version") or "")).strip(), e["summary"]))
            else:
                sys.stderr.write("peer %s not run: %s\n" % (key, e.get("error")))
    if not a.skip_trellis:
        if not os.path.exists(a.trellis):
            die("trellis not built: %s" % a.trellis)
        cmd = [a.trellis, "bench", "maskbench", a.data, "-m", a.model, "--json", "--quiet",
               "--csv", os.path.join(a.out, "trellis.csv")] + common
        doc = run_json(cmd, os.path.join(a.out, "trellis.log"))
        columns.insert(0, ("Trellis", doc["summary"]))
        with open(os.path.join(a.out, "trellis.json"), "w") as f:
            json.dump(doc, f, indent=2)
    if not columns:
        die("no engine produced a summary")
    md = table(columns)
    md += ("\nTimes in µs (TBM = mask + check + advance per token, TTFM = compile); %d schemas of %s, "
           "model %s, timeout %g s, one thread each.\n" % (a.limit, os.path.basename(a.data),
                                                            os.path.basename(a.model), a.timeout))
    with open(os.path.join(a.out, "table.md"), "w") as f:
        f.write(md)
    sys.stdout.write(md)


if __name__ == "__main__":
    main()
