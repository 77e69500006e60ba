"""pytorch_model.bin (torch.save) checkpoints as sources, written by Debian's
torch 1.13: plain tensors, every storage dtype, views with offsets and
non-contiguous strides sharing one storage, a nested {"model": ..., "epoch"}
dict, nn.Parameters, and a sharded checkpoint with pytorch_model.bin.index.json.
`inspect` lists what torch.load returns, `convert` writes exactly its values,
a mapping gives the same bytes as from the safetensors copy, a mount serves
them; compressed entries, foreign opcodes, views past their storage and
truncated files are refused with one line; a pickle that names os.system is
read as data and nothing runs."""
import collections
import json
import os
import pickle
import subprocess
import sys
import tempfile
import zipfile

sys.path.insert(0, os.path.dirname(__file__))
import ckref  # noqa: E402
from mountlib import Mount, have_fuse  # noqa: E402

try:
    import torch
except ImportError:
    print("SKIP: python3-torch is not installed (tools/test.sh installs it)")
    sys.exit(77)

CKPTFS, MKCKPT = os.environ["CKPTFS"], os.environ["MKCKPT"]
MAPS = os.path.join(os.path.dirname(__file__), "..", "..", "mappings")
DT = {torch.float32: "F32", torch.float64: "F64", torch.float16: "F16", torch.bfloat16: "BF16",
      torch.int64: "I64", torch.int32: "I32", torch.int16: "I16", torch.int8: "I8",
      torch.uint8: "U8", torch.bool: "BOOL"}


def raw(t):
    t = t.detach().contiguous()
    return t.view(torch.int16).numpy().tobytes() if t.dtype == torch.bfloat16 else t.numpy().tobytes()


def flat_tensors(obj, prefix=""):
    out = {}
    for k, v in obj.items():
        name = f"{prefix}.{k}" if prefix else k
        if isinstance(v, dict):
            out.update(flat_tensors(v, name))
        elif torch.is_tensor(v):
            out[name] = v
    return out


def check_source(path, want):
    """inspect and convert of path agree with torch's tensors `want`."""
    view = json.loads(ckref.run(CKPTFS, "inspect", path, "--json").stdout)
    assert view["format"] == "pytorch", view["format"]
    got = {t["name"]: t for t in view["tensors"]}
    assert sorted(got) == sorted(want), set(got) ^ set(want)
    for k, t in want.items():
        assert got[k]["dtype"] == DT[t.dtype] and got[k]["shape"] == list(t.shape), (k, got[k])
    with tempfile.TemporaryDirectory() as out:
        ckref.convert(CKPTFS, path, os.path.join(out, "c"))
        conv = ckref.read_checkpoint_dir(os.path.join(out, "c"))
        for k, t in want.items():
            assert conv[k][2].tobytes() == raw(t), k


