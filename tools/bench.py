#!/usr/bin/python3
"""ckptfs benchmarks, one command (as root, needs /dev/fuse):
    /usr/bin/python3 tools/bench.py [--shapes 1024,2048,4096] [--layers N] [--reps N] [--only kquant]
Builds its inputs with mkckpt and prints, side by side in one run (median and
min-max over the repetitions, absolute figures beside the ratios). On every
shape (Llama, hidden 1024 / 2048 / 4096, BF16): first reads of the identity,
Megatron and F32-cast views against the FUSE ceiling (the identity view also
against the passthrough serving its own files, one per tensor: what FUSE
costs for that many files), the cached re-read of every file against the
passthrough's, the same first reads with O_DIRECT opens (no page cache)
against the passthrough read that way, mount + read against the numpy peer
(read both ways), and cold reads (buffered and -o odirect) against dd
iflag=direct; then a table of each ratio per shape, its spread and issue #23's goal. On the
hidden-2048 shape alone: model.safetensors and model.gguf (F16, Q8_0)
  first reads, the FP8 block-dequant and gpt-oss (MXFP4) views' and
  model.gguf Q8_0 / Q4_0's first reads (cached and O_DIRECT), GGUF sources
  (Q8_0, and Q4_K_M as llama.cpp's preset writes it, quantized by ggml) read
  as Hugging Face F32 (the Q4_K_M file as BF16 too) through
  gguf-llama-to-hf, a numpy HF -> GGUF peer against mount + read
  model.gguf, llama.cpp's own quantizer (llama-quantize from a BF16 GGUF)
  against mount + read model.gguf Q4_K_M and Q6_K (--only kquant: these
  alone); libckptfs in-process (tools/ckread.c) against the raw read,
  and model.gguf Q8_0 / Q4_0 copied out through it in 8 MiB reads (source
  bytes read, peak RSS);
  `ckptfs diff` of two copies and of HF vs a Megatron copy through the
  inverse mapping (bytes per side); time to the first byte of a last-layer
  tensor; planning on sparse real-size presets and a 100k-key MoE; per-rank
  request ratios and shard reads; daemon peak RSS against the documented
  bound; concurrent readers.
The FUSE ceiling is tools/passthrough.c, a trivial passthrough daemon with
the same tuning. First reads are timed from a fresh mount's listing to its last byte, on
both sides, in rounds that read every subject once (interleaved, so the
noise of a shared machine hits all of them alike) (the passthrough lists its directory too); mount start-up has
rows of its own, and the workflow row includes mount and unmount."""
import argparse
import json
import mmap
import random
import os
import shutil
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


def read_files(paths, buf=bytearray(MB), direct=False):
    """Reads every file whole in 1 MiB reads. direct: opened with O_DIRECT,
    into a page-aligned buffer: no kernel page cache on either side of FUSE
    (a loader that reads each byte once can ask for that)."""
    n = 0
    if direct:
        buf = memoryview(mmap.mmap(-1, MB))
    for p in paths:
        fd = os.open(p, os.O_RDONLY | (os.O_DIRECT if direct else 0))
        with open(fd, "rb", buffering=0) as f:
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
    def __init__(self, src, every_file=False):
        self.dir = tempfile.mkdtemp(prefix="bench-pt-")
        self.every_file = every_file  # a directory of tensors only: serve it all
        run(PT, src, self.dir)  # returns once mounted

    def files(self):  # listed like ckptfs' tensors/: the same work on both sides
        return [os.path.join(self.dir, n) for n in sorted(os.listdir(self.dir))
                if self.every_file or n.endswith(".safetensors")]

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


def read_back_and_delete(out):
    """The peer's last step: read its output back, then delete it, the
    counterpart of the mount's unmount (timed on that side): each drops the
    page cache of the bytes it served, 30-40 ms per 300 MB on the 2-core VM
    (session 30: an unmount after reading the hidden-1024 view took 39 ms,
    one with nothing read 3 ms; rm of a cached 311 MB file 25-30 ms)."""
    n = read_files([out])
    os.unlink(out)
    return n


def peer_convert(src, out, cfg):
    """Today's workflow, as a competent numpy user writes it: memory-map the
    shards, build the Megatron tensors with numpy, write one converted file,
    read it back (and delete it, as the mount side unmounts)."""
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
    return read_back_and_delete(out)


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
    return read_back_and_delete(out)


def prepare():
    """One command from a clean clone: the dependencies (tools/install-deps.sh,
    silent when present) and an up-to-date build/ (ckptfs, mkckpt, passthrough)."""
    global np
    subprocess.run(["bash", os.path.join(ROOT, "tools", "install-deps.sh")], check=True)
    if not os.path.exists(os.path.join(B, "build.ninja")):
        subprocess.run(["meson", "setup", B, ROOT], check=True, stdout=subprocess.DEVNULL)
    subprocess.run(["meson", "compile", "-C", B], check=True, stdout=subprocess.DEVNULL)
    import numpy as np  # noqa: F811 (python3-numpy: installed just above)


