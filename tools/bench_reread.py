#!/usr/bin/env python3
"""Per-file costs of a cached re-read (issue #23): every file of ckptfs'
identity tensors/ (one file per tensor: 75 on the default model) read again
from the page cache, against tools/passthrough.c re-reading the source's two
safetensors files, side by side in interleaved rounds. The bytes are the
same, so the ratio is what the per-file round trips (OPEN, RELEASE, lookups)
cost. Default model: Llama, hidden 1024, GQA 16/4, 8 layers, BF16, 2 shards
(about 300 MB): the shape of the independent benchmark in the issue.

usage: /usr/bin/python3 tools/bench_reread.py [--rounds N] [--reps N]"""
import argparse
import os
import statistics
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench as b  # noqa: E402  (build paths, mounts, the reader)


def rereads(m, reps):
    files = m.files()
    b.read_files(files)  # the first read fills the page cache
    out = []
    for _ in range(reps):
        t0 = time.perf_counter()
        n = b.read_files(files)
        out.append((time.perf_counter() - t0, n))
    return len(files), out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--reps", type=int, default=10)
    a = ap.parse_args()
    b.prepare()
    with tempfile.TemporaryDirectory() as d:
        src = os.path.join(d, "src")
        b.run(b.MKCKPT, "--model", "llama", "--hidden", "1024", "--intermediate", "2816", "--layers", "8",
              "--heads", "16", "--kv-heads", "4", "--vocab", "32000", "--dtype", "BF16", "--shards", "2", src)
        pt, ck, nfiles = [], [], 0
        for _ in range(a.rounds):
            m = b.Passthrough(src)
            try:
                pt += rereads(m, a.reps)[1]
            finally:
                m.close()
            m = b.Ckptfs(src)
            try:
                nfiles, s = rereads(m, a.reps)
                ck += s
            finally:
                m.close()
        base = b.row("passthrough FUSE, cached re-read of the 2 source files", pt)
        b.row(f"ckptfs identity tensors/, cached re-read of its {nfiles} files", ck, base)
        per_file = (statistics.median(t for t, _ in ck) - statistics.median(t for t, _ in pt)) / nfiles
        print(f"per file beyond the passthrough: {per_file * 1e6:.0f} us")


if __name__ == "__main__":
    main()
