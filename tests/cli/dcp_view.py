"""dcp/ (issue #19, whole tensors): `mount -o dcp` serves the view as a
PyTorch Distributed Checkpoint directory and `convert --format dcp` writes
the same bytes. Checked without ckptfs's own DCP reader first:
- `.metadata` unpickles with stand-in classes registered at torch's module
  paths (dcpgen, written from the format description); only the expected
  globals appear; every tensor has one chunk at offset 0 of its global size,
  and the storage ranges tile `__0_0.distcp` without overlap;
- each chunk's byte range is a complete torch.save blob: Debian's torch
  loads it, and every tensor equals a numpy reference of the Megatron
  layout built from the HF source (ckref, Megatron's rules);
- the round trip: ckptfs's own DCP source reads the served directory back
  byte-identically; convert --format dcp writes the mount's bytes;
- `-o torch_dist` with llama-hf-to-megatron-torch-dist.json: Megatron's
  layer-stacked keys (against numpy's stack of the per-layer reference),
  metadata.json naming the torch_dist backend, a common.pt torch.load reads;
  ckptfs's torch_dist source and megatron-torch-dist-to-llama-hf.json give the
  HF source back byte for byte; convert --format torch_dist = the mount;
- dcp/ is on every mount (laid out on first use) with the same bytes; a
  view it cannot show answers EIO there (logged), -o dcp refuses it;
- a tp=2 per-rank view: each rank's dcp/ holds its fragments as chunks at
  their global offsets in __<rank>_0.distcp; both ranks' chunks, placed by
  those offsets, rebuild every global tensor of the reference exactly once
  (replicated ones twice, equal);
- convert --shard-groups --format dcp|torch_dist, rank by rank: one
  directory, each process's tensors once, rank 0's .metadata naming all;
  mount -o dcp --shard-groups refused;
- --ranks all (tp=2, pp=2 x tp=2, and torch_dist): one dcp/ beside the rank
  directories, as torch's writer leaves a save by those ranks: each rank's
  data file holds only pieces that rank holds, every piece of every tensor
  is stored exactly once (a replicated one by rank 0), the chunks rebuild
  the reference; ckptfs's own DCP source reads it back; convert --ranks all
  --format dcp writes the mount's bytes; ranks that leave a gap (--ranks 0)
  are refused with one line naming a tensor, nothing mounted."""
import json
import os
import pickle
import shutil
import subprocess
import sys
import tempfile

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import ckref  # noqa: E402
import dcpgen  # noqa: E402  (stand-in classes at torch's module paths; read_back)
from mountlib import Mount, skip_unless_fuse  # noqa: E402

CKPTFS, MKCKPT = os.environ["CKPTFS"], os.environ["MKCKPT"]
MEG = "llama-hf-to-megatron"
ALLOWED = {("torch.distributed.checkpoint.metadata", n) for n in
           ("Metadata", "TensorStorageMetadata", "TensorProperties", "ChunkStorageMetadata",
            "MetadataIndex", "_MEM_FORMAT_ENCODING")}
ALLOWED |= {("torch.distributed.checkpoint.filesystem", "_StorageInfo"), ("torch", "Size"),
            ("torch", "strided"), ("torch", "bfloat16"), ("torch", "float32"), ("torch", "float16")}


def globals_of(path):
    """The classes and functions the pickle names (pickletools, no import)."""
    import pickletools
    found = set()
    for opcode, arg, _ in pickletools.genops(open(path, "rb").read()):
        if opcode.name == "GLOBAL":
            found.add(tuple(arg.split(" ", 1)))
    return found


def check_structure(d):
    meta = pickle.load(open(os.path.join(d, ".metadata"), "rb"))
    size = os.path.getsize(os.path.join(d, "__0_0.distcp"))
    ranges = []
    for key, m in meta.state_dict_metadata.items():
        assert isinstance(m, dcpgen.TensorStorageMetadata), key
        assert len(m.chunks) == 1 and tuple(m.chunks[0].offsets) == (0,) * len(m.size)
        assert tuple(m.chunks[0].sizes) == tuple(m.size), key
        info = meta.storage_data[dcpgen.MetadataIndex(key, m.chunks[0].offsets, 0)]
        assert info.relative_path == "__0_0.distcp" and info.offset + info.length <= size
        ranges.append((info.offset, info.length))
    ranges.sort()
    assert ranges[0][0] == 0 and all(a + n == b for (a, n), (b, _) in zip(ranges, ranges[1:]))
    assert ranges[-1][0] + ranges[-1][1] == size, "the chunks do not tile the data file"
    return meta


