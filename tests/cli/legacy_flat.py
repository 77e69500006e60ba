"""Flat files for legacy loaders, read by real clients: torch.load (Debian's
torch 1.13, weights_only False and True) of the mount's pytorch_model.bin
returns exactly `convert`'s tensors for every shipped mapping; torch modules
built from config.json accept the HF and Megatron views with
load_state_dict(strict=True); Python's zipfile sees stored, 64-byte-aligned
records (and valid CRCs with -o zip_crc); reading the zip directory and the
pickle evaluates no tensor; the sharded view (-o max_shard_size) and vLLM's
per-rank part files hold the right tensors; fp8 targets are left out of
pytorch_model.bin with a note."""
import json
import os
import struct
import sys
import tempfile
import zipfile

import numpy as np

sys.path.insert(0, os.path.dirname(__file__))
import ckref  # noqa: E402
from mountlib import CKPTFS, Mount, read_random, skip_unless_fuse  # noqa: E402

skip_unless_fuse()
try:
    import torch
    from torch import nn
except ImportError:  # the test script installs python3-torch; say so loudly
    print("SKIP: python3-torch is not installed")
    sys.exit(77)

MKCKPT = os.environ["MKCKPT"]
MAPS = os.path.join(os.path.dirname(__file__), "..", "..", "mappings")
TORCH_DT = {"BF16": torch.bfloat16, "F16": torch.float16, "F32": torch.float32,
            "F64": torch.float64, "I64": torch.int64, "I32": torch.int32, "I16": torch.int16,
            "I8": torch.int8, "U8": torch.uint8, "BOOL": torch.bool}
SAME_SIZE_INT = {torch.bfloat16: torch.int16, torch.float16: torch.int16}


def mp(name):
    return os.path.join(MAPS, name)


def raw(t):
    """The tensor's bytes, as stored (bf16 through a same-size integer view)."""
    t = t.contiguous()
    return t.view(SAME_SIZE_INT.get(t.dtype, t.dtype)).numpy().tobytes()


def e4m3_to_f32(raw):
    """FP8 E4M3 (bias 7, no infinities, S.1111.111 is NaN) decoded from its bits."""
    b = raw.view(np.uint8).astype(np.int64)
    sign = np.where(b & 0x80, -1.0, 1.0)
    e, m = (b >> 3) & 0xF, b & 7
    v = np.where(e == 0, m / 8.0 * 2.0 ** -6, (1 + m / 8.0) * 2.0 ** (e - 7))
    v = np.where((b & 0x7F) == 0x7F, np.nan, v)
    return (sign * v).astype(np.float32)


def check_torch(m, want):
    """torch.load both ways: the same keys in plan order, dtypes, shapes, bytes."""
    plan = [t["name"] for t in m.plan()["targets"]]
    for weights_only in (False, True):
        sd = torch.load(m.path("pytorch_model.bin"), weights_only=weights_only)
        assert list(sd.keys()) == plan, (weights_only, set(sd) ^ set(plan))
        for k, (dt, shape, arr) in want.items():
            t = sd[k]
            assert t.dtype == TORCH_DT[dt], (k, t.dtype, dt)
            assert list(t.shape) == list(shape), (k, t.shape, shape)
            assert t.is_contiguous() and raw(t) == arr.tobytes(), k


def check_zip(path, crc):
    """Independent reader: stored entries, data 64-byte aligned, version '3\\n'."""
    with zipfile.ZipFile(path) as z, open(path, "rb") as f:
        names = z.namelist()
        assert names[0] == "pytorch_model/data.pkl" and names[-1] == "pytorch_model/version", names
        assert z.read("pytorch_model/version") == b"3\n"
        for info in z.infolist():
            assert info.compress_type == zipfile.ZIP_STORED, info
            f.seek(info.header_offset)
            h = f.read(30)
            assert h[:4] == b"PK\x03\x04"
            nl, xl = struct.unpack("<HH", h[26:30])
            data = info.header_offset + 30 + nl + xl
            assert data % 64 == 0, (info.filename, data)
            if "/data/" in info.filename:
                assert (info.CRC != 0) == crc or info.file_size == 0, (info.filename, info.CRC)
        if crc:
            assert z.testzip() is None, "a CRC-32 does not match"


