#!/usr/bin/python3
"""ckptfs benchmarks, one command (as root, needs /dev/fuse):
    /usr/bin/python3 tools/bench.py [--layers N] [--reps N]
Builds its inputs with mkckpt and prints, side by side in one run (median and
min-max over the repetitions, absolute figures beside the ratios):
  raw page-cache read of the source; a trivial passthrough FUSE daemon
  (tools/passthrough.c, same tuning) as the FUSE ceiling; the identity view
  (tensors/ and model.safetensors, first and second read); libckptfs
  in-process (tools/ckread.c) against the raw read; the Llama HF ->
  Megatron view, also with a cast to F32; model.gguf (F16, Q8_0) first
  reads, and against a numpy HF -> GGUF peer; `ckptfs diff` of two copies and
  of HF vs a Megatron copy through the inverse mapping (bytes per side);
  a numpy peer that converts and
  re-reads (today's workflow) vs mount + read; time to the first byte of a
  last-layer tensor; planning on sparse real-size presets and a 100k-key
  MoE; daemon peak RSS against the documented bound; concurrent readers;
  cold-cache reads where the page cache can be dropped.
First reads are timed from a fresh mount's listing to its last byte, on
both sides, in rounds that read every subject once (interleaved, so the
noise of a shared machine hits all of them alike) (the passthrough lists its directory too); mount start-up has
rows of its own, and the workflow row includes mount and unmount."""
import argparse
import json
import os
import statistics
import struct
import subprocess
import sys
import tempfile
import threading
import time


ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
B = os.path.join(ROOT, "build")
CKPTFS, MKCKPT, PT, CKREAD = (os.path.join(B, p) for p in ("src/ckptfs", "tools/mkckpt", "tools/passthrough",
                                                             "tools/ckread"))
MAPS = os.path.join(ROOT, "mappings")
MB = 1 << 20
np = None  # numpy, imported by prepare() once it is installed


def run(*a, **kw):
    return subprocess.run(list(a), check=True, capture_output=True, text=True, **kw)


def read_files(paths, buf=bytearray(MB)):
    n = 0
    for p in paths:
        with open(p, "rb", buffering=0) as f:
            while True:
                k = f.readinto(buf)
                if not k:
                    break
                n += k
    return n


class Ckptfs:
    def __init__(self, src, maps=(), opts=None, extra=()):
        self.dir = tempfile.mkdtemp(prefix="bench-")
        args = [CKPTFS, "mount", src, self.dir, "-f", *extra]
        for m in maps:
            args += ["--mapping", m]
        if opts:
            args += ["-o", opts]
        self.p = subprocess.Popen(args, stderr=subprocess.PIPE, text=True)
        while "mounted" not in (line := self.p.stderr.readline()):
            if not line:
                raise RuntimeError("ckptfs did not mount")

    def files(self):
        t = os.path.join(self.dir, "tensors")
        return [os.path.join(t, n) for n in sorted(os.listdir(t))]

    def stats(self):
        return json.load(open(os.path.join(self.dir, ".ckptfs", "stats.json")))

    def hwm_kib(self):
        for line in open(f"/proc/{self.p.pid}/status"):
            if line.startswith("VmHWM:"):
                return int(line.split()[1])

    def close(self):
        subprocess.run(["fusermount3", "-u", self.dir], check=False)
        self.p.wait(timeout=60)
        os.rmdir(self.dir)


class Passthrough:
    def __init__(self, src):
        self.dir = tempfile.mkdtemp(prefix="bench-pt-")
        run(PT, src, self.dir)  # returns once mounted

    def files(self):  # listed like ckptfs' tensors/: the same work on both sides
        return [os.path.join(self.dir, n) for n in sorted(os.listdir(self.dir))
                if n.endswith(".safetensors")]

    def close(self):
        subprocess.run(["fusermount3", "-u", self.dir], check=False)
        os.rmdir(self.dir)


def measure(fn, reps):
    out = []
    for _ in range(reps):
        t0 = time.perf_counter()
        nbytes = fn()
        out.append((time.perf_counter() - t0, nbytes))
    return out