def torch_dist(d, src, source, ref):
    """Megatron's torch_dist: stacked layers, metadata.json, common.pt."""
    import torch
    with Mount(src, ["llama-hf-to-megatron-torch-dist"], opts="torch_dist") as m:
        td = m.path("torch_dist")
        assert sorted(os.listdir(td)) == [".metadata", "__0_0.distcp", "common.pt", "metadata.json"]
        assert json.load(open(os.path.join(td, "metadata.json"))) == {
            "sharded_backend": "torch_dist", "sharded_backend_version": 1,
            "common_backend": "torch", "common_backend_version": 1}
        assert torch.load(os.path.join(td, "common.pt")) == {}
        check_structure(td)
        got = dcpgen.read_back(td)
        stacked = {}
        for k, (dt, arr) in ref.items():  # per-layer reference, stacked here
            parts = k.split(".")
            if parts[:2] == ["decoder", "layers"]:
                stacked.setdefault("decoder.layers." + ".".join(parts[3:]), {})[int(parts[2])] = arr
            else:
                stacked[k] = arr
        stacked = {k: np.stack([v[i] for i in sorted(v)]) if isinstance(v, dict) else v
                   for k, v in stacked.items()}
        assert set(got) == set(stacked), sorted(set(got) ^ set(stacked))
        for k, want in stacked.items():
            assert np.array_equal(got[k].view(torch.int16).numpy().view(np.uint16), want), k
        served = {f: open(os.path.join(td, f), "rb").read() for f in os.listdir(td)}
        copy = os.path.join(d, "td-copy")  # Megatron keeps the HF config elsewhere: put it beside
        shutil.copytree(td, copy)
        shutil.copy(os.path.join(src, "config.json"), copy)
    back = os.path.join(d, "td-back")
    ckref.run(CKPTFS, "convert", copy, back, "--mapping", "megatron-torch-dist-to-llama-hf", "--quiet")
    rb = ckref.read_checkpoint_dir(back)
    assert set(rb) == set(source)
    for k, (dt, arr) in source.items():
        assert rb[k][0] == dt and np.array_equal(rb[k][2], arr), k
    out = os.path.join(d, "td-conv")
    ckref.run(CKPTFS, "convert", src, out, "--mapping", "llama-hf-to-megatron-torch-dist", "--format",
              "torch_dist", "--quiet")
    assert {f: open(os.path.join(out, f), "rb").read() for f in os.listdir(out)} == served
    print(f"mount -o torch_dist: {len(stacked)} layer-stacked tensors equal numpy's stack; metadata.json and "
          "common.pt as Megatron writes them; ckptfs's torch_dist source + megatron-torch-dist-to-llama-hf "
          "give the HF source back byte for byte; convert --format torch_dist = the mount")


def per_rank(d, src, ref):
    """tp=2: each rank's chunks at their global offsets rebuild the reference."""
    import io
    import torch
    glob = {k: np.zeros(a.shape, a.dtype) for k, (dt, a) in ref.items()}
    hits = {k: np.zeros(a.shape, np.int32) for k, (dt, a) in ref.items()}
    held = [set(), set()]  # (key, chunk offsets) each rank holds
    for r in range(2):
        with Mount(src, [MEG], opts="dcp", extra=["--mesh", "tp=2", "--rank", str(r)]) as m:
            dcp = m.path("dcp")
            assert sorted(os.listdir(dcp)) == [".metadata", f"__{r}_0.distcp"]
            meta = pickle.load(open(os.path.join(dcp, ".metadata"), "rb"))
            blob = open(os.path.join(dcp, f"__{r}_0.distcp"), "rb").read()
            for key, tm in meta.state_dict_metadata.items():
                assert tuple(tm.size) == ref[key][1].shape, (key, tm.size)
                for i, c in enumerate(tm.chunks):
                    info = meta.storage_data[dcpgen.MetadataIndex(key, c.offsets, i)]
                    t = torch.load(io.BytesIO(blob[info.offset:info.offset + info.length]))
                    assert tuple(t.shape) == tuple(c.sizes), key
                    sl = tuple(slice(o, o + n) for o, n in zip(c.offsets, c.sizes))
                    glob[key][sl] = t.view(torch.int16).numpy().view(np.uint16)
                    hits[key][sl] += 1
                    held[r].add((key, tuple(c.offsets)))
    for k, (dt, a) in ref.items():
        assert np.array_equal(glob[k], a), f"{k}: the ranks' chunks do not rebuild it"
        assert hits[k].min() >= 1 and hits[k].max() <= 2, k
    split = sum(1 for h in hits.values() if h.max() == 1)
    print(f"tp=2 dcp/: both ranks' chunks at their global offsets rebuild all {len(ref)} tensors "
          f"({split} split, the rest replicated)")
    return held