class HFLlama(nn.Module):
    """HF LlamaForCausalLM's parameter names and shapes, from config.json."""

    def __init__(self, c):
        super().__init__()
        h, i, v = c["hidden_size"], c["intermediate_size"], c["vocab_size"]
        kv = h // c["num_attention_heads"] * c["num_key_value_heads"]
        self.model = nn.Module()
        self.model.embed_tokens = nn.Embedding(v, h)
        self.model.layers = nn.ModuleList()
        for _ in range(c["num_hidden_layers"]):
            layer = nn.Module()
            layer.self_attn = nn.Module()
            for name, o in [("q_proj", h), ("k_proj", kv), ("v_proj", kv)]:
                setattr(layer.self_attn, name, nn.Linear(h, o, bias=False))
            layer.self_attn.o_proj = nn.Linear(h, h, bias=False)
            layer.mlp = nn.Module()
            layer.mlp.gate_proj = nn.Linear(h, i, bias=False)
            layer.mlp.up_proj = nn.Linear(h, i, bias=False)
            layer.mlp.down_proj = nn.Linear(i, h, bias=False)
            layer.input_layernorm = Norm(h)
            layer.post_attention_layernorm = Norm(h)
            self.model.layers.append(layer)
        self.model.norm = Norm(h)
        self.lm_head = nn.Linear(h, v, bias=False)


class Norm(nn.Module):
    def __init__(self, h):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(h))


class MegatronGPT(nn.Module):
    """Megatron-core GPTModel (TE layer specs) names and fused shapes."""

    def __init__(self, c):
        super().__init__()
        h, i, v = c["hidden_size"], c["intermediate_size"], c["vocab_size"]
        kv = h // c["num_attention_heads"] * c["num_key_value_heads"]
        self.embedding = nn.Module()
        self.embedding.word_embeddings = nn.Embedding(v, h)
        self.decoder = nn.Module()
        self.decoder.layers = nn.ModuleList()
        for _ in range(c["num_hidden_layers"]):
            layer = nn.Module()
            layer.self_attention = nn.Module()
            layer.self_attention.linear_qkv = nn.Linear(h, h + 2 * kv, bias=False)
            layer.self_attention.linear_qkv.layer_norm_weight = nn.Parameter(torch.ones(h))
            layer.self_attention.linear_proj = nn.Linear(h, h, bias=False)
            layer.mlp = nn.Module()
            layer.mlp.linear_fc1 = nn.Linear(h, 2 * i, bias=False)
            layer.mlp.linear_fc1.layer_norm_weight = nn.Parameter(torch.ones(h))
            layer.mlp.linear_fc2 = nn.Linear(i, h, bias=False)
            self.decoder.layers.append(layer)
        self.decoder.final_layernorm = Norm(h)
        self.output_layer = nn.Linear(h, v, bias=False)


def check_module(cls, m, config):
    model = cls(config).to(torch.bfloat16)
    sd = torch.load(m.path("pytorch_model.bin"), weights_only=True)
    model.load_state_dict(sd, strict=True)  # raises on a missing/unexpected key or shape
    for k, p in model.state_dict().items():
        assert torch.equal(p, sd[k]), k


