#!/usr/bin/env python3
"""tests/bench/disk_write_load.py DIR SECONDS [FILES_PER_S] [BYTES]: writes
files of BYTES (default 368,784: one SmolLM2 F16 page record) at
FILES_PER_S (default 60: what `disk_throughput.sh` makes the tier write)
into DIR through the page cache, each to a .tmp name renamed to .kvp, as
the disk tier does, and keeps them. Run beside `trellis bench serve`
without the tier, it shows what writing that many bytes to this
machine's disk costs a process that writes nothing itself."""
import os
import sys
import time

folder, seconds = sys.argv[1], float(sys.argv[2])
rate = float(sys.argv[3]) if len(sys.argv) > 3 else 60.0
size = int(sys.argv[4]) if len(sys.argv) > 4 else 368784
os.makedirs(folder, exist_ok=True)
payload = os.urandom(size)
start, n = time.monotonic(), 0
while (now := time.monotonic()) - start < seconds:
    while n < (now - start) * rate:
        tmp, final = f"{folder}/{n}.tmp", f"{folder}/{n}.kvp"
        with open(tmp, "wb") as f:
            f.write(payload)
        os.rename(tmp, final)
        n += 1
    time.sleep(0.02)
print(f"{n} files, {n * size / 1e6:.0f} MB in {seconds:.0f} s", file=sys.stderr)