def shard_groups(d, src, ref):
    """convert --shard-groups --format dcp, rank by rank (no launcher): each
    process writes its groups' tensors in __R_0.distcp, rank 0 the
    .metadata naming them all; a mount's share is refused."""
    for fmt, world in (("dcp", 3), ("torch_dist", 2)):
        out = os.path.join(d, f"groups-{fmt}")
        for r in reversed(range(world)):  # rank 0 last: it writes .metadata after its part
            ckref.run(CKPTFS, "convert", src, out, "--mapping", MEG, "--format", fmt, "--shard-groups",
                      "--world-size", str(world), "--rank", str(r), "--quiet")
        files = [f"__{r}_0.distcp" for r in range(world)]
        extra = ["common.pt", "metadata.json"] if fmt == "torch_dist" else []
        assert sorted(os.listdir(out)) == sorted([".metadata"] + files + extra), os.listdir(out)
        got, ranges = read_chunks(out, ref)
        assert set(got) == set(ref), sorted(set(got) ^ set(ref))
        for k, (glob, hits) in got.items():
            assert (hits == 1).all() and np.array_equal(glob, ref[k][1]), k
        assert all(ranges.get(f) for f in files), "a process wrote nothing"
        back = os.path.join(d, f"groups-back-{fmt}")
        ckref.run(CKPTFS, "convert", out, back, "--quiet")
        rb = ckref.read_checkpoint_dir(back)
        assert {k: rb[k][2].tobytes() for k in rb} == {k: a.tobytes() for k, (dt, a) in ref.items()}
    mnt = os.path.join(d, "mnt-groups")
    os.mkdir(mnt)
    p = subprocess.run([CKPTFS, "mount", src, mnt, "-o", "dcp", "--mapping", MEG, "--shard-groups",
                        "--world-size", "2", "--rank", "0"], capture_output=True, text=True, timeout=60)
    lines = p.stderr.strip().splitlines()
    assert p.returncode == 2 and len(lines) == 1 and "--shard-groups" in lines[0], p.stderr
    assert not os.listdir(mnt)
    print("convert --shard-groups --format dcp|torch_dist (3 and 2 processes, rank by rank): one "
          "directory, each process's tensors in its data file, rank 0's .metadata naming them all; "
          "every tensor once and equal to the reference; a mount's share is refused")


def read_chunks(dcp, ref):
    """Every chunk of every key placed at its offsets (torch.load of its byte
    range): key -> (global array, how often each element was stored), and
    file -> the (offset, length) ranges .metadata names in it."""
    import io
    import torch
    meta = pickle.load(open(os.path.join(dcp, ".metadata"), "rb"))
    blobs, ranges, out = {}, {}, {}
    for key, tm in meta.state_dict_metadata.items():
        want = ref[key][1]
        assert tuple(tm.size) == want.shape, (key, tm.size)
        glob, hits = np.zeros(want.shape, want.dtype), np.zeros(want.shape, np.int32)
        for i, c in enumerate(tm.chunks):
            info = meta.storage_data[dcpgen.MetadataIndex(key, c.offsets, i)]
            f = info.relative_path
            if f not in blobs:
                blobs[f] = open(os.path.join(dcp, f), "rb").read()
            ranges.setdefault(f, []).append((info.offset, info.length, key, tuple(c.offsets)))
            t = torch.load(io.BytesIO(blobs[f][info.offset:info.offset + info.length]))
            assert tuple(t.shape) == tuple(c.sizes), key
            sl = tuple(slice(o, o + n) for o, n in zip(c.offsets, c.sizes))
            glob[sl] = t.view(torch.int16).numpy().view(np.uint16)
            hits[sl] += 1
        out[key] = (glob, hits)
    for f, rs in ranges.items():  # the chunks tile each data file
        rs.sort()
        assert rs[0][0] == 0 and all(a + n == b for (a, n, *_), (b, *_) in zip(rs, rs[1:])), f
        assert rs[-1][0] + rs[-1][1] == len(blobs[f]), f
    return out, ranges


