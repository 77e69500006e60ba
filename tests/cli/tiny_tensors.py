"""Reads that cover thousands of tiny tensors at once, buffered and with
`-o odirect`.

The kernel asks a mount for 1 MiB at a time, and a flat file's 1 MiB may
hold thousands of tensors of a few bytes, each read from its source file.
The daemon answers such a read from one buffer instead of one piece per
tensor (writev takes at most 1024: a refused reply would leave the reader
waiting for good, so every read here runs in a child process with a
deadline). With `-o odirect` the tensors are read as the aligned blocks
around them and answered from where they landed; more than fit in one reply
buffer go through a bounce buffer.

A cast view of 3000 tiny tensors is answered from the cache the same way.

Requests of every shape: random windows of 1 to 256 pages, each one
request, and with `-o direct_io` windows of any offset and 1 byte to 1 MiB,
against the files read whole (and checked) through another mount.

At the boundary: a one-page read of exactly 1023, 1024 and 1025 tensors.
libfuse puts its header in front of a reply's pieces, so a reply of 1024
pieces is 1025 for writev: the kernel refused it and the reader waited for
good (a CI run hung on it). Each such page is read alone (no readahead), and
stats.json's count of direct reads shows the reads had those many pieces.

The expectation is the source itself (numpy's F16 -> F32 for the cast): every tensor of every flat file the
mount serves, parsed by ckref's reader (written from the format, not from
ckptfs), equals the bytes written into the source, and preads of
`tensors/` files at unaligned offsets equal the same slices of them."""
import json
import os
import shutil
import struct
import subprocess
import sys
import tempfile

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import ckref  # noqa: E402
from mountlib import Mount, skip_unless_fuse  # noqa: E402

DEADLINE = 120  # seconds for one child's reads; a refused reply hangs forever

# the child: reads every listed file whole in 8 MiB reads (the kernel splits
# them into 1 MiB requests) into the output directory, then preads at offsets
READER = r"""
import os, sys, json
out, jobs = sys.argv[1], json.loads(sys.argv[2])
for i, p in enumerate(jobs["whole"]):
    fd = os.open(p, os.O_RDONLY)
    with open(os.path.join(out, str(i)), "wb") as f:
        while True:
            b = os.read(fd, 8 << 20)
            if not b:
                break
            f.write(b)
    os.close(fd)
got = []
for p, off, n in jobs["at"]:
    fd = os.open(p, os.O_RDONLY)
    got.append(os.pread(fd, n, off).hex())
    os.close(fd)
json.dump(got, open(os.path.join(out, "at.json"), "w"))
"""


# the child for one-page reads: each (path, offset) read alone, 4096 bytes,
# with readahead off, so each is one request of exactly that page
PAGE_READER = r"""
import os, sys, json
got = []
for p, off in json.loads(sys.argv[1]):
    fd = os.open(p, os.O_RDONLY)
    os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_RANDOM)
    got.append(os.pread(fd, 4096, off).hex())
    os.close(fd)
print(json.dumps(got))
"""


# the child for random windows against the file read whole elsewhere, each
# one request: through the page cache (readahead off) page-aligned reads of
# 1 to 256 pages; with -o direct_io ("exact") any offset and 1 byte to 1 MiB
WINDOW_READER = r"""
import os, sys, json, random
jobs = json.loads(sys.argv[1])
rng = random.Random(jobs["seed"])
bad = []
for path, whole_path in jobs["files"]:
    whole = open(whole_path, "rb").read()
    fd = os.open(path, os.O_RDONLY)
    os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_RANDOM)
    for _ in range(jobs["n"]):
        if jobs["exact"]:
            n = int(2 ** rng.uniform(0, 20))
            off = rng.randrange(len(whole))
        else:
            n = 4096 * rng.choice([1, 2, 3, 5, 8, 13, 32, 100, 256])
            off = rng.randrange(len(whole) // 4096 + 1) * 4096
        if os.pread(fd, n, off) != whole[off:off + n]:
            bad.append((os.path.basename(path), off, n))
    os.close(fd)
print(json.dumps(bad))
"""