# Model shapes of the three-shape run (issue #23): Llama, BF16, GQA, 32k vocab;
# hidden 1024 is the independent benchmark's model (about 300 MB).
SHAPES = {1024: {"intermediate": 2816, "heads": 16, "kv": 4, "layers": 8, "shards": 2},
          2048: {"intermediate": 5632, "heads": 16, "kv": 4, "layers": 6, "shards": 4},
          4096: {"intermediate": 11008, "heads": 32, "kv": 8, "layers": 3, "shards": 4}}
# the ratios measured on every shape, with issue #23's goals
# (key, the table's name, the goal; 0: a row that says what bounds a goal)
GOALS = [("id", "identity tensors/ first read / FUSE ceiling", 0.95),
         ("id_files", "identity first read / passthrough of its files (no goal)", 0.0),
         ("reread", "identity re-read of every file / passthrough re-read", 0.9),
         ("meg", "Megatron view first read / FUSE ceiling", 0.8),
         ("f32", "Megatron + F32 cast first read / FUSE ceiling", 0.7),
         ("workflow", "mount + read Megatron: speed-up over the numpy peer", 3.0),
         ("bound", "  the most FUSE allows: peer / ceiling's read (no goal)", 0.0),
         # the same goals read with O_DIRECT opens on both sides: no kernel
         # page cache, so none of the fresh memory it takes (this VM's host
         # faults) and one copy fewer
         ("id_od", "O_DIRECT opens: identity first read / ceiling's", 0.95),
         ("meg_od", "O_DIRECT opens: Megatron view first read / ceiling's", 0.8),
         ("f32_od", "O_DIRECT opens: Megatron + F32 cast / ceiling's", 0.7),
         ("workflow_od", "O_DIRECT opens: mount + read Megatron / the peer", 3.0),
         ("cold_id", "cold identity / cold dd iflag=direct", 0.8),
         ("cold_meg", "cold Megatron / cold dd iflag=direct", 0.8),
         ("cold_id_od", "cold identity -o odirect / cold dd iflag=direct", 0.8),
         ("cold_meg_od", "cold Megatron -o odirect / cold dd iflag=direct", 0.8)]
SPREAD = {}  # ratio key -> {hidden: value}


def ratio(key, hidden, value):
    assert any(k == key for k, _, _ in GOALS), key
    SPREAD.setdefault(key, {})[hidden] = value


def make_source(work, hidden, layers):
    s = SHAPES[hidden]
    src = os.path.join(work, f"llama-h{hidden}")
    run(MKCKPT, "--model", "llama", "--hidden", str(hidden), "--intermediate", str(s["intermediate"]),
        "--heads", str(s["heads"]), "--kv-heads", str(s["kv"]), "--vocab", "32000",
        "--layers", str(layers or s["layers"]), "--dtype", "BF16", "--shards", str(s["shards"]), src)
    cfg = json.load(open(os.path.join(src, "config.json")))
    shards = [os.path.join(src, f) for f in sorted(os.listdir(src)) if f.endswith(".safetensors")]
    return src, cfg, shards, sum(os.path.getsize(f) for f in shards)


def dd_direct(paths):
    """The raw cold baseline the issue names: dd with O_DIRECT, 4 MiB blocks,
    one reader per file at once (the device's queue, not one request deep)."""
    t0 = time.perf_counter()
    ps = [subprocess.Popen(["dd", f"if={p}", "of=/dev/null", "bs=4M", "iflag=direct"],
                           stderr=subprocess.DEVNULL) for p in paths]
    for p in ps:
        p.wait()
    return time.perf_counter() - t0