def ranks_view(d, src, ref, held):
    """--ranks all: one dcp/ (or torch_dist/) for the ranks of a mesh."""
    for mesh, world, fmt in (("tp=2", 2, "dcp"), ("pp=2,tp=2", 4, "dcp"), ("tp=2", 2, "torch_dist")):
        with Mount(src, [MEG], opts=fmt, extra=["--mesh", mesh, "--ranks", "all"]) as m:
            assert sorted(os.listdir(m.dir)) == sorted([fmt] + [f"rank{r}" for r in range(world)])
            top = m.path(fmt)
            files = [f"__{r}_0.distcp" for r in range(world)]
            extra = ["common.pt", "metadata.json"] if fmt == "torch_dist" else []
            assert sorted(os.listdir(top)) == sorted([".metadata"] + files + extra)
            got, ranges = read_chunks(top, ref)
            assert set(got) == set(ref), sorted(set(got) ^ set(ref))
            for k, (glob, hits) in got.items():
                assert (hits == 1).all(), f"{mesh}: a piece of {k} is missing or stored twice"
                assert np.array_equal(glob, ref[k][1]), f"{mesh}: {k}"
            if mesh == "tp=2":  # each rank's file: pieces that rank holds; a replica: rank 0's
                for r in range(world):
                    mine = {(k, o) for _, _, k, o in ranges.get(files[r], [])}
                    assert mine <= held[r], (r, sorted(mine - held[r])[:3])
                    assert r == 0 or not mine & held[0], "a replicated piece not by rank 0"
            served = {f: open(os.path.join(top, f), "rb").read() for f in os.listdir(top)}
            back = os.path.join(d, f"ranks-back-{world}-{fmt}")
            copy = os.path.join(d, f"ranks-copy-{world}-{fmt}")
            shutil.copytree(top, copy)
        ckref.run(CKPTFS, "convert", copy, back, "--quiet")  # ckptfs's own DCP / torch_dist source
        rb = ckref.read_checkpoint_dir(back)
        assert set(rb) == set(ref)
        for k, (dt, arr) in ref.items():
            assert rb[k][0] == dt and np.array_equal(rb[k][2], arr), k
        out = os.path.join(d, f"ranks-conv-{world}-{fmt}")
        ckref.run(CKPTFS, "convert", src, out, "--mapping", MEG, "--mesh", mesh, "--ranks", "all",
                  "--format", fmt, "--quiet")
        assert {f: open(os.path.join(out, f), "rb").read() for f in os.listdir(out)} == served
    mnt = os.path.join(d, "mnt")
    os.mkdir(mnt)
    for args in (["mount", src, mnt, "-o", "dcp", "--mapping", MEG, "--mesh", "tp=2", "--ranks", "0"],
                 ["convert", src, os.path.join(d, "y"), "--format", "dcp", "--mapping", MEG, "--mesh",
                  "tp=2", "--ranks", "1"]):
        p = subprocess.run([CKPTFS, *args], capture_output=True, text=True, timeout=60)
        lines = p.stderr.strip().splitlines()
        assert p.returncode != 0 and len(lines) == 1 and "do not cover" in lines[0], (args, p.stderr)
        assert '"' in lines[0] and "--ranks all" in lines[0], lines[0]
    assert not os.listdir(mnt) and not os.path.exists(os.path.join(d, "y"))
    print("--ranks all (tp=2, pp=2 x tp=2, torch_dist): one directory beside the rank directories; every "
          "piece stored once (replicas by rank 0), in the file of a rank that holds it; the chunks "
          "rebuild the reference; ckptfs's source reads it back; convert --ranks all = the mount; "
          "--ranks 0 / 1 refused with one line")


def default_on(d, src, served):
    """dcp/ on every mount (no -o): the same bytes as -o dcp, laid out on
    first use; a per-rank view whose fragments are not contiguous shows the
    directory but answers EIO for its files (logged), its tensors intact,
    while -o dcp refuses that view at mount time."""
    import errno
    with Mount(src, [MEG]) as m:
        assert "dcp" in os.listdir(m.dir)
        got = {f: open(m.path("dcp", f), "rb").read() for f in os.listdir(m.path("dcp"))}
        assert got == served, "the default dcp/ differs from -o dcp"
    cols = os.path.join(d, "cols.json")  # up_proj split on dim 1 in two blocks: two column fragments
    json.dump({"ckptfs_mapping": 1, "rules": [{"from": "{k:path}", "to": "{k}"}],
               "partition": [{"match": "model.layers.{L}.mlp.up_proj.weight", "spec": [None, "tp"],
                              "blocks": [1, 2]}]}, open(cols, "w"))
    m = Mount(src, [cols], extra=["--mesh", "tp=2", "--rank", "0"], expect_errors=True)
    try:
        assert sorted(os.listdir(m.path("dcp"))) == [".metadata", "__0_0.distcp"]
        try:
            open(m.path("dcp", ".metadata"), "rb").read()
            raise AssertionError("a dcp/ of non-contiguous fragments was served")
        except OSError as e:
            assert e.errno == errno.EIO, e
        up = open(m.path("tensors", "model.layers.0.mlp.up_proj.weight"), "rb").read()
        assert len(up) == os.path.getsize(m.path("tensors", "model.layers.0.mlp.up_proj.weight")) > 0
    finally:
        log = m.close()
    notes = [line for line in log.splitlines() if "dcp/:" in line]
    assert notes and all("not contiguous" in n and "up_proj" in n for n in notes), log
    mnt = os.path.join(d, "mnt-cols")
    os.mkdir(mnt)
    p = subprocess.run([CKPTFS, "mount", src, mnt, "-o", "dcp", "--mapping", cols, "--mesh", "tp=2",
                        "--rank", "0"], capture_output=True, text=True, timeout=60)
    lines = p.stderr.strip().splitlines()
    assert p.returncode != 0 and len(lines) == 1 and "not contiguous" in lines[0], p.stderr
    assert not os.listdir(mnt)
    print("dcp/ on every mount: the -o dcp bytes, laid out on first use; non-contiguous fragments: "
          "EIO for dcp/'s files with a log line (tensors/ intact), refused at mount with -o dcp")


