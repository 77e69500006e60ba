"""DCP and Megatron torch_dist checkpoints as sources, from tests/cli/dcpgen.py
(PyTorch 2.x's layout: a pickled Metadata, torch.save blobs inside .distcp
files). Keys assembled from row, column and block chunks (some saved as
views of larger storages) equal the tensors the stand-in classes read back
with torch; a torch_dist checkpoint with layer-stacked keys, made from an
HF Llama, comes back byte for byte through megatron-torch-dist-to-llama-hf;
mounts serve the same bytes; overlapping or missing chunks, an unknown
sharded backend and an item past the end of its file are refused."""
import json
import os
import pickle
import sys
import tempfile

sys.path.insert(0, os.path.dirname(__file__))
import ckref  # noqa: E402
from mountlib import Mount, have_fuse  # noqa: E402

try:
    import torch
    import dcpgen
except ImportError:
    print("SKIP: python3-torch is not installed (tools/test.sh installs it)")
    sys.exit(77)

CKPTFS, MKCKPT = os.environ["CKPTFS"], os.environ["MKCKPT"]
MAPS = os.path.join(os.path.dirname(__file__), "..", "..", "mappings")
DT = {torch.float32: "F32", torch.bfloat16: "BF16", torch.int64: "I64", torch.float16: "F16"}


def raw(t):
    t = t.contiguous()
    return t.view(torch.int16).numpy().tobytes() if t.dtype == torch.bfloat16 else t.numpy().tobytes()


def converted(src, maps=(), *extra):
    with tempfile.TemporaryDirectory() as out:
        ckref.convert(CKPTFS, src, os.path.join(out, "c"), maps, *extra)
        return {k: v[2].tobytes() for k, v in ckref.read_checkpoint_dir(os.path.join(out, "c")).items()}


