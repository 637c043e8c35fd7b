"""`trellis bench stream` against a running server: both paths answer,
every figure is a positive number, the ratios are printed, and a server
that is not there is a clear error (exit 1), not a hang."""
import re
import subprocess

from conftest import BIN


def run_bench(*args, timeout=300):
    p = subprocess.run([BIN, "bench", "stream", *args], capture_output=True, text=True,
                       timeout=timeout)
    return p.returncode, p.stdout, p.stderr


def test_both_paths_measured(server):
    rc, out, err = run_bench("--url", server.base, "--rounds", "2", "--requests", "2",
                             "--prompt-tokens", "16", "--max-tokens", "6", "--ctx", "2048",
                             "--kv-mem", "64")
    assert rc == 0, (out, err)
    rows = [l for l in out.splitlines() if re.match(r"^\d+\s+(http|in-proc)\s+\|", l)]
    assert [r.split()[1] for r in rows] == ["http", "in-proc"], out
    for r in rows:
        nums = [float(x) for x in re.findall(r"\d+\.\d+", r)]
        assert len(nums) == 6 and all(x > 0 for x in nums), r
    m = re.search(r"TTFT (\d+\.\d+) .*TPOT (\d+\.\d+) .*; 0 failed requests", out)
    assert m and float(m.group(1)) > 0 and float(m.group(2)) > 0, out


def test_no_server_is_an_error():
    import socket
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()  # nothing listens there now
    rc, out, err = run_bench("--url", f"http://127.0.0.1:{port}", "--rounds", "1",
                             "--requests", "1", "--max-tokens", "2", "--kv-mem", "64",
                             timeout=120)
    assert rc == 1, (out, err)
    assert f"cannot connect to 127.0.0.1:{port}" in err, err