def main():
    skip_unless_fuse()
    import torch
    d = tempfile.mkdtemp(prefix="ckptfs-dcpview-")
    try:
        src = os.path.join(d, "llama")
        ckref.run(MKCKPT, "--model", "llama", "--heads", "8", "--kv-heads", "2", "--dtype", "BF16",
                  "--shards", "2", src)
        cfg = json.load(open(os.path.join(src, "config.json")))
        source = {k: (v[0], v[2]) for k, v in ckref.read_checkpoint_dir(src).items()}
        ref = ckref.llama_to_megatron_ref(source, cfg)
        with Mount(src, [MEG], opts="dcp") as m:
            dcp = m.path("dcp")
            assert sorted(os.listdir(dcp)) == [".metadata", "__0_0.distcp"]
            names = globals_of(os.path.join(dcp, ".metadata"))
            assert names <= ALLOWED, names - ALLOWED
            meta = check_structure(dcp)
            got = dcpgen.read_back(dcp)  # torch.load of every chunk's byte range
            assert set(got) == set(ref), sorted(set(got) ^ set(ref))
            for k, (dt, arr) in ref.items():
                t = got[k]
                assert t.dtype == torch.bfloat16 and tuple(t.shape) == arr.shape, k
                assert meta.state_dict_metadata[k].properties.dtype == torch.bfloat16
                assert np.array_equal(t.view(torch.int16).numpy().view(np.uint16), arr), k
            served = {f: open(os.path.join(dcp, f), "rb").read() for f in os.listdir(dcp)}
            # ckptfs's own DCP source reads it back
            back = os.path.join(d, "back")
            ckref.run(CKPTFS, "convert", dcp, back, "--quiet")
            rb = ckref.read_checkpoint_dir(back)
            assert set(rb) == set(ref)
            for k, (dt, arr) in ref.items():
                assert rb[k][0] == dt and np.array_equal(rb[k][2], arr), k
        print(f"mount -o dcp: {len(ref)} Megatron-layout tensors; .metadata unpickles with stand-ins at "
              "torch's module paths (expected globals only), chunks tile __0_0.distcp, torch.load of each "
              "equals numpy's reference; ckptfs's DCP source reads it back byte-identically")
        out = os.path.join(d, "conv")
        ckref.run(CKPTFS, "convert", src, out, "--mapping", MEG, "--format", "dcp", "--quiet")
        assert {f: open(os.path.join(out, f), "rb").read() for f in os.listdir(out)} == served
        print("convert --format dcp writes the mount's two files byte for byte")
        default_on(d, src, served)
        # an F32 identity view with its own dtypes
        f32 = os.path.join(d, "mixtral")
        ckref.run(MKCKPT, "--model", "mixtral", f32)
        with Mount(f32, opts="dcp") as m:
            got = dcpgen.read_back(m.path("dcp"))
            want = ckref.read_checkpoint_dir(f32)
            assert set(got) == set(want)
            for k, (dt, shape, arr) in want.items():
                assert got[k].dtype == torch.float32 and np.array_equal(got[k].numpy(), arr), k
        print(f"identity F32 Mixtral: {len(want)} tensors through dcp/ equal the source")
        torch_dist(d, src, source, ref)
        held = per_rank(d, src, ref)
        ranks_view(d, src, ref, held)
        shard_groups(d, src, ref)
    finally:
        shutil.rmtree(d, ignore_errors=True)


if __name__ == "__main__":
    main()