def measure_fresh(factory, reader, reps, cold=False):
    """A first read: each repetition mounts afresh (not timed: mount
    start-up is its own row), optionally drops the page cache, then times the
    reader (listing and reading every file)."""
    out = []
    for _ in range(reps):
        m = factory()
        try:
            if cold:
                drop_caches()
            t0 = time.perf_counter()
            nbytes = reader(m)
            out.append((time.perf_counter() - t0, nbytes))
        finally:
            m.close()
    return out


def gbps(samples):
    rates = sorted(n / t / 1e9 for t, n in samples)
    return statistics.median(rates), rates[0], rates[-1]


ROWS = []


def row(name, samples, base=None, unit="GB/s"):
    med, lo, hi = gbps(samples) if unit == "GB/s" else samples
    ratio = f"{med / base:5.2f}" if base else "     "
    ROWS.append((name, med, lo, hi, ratio, unit))
    print(f"{name:58s} {med:8.2f} {unit:5s} [{lo:.2f}-{hi:.2f}] {ratio}", flush=True)
    return med


def drop_caches():
    try:
        os.sync()
        with open("/proc/sys/vm/drop_caches", "w") as f:
            f.write("3")
        return True
    except OSError:
        return False


def memmap_bf16(src):
    """The peers' first step: memory-map every shard, BF16 tensors as uint16."""
    t = {}
    for f in sorted(os.listdir(src)):
        if not f.endswith(".safetensors"):
            continue
        mm = np.memmap(os.path.join(src, f), dtype=np.uint8, mode="r")
        n = int(np.frombuffer(mm[:8], np.uint64)[0])
        hdr = json.loads(bytes(mm[8:8 + n]))
        hdr.pop("__metadata__", None)
        for k, e in hdr.items():
            b, en = e["data_offsets"]
            t[k] = mm[8 + n + b:8 + n + en].view(np.uint16).reshape(e["shape"])
    return t


def peer_convert(src, out, cfg):
    """Today's workflow, as a competent numpy user writes it: memory-map the
    shards, build the Megatron tensors with numpy, write one converted file,
    read it back."""
    t = memmap_bf16(src)
    H, nh, ng = cfg["hidden_size"], cfg["num_attention_heads"], cfg["num_key_value_heads"]
    o = {"embedding.word_embeddings.weight": t["model.embed_tokens.weight"],
         "decoder.final_layernorm.weight": t["model.norm.weight"],
         "output_layer.weight": t["lm_head.weight"]}
    for L in range(cfg["num_hidden_layers"]):
        p, d = f"model.layers.{L}.", f"decoder.layers.{L}."
        q, k, v = (t[p + f"self_attn.{x}_proj.weight"] for x in "qkv")
        o[d + "self_attention.linear_qkv.weight"] = np.concatenate(
            [q.reshape(ng, -1, H), k.reshape(ng, -1, H), v.reshape(ng, -1, H)], 1).reshape(-1, H)
        o[d + "self_attention.linear_qkv.layer_norm_weight"] = t[p + "input_layernorm.weight"]
        o[d + "self_attention.linear_proj.weight"] = t[p + "self_attn.o_proj.weight"]
        o[d + "mlp.linear_fc1.weight"] = np.concatenate([t[p + "mlp.gate_proj.weight"],
                                                         t[p + "mlp.up_proj.weight"]], 0)
        o[d + "mlp.linear_fc1.layer_norm_weight"] = t[p + "post_attention_layernorm.weight"]
        o[d + "mlp.linear_fc2.weight"] = t[p + "mlp.down_proj.weight"]
    hdr, off = {"__metadata__": {"format": "pt"}}, 0
    for k, a in o.items():
        hdr[k] = {"dtype": "BF16", "shape": list(a.shape), "data_offsets": [off, off + a.nbytes]}
        off += a.nbytes
    text = json.dumps(hdr).encode()
    text += b" " * (-len(text) % 8)
    with open(out, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text)
        for a in o.values():
            np.ascontiguousarray(a).tofile(f)
    return read_files([out])