def tensors(rng, n, big):
    """n tiny tensors (1-8 elements, U8 and I16: odd sizes and offsets) and
    one of `big` bytes, which spans several 1 MiB requests."""
    t = {}
    for i in range(n):
        k = int(rng.integers(1, 9))
        dt, size = ("I16", 2) if i % 2 else ("U8", 1)
        t[f"tiny.{i}"] = (dt, (k,), rng.integers(0, 256, k * size, dtype=np.uint8).tobytes())
    t[f"big.{n}"] = ("U8", (big,), rng.integers(0, 256, big, dtype=np.uint8).tobytes())
    return t


def read_all(m, work, want):
    """Every flat file at the mount's root and preads of tensors/ files, by
    a child with a deadline. Returns the parsed flat files and the slices."""
    flats = sorted(f for f in os.listdir(m.dir) if f.endswith(".safetensors"))
    assert flats, os.listdir(m.dir)
    at = []
    for name in [k for k in ("f0.tiny.7", "f0.tiny.2999", "f1.tiny.699", "f0.big.3000", "f1.big.700",
                              "h.7", "h.2999") if k in want]:
        raw = want[name][2]
        for off in (0, 1, 4095, 4097, 1 << 20, len(raw) - 1):
            if off < len(raw):
                at.append((m.path("tensors", name), off, 70000))
    out = tempfile.mkdtemp(dir=work)
    jobs = json.dumps({"whole": [m.path(f) for f in flats], "at": at})
    try:
        subprocess.run([sys.executable, "-c", READER, out, jobs], check=True, timeout=DEADLINE)
    except subprocess.TimeoutExpired:
        raise AssertionError(f"a read of the mount got no answer in {DEADLINE} s")
    got = {}
    for i in range(len(flats)):
        got.update(ckref.read_safetensors(os.path.join(out, str(i))))
    slices = json.load(open(os.path.join(out, "at.json")))
    return got, [(p, off, n, bytes.fromhex(s)) for (p, off, n), s in zip(at, slices)]


def check(m, work, want, what):
    got, slices = read_all(m, work, want)
    assert sorted(got) == sorted(want), f"{what}: keys differ"
    bad = [k for k, (dt, shape, raw) in want.items()
           if got[k][0] != dt or got[k][1] != shape or got[k][2].tobytes() != raw]
    assert not bad, f"{what}: {len(bad)} tensors differ, first {bad[:3]}"
    for p, off, n, b in slices:
        raw = want[os.path.basename(p)][2]
        assert b == raw[off:off + n], f"{what}: pread of {p} at {off}"


def windows(src, work, want):
    """Requests of every shape: random windows of model.safetensors and
    pytorch_model.bin, each one request (page-aligned through the page
    cache; any offset and length with -o direct_io), in a fresh mount, against the
    files read whole through another mount and checked there against the
    source (ckref's reader; torch.load for pytorch_model.bin)."""
    out = tempfile.mkdtemp(dir=work)
    names = ["model.safetensors", "pytorch_model.bin"]
    with Mount(src) as m:
        jobs = json.dumps({"whole": [m.path(f) for f in names], "at": []})
        subprocess.run([sys.executable, "-c", READER, out, jobs], check=True, timeout=DEADLINE)
    got = ckref.read_safetensors(os.path.join(out, "0"))
    assert {k: v[2].tobytes() for k, v in got.items()} == {k: v[2] for k, v in want.items()}
    try:
        import torch
        sd = torch.load(os.path.join(out, "1"))
        assert sorted(sd) == sorted(want), "pytorch_model.bin: keys"
        assert all(sd[k].numpy().tobytes() == v[2] for k, v in want.items()), "pytorch_model.bin"
    except ImportError:
        print("SKIP part: python3-torch is not installed (pytorch_model.bin checked by windows only)")
    for opts in (None, "direct_io"):
        with Mount(src, opts=opts) as m:
            jobs = json.dumps({"files": [(m.path(f), os.path.join(out, str(i))) for i, f in enumerate(names)],
                               "n": 150, "seed": 7, "exact": opts is not None})
            try:
                r = subprocess.run([sys.executable, "-c", WINDOW_READER, jobs], check=True,
                                   timeout=DEADLINE, capture_output=True, text=True)
            except subprocess.TimeoutExpired:
                raise AssertionError(f"windows ({opts}): a read got no answer in {DEADLINE} s")
            bad = json.loads(r.stdout)
            assert not bad, f"windows ({opts}) that differ from the whole file: {bad[:5]}"