def shape_rows(work, hidden, layers, R, full):
    """The per-shape rows: first and second reads against the FUSE ceiling,
    the workflow against the numpy peer, cold reads against dd. full: also
    the flat file and model.gguf first reads (the main shape only)."""
    src, cfg, shards, total = make_source(work, hidden, layers)
    meg = os.path.join(MAPS, "llama-hf-to-megatron.json")
    to_f32 = os.path.join(work, "to-f32.json")
    json.dump({"rules": [{"from": "{k:path}", "to": "{k}", "expr": "x.to(F32)"}]}, open(to_f32, "w"))
    print(f"\n== hidden {hidden}: llama, {cfg['num_hidden_layers']} layers, GQA "
          f"{cfg['num_attention_heads']}/{cfg['num_key_value_heads']}, BF16, {total / 1e6:.0f} MB in "
          f"{len(shards)} files; {os.cpu_count()} cores; reps {R}; figures: median [min-max] ratio",
          flush=True)
    read_files(shards)  # warm the page cache
    raw = row("raw read of the source files (page cache)", measure(lambda: read_files(shards), R))

    # first reads, interleaved: each round mounts and reads every subject once,
    # so a slow spell of this shared machine hits all of them alike
    flat = lambda m: read_files([os.path.join(m.dir, "model.safetensors")])  # noqa: E731
    every = lambda m: read_files(m.files())  # noqa: E731
    every_od = lambda m: read_files(m.files(), direct=True)  # noqa: E731
    gguf = lambda m: read_files([os.path.join(m.dir, "model.gguf")])  # noqa: E731
    # the passthrough over the identity view's own files (one per tensor,
    # copied out through a mount): what FUSE costs for that many files
    per_tensor = os.path.join(work, f"per-tensor-h{hidden}")
    m = Ckptfs(src)
    try:
        os.mkdir(per_tensor)
        for f in m.files():
            shutil.copyfile(f, os.path.join(per_tensor, os.path.basename(f)))
    finally:
        m.close()
    read_files([os.path.join(per_tensor, n) for n in os.listdir(per_tensor)])
    subjects = [("pt", lambda: Passthrough(src), every), ("id", lambda: Ckptfs(src), every),
                ("pt_files", lambda: Passthrough(per_tensor, every_file=True), every),
                ("meg", lambda: Ckptfs(src, [meg]), every), ("f32", lambda: Ckptfs(src, [meg, to_f32]), every),
                ("pt_od", lambda: Passthrough(src), every_od), ("id_od", lambda: Ckptfs(src), every_od),
                ("meg_od", lambda: Ckptfs(src, [meg]), every_od),
                ("f32_od", lambda: Ckptfs(src, [meg, to_f32]), every_od)]
    if full:
        subjects += [("flat", lambda: Ckptfs(src), flat),
                     ("gguf16", lambda: Ckptfs(src, opts="gguf=F16,gguf_vocab=none"), gguf),
                     ("gguf8", lambda: Ckptfs(src, opts="gguf=Q8_0,gguf_vocab=none"), gguf),
                     ("easydel", lambda: Ckptfs(src, [os.path.join(MAPS, "llama-hf-to-easydel.json")]), every)]
    first = {k: [] for k, _, _ in subjects}
    for r in range(R):
        # the order turned round every other round: in a fixed order, two
        # builds' F32 views read one after the other measured 40-70% apart,
        # the later one ahead whichever it was (session 26)
        for k, factory, reader in (subjects if r % 2 == 0 else subjects[::-1]):
            first[k] += measure_fresh(factory, reader, 1)
    ceiling = row("passthrough FUSE, first read (the FUSE ceiling)", first["pt"], raw)
    ratio("id", hidden, row("ckptfs identity tensors/, first read  vs ceiling", first["id"], ceiling) / ceiling)
    pt_files = row(f"passthrough of {len(os.listdir(per_tensor))} files, one per tensor, first read",
                   first["pt_files"], ceiling)
    ratio("id_files", hidden, row("ckptfs identity tensors/, first read  vs that", first["id"], pt_files) / pt_files)
    shutil.rmtree(per_tensor)
    ratio("meg", hidden, row("ckptfs Megatron view tensors/, first read vs ceiling", first["meg"], ceiling) / ceiling)
    ratio("f32", hidden, row("ckptfs Megatron view + cast to F32, first read vs ceiling", first["f32"], ceiling) / ceiling)
    ceiling_od = row("passthrough, first read with O_DIRECT opens (no page cache)", first["pt_od"], ceiling)
    for k, name in [("id_od", "identity tensors/"), ("meg_od", "Megatron view"), ("f32_od", "Megatron + F32")]:
        ratio(k, hidden, row(f"ckptfs {name}, O_DIRECT opens vs that", first[k], ceiling_od) / ceiling_od)
    if full:
        row("ckptfs identity model.safetensors, first read vs ceiling", first["flat"], ceiling)
        row("ckptfs model.gguf F16, first read vs ceiling", first["gguf16"], ceiling)
        row("ckptfs model.gguf Q8_0, first read vs ceiling", first["gguf8"], ceiling)
        row("ckptfs EasyDeL view (Linear weights transposed), first read vs ceiling", first["easydel"], ceiling)

    # second reads (kernel page cache, keep_cache): every file again, per-file
    # round trips included (75 files for 8 layers against the source's few)
    pt, m = Passthrough(src), Ckptfs(src)
    read_files(pt.files())
    read_files(m.files())
    second = {"pt": [], "id": []}
    for _ in range(R):
        second["pt"] += measure(lambda: read_files(pt.files()), 1)
        second["id"] += measure(lambda: read_files(m.files()), 1)
    nfiles = len(m.files())
    pt.close()
    m.close()
    pt2 = row("passthrough FUSE, second read (keep_cache)", second["pt"], raw)
    ratio("reread", hidden,
          row(f"ckptfs identity tensors/ ({nfiles} files), second read vs passthrough 2nd", second["id"], pt2) / pt2)

    # today's workflow vs mount + read (mount and unmount timed; the peer deletes its output)
    peer_out = os.path.join(work, "peer.safetensors")
    peer = measure(lambda: peer_convert(src, peer_out, cfg), R)

    def mount_and_read(direct):
        m = Ckptfs(src, [meg])
        try:
            return read_files(m.files(), direct=direct)
        finally:
            m.close()
    mine, mine_od = [], []
    for _ in range(R):  # interleaved, as the first reads
        mine += measure(lambda: mount_and_read(False), 1)
        mine_od += measure(lambda: mount_and_read(True), 1)
    pm, cm, cd = (statistics.median(t for t, _ in x) for x in (peer, mine, mine_od))
    print(f"{'numpy peer: mmap, convert, write, read back, delete':58s} {pm:8.2f} s")
    print(f"{'ckptfs: mount + read the Megatron view':58s} {cm:8.2f} s     speed-up {pm / cm:5.2f}x")
    print(f"{'ckptfs: the same, read with O_DIRECT opens':58s} {cd:8.2f} s     speed-up {pm / cd:5.2f}x")
    ratio("workflow", hidden, pm / cm)
    ratio("workflow_od", hidden, pm / cd)
    # what FUSE allows: the ceiling's first read of the same bytes alone
    # (no mount, no planning, no transform) against the peer
    fuse_s = total / (ceiling * 1e9)
    print(f"{'  bound: the FUSE ceiling reading these bytes':58s} {fuse_s:8.2f} s     "
          f"speed-up {pm / fuse_s:5.2f}x at most")
    ratio("bound", hidden, pm / fuse_s)

    # cold cache: the number a user with a checkpoint on disk sees; rounds
    # interleave dd, the raw buffered read and the views
    if drop_caches():
        cold = {k: [] for k in ("dd", "raw", "id", "meg", "id_od", "meg_od")}
        views = {"id": ([], None), "meg": ([meg], None), "id_od": ([], "odirect"), "meg_od": ([meg], "odirect")}
        for _ in range(R):
            drop_caches()
            cold["dd"].append((dd_direct(shards), total))
            drop_caches()
            cold["raw"] += measure(lambda: read_files(shards), 1)
            for k, (maps, opts) in views.items():
                cold[k] += measure_fresh(lambda: Ckptfs(src, maps, opts), lambda m: read_files(m.files()), 1,
                                         cold=True)
        dd = row("cold: dd iflag=direct bs=4M, a reader per file", cold["dd"])
        row("cold: raw buffered read of the source vs dd", cold["raw"], dd)
        for k, name in [("id", "identity view"), ("meg", "Megatron view"),
                        ("id_od", "identity view -o odirect"), ("meg_od", "Megatron view -o odirect")]:
            ratio("cold_" + k, hidden, row(f"cold: {name} vs dd", cold[k], dd) / dd)
        read_files(shards)  # warm again for the rows that follow
    else:
        print("cold cache: /proc/sys/vm/drop_caches not writable here; skipped")
    return src, cfg, shards, total, raw, ceiling, ceiling_od, pm


