"""The prefix cache's disk tier through the server (--kv-cache-dir): the
folder and bound are reported, a long prompt's pages survive a restart
(SIGTERM) and are read back instead of computed, with the same greedy
output; /metrics counts them; /flush_cache forgets both tiers; a folder
another server holds, or one that cannot be created, is a clear error at
start."""
import os
import shutil
import subprocess
import tempfile

from conftest import BIN, Server

WORDS = ("the of and to in a is that for it as was with be by on not he this are or "
         "his from at which but have an they you were her she there been one all").split()


def long_prompt(seed, n=700):
    x = seed
    out = []
    for _ in range(n):
        x = (x * 6364136223846793005 + 1442695040888963407) % (1 << 64)
        out.append(WORDS[(x >> 33) % len(WORDS)])
    return " ".join(out)


def complete(s, prompt):
    status, r = s.post("/v1/completions", {"prompt": prompt, "max_tokens": 8,
                                           "temperature": 0})
    assert status == 200, r
    return r["choices"][0]["text"], r["usage"]


def metric(s, name):
    status, text = s.get("/metrics")
    assert status == 200
    for line in text.splitlines():
        if line.startswith(name + " "):
            return float(line.split()[1])
    raise AssertionError(f"{name} not in /metrics")


def start(d, *args):
    return Server("--ctx", "1024", "--kv-cache-dir", d, *args)


def test_restart_reads_back_and_flush_forgets():
    d = tempfile.mkdtemp(prefix="trellis-kvd-")
    try:
        p = long_prompt(7)
        s = start(d, "--kv-cache-disk-mb", "256")
        try:
            status, info = s.get("/server_info")
            assert info["kv_cache_dir"].startswith(d + "/"), info
            assert info["kv_cache_disk_mb"] == 256, info
            text1, u1 = complete(s, p)
            assert u1["prompt_tokens"] > 500, u1
        finally:
            s.stop()  # the cached pages are written at exit
        files = [f for sub in os.listdir(d) for f in os.listdir(os.path.join(d, sub))
                 if f.endswith(".kvp")]
        assert len(files) >= u1["prompt_tokens"] // 16 - 1, files

        s = start(d)
        try:
            assert metric(s, "trellis_kv_disk_pages") >= len(files) - 1
            text2, u2 = complete(s, p)
            assert text2 == text1, (text1, text2)
            hit = metric(s, "trellis_kv_disk_hit_tokens_total")
            assert hit >= u1["prompt_tokens"] - 32, hit
            assert metric(s, "trellis_kv_disk_pages_read_total") >= hit // 16
            assert s.engine()["disk_hit_tokens"] == hit
            # admission found them cached: not counted as memory hits
            assert metric(s, "trellis_kv_memory_hit_tokens_total") < 32
            status, _ = s.post("/flush_cache", {})
            assert status == 200
            assert metric(s, "trellis_kv_disk_pages") == 0
            text3, _ = complete(s, p)
            assert text3 == text1
            assert metric(s, "trellis_kv_disk_hit_tokens_total") == hit  # nothing new read
        finally:
            s.stop()
    finally:
        shutil.rmtree(d, ignore_errors=True)


def test_folder_in_use_or_impossible_is_a_clear_error():
    d = tempfile.mkdtemp(prefix="trellis-kvd-")
    try:
        s = start(d)
        try:
            r = subprocess.run([BIN, "serve", "--port", "0", "--threads", "2", "--kv-mem", "64",
                                "--ctx", "1024", "--kv-cache-dir", d],
                               capture_output=True, text=True, timeout=120)
            assert r.returncode != 0
            assert "in use by another process" in r.stderr + r.stdout, r.stderr
        finally:
            s.stop()
        blocker = os.path.join(d, "file")
        open(blocker, "w").close()
        r = subprocess.run([BIN, "serve", "--port", "0", "--threads", "2", "--kv-mem", "64",
                            "--kv-cache-dir", os.path.join(blocker, "sub")],
                           capture_output=True, text=True, timeout=120)
        assert r.returncode != 0
        assert "cannot create" in r.stderr + r.stdout, r.stderr
    finally:
        shutil.rmtree(d, ignore_errors=True)