def peer_gguf(src, out, cfg, qtype):
    """convert_hf_to_gguf.py's work in numpy, as a competent user writes it:
    memory-map the shards, permute Q/K, cast (F16) or quantize (Q8_0, blocks
    of 32: d = amax/127, q = round(x/d)) the matrices, keep 1-D tensors F32,
    write one GGUF (header, infos, aligned data), read it back."""
    t = memmap_bf16(src)
    nh, nkv = cfg["num_attention_heads"], cfg["num_key_value_heads"]

    def f32(a):
        return (a.astype(np.uint32) << 16).view(np.float32)

    def permute(w, heads):
        r, c = w.shape
        return w.reshape(heads, 2, r // heads // 2, c).swapaxes(1, 2).reshape(r, c)
    infos, blobs, off = [], [], 0
    for k, a in t.items():
        w = f32(a)
        if k.endswith("q_proj.weight"):
            w = permute(w, nh)
        elif k.endswith("k_proj.weight"):
            w = permute(w, nkv)
        if w.ndim == 1:
            raw, ty = w.tobytes(), 0
        elif qtype == "F16":
            raw, ty = w.astype(np.float16).tobytes(), 1
        else:
            x = w.reshape(-1, 32)
            d = np.abs(x).max(1, keepdims=True) / 127
            q = np.round(x / np.where(d == 0, 1, d)).astype(np.int8)
            raw = np.concatenate([d.astype(np.float16).view(np.uint8), q.view(np.uint8)], 1).tobytes()
            ty = 8
        infos.append((k, list(reversed(w.shape)), ty, off))
        blobs.append(raw)
        off += (len(raw) + 31) // 32 * 32
    head = bytearray(b"GGUF" + struct.pack("<IQQ", 3, len(infos), 0))
    for k, dims, ty, o in infos:
        e = k.encode()
        head += struct.pack("<Q", len(e)) + e + struct.pack("<I", len(dims))
        head += b"".join(struct.pack("<Q", x) for x in dims) + struct.pack("<IQ", ty, o)
    head += b"\0" * (-len(head) % 32)
    with open(out, "wb") as f:
        f.write(head)
        for raw in blobs:
            f.write(raw + b"\0" * (-len(raw) % 32))
    return read_files([out])


def prepare():
    """One command from a clean clone: the dependencies (tools/install-deps.sh,
    silent when present) and an up-to-date build/ (ckptfs, mkckpt, passthrough)."""
    global np
    subprocess.run(["bash", os.path.join(ROOT, "tools", "install-deps.sh")], check=True)
    if not os.path.exists(os.path.join(B, "build.ninja")):
        subprocess.run(["meson", "setup", B, ROOT], check=True, stdout=subprocess.DEVNULL)
    subprocess.run(["meson", "compile", "-C", B], check=True, stdout=subprocess.DEVNULL)
    import numpy as np  # noqa: F811 (python3-numpy: installed just above)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--layers", type=int, default=6)
    ap.add_argument("--reps", type=int, default=3)
    a = ap.parse_args()
    prepare()
    work = tempfile.mkdtemp(prefix="ckptfs-bench-")
    src = os.path.join(work, "llama")
    run(MKCKPT, "--model", "llama", "--hidden", "2048", "--intermediate", "5632", "--heads", "16",
        "--kv-heads", "4", "--vocab", "32000", "--layers", str(a.layers), "--dtype", "BF16",
        "--shards", "4", src)
    cfg = json.load(open(os.path.join(src, "config.json")))
    shards = sorted(f for f in os.listdir(src) if f.endswith(".safetensors"))
    total = sum(os.path.getsize(os.path.join(src, f)) for f in shards)
    meg = os.path.join(MAPS, "llama-hf-to-megatron.json")
    to_f32 = os.path.join(work, "to-f32.json")
    json.dump({"rules": [{"from": "{k:path}", "to": "{k}", "expr": "x.to(F32)"}]}, open(to_f32, "w"))
    print(f"input: llama, {a.layers} layers, BF16, {total / 1e6:.0f} MB in {len(shards)} files; "
          f"{os.cpu_count()} cores; reps {a.reps}; figures: median [min-max] ratio\n")
    R = a.reps
    read_files([os.path.join(src, f) for f in shards])  # warm the page cache
    raw = row("raw read of the source files (page cache)",
              measure(lambda: read_files([os.path.join(src, f) for f in shards]), R))

    # first reads, interleaved: each round mounts and reads every subject once,
    # so a slow spell of this shared machine hits all of them alike
    flat = lambda m: read_files([os.path.join(m.dir, "model.safetensors")])  # noqa: E731
    every = lambda m: read_files(m.files())  # noqa: E731
    subjects = [("pt", lambda: Passthrough(src), every), ("id", lambda: Ckptfs(src), every),
                ("flat", lambda: Ckptfs(src), flat), ("meg", lambda: Ckptfs(src, [meg]), every),
                ("f32", lambda: Ckptfs(src, [meg, to_f32]), every)]
    gguf = lambda m: read_files([os.path.join(m.dir, "model.gguf")])  # noqa: E731
    subjects += [("gguf16", lambda: Ckptfs(src, opts="gguf=F16,gguf_vocab=none"), gguf),
                 ("gguf8", lambda: Ckptfs(src, opts="gguf=Q8_0,gguf_vocab=none"), gguf)]
    first = {k: [] for k, _, _ in subjects}
    for _ in range(R):
        for k, factory, reader in subjects:
            first[k] += measure_fresh(factory, reader, 1)
    ceiling = row("passthrough FUSE, first read (the FUSE ceiling)", first["pt"], raw)
    row("ckptfs identity tensors/, first read  vs ceiling", first["id"], ceiling)
    row("ckptfs identity model.safetensors, first read vs ceiling", first["flat"], ceiling)
    row("ckptfs Megatron view tensors/, first read vs ceiling", first["meg"], ceiling)
    row("ckptfs Megatron view + cast to F32, first read vs ceiling", first["f32"], ceiling)
    row("ckptfs model.gguf F16, first read vs ceiling", first["gguf16"], ceiling)
    row("ckptfs model.gguf Q8_0, first read vs ceiling", first["gguf8"], ceiling)

    # libckptfs in-process (tools/ckread.c, a fresh process each time, one
    # reader thread per core): no FUSE, so against the raw page-cache read
    def lib_read(*maps):
        args = [CKREAD, src, "-j", str(os.cpu_count())]
        for m in maps:
            args += ["-o", "mapping=" + m]
        r = json.loads(run(*args).stdout)
        return [(r["seconds"], r["bytes"])]
    lib = {"id": [], "meg": []}
    for _ in range(R):
        lib["id"] += lib_read()
        lib["meg"] += lib_read(meg)
    row("libckptfs identity, every target, first read vs raw", lib["id"], raw)
    row("libckptfs Megatron view, every target, first read vs raw", lib["meg"], raw)

    # diff reads both sides through the engine: bytes per side per second
    copy, meg_dir = os.path.join(work, "llama-copy"), os.path.join(work, "megatron")
    run("cp", "-r", src, copy)
    run(CKPTFS, "convert", src, meg_dir, "--mapping", meg, "--quiet")
    read_files([os.path.join(copy, f) for f in shards])
    back = os.path.join(MAPS, "megatron-to-llama-hf.json")
    row("ckptfs diff of two copies, per side vs ceiling",
        measure(lambda: (run(CKPTFS, "diff", src, copy), total)[1], R), ceiling)
    row("ckptfs diff HF vs Megatron through the inverse, per side",
        measure(lambda: (run(CKPTFS, "diff", src, meg_dir, "--mapping", back), total)[1], R), ceiling)

    # second reads (kernel page cache, keep_cache), interleaved the same way
    pt, m = Passthrough(src), Ckptfs(src)
    read_files(pt.files())
    read_files(m.files())
    second = {"pt": [], "id": []}
    for _ in range(R):
        second["pt"] += measure(lambda: read_files(pt.files()), 1)
        second["id"] += measure(lambda: read_files(m.files()), 1)
    pt.close()
    m.close()
    pt2 = row("passthrough FUSE, second read (keep_cache)", second["pt"], raw)
    row("ckptfs identity tensors/, second read vs passthrough 2nd", second["id"], pt2)

    # today's workflow vs mount + read (output bytes per second of wall time)
    peer_out = os.path.join(work, "peer.safetensors")
    peer = measure(lambda: peer_convert(src, peer_out, cfg), R)
    os.unlink(peer_out)
    def mount_and_read():  # the workflow's figure includes mount and unmount
        m = Ckptfs(src, [meg])
        try:
            return read_files(m.files())
        finally:
            m.close()
    mine = measure(mount_and_read, R)
    pm, cm = statistics.median(t for t, _ in peer), statistics.median(t for t, _ in mine)
    print(f"{'numpy peer: mmap, convert, write, read back':58s} {pm:8.2f} s")
    print(f"{'ckptfs: mount + read the Megatron view':58s} {cm:8.2f} s     speed-up {pm / cm:5.2f}x")
    for ty in ("F16", "Q8_0"):  # convert_hf_to_gguf's work in numpy vs mount + read model.gguf
        gout = os.path.join(work, "peer.gguf")
        pg = statistics.median(t for t, _ in measure(lambda: peer_gguf(src, gout, cfg, ty), R))
        os.unlink(gout)

        def mount_gguf():
            m = Ckptfs(src, opts=f"gguf={ty},gguf_vocab=none")
            try:
                return read_files([os.path.join(m.dir, "model.gguf")])
            finally:
                m.close()
        cg = statistics.median(t for t, _ in measure(mount_gguf, R))
        print(f"{'numpy peer: HF -> GGUF ' + ty + ', write, read back':58s} {pg:8.2f} s")
        print(f"{'ckptfs: mount + read model.gguf ' + ty:58s} {cg:8.2f} s     speed-up {pg / cg:5.2f}x")
    last = f"decoder.layers.{a.layers - 1}.self_attention.linear_qkv.weight"

    def first_byte():
        t0 = time.perf_counter()
        m = Ckptfs(src, [meg])
        with open(os.path.join(m.dir, "tensors", last), "rb") as f:
            f.read(1)
        dt = time.perf_counter() - t0
        m.close()
        return dt
    fb = statistics.median(first_byte() for _ in range(R))
    print(f"{'time to first byte of ' + last[:24] + '...: ckptfs':58s} {fb * 1000:8.1f} ms"
          f"    peer {pm * 1000:.0f} ms ({pm / fb:.0f}x)")

    # planning on sparse real-size presets and a 100k-key MoE
    for name, args, mp in [("llama 70b", ["--preset", "70b", "--shards", "30"], meg),
                           ("MoE, 100k keys", ["--model", "mixtral", "--experts", "520",
                                                 "--layers", "64"], os.path.join(MAPS, "mixtral-hf-to-fused-experts.json"))]:
        d = os.path.join(work, name.split()[0] + "-sparse")
        run(MKCKPT, *args, "--dtype", "BF16", "--sparse", d)
        nkeys = len(json.loads(run(CKPTFS, "inspect", d, "--json").stdout)["tensors"])
        ts = []
        for _ in range(R):
            t0 = time.perf_counter()
            run(CKPTFS, "inspect", d, "--mapping", mp)
            ts.append(time.perf_counter() - t0)
        ms = []
        for _ in range(R):
            mnt = tempfile.mkdtemp()
            t0 = time.perf_counter()
            run(CKPTFS, "mount", d, mnt, "--mapping", mp)
            ms.append(time.perf_counter() - t0)
            subprocess.run(["fusermount3", "-u", mnt])
            os.rmdir(mnt)
        print(f"{'planning ' + name + f' ({nkeys} keys): inspect --mapping':58s} "
              f"{statistics.median(ts) * 1000:8.1f} ms   mount start-up {statistics.median(ms) * 1000:.0f} ms")

    # per-rank: bytes a tp=8 rank requests vs its local bytes, sparse 70B
    d70 = os.path.join(work, "llama-sparse")
    ratios, reqs = [], []
    for r in range(8):
        io = json.loads(run(CKPTFS, "inspect", d70, "--mapping", meg, "--mesh", "tp=8", "--rank", str(r),
                            "--io-plan").stdout)
        ratios.append(io["ratio"])
        reqs.append(io["read_requests"])
    print(f"{'per-rank tp=8, sparse 70b: source bytes requested / local':58s} "
          f"{max(ratios):8.4f} max over ranks ({min(reqs)}-{max(reqs)} requests per rank)")

    # per-rank: time to read a rank's whole shard (tp=4, rank 1: a quarter of
    # the sharded weights plus the replicated norms) on a fresh mount, vs the
    # whole Megatron view's first read
    whole = statistics.median(t for t, _ in measure_fresh(lambda: Ckptfs(src, [meg]),
                                                          lambda m: read_files(m.files()), R))
    local = []

    def rank_read(m):
        n = read_files(m.files())
        local.append(n)
        return n
    rs = measure_fresh(lambda: Ckptfs(src, [meg], None, ["--mesh", "tp=4", "--rank", "1"]), rank_read, R)
    t_rank = statistics.median(t for t, _ in rs)
    print(f"{'per-rank tp=4: first read of rank 1 shard (' + str(local[0] // MB) + ' MiB)':58s} "
          f"{t_rank * 1000:8.1f} ms   {local[0] / t_rank / 1e9:.2f} GB/s; "
          f"{t_rank / whole:.2f} of the whole view's time")

    # memory: a checkpoint 4x larger than cache_size
    cache = total // 4
    gmax, threads = cache // 8, os.cpu_count()
    m = Ckptfs(src, [meg], f"cache_size={cache},threads={threads}")
    read_files(m.files())
    hwm = m.hwm_kib() * 1024
    s = m.stats()
    m.close()
    bound = cache + threads * (max(gmax, 4 * MB) + 32 * MB) + 64 * MB
    print(f"{'peak RSS reading 4x cache_size (' + str(cache // MB) + ' MiB cache)':58s} "
          f"{hwm / MB:8.0f} MiB  bound {bound / MB:.0f} MiB ({'within' if hwm <= bound else 'OVER'}); "
          f"{s['cache_evictions']} evictions")

    # concurrency: N readers over disjoint files of the identity view
    one = None
    for n in (1, 2, 4, 8):
        def go(n=n):
            m = Ckptfs(src)
            files = m.files()
            th = [threading.Thread(target=read_files, args=(files[i::n],)) for i in range(n)]
            t0 = time.perf_counter()
            for t in th:
                t.start()
            for t in th:
                t.join()
            dt = time.perf_counter() - t0
            m.close()
            return dt
        samples = [(go(), total) for _ in range(R)]
        med = row(f"identity view, {n} concurrent reader(s) vs 1 reader", samples, one)
        one = one or med

    # cold cache: the number a user with a checkpoint on disk sees
    if drop_caches():
        def cold_raw():
            drop_caches()
            return read_files([os.path.join(src, f) for f in shards])
        rc = row("cold: raw read of the source", measure(cold_raw, R))
        row("cold: identity view vs raw",
            measure_fresh(lambda: Ckptfs(src), lambda m: read_files(m.files()), R, cold=True), rc)
        row("cold: Megatron view vs raw",
            measure_fresh(lambda: Ckptfs(src, [meg]), lambda m: read_files(m.files()), R, cold=True), rc)
    else:
        print("cold cache: /proc/sys/vm/drop_caches not writable here; skipped")
    subprocess.run(["rm", "-rf", work])


if __name__ == "__main__":
    main()