with tempfile.TemporaryDirectory() as d:
    torch.manual_seed(0)
    base = torch.randn(6, 8)
    sd = collections.OrderedDict()
    for dt in DT:
        sd[f"dtype.{DT[dt]}"] = (torch.randn(3, 5) * 50).to(dt)
    sd["view.base"] = base
    sd["view.transposed"] = base.t()
    sd["view.slice"] = base[2:5, 1:6]
    sd["view.column"] = base[:, 3]
    sd["view.expanded"] = torch.randn(4, 1).expand(4, 3)  # stride 0
    sd["scalar"] = torch.tensor(2.5)
    sd["empty"] = torch.zeros(0, 4)
    plain = os.path.join(d, "plain.bin")
    torch.save(sd, plain)
    check_source(plain, dict(sd))
    print(f"{len(sd)} tensors (every storage dtype, views sharing a storage): inspect and convert match torch")

    nested = {"model": {"encoder": {"w": torch.randn(2, 3)}, "head": torch.nn.Parameter(torch.randn(4))},
              "epoch": 3, "lr": 0.1, "name": "run-1"}
    npath = os.path.join(d, "nested.bin")
    torch.save(nested, npath)
    check_source(npath, flat_tensors(nested))
    print("nested dicts flatten with '.', nn.Parameter unwraps, non-tensors are left out")

    # a sharded HF-style checkpoint (pytorch_model.bin.index.json) from an mkckpt llama
    st = os.path.join(d, "llama-st")
    ckref.run(MKCKPT, "--model", "llama", "--dtype", "BF16", st)
    arrays = ckref.read_checkpoint_dir(st)
    tensors = {k: torch.from_numpy(a.view("int16").copy()).view(torch.bfloat16) if dt == "BF16" else torch.from_numpy(a.copy())
               for k, (dt, _, a) in arrays.items()}
    tb = os.path.join(d, "llama-bin")
    os.makedirs(tb)
    keys = sorted(tensors)
    shards = [keys[: len(keys) // 2], keys[len(keys) // 2:]]
    wmap = {}
    for i, ks in enumerate(shards):
        name = f"pytorch_model-{i + 1:05d}-of-00002.bin"
        torch.save(collections.OrderedDict((k, tensors[k]) for k in ks), os.path.join(tb, name))
        wmap.update({k: name for k in ks})
    json.dump({"metadata": {"total_size": 0}, "weight_map": wmap},
              open(os.path.join(tb, "pytorch_model.bin.index.json"), "w"))
    os.link(os.path.join(st, "config.json"), os.path.join(tb, "config.json"))
    check_source(tb, tensors)
    meg = os.path.join(MAPS, "llama-hf-to-megatron.json")
    a, b = os.path.join(d, "from-st"), os.path.join(d, "from-bin")
    ckref.convert(CKPTFS, st, a, [meg])
    ckref.convert(CKPTFS, tb, b, [meg])
    ra, rb = ckref.read_checkpoint_dir(a), ckref.read_checkpoint_dir(b)
    assert {k: v[2].tobytes() for k, v in ra.items()} == {k: v[2].tobytes() for k, v in rb.items()}
    print("sharded pytorch_model.bin + index: the Megatron mapping gives the same bytes as from safetensors")

    if have_fuse():
        with Mount(plain) as m:
            for k, t in sd.items():
                assert open(m.path("tensors", k), "rb").read() == raw(t), k
            back = torch.load(m.path("pytorch_model.bin"), weights_only=True)
            assert all(torch.equal(back[k], sd[k].contiguous()) for k in sd)
        with Mount(tb, [meg]) as m:
            assert {k: open(m.path("tensors", k), "rb").read() for k in os.listdir(m.path("tensors"))} == \
                {k: v[2].tobytes() for k, v in ra.items()}
        print("mounts of torch sources serve the same bytes (and a pytorch_model.bin that loads back)")

    # refused with one line naming the file and the problem
    def refused(path, msg):
        p = ckref.run(CKPTFS, "inspect", path, check=False)
        assert p.returncode == 3 and msg in p.stderr and p.stderr.count("\n") == 1 and path in p.stderr, \
            (msg, p.returncode, p.stderr)

    comp = os.path.join(d, "compressed.bin")
    with zipfile.ZipFile(plain) as zin, zipfile.ZipFile(comp, "w", zipfile.ZIP_DEFLATED) as zout:
        for info in zin.infolist():
            zout.writestr(info.filename, zin.read(info.filename))
    refused(comp, "is compressed (method 8)")
    cut = os.path.join(d, "truncated.bin")
    open(cut, "wb").write(open(plain, "rb").read()[:-300])
    refused(cut, "not a valid zip archive")

    def archive(path, pkl):
        with zipfile.ZipFile(path, "w") as z:
            z.writestr("archive/data.pkl", pkl)
            z.writestr("archive/data/0", b"\0" * 16)
            z.writestr("archive/version", "3\n")

    def rebuild(offset, size, stride, numel=4):
        return (b"\x80\x02}(X\x01\x00\x00\x00wctorch._utils\n_rebuild_tensor_v2\n((X\x07\x00\x00\x00storage"
                b"ctorch\nFloatStorage\nX\x01\x00\x00\x000X\x03\x00\x00\x00cpuK" + bytes([numel]) + b"tQK"
                + bytes([offset]) + b"(" + b"".join(b"K" + bytes([s]) for s in size) + b"t("
                + b"".join(b"K" + bytes([s]) for s in stride) + b"t\x89}tRu.")
    good = os.path.join(d, "handmade.bin")
    archive(good, rebuild(0, [2, 2], [2, 1]))
    assert json.loads(ckref.run(CKPTFS, "inspect", good, "--json").stdout)["tensors"][0]["shape"] == [2, 2]
    assert list(torch.load(good)["w"].shape) == [2, 2]  # the hand-made pickle is torch's format
    past = os.path.join(d, "past.bin")
    archive(past, rebuild(1, [2, 2], [2, 1]))  # elements 1..4 of a 4-element storage
    refused(past, "view reaches element 4 of a 4-element storage")
    big = os.path.join(d, "bigstorage.bin")
    archive(big, rebuild(0, [2, 2], [2, 1], numel=8))  # 8 floats claimed, 16 bytes stored
    refused(big, "holds 16 bytes, its storage needs 32")
    proto0 = os.path.join(d, "proto0.bin")
    archive(proto0, pickle.dumps({"w": 1}, protocol=0))
    refused(proto0, "is not allowed")
    # os.system named in the pickle: read as a name, never called
    flag = os.path.join(d, "pwned")
    evil = os.path.join(d, "evil.bin")
    archive(evil, b"\x80\x02}(X\x01\x00\x00\x00xcos\nsystem\n(X" + len(f"touch {flag}").to_bytes(4, "little")
            + f"touch {flag}".encode() + b"tRu.")
    p = ckref.run(CKPTFS, "inspect", evil, check=False)
    assert p.returncode == 0 and "0 tensors" in p.stdout and not os.path.exists(flag), (p.stdout, p.stderr)
    print("compressed, truncated, out-of-storage views and foreign opcodes refused; os.system never runs")