GGUF_SCALAR = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}
GGML_BLOCK = {8: (32, 34)}  # Q8_0: elements, bytes


def gguf_requantized(f32_gguf, out, pick):
    """An F32 GGUF (ckptfs convert --format gguf:F32) with its matrices
    requantized by ggml's own quantizer (node-llama-cpp's libggml-base.so,
    installed by install-deps): pick(name) gives each 2-D tensor's ggml type,
    1-D tensors stay F32. The metadata is copied as it is."""
    import ctypes
    import glob
    lib = ctypes.CDLL(glob.glob(os.path.join(ROOT, "build-node", "node_modules", "@node-llama-cpp",
                                             "linux-x64", "bins", "linux-x64", "libggml-base.so"))[0])
    lib.ggml_quantize_chunk.restype = ctypes.c_size_t
    lib.ggml_quantize_chunk.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64,
                                        ctypes.c_int64, ctypes.c_int64, ctypes.c_void_p]
    b = open(f32_gguf, "rb").read()
    nt, nkv = struct.unpack_from("<QQ", b, 8)
    pos = 24

    def skip_value(t):
        nonlocal pos
        if t == 8:
            pos += 8 + struct.unpack_from("<Q", b, pos)[0]
        elif t == 9:
            et, n = struct.unpack_from("<IQ", b, pos)
            pos += 12
            for _ in range(n):
                skip_value(et)
        else:
            pos += GGUF_SCALAR[t]
    for _ in range(nkv):  # key, type, value
        pos += 8 + struct.unpack_from("<Q", b, pos)[0]
        pos += 4
        skip_value(struct.unpack_from("<I", b, pos - 4)[0])
    meta_end, infos = pos, []
    for _ in range(nt):
        n = struct.unpack_from("<Q", b, pos)[0]
        name = b[pos + 8:pos + 8 + n].decode()
        pos += 8 + n
        nd = struct.unpack_from("<I", b, pos)[0]
        dims = struct.unpack_from(f"<{nd}Q", b, pos + 4)
        t, off = struct.unpack_from("<IQ", b, pos + 4 + 8 * nd)
        pos += 4 + 8 * nd + 12
        assert t == 0, f"{f32_gguf}: {name} is not F32"
        infos.append((name, dims, off))
    data = (pos + 31) // 32 * 32
    head, blobs, off = bytearray(b[:meta_end]), [], 0
    for name, dims, src_off in infos:
        x = np.frombuffer(b, np.float32, int(np.prod(dims)), data + src_off)
        t = pick(name) if len(dims) == 2 else 0
        if t:
            qk, qb = GGML_BLOCK[t]
            q = np.zeros(x.size // qk * qb, np.uint8)
            x = np.ascontiguousarray(x)
            assert lib.ggml_quantize_chunk(t, x.ctypes.data, q.ctypes.data, 0, dims[1], dims[0], None) == q.size
            x = q
        head += struct.pack("<Q", len(name)) + name.encode() + struct.pack(f"<I{len(dims)}Q", len(dims), *dims)
        head += struct.pack("<IQ", t, off)
        blobs.append(x.tobytes())
        off += (len(blobs[-1]) + 31) // 32 * 32
    with open(out, "wb") as f:
        f.write(head + b"\0" * (-len(head) % 32))
        for blob in blobs:
            f.write(blob + b"\0" * (-len(blob) % 32))


def gguf_sources(work, src, R, ceiling, ceiling_od):
    """GGUF files as sources through gguf-llama-to-hf, the model read back as
    Hugging Face tensors (GB/s out): as F32, this shape's Llama in Q8_0
    (every matrix requantized by ggml's quantizer) and in Q4_K_M (written by
    llama.cpp's own llama_model_quantize, the preset as it lays it out),
    and the Q4_K_M file as BF16
    (-o gguf_dequant=BF16), interleaved."""
    sys.path.insert(0, os.path.join(ROOT, "tests", "cli"))
    os.environ.setdefault("CKPTFS", CKPTFS)
    os.environ.setdefault("MKCKPT", MKCKPT)
    import gguf_kquant as kq
    f32 = os.path.join(work, "gguf-f32")
    run(CKPTFS, "convert", src, f32, "--format", "gguf:F32", "--gguf-vocab", "none", "--quiet")
    files = {}
    for ty in ("Q8_0", "Q4_K_M"):
        os.mkdir(os.path.join(work, "gguf-" + ty))
        files[ty] = os.path.join(work, "gguf-" + ty, "model.gguf")
        if ty == "Q8_0":
            gguf_requantized(os.path.join(f32, "model.gguf"), files[ty], lambda n: 8)
        else:
            kq.llama_quantize(kq.libllama(), os.path.join(f32, "model.gguf"), files[ty], ty, threads=0)
        read_files([files[ty]])
    shutil.rmtree(f32)
    mp = [os.path.join(MAPS, "gguf-llama-to-hf.json")]
    # Hugging Face checkpoints are BF16: the Q4_K_M file decoded to it too
    views = [(k, lambda f=files[k.split()[0]], o=o: Ckptfs(f, mp, opts=o))
             for k, o in (("Q8_0", None), ("Q4_K_M", None), ("Q4_K_M BF16", "gguf_dequant=BF16"))]
    got = {(k, od): [] for k, _ in views for od in (False, True)}
    for r in range(R):
        for k, factory in (views if r % 2 == 0 else views[::-1]):
            for od in (False, True):
                got[(k, od)] += measure_fresh(factory, lambda m: read_files(m.files(), direct=od), 1)
    for k, _ in views:
        ty, dt = (k.split() + ["F32"])[:2]
        row(f"ckptfs GGUF {ty} -> HF {dt} view, first read vs ceiling", got[(k, False)], ceiling)
        row("  the same, O_DIRECT opens vs the passthrough's", got[(k, True)], ceiling_od)
    for ty in ("Q8_0", "Q4_K_M"):
        shutil.rmtree(os.path.join(work, "gguf-" + ty))


def quantized_views(work, src, hidden, cfg, R, ceiling, ceiling_od):
    """The FP8 block-dequant view of this shape's Llama with 128 x 128-block
    F8_E4M3 layers, gpt-oss's Megatron view of a two-layer 20b preset
    (MXFP4 experts, 32,000 vocabulary), both GB/s of BF16 out, and this
    shape's model.gguf Q8_0 and Q4_0 (GB/s of blocks out; each quantizes the
    BF16 source as it stands), interleaved."""
    s = SHAPES[hidden]
    fp8 = os.path.join(work, f"llama-fp8-h{hidden}")
    run(MKCKPT, "--model", "llama", "--hidden", str(hidden), "--intermediate", str(s["intermediate"]),
        "--heads", str(s["heads"]), "--kv-heads", str(s["kv"]), "--vocab", "32000",
        "--layers", str(cfg["num_hidden_layers"]), "--dtype", "BF16", "--fp8-block", "128",
        "--shards", str(s["shards"]), fp8)
    oss = os.path.join(work, "gpt-oss-2l")
    run(MKCKPT, "--model", "gpt-oss", "--preset", "20b", "--layers", "2", "--vocab", "32000",
        "--shards", "2", oss)
    for d in (fp8, oss):
        read_files([os.path.join(d, f) for f in os.listdir(d) if f.endswith(".safetensors")])
    tree = lambda m: m.files()  # noqa: E731
    gguf = lambda m: [os.path.join(m.dir, "model.gguf")]  # noqa: E731
    views = [("fp8", "FP8 block-dequant view (F8_E4M3 x 128x128 scales -> BF16)",
              lambda: Ckptfs(fp8, [os.path.join(MAPS, "fp8-block-dequant.json")]), tree),
             ("oss", "gpt-oss Megatron view (MXFP4 experts -> BF16)",
              lambda: Ckptfs(oss, [os.path.join(MAPS, "gpt-oss-hf-to-megatron.json")]), tree),
             ("q8", "model.gguf Q8_0 (from BF16)", lambda: Ckptfs(src, opts="gguf=Q8_0,gguf_vocab=none"), gguf),
             ("q4", "model.gguf Q4_0 (llama-quantize's mix, from BF16)", lambda: Ckptfs(src, opts="gguf=Q4_0,gguf_vocab=none"), gguf)]
    got = {(k, od): [] for k, _, _, _ in views for od in (False, True)}
    for r in range(R):
        for k, _, factory, files in (views if r % 2 == 0 else views[::-1]):
            for od in (False, True):
                got[(k, od)] += measure_fresh(factory, lambda m: read_files(files(m), direct=od), 1)
    for k, name, _, _ in views:
        row(f"ckptfs {name}, first read vs ceiling", got[(k, False)], ceiling)
        row("  the same, O_DIRECT opens vs the passthrough's", got[(k, True)], ceiling_od)
    subprocess.run(["rm", "-rf", fp8, oss])


def kquant_mixes(work, src, R, mixes=("Q4_K_M", "Q6_K", "Q2_K", "Q3_K_M", "IQ4_XS", "Q4_K_M+imatrix",
                                       "IQ4_XS+imatrix")):
    """model.gguf Q4_K_M, Q6_K, Q2_K, Q3_K_M and IQ4_XS (llama-quantize's
    mixes, byte for byte; --mixes picks others, the legacy Q4_0 ... Q5_1
    too), and Q4_K_M and IQ4_XS given an importance matrix, against llama.cpp's own
    quantizer: mount + read model.gguf against llama_model_quantize (the
    prebuilt libllama, every core) turning this shape's BF16 GGUF into the
    same mix, writing it, reading it back and deleting it. The BF16 GGUF
    (and the matrix, random values for every tensor) is written
    beforehand, untimed: the peer is spared convert_hf_to_gguf.py's part of
    the workflow."""
    sys.path.insert(0, os.path.join(ROOT, "tests", "cli"))
    os.environ.setdefault("CKPTFS", CKPTFS)
    os.environ.setdefault("MKCKPT", MKCKPT)
    import gguf_imatrix as gi
    import gguf_kquant as kq
    lib = kq.libllama()
    bf16 = os.path.join(work, "kq-bf16")
    run(CKPTFS, "convert", src, bf16, "--format", "gguf:BF16", "--gguf-vocab", "none", "--quiet")
    gin, gout = os.path.join(bf16, "model.gguf"), os.path.join(work, "kq-peer.gguf")
    imx_file = os.path.join(work, "kq.imatrix.dat")
    imx = gi.write_legacy(imx_file, gi.some_imatrix(np.random.default_rng(5), gi.matrices(gin)), 10)
    read_files([gin])
    for spec in mixes:
        mix, weights = spec.split("+")[0], imx if spec.endswith("+imatrix") else None
        tag = mix + (" + imatrix" if weights else "")

        def peer():
            kq.llama_quantize(lib, gin, gout, mix, threads=0, imatrix=weights)
            n = read_files([gout])
            os.remove(gout)
            return n

        def mount():
            m = Ckptfs(src, opts=f"gguf={mix},gguf_vocab=none" + (f",gguf_imatrix={imx_file}" if weights else ""))
            try:
                return read_files([os.path.join(m.dir, "model.gguf")])
            finally:
                m.close()
        got = {"peer": [], "ckptfs": []}
        for r in range(R):  # interleaved
            for k, fn in ((("peer", peer), ("ckptfs", mount)) if r % 2 == 0 else (("ckptfs", mount), ("peer", peer))):
                got[k] += measure(fn, 1)
        pt = statistics.median(t for t, _ in got["peer"])
        ct = statistics.median(t for t, _ in got["ckptfs"])
        row(f"ckptfs: mount + read model.gguf {tag}", got["ckptfs"])
        print(f"{'llama-quantize BF16 GGUF -> ' + tag + ', write, read back, delete':58s} {pt:8.2f} s")
        print(f"{'ckptfs: mount + read model.gguf ' + tag:58s} {ct:8.2f} s     speed-up {pt / ct:5.2f}x")
    shutil.rmtree(bf16)


def print_spread(shapes):
    print("\n== every shape: the ratio on each, its spread, and issue #23's goal")
    print(f"{'ratio':56s} " + " ".join(f"h{h:<6d}" for h in shapes) + "  spread       goal")
    for key, name, goal in GOALS:
        v = SPREAD.get(key, {})
        if not v:
            continue
        vals = [v[h] for h in shapes if h in v]
        cells = " ".join(f"{v[h]:<7.2f}" if h in v else "-      " for h in shapes)
        met = "met on every shape" if min(vals) >= goal else "NOT met on every shape"
        told = f"{goal:.2f} ({met})" if goal else "-"
        print(f"{name:56s} {cells}  {min(vals):.2f}-{max(vals):.2f}    {told}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--shapes", default="1024,2048,4096",
                    help="hidden sizes to run the per-shape rows on (of 1024, 2048, 4096)")
    ap.add_argument("--layers", type=int, default=0, help="layers of every shape (default: per shape)")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--mixes", default="Q4_K_M,Q6_K,Q2_K,Q3_K_M,IQ4_XS,Q4_K_M+imatrix,IQ4_XS+imatrix",
                    help="--only kquant: the mixes to run (MIX or MIX+imatrix, comma-separated)")
    ap.add_argument("--only", choices=["kquant", "gguf_sources"],
                    help="run one group of rows alone, on the hidden-2048 shape (kquant: the K-quant mixes; "
                    "gguf_sources: GGUF files read as Hugging Face, against the FUSE ceilings measured first)")
    a = ap.parse_args()
    if a.only:
        prepare()
        work = tempfile.mkdtemp(prefix="ckptfs-bench-")
        try:
            src = make_source(work, 2048, a.layers)[0]
            shards = [os.path.join(src, f) for f in os.listdir(src) if f.endswith(".safetensors")]
            read_files(shards)
            if a.only == "kquant":
                kquant_mixes(work, src, a.reps, a.mixes.split(","))
            else:
                raw = row("raw read of the source files (page cache)", measure(lambda: read_files(shards), a.reps))
                pt = {False: [], True: []}
                for _ in range(a.reps):
                    for od in (False, True):
                        pt[od] += measure_fresh(lambda: Passthrough(src), lambda m: read_files(m.files(), direct=od), 1)
                ceiling = row("passthrough FUSE, first read (the FUSE ceiling)", pt[False], raw)
                ceiling_od = row("passthrough, first read with O_DIRECT opens (no page cache)", pt[True], ceiling)
                gguf_sources(work, src, a.reps, ceiling, ceiling_od)
        finally:
            subprocess.run(["rm", "-rf", work])
        return
    shapes = [int(x) for x in a.shapes.split(",")]
    for h in shapes:
        if h not in SHAPES:
            ap.error(f"--shapes: {h} is not one of {sorted(SHAPES)}")
    prepare()
    work = tempfile.mkdtemp(prefix="ckptfs-bench-")
    R = a.reps
    main_h = 2048 if 2048 in shapes else shapes[0]
    for h in shapes:
        if h != main_h:
            src = shape_rows(work, h, a.layers, R, False)[0]
            subprocess.run(["rm", "-rf", src])
    # the main shape last: its per-shape rows, then the rows measured on it alone
    src, cfg, shards, total, raw, ceiling, ceiling_od, pm = shape_rows(work, main_h, a.layers, R, True)
    meg = os.path.join(MAPS, "llama-hf-to-megatron.json")
    shards = [os.path.basename(f) for f in shards]
    layers = cfg["num_hidden_layers"]

    # views whose CPU work per byte is high (block-scaled FP8 and MXFP4
    # dequantised to BF16, GGUF blocks quantized): first reads, through the page cache and with
    # O_DIRECT opens, against the ceilings measured on this shape
    quantized_views(work, src, main_h, cfg, R, ceiling, ceiling_od)
    gguf_sources(work, src, R, ceiling, ceiling_od)
    kquant_mixes(work, src, R)

    # libckptfs in-process (tools/ckread.c, a fresh process each time, one
    # reader thread per core): no FUSE, so against the raw page-cache read
    def lib_read(*maps, opts=()):
        args = [CKREAD, src, "-j", str(os.cpu_count())]
        for m in maps:
            args += ["-o", "mapping=" + m]
        for o in opts:
            args += ["-o", o]
        r = json.loads(run(*args).stdout)
        return [(r["seconds"], r["bytes"])]
    lib = {"id": [], "meg": [], "rank": []}
    for _ in range(R):
        lib["id"] += lib_read()
        lib["meg"] += lib_read(meg)
        lib["rank"] += lib_read(meg, opts=("mesh=tp=4", "rank=1"))
    row("libckptfs identity, every target, first read vs raw", lib["id"], raw)
    row("libckptfs Megatron view, every target, first read vs raw", lib["meg"], raw)
    # a rank's share: row-parallel weights are column slices, a run per row
    row("libckptfs Megatron view tp=4 rank 1, every target, vs raw", lib["rank"], raw)
    # a loader copying model.gguf out in 8 MiB reads (ckread --file): each
    # source byte read once, and the memory that takes (BF16, the source's
    # type: the rope permutation of Q and K as plain copies)
    for ty in ("BF16", "Q8_0", "Q4_0"):
        rs = [json.loads(run(CKREAD, src, "-o", "gguf=" + ty, "-o", "gguf_vocab=none", "--file",
                             "model.gguf", "/dev/null").stdout) for _ in range(R)]
        row(f"libckptfs model.gguf {ty}, 8 MiB reads, vs raw", [(r["seconds"], r["bytes"]) for r in rs], raw)
        print(f"  source bytes read / the source files' {max(r['source_bytes_read'] for r in rs) / total:.4f}, "
              f"peak RSS {max(r['max_rss_kib'] for r in rs) / 1024:.0f} MiB")

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

    for ty in ("F16", "Q8_0"):  # convert_hf_to_gguf's work in numpy vs mount + read model.gguf
        gout = os.path.join(work, "peer.gguf")
        pg = statistics.median(t for t, _ in measure(lambda: peer_gguf(src, gout, cfg, ty), R))

        def mount_gguf():
            m = Ckptfs(src, opts=f"gguf={ty},gguf_vocab=none")
            try:
                return read_files([os.path.join(m.dir, "model.gguf")])
            finally:
                m.close()
        cg = statistics.median(t for t, _ in measure(mount_gguf, R))
        print(f"{'numpy peer: HF -> GGUF ' + ty + ', write, read back, delete':58s} {pg:8.2f} s")
        print(f"{'ckptfs: mount + read model.gguf ' + ty:58s} {cg:8.2f} s     speed-up {pg / cg:5.2f}x")
    last = f"decoder.layers.{layers - 1}.self_attention.linear_qkv.weight"

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

    # random 4 KiB reads of the Megatron + F32 view: streamed (each read
    # evaluates its own window) vs through the cache (-o no_stream: a read
    # evaluates its whole group first)
    to_f32 = os.path.join(work, "to-f32.json")
    with open(to_f32, "w") as f:
        json.dump({"rules": [{"from": "{k:path}", "to": "{k}", "expr": "x.to(F32)"}]}, f)

    def random_reads(opts, n=300):
        m = Ckptfs(src, [meg, to_f32], opts)
        try:
            files, rng = m.files(), random.Random(7)
            picks = [(f, rng.randrange(os.path.getsize(f) // 4096) * 4096) for f in
                     (rng.choice(files) for _ in range(n))]
            t0 = time.perf_counter()
            for f, off in picks:
                fd = os.open(f, os.O_RDONLY)
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_RANDOM)
                os.pread(fd, 4096, off)
                os.close(fd)
            return (time.perf_counter() - t0) / n, m.stats()["source_bytes_read"]
        finally:
            m.close()
    rr = {o: [] for o in ("", "no_stream")}
    for r in range(R):
        for o in (("", "no_stream") if r % 2 == 0 else ("no_stream", "")):
            rr[o].append(random_reads(o or None))
    st, ca = (statistics.median(x[0] for x in rr[o]) for o in ("", "no_stream"))
    sb, cb = (statistics.median(x[1] for x in rr[o]) for o in ("", "no_stream"))
    print(f"{'random 4 KiB reads, F32 view: streamed vs no_stream':58s} {st * 1000:8.3f} ms"
          f"   vs {ca * 1000:.3f} ms ({ca / st:.0f}x); source read {sb / MB:.1f} vs {cb / MB:.0f} MiB")

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
    # per evaluator: its chunks, a 32 MiB staging window and a buffer for a large
    # transpose's chunks (max(32 MiB, cache_size / 4 / threads)); + 10 FUSE threads'
    # streamed reads: a staging window (32 MiB at most) and a reply buffer
    bound = (cache + threads * (max(gmax, 4 * MB) + 32 * MB + max(32 * MB, cache // 4 // threads))
             + 10 * 34 * MB + 64 * MB)
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

    print_spread(shapes)
    subprocess.run(["rm", "-rf", work])


if __name__ == "__main__":
    main()