with tempfile.TemporaryDirectory() as d:
    torch.manual_seed(3)
    w = torch.randn(8, 6)
    blk = torch.randn(4, 6).to(torch.bfloat16)
    big = torch.randn(10, 10)  # chunks saved as views of this storage
    e = torch.arange(24, dtype=torch.int64).view(4, 6)
    tensors = {
        "rows": [((0, 0), w[:3].clone()), ((3, 0), w[3:].clone())],
        "cols": [((0, 0), e[:, :2].clone()), ((0, 2), e[:, 2:5].clone()), ((0, 5), e[:, 5:].clone())],
        "blocks": [((0, 0), blk[:2, :3].clone()), ((0, 3), blk[:2, 3:].clone()),
                   ((2, 0), blk[2:, :3].clone()), ((2, 3), blk[2:, 3:].clone())],
        "views": [((0, 0), big[1:4, 2:7]), ((3, 0), big[5:9, 2:7].t().contiguous().t())],
        "scalar": [((), torch.tensor(1.5))],
    }
    src = os.path.join(d, "dcp")
    dcpgen.write_dcp(src, tensors, byte_items={"extra_state": b"opaque bytes", "step": pickle.dumps(7)})
    want = dcpgen.read_back(src)
    view = json.loads(ckref.run(CKPTFS, "inspect", src, "--json").stdout)
    assert view["format"] == "dcp" and view["non_tensor_values"] == 2, view
    got = {t["name"]: t for t in view["tensors"]}
    assert sorted(got) == sorted(want)
    for k, t in want.items():
        assert got[k]["dtype"] == DT[t.dtype] and got[k]["shape"] == list(t.shape), got[k]
    conv = converted(src)
    assert conv == {k: raw(t) for k, t in want.items()}
    print(f"DCP: {len(want)} keys from row/column/block/view chunks equal torch's reassembly; byte items left out")

    # Megatron torch_dist: layer-stacked keys, chunked as tp=2 would shard them
    hf = os.path.join(d, "llama")
    ckref.run(MKCKPT, "--model", "llama", "--dtype", "BF16", "--layers", "3", hf)
    meg = os.path.join(d, "megatron")
    ckref.convert(CKPTFS, hf, meg, [os.path.join(MAPS, "llama-hf-to-megatron.json")])
    per_layer = {k: torch.from_numpy(a.view("int16").copy()).view(torch.bfloat16)
                 for k, (_, _, a) in ckref.read_checkpoint_dir(meg).items()}
    stacked = {}
    for k, t in per_layer.items():
        parts = k.split(".")
        if k.startswith("decoder.layers."):
            name = ".".join(parts[:2] + parts[3:])
            stacked.setdefault(name, {})[int(parts[2])] = t
        else:
            stacked[k] = t
    stacked = {k: torch.stack([t[i] for i in sorted(t)]) if isinstance(t, dict) else t
               for k, t in stacked.items()}
    dist = {}
    for k, t in stacked.items():
        # tp=2-like chunks: column-parallel on the first matrix dim, row-parallel on the last
        dim = t.dim() - 1 if k.endswith(("linear_proj.weight", "linear_fc2.weight")) else t.dim() - 2
        if t.dim() >= 2 and t.shape[dim] % 2 == 0 and not k.endswith("layer_norm_weight"):
            h = t.shape[dim] // 2
            off0, off1 = [0] * t.dim(), [0] * t.dim()
            off1[dim] = h
            dist[k] = [(tuple(off0), t.narrow(dim, 0, h).clone()), (tuple(off1), t.narrow(dim, h, h).clone())]
        else:
            dist[k] = [((0,) * t.dim(), t.clone())]
    dist["optimizer.state.exp_avg.decoder.layers.mlp.linear_fc2.weight"] = \
        [((0, 0, 0), torch.zeros_like(stacked["decoder.layers.mlp.linear_fc2.weight"]).float())]
    td = os.path.join(d, "torch_dist")
    dcpgen.write_dcp(td, dist, byte_items={"decoder.layers.self_attention.linear_qkv._extra_state": b"te"},
                     megatron=True)
    os.link(os.path.join(hf, "config.json"), os.path.join(td, "config.json"))
    view = json.loads(ckref.run(CKPTFS, "inspect", td, "--json").stdout)
    assert view["format"] == "torch_dist", view["format"]
    names = {t["name"] for t in view["tensors"]}
    assert "optimizer.state.exp_avg.decoder.layers.mlp.linear_fc2.weight" in names  # visible
    back = converted(td, [os.path.join(MAPS, "megatron-torch-dist-to-llama-hf.json")])
    orig = {k: v[2].tobytes() for k, v in ckref.read_checkpoint_dir(hf).items()}
    # the one optimizer tensor follows its parameter (fc2 -> down_proj, per layer)
    zeros = bytes(len(orig["model.layers.0.mlp.down_proj.weight"]) * 2)  # BF16 -> F32
    with_state = dict(orig, **{f"state.model.layers.{L}.mlp.down_proj.weight.exp_avg": zeros for L in range(3)})
    assert back == with_state, set(back) ^ set(with_state)
    assert converted(td, [os.path.join(MAPS, "megatron-torch-dist-to-llama-hf.json")], "--state",
                     "params") == orig
    print("torch_dist (layer-stacked, tp-chunked, optimizer entries): megatron-torch-dist-to-llama-hf "
          "restores the HF checkpoint byte for byte, the optimizer tensor beside it")

    # per-rank views of a DCP source read only their bytes: an HF Llama stored
    # in two row chunks per tensor, viewed as Megatron tp=2 ranks
    hfd = os.path.join(d, "hf-dcp")
    hft = {k: torch.from_numpy(a.view("int16").copy()).view(torch.bfloat16)
           for k, (_, _, a) in ckref.read_checkpoint_dir(hf).items()}
    dcpgen.write_dcp(hfd, {k: ([((0,) * t.dim(), t[: t.shape[0] // 2].clone()),
                                 ((t.shape[0] // 2,) + (0,) * (t.dim() - 1), t[t.shape[0] // 2:].clone())]
                                if t.dim() and t.shape[0] % 2 == 0 else [((0,) * t.dim(), t)])
                             for k, t in hft.items()})
    os.link(os.path.join(hf, "config.json"), os.path.join(hfd, "config.json"))
    megmap = os.path.join(MAPS, "llama-hf-to-megatron.json")
    for r in range(2):
        io, io_st = (json.loads(ckref.run(CKPTFS, "inspect", x, "--mapping", megmap, "--mesh", "tp=2",
                                          "--rank", str(r), "--io-plan").stdout) for x in (hfd, hf))
        # no more than from the safetensors copy (exactly the local bytes at real
        # sizes: ranks_e2e's sparse 8b test; tiny rows here are read through small
        # gaps, which chunk boundaries can only cut)
        assert io["view_bytes"] == io_st["view_bytes"]
        assert io["source_bytes_requested"] <= io_st["source_bytes_requested"], (r, io, io_st)
        a_, b_ = os.path.join(d, f"dcp-r{r}"), os.path.join(d, f"st-r{r}")
        ckref.convert(CKPTFS, hfd, a_, [megmap], "--mesh", "tp=2", "--rank", str(r))
        ckref.convert(CKPTFS, hf, b_, [megmap], "--mesh", "tp=2", "--rank", str(r))
        assert {k: v[2].tobytes() for k, v in ckref.read_checkpoint_dir(a_).items()} == \
            {k: v[2].tobytes() for k, v in ckref.read_checkpoint_dir(b_).items()}, r
    print("tp=2 ranks of a chunked DCP source request no more than from safetensors, and equal its shards")

    if have_fuse():
        with Mount(src) as m:
            for k, t in want.items():
                assert open(m.path("tensors", k), "rb").read() == raw(t), k
        with Mount(td, [os.path.join(MAPS, "megatron-torch-dist-to-llama-hf.json")],
                   extra=["--state", "params"]) as m:
            assert {k: open(m.path("tensors", k), "rb").read() for k in os.listdir(m.path("tensors"))} == orig
        print("mounts of DCP and torch_dist sources serve the same bytes")

    # refused with one line naming the file and the problem
    def refused(path, msg):
        p = ckref.run(CKPTFS, "inspect", path, check=False)
        assert p.returncode == 3 and msg in p.stderr and p.stderr.count("\n") == 1, (msg, p.stderr)

    bad = os.path.join(d, "overlap")
    dcpgen.write_dcp(bad, {"x": [((0, 0), torch.ones(1, 2)), ((2, 0), torch.ones(2, 2))]})
    refused(bad, 'the chunks of "x" do not cover the tensor')  # row 1 of 4 is in no chunk
    bad2 = os.path.join(d, "overlap2")
    dcpgen.write_dcp(bad2, {"x": [((0, 0), torch.ones(2, 2)), ((1, 0), torch.ones(2, 2)),
                                  ((0, 2), torch.ones(3, 2))]})
    refused(bad2, 'chunks of "x" overlap')
    zarr = os.path.join(d, "zarr")
    dcpgen.write_dcp(zarr, {"x": [((0,), torch.ones(2))]}, megatron=True)
    json.dump({"sharded_backend": "zarr"}, open(os.path.join(zarr, "metadata.json"), "w"))
    refused(zarr, 'sharded_backend "zarr" is not supported')
    short = os.path.join(d, "short")
    dcpgen.write_dcp(short, {"x": [((0,), torch.ones(64))]}, ranks=1)
    p = os.path.join(short, "__0_0.distcp")
    os.truncate(p, os.path.getsize(p) - 10)
    refused(short, "runs past the end of the file")
    meta = pickle.load(open(os.path.join(src, ".metadata"), "rb"))
    meta.storage_data = {k: v for k, v in meta.storage_data.items() if k.fqn != "rows"}
    missing = os.path.join(d, "missing")
    os.makedirs(missing)
    for f in os.listdir(src):
        if f != ".metadata":
            os.link(os.path.join(src, f), os.path.join(missing, f))
    pickle.dump(meta, open(os.path.join(missing, ".metadata"), "wb"), protocol=4)
    refused(missing, '"rows": a chunk has no storage_data entry')
    print("overlapping, uncovered and unlisted chunks, other backends and short files are refused")