with tempfile.TemporaryDirectory() as d:
    srcs = ckref.make_sources(MKCKPT, d)
    cases = [("llama", []), ("llama", [mp("identity.json")]), ("llama", [mp("llama-hf-to-megatron.json")]),
             ("llama", [mp("llama-hf-to-megatron.json"), mp("megatron-to-llama-hf.json")]),
             ("llama", [mp("strip-wrapper-prefixes.json")]),
             ("gpt2", [mp("gpt2-conv1d-to-linear.json")]),
             ("mixtral", [mp("mixtral-hf-to-fused-experts.json")]),
             ("mixtral", [mp("mixtral-expert-parallel.json")])]
    for i, (src, maps) in enumerate(cases):
        out = os.path.join(d, f"conv{i}")
        ckref.convert(CKPTFS, srcs[src], out, maps)
        want = ckref.read_checkpoint_dir(out)
        with Mount(srcs[src], maps) as m:
            check_torch(m, want)
            check_zip(m.path("pytorch_model.bin"), crc=False)
            assert m.plan()["pytorch_model_bin"]["omitted"] == []
    print(f"{len(cases)} views: torch.load of pytorch_model.bin equals convert, both weights_only modes")

    config = json.load(open(os.path.join(srcs["llama"], "config.json")))
    with Mount(srcs["llama"]) as m:
        assert json.load(open(m.path("config.json"))) == config
        check_module(HFLlama, m, config)
    with Mount(srcs["llama"], [mp("llama-hf-to-megatron.json")]) as m:
        check_module(MegatronGPT, m, config)
    print("HF and Megatron modules built from config.json load the views with strict=True")

    # reading the zip's directory and the pickle evaluates no tensor: the
    # first tensor record and the version record start on their own pages
    with Mount(srcs["llama"], [mp("llama-hf-to-megatron.json")]) as m:
        p = m.path("pytorch_model.bin")
        size = os.stat(p).st_size
        tail = read_random(p, max(0, size - 98), 98)  # EOCD64 + locator + EOCD
        assert tail[-22:-18] == b"PK\x05\x06" and tail[:4] == b"PK\x06\x06", tail[:4]
        cd_size, cd_off = struct.unpack("<QQ", tail[40:56])
        cd = read_random(p, cd_off, cd_size)
        assert cd[:4] == b"PK\x01\x02"
        head = read_random(p, 0, 30)
        nl, xl = struct.unpack("<HH", head[26:30])
        pkl_len = struct.unpack("<I", head[22:26])[0]
        pkl = read_random(p, 30 + nl + xl, pkl_len)
        assert pkl[:2] == b"\x80\x02" and pkl[-1:] == b"."
        s = m.stats()
        assert s["groups_evaluated"] == 0 and s["source_bytes_read"] == 0, s

    # -o zip_crc: every CRC-32 filled in before the mount is live
    want = ckref.read_checkpoint_dir(os.path.join(d, "conv5"))
    with Mount(srcs["gpt2"], [mp("gpt2-conv1d-to-linear.json")], "zip_crc") as m:
        assert m.plan()["pytorch_model_bin"]["crc32"] is True
        check_zip(m.path("pytorch_model.bin"), crc=True)
        check_torch(m, want)
    print("zip structure: stored, 64-byte aligned, CRCs with -o zip_crc; directory reads are free")

    # past 4 GiB: ZIP64 offsets in the directory (the sparse 8b preset, 16 GB
    # of holes; only headers are read)
    s8 = os.path.join(d, "sparse8b")
    ckref.run(MKCKPT, "--preset", "8b", "--dtype", "BF16", "--shards", "4", "--sparse", s8)
    with Mount(s8) as m:
        p = m.path("pytorch_model.bin")
        with zipfile.ZipFile(p) as z:
            infos = z.infolist()
        assert infos[-2].header_offset > 1 << 32 and len(infos) == len(m.plan()["targets"]) + 2
        assert m.stats()["groups_evaluated"] == 0  # the directory shares no page with a tensor

        def local_name(info):
            h = read_random(p, info.header_offset, 30)
            nl = struct.unpack("<H", h[26:28])[0]
            assert h[:4] == b"PK\x03\x04", info
            return read_random(p, info.header_offset + 30, nl).decode()
        for info in infos[-3:]:
            assert local_name(info) == info.filename
    # one record past 4 GiB: every gate and up projection of the 8b preset
    # stacked into one 7.5 GB tensor; its local header carries the ZIP64 sizes
    bigmap = os.path.join(d, "big.json")
    json.dump({"ckptfs_mapping": 1, "unused": "drop", "rules": [
        {"from": {"g": "model.layers.{L}.mlp.gate_proj.weight", "u": "model.layers.{L}.mlp.up_proj.weight"},
         "reduce": "L", "to": "big", "expr": "cat([stack(g, 0), stack(u, 0)], 0)"}]}, open(bigmap, "w"))
    with Mount(s8, [bigmap]) as m:
        p = m.path("pytorch_model.bin")
        with zipfile.ZipFile(p) as z:
            info = z.getinfo("pytorch_model/data/0")
        size = os.stat(m.path("tensors", "big")).st_size
        assert info.file_size == info.compress_size == size > 1 << 32, (info, size)
        h = read_random(p, info.header_offset, 30)
        nl, xl = struct.unpack("<HH", h[26:30])
        assert h[:4] == b"PK\x03\x04" and struct.unpack("<II", h[18:26]) == (0xFFFFFFFF, 0xFFFFFFFF)
        extra = read_random(p, info.header_offset + 30 + nl, xl)
        assert struct.unpack("<HHQQ", extra[:20]) == (1, 16, size, size), extra[:20]  # ZIP64 sizes
        data = info.header_offset + 30 + nl + xl
        assert data % 64 == 0
        # (the preset is holes: these reads show the offsets are served, not
        # which bytes land where; the small views above check that)
        for off in (0, size - 4096):  # first and last bytes, through both files
            assert read_random(p, data + off, 4096) == read_random(m.path("tensors", "big"), off, 4096)
    print("ZIP64: directory offsets past 4 GiB point at their local headers; a 7.5 GB record has ZIP64 sizes")

    # sharded flat view: the index names every key once, each shard holds its keys
    want = ckref.read_checkpoint_dir(os.path.join(d, "conv2"))
    with Mount(srcs["llama"], [mp("llama-hf-to-megatron.json")], "max_shard_size=40KB") as m:
        idx = json.load(open(m.path("model.safetensors.index.json")))
        assert sorted(idx["weight_map"]) == sorted(want)
        assert idx["metadata"]["total_size"] == sum(a.nbytes for _, _, a in want.values())
        files = sorted(set(idx["weight_map"].values()))
        assert len(files) > 2 and files == sorted(f for f in os.listdir(m.dir) if f.startswith("model-0"))
        got = {}
        for f in files:
            shard = ckref.read_safetensors(m.path(f))
            assert all(idx["weight_map"][k] == f for k in shard), f
            size = sum(a.nbytes for _, _, a in shard.values())
            assert size <= 40000 or len(shard) == 1, (f, size)
            got.update(shard)
        assert {k: v[2].tobytes() for k, v in got.items()} == {k: v[2].tobytes() for k, v in want.items()}
        # convert --max-shard-size writes the same files: one builder serves both
        conv3 = os.path.join(d, "conv_shards")
        ckref.convert(CKPTFS, srcs["llama"], conv3, [mp("llama-hf-to-megatron.json")],
                      "--max-shard-size", "40KB")
        wrote = sorted(f for f in os.listdir(conv3) if f != "config.json")
        assert wrote == sorted(files + ["model.safetensors.index.json"]), wrote
        for f in wrote:
            assert open(os.path.join(conv3, f), "rb").read() == open(m.path(f), "rb").read(), f
    print("max_shard_size: shards and index equal the converted model, and convert's shards byte for byte")

    # vLLM's sharded_state layout on a per-rank view: the rank's tensors
    for rank in (0, 1):
        with Mount(srcs["llama"], [mp("llama-hf-to-megatron.json")], "part_size=30KB",
                   extra=["--mesh", "tp=2", "--rank", str(rank)]) as m:
            parts = sorted(f for f in os.listdir(m.dir) if f.startswith("model-rank-"))
            assert len(parts) > 1 and all(f.startswith(f"model-rank-{rank}-part-") for f in parts), parts
            local = {k: open(m.path("tensors", k), "rb").read() for k in os.listdir(m.path("tensors"))}
            got = {}
            for f in parts:
                got.update({k: v[2].tobytes() for k, v in ckref.read_safetensors(m.path(f)).items()})
            assert got == local
            sd = torch.load(m.path("pytorch_model.bin"), weights_only=True)
            assert {k: raw(v) for k, v in sd.items()} == local
    print("per-rank views: model-rank-R-part-P.safetensors and pytorch_model.bin hold the local shard")

    # an fp8 target has no typed storage in torch 1.13: left out, with a note
    fp8 = os.path.join(d, "fp8.json")
    json.dump({"ckptfs_mapping": 1, "unused": "keep", "rules": [
        {"from": "model.layers.{L}.mlp.up_proj.weight", "to": "model.layers.{L}.mlp.up_proj.weight",
         "expr": "to(x, F8_E4M3, 1)"}]}, open(fp8, "w"))
    m = Mount(srcs["llama"], [fp8], expect_errors=True)
    omitted = [o["name"] for o in m.plan()["pytorch_model_bin"]["omitted"]]
    assert sorted(omitted) == [f"model.layers.{L}.mlp.up_proj.weight" for L in range(2)], omitted
    sd = torch.load(m.path("pytorch_model.bin"), weights_only=True)
    assert set(sd) == set(os.listdir(m.path("tensors"))) - set(omitted)
    log = m.close()
    notes = [line for line in log.splitlines() if "pytorch_model.bin leaves out" in line]
    assert len(notes) == 2 and all("F8_E4M3" in n for n in notes), log
    # every tensor FP8 (a DeepSeek-V3 mount leaves out 30,000): a count and the first three
    fp8all = os.path.join(d, "fp8all.json")
    json.dump({"ckptfs_mapping": 1, "rules": [{"from": "{k:path}", "to": "{k}",
                                               "expr": "to(x, F8_E4M3, 1)"}]}, open(fp8all, "w"))
    m = Mount(srcs["llama"], [fp8all], expect_errors=True)
    omitted = m.plan()["pytorch_model_bin"]["omitted"]
    log = m.close()
    notes = [line for line in log.splitlines() if "pytorch_model.bin leaves out" in line]
    assert len(omitted) > 4 and len(notes) == 4, (len(omitted), notes)
    assert f"leaves out {len(omitted)} tensors" in notes[0] and "plan.json" in notes[0], notes[0]
    assert all(o["name"] in n for o, n in zip(omitted, notes[1:])), notes
    # one daemon for four ranks: the first rank's lines, then one for the others
    m = Mount(srcs["llama"], [mp("llama-hf-to-megatron.json"), fp8all], expect_errors=True,
              extra=["--mesh", "tp=2,dp=2", "--ranks", "all"])
    counts = [len(m.plan(f"rank{r}")["pytorch_model_bin"]["omitted"]) for r in range(4)]
    log = m.close()
    notes = [line for line in log.splitlines() if "pytorch_model.bin leaves out" in line]
    assert len(notes) == 5 and f"leaves out {counts[0]} tensors" in notes[0], notes
    assert min(counts) > 4 and len(set(counts)) == 1 and notes[4].endswith(
        f"leaves out {counts[1]} tensors in each of 3 more views too (rank1/ to rank3/; "
        "each one's .ckptfs/plan.json lists them)"), notes
    print("fp8 targets: left out of pytorch_model.bin, listed in plan.json and the log (a count "
          "and the first three when there are more)")

    # -o npy_f32: BF16 and FP8 served widened to float32, any byte range
    conv = os.path.join(d, "conv-fp8")
    ckref.convert(CKPTFS, srcs["llama"], conv, [fp8])
    want = ckref.read_checkpoint_dir(conv)
    rng = np.random.default_rng(7)
    with Mount(srcs["llama"], [fp8], "npy_f32", expect_errors=True) as m:
        for k, (dt, shape, arr) in want.items():
            wide = e4m3_to_f32(arr) if dt == "F8_E4M3" else ckref.as_f32(dt, arr)
            a = np.load(m.path("npy", k + ".npy"))
            assert a.dtype == np.float32 and a.shape == tuple(shape), (k, a.dtype)
            assert a.tobytes() == wide.tobytes(), k
            full = open(m.path("npy", k + ".npy"), "rb").read()
            for _ in range(5):  # unaligned ranges straight from the daemon
                off = int(rng.integers(0, len(full)))
                n = int(rng.integers(1, len(full) - off + 1))
                assert read_random(m.path("npy", k + ".npy"), off, n) == full[off:off + n], (k, off, n)
    print("npy_f32: np.load of widened BF16 and FP8 files equals an independent decode")

    # the widening is a planned cast: on the identity view of a BF16 source
    # (renames, read from the file) npy/ reads evaluate the F32 copy alone
    # (a cast: read by read into the replies, nothing cached; through the
    # cache with no_stream, one group), and tensors/ stays a straight file read
    src_w = ckref.read_checkpoint_dir(srcs["llama"])
    key = "model.layers.0.mlp.down_proj.weight"
    dt, shape, arr = src_w[key]
    assert dt == "BF16"
    for opts, streamed in [("npy_f32,no_prefetch,direct_io", True),
                           ("npy_f32,no_prefetch,direct_io,no_stream", False)]:
        with Mount(srcs["llama"], [], opts) as m:
            a = np.load(m.path("npy", key + ".npy"))
            assert a.dtype == np.float32 and a.tobytes() == ckref.as_f32(dt, arr).tobytes()
            s = m.stats()
            if streamed:
                assert s["streamed_reads"] > 0 and s["groups_evaluated"] == 0, s
                assert s["cache_bytes"] == 0, s
            else:
                assert s["groups_evaluated"] == 1 and s["cache_bytes"] == a.nbytes, s
                assert s["streamed_reads"] == 0, s
            assert open(m.path("tensors", key), "rb").read() == arr.tobytes()
            s2 = m.stats()
            assert s2["direct_reads"] > s["direct_reads"] and s2["cache_bytes"] == s["cache_bytes"], s2
            assert s2["streamed_reads"] == s["streamed_reads"], s2
            with open(m.path("npy", "lm_head.weight.npy"), "rb", buffering=0) as f:
                assert f.read(4) == b"\x93NUM"  # the header alone evaluates nothing
            s3 = m.stats()
            assert s3["groups_evaluated"] == s["groups_evaluated"], s3
            assert s3["streamed_reads"] == s["streamed_reads"], s3
    print("npy_f32: a widened file evaluates its F32 copy alone; the BF16 rename stays a file read")

    # one daemon for two ranks: each rankR/npy/ widens that rank's shard
    with Mount(srcs["llama"], [mp("llama-hf-to-megatron.json")], "npy_f32",
               extra=["--mesh", "tp=2", "--ranks", "0-1"]) as m:
        n = 0
        for r in (0, 1):
            for f in sorted(os.listdir(m.path(f"rank{r}", "tensors"))):
                raw = np.fromfile(m.path(f"rank{r}", "tensors", f), dtype=np.uint16)
                a = np.load(m.path(f"rank{r}", "npy", f + ".npy"))
                assert a.dtype == np.float32 and a.tobytes() == ckref.as_f32("BF16", raw).tobytes(), (r, f)
                n += 1
        assert n > 10, n
    print(f"npy_f32 with --ranks 0-1: {n} widened shards equal their tensors/ bytes decoded")
