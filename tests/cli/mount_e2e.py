"""The FUSE mount, really mounted: every tensors/ file and model.safetensors
equal `convert`'s output (itself checked against numpy references in
mappings_e2e) for the identity view and every shipped mapping; laziness;
xattrs; read-only; EIO after a source is truncated; a cache smaller than the
model; the daemon started without -f; bad input refused before mounting."""
import errno
import json
import mmap
import os
import subprocess
import sys
import tempfile
import time

import numpy as np

sys.path.insert(0, os.path.dirname(__file__))
import ckref  # noqa: E402
from mountlib import CKPTFS, Mount, evaluated_groups, is_mounted, read_random, skip_unless_fuse  # noqa: E402

skip_unless_fuse()
MKCKPT = os.environ["MKCKPT"]
MAPS = os.path.join(os.path.dirname(__file__), "..", "..", "mappings")
MIB = 1 << 20


def mp(name):
    return os.path.join(MAPS, name)


def expected(outdir):
    """name -> raw bytes of a converted checkpoint."""
    return {k: v[2].tobytes() for k, v in ckref.read_checkpoint_dir(outdir).items()}


def check_npy(m, outdir):
    """np.load of every npy/<key>.npy equals the converted tensor (BF16 as raw
    '<V2' 2-byte values, as documented)."""
    for k, (dt, shape, arr) in ckref.read_checkpoint_dir(outdir).items():
        a = np.load(m.path("npy", k + ".npy"))
        assert a.shape == tuple(shape), (k, a.shape, shape)
        assert a.dtype.str == {"BF16": "|V2", "F32": "<f4", "F16": "<f2"}.get(dt, a.dtype.str), (k, a.dtype)
        assert a.tobytes() == arr.tobytes(), k


def check_view(m, want):
    names = sorted(os.listdir(m.path("tensors")))
    assert names == sorted(want), f"tensors/ differs: {set(names) ^ set(want)}"
    for k, raw in want.items():
        with open(m.path("tensors", k), "rb") as f:
            assert f.read() == raw, f"tensors/{k} differs"
        assert os.stat(m.path("tensors", k)).st_size == len(raw)
    flat = ckref.read_safetensors(m.path("model.safetensors"))
    assert {k: v[2].tobytes() for k, v in flat.items()} == want, "model.safetensors differs"
    with open(m.path("model.safetensors"), "rb") as f:
        n = int.from_bytes(f.read(8), "little")
        assert json.loads(f.read(n))["__metadata__"] == {"format": "pt"}


