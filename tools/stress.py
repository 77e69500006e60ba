#!/usr/bin/python3
"""fsx-style stress of a real mount, for as long as asked:
    /usr/bin/python3 tools/stress.py [--minutes M] [--threads N] [--seed S]
                     [--ckptfs PATH] [--cache-size SIZE]
Mounts a generated Llama checkpoint through the HF -> Megatron mapping (in
the foreground, so a sanitizer build's reports are seen), then N threads do
seeded random operations until the time is up: reads of random ranges of
random files (tensors/ and model.safetensors) checked against `convert`'s
output, open/close storms, stat/listxattr, stats.json, and reader processes
killed in the middle of reads. A watchdog fails the run if the daemon stops
answering. On a mismatch it prints the recent operations of that thread and
the seed to replay. Prints reads done and mismatches (must be 0)."""
import argparse
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tests", "cli"))
import ckref  # noqa: E402

ap = argparse.ArgumentParser()
ap.add_argument("--minutes", type=float, default=1.0)
ap.add_argument("--threads", type=int, default=16)
ap.add_argument("--seed", type=int, default=int(time.time()))
ap.add_argument("--ckptfs", default=os.path.join(ROOT, "build", "src", "ckptfs"))
ap.add_argument("--mkckpt", default=os.path.join(ROOT, "build", "tools", "mkckpt"))
ap.add_argument("--cache-size", default="1MiB")
ap.add_argument("--page-cache", action="store_true",
                help="let the kernel cache file data (default: -o direct_io, so every read reaches the daemon)")
a = ap.parse_args()
MAP = os.path.join(ROOT, "mappings", "llama-hf-to-megatron.json")
print(f"stress: seed {a.seed}, {a.threads} threads, {a.minutes} min, cache {a.cache_size}, {a.ckptfs}",
      flush=True)

work = tempfile.mkdtemp(prefix="ckptfs-stress-")
src, out, mnt = (os.path.join(work, x) for x in ("src", "conv", "mnt"))
ckref.run(a.mkckpt, "--model", "llama", "--preset", "small", "--layers", "2", "--dtype", "BF16",
          "--shards", "3", src)
ckref.run(a.ckptfs, "convert", src, out, "--mapping", MAP, "--quiet")
want = {"tensors/" + k: v[2].tobytes() for k, v in ckref.read_checkpoint_dir(out).items()}
with open(os.path.join(out, "model.safetensors"), "rb") as f:
    want["model.safetensors"] = f.read()
os.mkdir(mnt)
daemon = subprocess.Popen([a.ckptfs, "mount", src, mnt, "-f", "--mapping", MAP, "-o",
                           f"cache_size={a.cache_size},chunk=64KiB" + ("" if a.page_cache else ",direct_io")],
                          stderr=subprocess.PIPE, text=True)
while "mounted" not in (line := daemon.stderr.readline()):
    if not line:
        sys.exit("stress: the daemon did not mount")

deadline = time.time() + a.minutes * 60
names = sorted(want)
counts = [0] * a.threads
failures = []
last_progress = [time.time()]


def worker(i):
    rng = random.Random(a.seed * 1000 + i)
    log = []
    while time.time() < deadline and not failures:
        op = rng.random()
        name = rng.choice(names)
        path = os.path.join(mnt, name)
        data = want[name]
        if op < 0.75:  # a random range
            off = rng.randrange(len(data))
            n = rng.randrange(1, min(len(data) - off, 1 << 21) + 1)
            log.append(("read", name, off, n))
            fd = os.open(path, os.O_RDONLY)
            try:
                if rng.random() < 0.5:
                    os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_RANDOM)
                got = os.pread(fd, n, off)
            finally:
                os.close(fd)
            if got != data[off:off + n]:
                failures.append(f"thread {i}: {name} [{off}, {off + n}) differs; replay with "
                                f"--seed {a.seed}; recent ops: {log[-10:]}")
            counts[i] += 1
        elif op < 0.85:  # open/close storm
            log.append(("open-close", name))
            for _ in range(20):
                os.close(os.open(path, os.O_RDONLY))
        elif op < 0.95:  # metadata
            log.append(("meta", name))
            os.stat(path)
            if name.startswith("tensors/"):
                os.listxattr(path)
            json.load(open(os.path.join(mnt, ".ckptfs", "stats.json")))
        else:  # a reader killed mid-read
            log.append(("kill-reader", name))
            p = subprocess.Popen(["cat", path], stdout=subprocess.DEVNULL)
            time.sleep(rng.random() * 0.01)
            p.kill()
            p.wait()
        last_progress[0] = time.time()
        log = log[-50:]


def watchdog():
    while time.time() < deadline + 30:
        time.sleep(5)
        if time.time() - last_progress[0] > 120:
            failures.append("watchdog: no operation finished for 120 s (deadlock?)")
            os.kill(os.getpid(), signal.SIGTERM)
            return


threads = [threading.Thread(target=worker, args=(i,), daemon=True) for i in range(a.threads)]
threading.Thread(target=watchdog, daemon=True).start()
for t in threads:
    t.start()
for t in threads:
    t.join()
stats = json.load(open(os.path.join(mnt, ".ckptfs", "stats.json")))
subprocess.run(["fusermount3", "-u", mnt], check=False)
daemon.wait(timeout=120)
log = daemon.stderr.read()
bad = [l for l in log.splitlines() if any(x in l for x in ("Sanitizer", "runtime error", "ERROR"))]
subprocess.run(["rm", "-rf", work])
print(f"stress: {sum(counts)} reads checked, {len(failures)} mismatches, daemon exit {daemon.returncode}, "
      f"{stats['cache_evictions']} evictions, {stats['regions_evaluated']} regions evaluated", flush=True)
for f in failures[:3]:
    print("stress:", f)
for b in bad[:10]:
    print("stress: daemon:", b)
sys.exit(1 if failures or bad or daemon.returncode else 0)