def boundary_units(n):
    """n tensor names in file order (they sort as written), each with its
    size in units (a unit: 4 bytes): mostly 1, and in every 3300, one of 2,
    one of 3 and two of a half, each a page or more from the others.
    However the data lies against the pages, some page holds 1023 tensors,
    one 1024 and one 1025 (on 4-byte boundaries: a plain page 1024, one
    with a double 1023, one with the halves 1025; off them: 1025, 1024 and,
    with the triple, 1023)."""
    def units(i):
        return {100: 2, 1200: 3, 2300: 0.5, 2301: 0.5}.get(i % 3300, 1)
    return {f"b{i:05d}": units(i) for i in range(n)}


def page_plan(m, flat, sizes):
    """The one-page reads of `flat` wholly inside its data, by how many
    tensors each holds: {count: [offset, ...]} (the layout from the mount's
    own header, read with readahead off so no data page is cached)."""
    fd = os.open(m.path(flat), os.O_RDONLY)
    os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_RANDOM)
    (n,) = struct.unpack("<Q", os.pread(fd, 8, 0))
    header = json.loads(os.pread(fd, n, 8))
    size = os.fstat(fd).st_size
    os.close(fd)
    start = 8 + n
    ends = sorted(start + e["data_offsets"][1] for k, e in header.items() if k != "__metadata__")
    assert len(ends) == len(sizes) and ends[-1] == size, (len(ends), len(sizes))
    plan = {}
    first = -(-start // 4096) * 4096  # the first page the header's read left alone
    for off in range(first, size - 4096 + 1, 4096):
        # tensors ending inside the page, plus one running past its end
        k = sum(1 for e in ends if off < e <= off + 4096) + (off + 4096 not in ends)
        plan.setdefault(k, []).append(off)
    return plan, start, header


def read_pages(m, flat, offs, what):
    jobs = json.dumps([(m.path(flat), off) for off in offs])
    try:
        r = subprocess.run([sys.executable, "-c", PAGE_READER, jobs], check=True, timeout=DEADLINE,
                           capture_output=True, text=True)
    except subprocess.TimeoutExpired:
        raise AssertionError(f"{what}: a one-page read of {flat} got no answer in {DEADLINE} s")
    return [bytes.fromhex(h) for h in json.loads(r.stdout)]


def expected_page(start, header, want, off):
    page = bytearray(4096)
    for k, e in header.items():
        if k == "__metadata__":
            continue
        b, en = start + e["data_offsets"][0], start + e["data_offsets"][1]
        if en > off and b < off + 4096:
            raw = want[k][2]
            lo, hi = max(b, off), min(en, off + 4096)
            page[lo - off:hi - off] = raw[lo - b:hi - b]
    return bytes(page)


def check_boundary(m, want, what):
    """One page each of 1023, 1024 and 1025 tensors, read alone: the right
    bytes, answered (not left waiting), and that many direct reads (each
    tensor read from its source file)."""
    plan, start, header = page_plan(m, "model.safetensors", want)
    picks = []
    for k in (1023, 1024, 1025):
        assert plan.get(k), f"{what}: no page of {k} tensors: {sorted((c, len(o)) for c, o in plan.items())}"
        picks.append((k, plan[k][0]))
    before = m.stats()["direct_reads"]
    pages = read_pages(m, "model.safetensors", [off for _, off in picks], what)
    for (k, off), page in zip(picks, pages):
        assert page == expected_page(start, header, want, off), f"{what}: page of {k} tensors at {off}"
    got = m.stats()["direct_reads"] - before
    assert got == sum(k for k, _ in picks), f"{what}: {got} direct reads, not {sum(k for k, _ in picks)}"


def boundaries(work, rng):
    """Replies of 1023, 1024 and 1025 pieces: from the source files
    (buffered and -o odirect), and cast through the cache (-o no_stream)."""
    src = os.path.join(work, "bound")
    os.mkdir(src)
    want = {}
    for i, u in boundary_units(20000).items():
        n = int(4 * u)
        want[i] = ("U8", (n,), rng.integers(0, 256, n, dtype=np.uint8).tobytes())
    ckref.write_safetensors(os.path.join(src, "model.safetensors"), want)
    for opts in (None, "odirect"):
        with Mount(src, opts=opts) as m:
            check_boundary(m, want, f"pieces at the writev limit ({opts or 'buffered'})")
    # F16 -> F32 through the cache: a tensor of one element is 4 bytes
    src16 = os.path.join(work, "bound16")
    os.mkdir(src16)
    f16, as_f32 = {}, {}
    for i, u in boundary_units(20000).items():
        if u != int(u):
            continue  # no F32 tensor of 2 bytes: 1025 pieces is not made here
        k = int(u)
        a = rng.standard_normal(k).astype(np.float16)
        f16[i] = ("F16", (k,), a.tobytes())
        as_f32[i] = ("F32", (k,), a.astype(np.float32).tobytes())
    ckref.write_safetensors(os.path.join(src16, "model.safetensors"), f16)
    cast = os.path.join(work, "bound-f32.json")
    with open(cast, "w") as f:
        json.dump({"rules": [{"from": "{k:path}", "to": "{k}", "expr": "x.to(F32)"}]}, f)
    with Mount(src16, [cast], "no_stream") as m:
        plan, start, header = page_plan(m, "model.safetensors", as_f32)
        for k in (1023, 1024):
            assert plan.get(k), f"cast: no page of {k} tensors: {sorted((c, len(o)) for c, o in plan.items())}"
        offs = [plan[1023][0], plan[1024][0]]
        for off, page in zip(offs, read_pages(m, "model.safetensors", offs, "cast")):
            assert page == expected_page(start, header, as_f32, off), f"cast: page at {off}"
        assert m.stats()["groups_evaluated"] > 0


def main():
    skip_unless_fuse()
    rng = np.random.default_rng(23)
    work = tempfile.mkdtemp(prefix="ckptfs-tiny-")
    try:
        src = os.path.join(work, "src")
        os.mkdir(src)
        # one file whose first 1 MiB holds 3000 tensors (more pieces than
        # writev takes), one with 700 (fewer, but more aligned blocks than
        # one reply buffer holds)
        want = {}
        for i, (n, big) in enumerate([(3000, 3_000_001), (700, 2_500_003)]):
            t = tensors(rng, n, big)
            t = {f"f{i}.{k}": v for k, v in t.items()}
            ckref.write_safetensors(os.path.join(src, f"model-0000{i + 1}-of-00002.safetensors"), t)
            want.update(t)
        with Mount(src) as m:
            check(m, work, want, "buffered mount")
        windows(src, work, want)
        with Mount(src, opts="odirect") as m:
            check(m, work, want, "odirect mount")
            s = m.stats()
            assert s["odirect_files"] == 2 and s["direct_reads"] > 0, s
        # evaluated, not read from the source: 3000 F16 tensors cast to F32,
        # more pieces than writev takes in one read too
        src16 = os.path.join(work, "f16")
        os.mkdir(src16)
        f16 = {f"h.{i}": ("F16", (int(k),), rng.standard_normal(k).astype(np.float16).tobytes())
               for i, k in enumerate(rng.integers(1, 9, 3000))}
        ckref.write_safetensors(os.path.join(src16, "model.safetensors"), f16)
        cast = os.path.join(work, "to-f32.json")
        with open(cast, "w") as f:
            json.dump({"rules": [{"from": "{k:path}", "to": "{k}", "expr": "x.to(F32)"}]}, f)
        as_f32 = {k: ("F32", shape, np.frombuffer(raw, np.float16).astype(np.float32).tobytes())
                  for k, (_, shape, raw) in f16.items()}
        # by default each cast is evaluated straight into its read's reply
        # (streamed: 3000 evaluations into one reply); -o no_stream sends
        # them through the cache, its pieces gathered into one reply
        with Mount(src16, [cast]) as m:
            check(m, work, as_f32, "cast mount")
            s = m.stats()
            assert s["streamed_reads"] >= len(f16) and s["groups_evaluated"] == 0, s
            assert s["direct_reads"] == 0, s
        with Mount(src16, [cast], "no_stream") as m:
            check(m, work, as_f32, "cast mount, no_stream")
            s = m.stats()
            assert s["groups_evaluated"] > 0 and s["streamed_reads"] == 0, s
        boundaries(work, rng)
        print(f"tiny tensors: {len(want)} tensors, buffered and odirect, flat files and unaligned preads; "
              f"{len(f16)} cast, streamed and from the cache; random windows; replies of 1023, 1024 and 1025 pieces: ok")
    finally:
        shutil.rmtree(work)


if __name__ == "__main__":
    main()