with tempfile.TemporaryDirectory() as d:
    srcs = ckref.make_sources(MKCKPT, d)
    cases = [("llama", []), ("llama", [mp("identity.json")]),
             ("llama", [mp("llama-hf-to-megatron.json")]),
             ("llama", [mp("llama-hf-to-megatron.json"), mp("megatron-to-llama-hf.json")]),
             ("gpt2", [mp("gpt2-conv1d-to-linear.json")]),
             ("mixtral", [mp("mixtral-hf-to-fused-experts.json")])]
    for i, (src, maps) in enumerate(cases):
        out = os.path.join(d, f"conv{i}")
        ckref.convert(CKPTFS, srcs[src], out, maps)
        want = expected(out)
        if not maps or maps == [mp("identity.json")]:
            assert want == expected(srcs[src])  # identity: the source itself
        with Mount(srcs[src], maps) as m:
            check_view(m, want)
            check_npy(m, out)
            s = m.stats()
            # each group evaluated once (renames are read from the source:
            # direct reads); the flat read was served from the cache
            plan = m.plan()
            assert s["groups_evaluated"] == evaluated_groups(plan), s
            assert s["read_errors"] == 0 and (s["cache_hits"] > 0) == (evaluated_groups(plan) > 0), s
            assert (s["direct_reads"] > 0) == any(t["direct"] for t in plan["targets"]), s
            assert (s["streamed_reads"] > 0) == any(t["streamed"] for t in plan["targets"]), s
    print(f"{len(cases)} views: tensors/ and model.safetensors equal convert")

    # -o direct_io: no page cache, every read answered by the daemon, same bytes
    with Mount(srcs["gpt2"], [mp("gpt2-conv1d-to-linear.json")], "direct_io,chunk=64KiB") as m:
        check_view(m, expected(os.path.join(d, "conv4")))
        check_view(m, expected(os.path.join(d, "conv4")))  # again: from the daemon's cache
        s = m.stats()
        assert s["cache_hits"] > 0 and s["groups_evaluated"] == evaluated_groups(m.plan()), s

    # opens: the files are immutable, so the kernel opens them without asking
    # the daemon (one OPEN answered ENOSYS, then none, and no RELEASE), and a
    # re-read is served from the page cache the opens keep; stats.json stays
    # live (a fresh snapshot per read, one size); -o direct_io keeps opens
    # A listing answers with each file's attributes (READDIRPLUS), so the
    # opens after it cost no LOOKUP each (stats.json, whose entry does not
    # stay cached, costs one per read of it), and the sizes it gave are true
    with Mount(srcs["llama"], [mp("llama-hf-to-megatron.json")]) as m:
        names = sorted(os.listdir(m.path("tensors")))
        s0 = m.stats()
        first = {n: open(m.path("tensors", n), "rb").read() for n in names}
        s1 = m.stats()
        assert len(names) > 10 and s1["lookup_requests"] - s0["lookup_requests"] <= 2, (len(names), s0, s1)
        assert all(os.stat(m.path("tensors", n)).st_size == len(first[n]) for n in names)
        again = {n: open(m.path("tensors", n), "rb").read() for n in names}
        s2 = m.stats()
        assert again == first and s1["open_requests"] <= 1 and s2["open_requests"] == s1["open_requests"], (s1, s2)
        assert s2["read_requests"] == s1["read_requests"] > 0, (s1, s2)  # no page was dropped
        assert os.stat(m.path(".ckptfs", "stats.json")).st_size == len(open(m.path(".ckptfs", "stats.json"),
                                                                              "rb").read())
        # a reader that opens with O_DIRECT skips the page cache: its reads
        # reach the daemon although every page is cached, and get the same bytes
        buf = mmap.mmap(-1, 1 << 20)  # page-aligned
        for n in names[:6]:
            fd = os.open(m.path("tensors", n), os.O_RDONLY | os.O_DIRECT)
            got = bytearray()
            while k := os.readv(fd, [buf]):
                got += buf[:k]
            os.close(fd)
            assert got == first[n], n
        s3 = m.stats()
        assert s3["read_requests"] >= s2["read_requests"] + 6, (s2, s3)
    with Mount(srcs["llama"], [], "direct_io") as m:
        n = os.listdir(m.path("tensors"))[0]
        for _ in range(3):
            open(m.path("tensors", n), "rb").read()
        assert m.stats()["open_requests"] >= 3, m.stats()
        # no page cache: a shared mapping is refused (the kernel's rule for
        # FOPEN_DIRECT_IO), a private one (numpy's mmap_mode="c") reads the file
        want = open(m.path("tensors", n), "rb").read()
        fd = os.open(m.path("tensors", n), os.O_RDONLY)
        try:
            mmap.mmap(fd, 0, access=mmap.ACCESS_READ)
            raise AssertionError("a shared mmap of a direct_io file")
        except OSError as e:
            assert e.errno == errno.ENODEV, e
        with mmap.mmap(fd, 0, access=mmap.ACCESS_COPY) as mm:
            assert len(want) > 0 and mm[:] == want
        os.close(fd)
    print(f"{len(names)} tensors read twice: {s2['open_requests']} OPEN, the second pass from the page cache; "
          "-o direct_io opens every time; O_DIRECT opens reach the daemon; -o direct_io maps privately only")

    # without io_uring (forced): the pread path serves identical bytes
    with Mount(srcs["mixtral"], [mp("mixtral-hf-to-fused-experts.json")], "no_uring") as m:
        check_view(m, expected(os.path.join(d, "conv5")))
        assert m.stats()["io"] == "pread"

    # laziness: listing, stat and xattrs evaluate nothing; one read, one group
    # (no_prefetch: the group after a started tensor is not evaluated ahead;
    # no_stream: reads go through the cache, whose groups this counts)
    maps = [mp("llama-hf-to-megatron.json")]
    view = json.loads(ckref.run(CKPTFS, "inspect", srcs["llama"], "--mapping", maps[0], "--json").stdout)
    with Mount(srcs["llama"], maps, "no_prefetch,no_stream") as m:
        for name in os.listdir(m.path("tensors")):
            p = m.path("tensors", name)
            os.stat(p)
            attrs = {a: os.getxattr(p, a).decode() for a in os.listxattr(p)}
            t = next(t for t in view["tensors"] if t["name"] == name)
            assert attrs["user.ckptfs.dtype"] == t["dtype"], attrs
            assert json.loads(attrs["user.ckptfs.shape"]) == t["shape"], attrs
            assert int(attrs["user.ckptfs.group"]) == t["group"], attrs
            assert isinstance(json.loads(attrs["user.ckptfs.sources"]), list)
        os.statvfs(m.dir)
        os.stat(m.path("model.safetensors"))
        s = m.stats()
        assert s["groups_evaluated"] == 0 and s["source_bytes_read"] == 0, s
        plan = m.plan()
        name = "decoder.layers.1.self_attention.linear_qkv.weight"
        t = next(t for t in plan["targets"] if t["name"] == name)
        g = plan["groups"][t["group"]]
        assert len(g["sources"]) == 3
        data = read_random(m.path("tensors", name))
        assert len(data) == t["bytes"]
        s = m.stats()
        assert s["groups_evaluated"] == 1, s
        assert s["source_bytes_read"] == g["in_bytes"] == sum(x["bytes"] for x in g["sources"]), (s, g)
        # a partial read of model.safetensors inside one tensor evaluates only its
        # group (page-aligned: the page cache reads whole pages)
        t2 = max(plan["targets"], key=lambda t: t["bytes"] if t["name"] != name else 0)
        start = (t2["flat_offset"] + 4095) // 4096 * 4096
        assert start + 4096 <= t2["flat_offset"] + t2["bytes"]
        before = m.stats()
        read_random(m.path("model.safetensors"), start, 4096)
        s = m.stats()
        if t2["direct"]:  # a rename: read from the source, nothing evaluated
            assert s["groups_evaluated"] == 1 and s["direct_reads"] == before["direct_reads"] + 1, s
            assert s["source_bytes_read"] == before["source_bytes_read"] + 4096, s
        else:
            assert s["groups_evaluated"] == 2, s

        # read-only: every write-side operation is EROFS
        def erofs(fn):
            try:
                fn()
            except OSError as e:
                assert e.errno == errno.EROFS, (fn, e)
            else:
                raise AssertionError(f"{fn} succeeded")
        p = m.path("tensors", name)
        erofs(lambda: open(p, "r+b"))
        erofs(lambda: open(m.path("tensors", "new"), "wb"))
        erofs(lambda: os.truncate(p, 0))
        erofs(lambda: os.mkdir(m.path("d")))
        erofs(lambda: os.unlink(p))
        erofs(lambda: os.rmdir(m.path("tensors")))
        erofs(lambda: os.rename(p, m.path("tensors", "x")))
        erofs(lambda: os.symlink("a", m.path("l")))
        erofs(lambda: os.chmod(p, 0o666))
        erofs(lambda: os.setxattr(p, "user.x", b"1"))
        erofs(lambda: os.removexattr(p, "user.ckptfs.dtype"))

    # streamed reads (the default): a tensor whose pieces read their sources
    # in order (the fused QKV: blocks of q, k and v rows) is evaluated read by
    # read into the reply, on its own: a 4 KiB read reads its 4 KiB of source
    # and evaluates no group (the cache, above, evaluated all three sources);
    # a transposed tensor (GPT-2's Conv1D as Linear) is not streamed and still
    # evaluates its group
    conv2 = expected(os.path.join(d, "conv2"))
    with Mount(srcs["llama"], maps, "no_prefetch") as m:
        t = next(t for t in m.plan()["targets"] if t["name"] == name)
        assert t["streamed"] and not t["direct"], t
        for off in (0, 8192, t["bytes"] - 4096):
            assert read_random(m.path("tensors", name), off, 4096) == conv2[name][off:off + 4096], off
        s = m.stats()
        assert s["groups_evaluated"] == 0 and s["cache_bytes"] == 0, s
        assert s["streamed_reads"] == 3 and s["source_bytes_read"] == 3 * 4096, s
    with Mount(srcs["gpt2"], [mp("gpt2-conv1d-to-linear.json")], "no_prefetch") as m:
        plan = m.plan()
        tr = [t for t in plan["targets"] if not t["direct"] and not t["streamed"]]
        assert tr, "the Conv1D view has transposed weights"
        want4 = expected(os.path.join(d, "conv4"))
        assert read_random(m.path("tensors", tr[0]["name"])) == want4[tr[0]["name"]]
        s = m.stats()
        assert s["groups_evaluated"] == 1 and s["streamed_reads"] == 0, s

    # prefetch: starting an evaluated tensor evaluates the next evaluated group
    # in plan order ahead of the reader, once; reading it then hits the cache
    with Mount(srcs["llama"], maps, "no_stream") as m:
        plan = m.plan()
        evaluated = [t for t in plan["targets"] if not t["direct"]]
        first = evaluated[0]
        nxt = next(t for t in evaluated if t["group"] != first["group"])
        read_random(m.path("tensors", first["name"]))
        for _ in range(200):  # the prefetch finishes on an evaluator thread
            s = m.stats()
            if s["evaluations_in_flight"] == 0 and s["groups_evaluated"] == 2:
                break
            time.sleep(0.01)
        assert s["prefetches"] == 1 and s["groups_evaluated"] == 2, s
        misses = s["cache_misses"]
        assert read_random(m.path("tensors", nxt["name"])) == expected(os.path.join(d, "conv2"))[nxt["name"]]
        s = m.stats()
        assert s["cache_misses"] == misses and s["prefetches"] == 2, s  # hit; it prefetches the next

    # a cache far smaller than the model still serves correct bytes
    want = expected(os.path.join(d, "conv2"))
    with Mount(srcs["llama"], maps, "cache_size=16KiB,chunk=4KiB,group_max=0,no_stream") as m:
        check_view(m, want)
        s = m.stats()
        assert s["cache_evictions"] > 0 and s["regions_evaluated"] > 0, s
        # a read holds its chunks until just after its reply is written (zero
        # copy); the release is asynchronous, so allow it a bounded moment
        for _ in range(50):
            if s["cache_bytes"] <= 16 * 1024 + 2 * 4096 * 4:  # budget + in-flight chunks
                break
            time.sleep(0.05)
            s = m.stats()
        assert s["cache_bytes"] <= 16 * 1024 + 2 * 4096 * 4, s

    # chunks served whole are spares once the kernel holds their pages: past
    # served_max (max(cache_size / 8, 4 chunks) = 8 MiB here) the oldest are
    # dropped well under the budget and their memory is reused for the next
    # evaluations, recycled chunks showing no old byte; -o direct_io (no
    # kernel page cache) keeps them
    big = os.path.join(d, "big")
    ckref.run(MKCKPT, "--model", "llama", "--hidden", "1024", "--intermediate", "2816", "--layers", "1",
              "--vocab", "1000", "--dtype", "F32", big)
    ckref.convert(CKPTFS, big, os.path.join(d, "big-meg"), maps)
    want = expected(os.path.join(d, "big-meg"))
    for opts, drops in [("cache_size=64MiB,chunk=2MiB,no_prefetch,no_stream", True),
                        ("cache_size=64MiB,chunk=2MiB,no_prefetch,direct_io,no_stream", False)]:
        with Mount(big, maps, opts) as m:
            for k, raw in want.items():
                with open(m.path("tensors", k), "rb") as f:
                    assert f.read() == raw, f"tensors/{k} differs ({opts})"
            s = m.stats()
            assert s["cache_evictions"] == 0 and s["read_errors"] == 0, s
            if drops:
                assert s["cache_dropped"] > 0 and s["cache_recycled"] > 0, s
                assert s["cache_bytes"] <= 8 * MIB + 2 * MIB, s  # the spares, and a chunk being read
            else:
                assert s["cache_dropped"] == 0 and s["cache_recycled"] == 0, s
    print(f"served chunks: {s['cache_bytes'] >> 20} MiB kept with direct_io; without it the oldest dropped "
          "and their memory reused, same bytes")

    # a source truncated under the mount: EIO for what needs it, the rest served
    cp = os.path.join(d, "copy")
    ckref.run(MKCKPT, "--model", "llama", "--shards", "3", cp)
    idx = json.load(open(os.path.join(cp, "model.safetensors.index.json")))["weight_map"]
    m = Mount(cp, expect_errors=True)
    ms = Mount(cp, maps, expect_errors=True)  # its reads are streamed (the same check)
    victim = "model-00003-of-00003.safetensors"
    bad = next(k for k, f in idx.items() if f == victim)
    good = next(k for k, f in idx.items() if f != victim)
    os.truncate(os.path.join(cp, victim), os.path.getsize(os.path.join(cp, victim)) - 64)
    for _ in range(3):
        try:
            read_random(m.path("tensors", bad))
            raise AssertionError("read of a truncated source succeeded")
        except OSError as e:
            assert e.errno == errno.EIO, e
    assert len(read_random(m.path("tensors", good))) > 0
    assert m.stats()["read_errors"] >= 1
    log = m.close()
    changed = [l for l in log.splitlines() if "changed after mount" in l]
    assert len(changed) == 1 and victim in changed[0], log  # logged once, with the file
    plan = ms.plan()
    sv = next(t for t in plan["targets"] if t["streamed"] and
              any(x["file"] == victim for x in plan["groups"][t["group"]]["sources"]))
    try:
        read_random(ms.path("tensors", sv["name"]))
        raise AssertionError("a streamed read of a truncated source succeeded")
    except OSError as e:
        assert e.errno == errno.EIO, e
    assert ms.stats()["read_errors"] >= 1
    log = ms.close()
    assert sum(victim in l for l in log.splitlines() if "changed after mount" in l) == 1, log

    # a source replaced by rename, or deleted: the descriptor held since mount
    # keeps serving the original bytes (snapshot semantics)
    snap = os.path.join(d, "snap")
    ckref.run(MKCKPT, "--model", "llama", "--shards", "2", snap)
    orig = expected(snap)
    with Mount(snap) as m:
        for f in os.listdir(snap):
            if f.endswith(".safetensors"):
                p = os.path.join(snap, f)
                tmp = p + ".new"
                with open(tmp, "wb") as fh:
                    fh.write(b"\xff" * os.path.getsize(p))
                os.rename(tmp, p)
        os.remove(os.path.join(snap, "model-00002-of-00002.safetensors"))
        for k, raw in orig.items():
            assert read_random(m.path("tensors", k)) == raw, k
        assert m.stats()["read_errors"] == 0

    # plan.json is built on its first use, not at mount: 12,288 expert
    # tensors' plan (about 2 MB of JSON) enters the daemon's memory when the
    # file is first looked up, not when the mount starts or .ckptfs/ is
    # listed, and then says what the library's plan says of every target
    moe = os.path.join(d, "moe")
    ckref.run(MKCKPT, "--model", "mixtral", "--experts", "128", "--layers", "32", "--sparse", moe)
    with Mount(moe, [mp("mixtral-hf-to-fused-experts.json")]) as m:
        def rss():
            with open(f"/proc/{m.proc.pid}/status") as f:
                return next(int(x.split()[1]) for x in f if x.startswith("VmRSS:")) * 1024
        assert sorted(os.listdir(m.path(".ckptfs"))) == ["plan.json", "stats.json"]
        before = rss()
        size = os.stat(m.path(".ckptfs", "plan.json")).st_size
        raw = open(m.path(".ckptfs", "plan.json"), "rb").read()
        grown = rss() - before
        plan = json.loads(raw)
        assert len(raw) == size > 1 << 20 and grown > size * 0.8, (size, len(raw), grown)
        names = sorted(os.listdir(m.path("tensors")))
        assert sorted(t["file"] for t in plan["targets"]) == [f"tensors/{n}" for n in names]
        assert all(t["bytes"] == os.stat(m.path(t["file"])).st_size for t in plan["targets"])

    # without -f: returns once live, usable at once; fusermount3 -u ends it
    mnt = tempfile.mkdtemp(prefix="ckptfs-d-")
    p = subprocess.run([CKPTFS, "mount", srcs["gpt2"], mnt], capture_output=True, text=True, timeout=60)
    try:
        assert p.returncode == 0, p.stderr
        assert is_mounted(mnt)
        assert len(os.listdir(os.path.join(mnt, "tensors"))) > 0
    finally:
        subprocess.run(["fusermount3", "-u", mnt], check=False)
    assert not is_mounted(mnt)

    # bad input: refused before mounting, one line, non-zero
    bad_map = os.path.join(d, "bad.json")
    with open(bad_map, "w") as f:
        json.dump({"rules": [{"from": "nope.{x}", "to": "y.{x}"}]}, f)
    for args, code in [([srcs["gpt2"], mnt, "--mapping", bad_map], 4),
                       ([os.path.join(d, "missing"), mnt], 3),
                       ([srcs["gpt2"], mnt, "-o", "cache_size=lots"], 2)]:
        p = subprocess.run([CKPTFS, "mount", *args], capture_output=True, text=True, timeout=60)
        assert p.returncode == code, (args, p.returncode, p.stderr)
        assert p.stderr.count("\n") == 1, p.stderr
        assert not is_mounted(mnt)
    os.rmdir(mnt)
print("mount: views, laziness, xattrs, EROFS, small cache, EIO, daemon mode, bad input")
