"""Independent reference code for the CLI tests: a safetensors reader and
writer written from the format description (not ckptfs's C code), and the
test-checkpoint value formula computed with numpy."""
import json
import os
import struct
import subprocess

import numpy as np

DTYPES = {  # name -> (numpy dtype of the raw element, size)
    "BOOL": ("u1", 1), "U8": ("u1", 1), "I8": ("i1", 1), "F8_E5M2": ("u1", 1),
    "F8_E4M3": ("u1", 1), "I16": ("<i2", 2), "U16": ("<u2", 2), "F16": ("<f2", 2),
    "BF16": ("<u2", 2), "I32": ("<i4", 4), "U32": ("<u4", 4), "F32": ("<f4", 4),
    "F64": ("<f8", 8), "I64": ("<i8", 8), "U64": ("<u8", 8),
}
# safetensors' save_file order: dtype enum descending, then name
ENUM_ORDER = ["BOOL", "U8", "I8", "F8_E5M2", "F8_E4M3", "I16", "U16", "F16", "BF16",
              "I32", "U32", "F32", "F64", "I64", "U64"]


def write_safetensors(path, tensors, metadata=None):
    """tensors: dict name -> (dtype, shape, raw bytes)."""
    names = sorted(tensors, key=lambda n: (-ENUM_ORDER.index(tensors[n][0]), n))
    header, off = {}, 0
    if metadata is not None:
        header["__metadata__"] = metadata
    for n in names:
        dt, shape, raw = tensors[n]
        header[n] = {"dtype": dt, "shape": list(shape), "data_offsets": [off, off + len(raw)]}
        off += len(raw)
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for n in names:
            f.write(tensors[n][2])


def read_safetensors(path):
    """Returns dict name -> (dtype, shape, numpy array of raw elements)."""
    with open(path, "rb") as f:
        data = f.read()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + n])
    header.pop("__metadata__", None)
    out = {}
    for name, e in header.items():
        b, en = e["data_offsets"]
        raw = data[8 + n + b:8 + n + en]
        out[name] = (e["dtype"], tuple(e["shape"]),
                     np.frombuffer(raw, dtype=DTYPES[e["dtype"]][0]).reshape(e["shape"]))
    return out


def read_checkpoint_dir(d):
    out = {}
    for f in sorted(os.listdir(d)):
        if f.endswith(".safetensors"):
            out.update(read_safetensors(os.path.join(d, f)))
    return out


def arrays(d):
    """name -> (dtype, numpy array of raw elements) for a checkpoint dir."""
    return {k: (v[0], v[2]) for k, v in read_checkpoint_dir(d).items()}


def assert_same(got, want, what):
    """Two {name: (dtype, array)} maps hold the same names, dtypes and bytes."""
    assert set(got) == set(want), (what, sorted(set(got) ^ set(want))[:6])
    for k, (dt, a) in want.items():
        assert got[k][0] == dt and got[k][1].tobytes() == np.ascontiguousarray(a).tobytes(), \
            (what, k, got[k][0], dt)


def as_f32(dtype, arr):
    if dtype == "BF16":
        return (arr.astype(np.uint32) << np.uint32(16)).view(np.float32)
    return arr.astype(np.float32)


def fnv1a64(s):
    h = 0xcbf29ce484222325
    for c in s.encode():
        h = ((h ^ c) * 0x100000001b3) & 0xFFFFFFFFFFFFFFFF
    return h


def gen_values(key, n):
    """v(key, i) = ((splitmix64(fnv1a64(key) + i) mod 255) - 127) / 64"""
    z = np.arange(n, dtype=np.uint64) + np.uint64(fnv1a64(key))
    z = z + np.uint64(0x9E3779B97F4A7C15)
    z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    z = z ^ (z >> np.uint64(31))
    return ((z % np.uint64(255)).astype(np.int64) - 127).astype(np.float32) / np.float32(64)


def run(*args, check=True):
    p = subprocess.run(list(args), capture_output=True, text=True)
    if check and p.returncode != 0:
        raise AssertionError(f"{args} exited {p.returncode}: {p.stderr}")
    return p


def assert_refused_without(ckptfs, d, src, mapping, cases):
    """For each (what, gone, why): src's tensors but those gone(name) says,
    with src's config.json, make `inspect --mapping` fail with exit 4 and one
    line holding why, and `convert` write nothing."""
    tensors = {k: (dt, a.shape, a.tobytes()) for k, (dt, a) in arrays(src).items()}
    cfg = open(os.path.join(src, "config.json")).read()
    for what, gone, why in cases:
        broken = os.path.join(d, "broken")
        os.makedirs(broken, exist_ok=True)
        kept = {k: v for k, v in tensors.items() if not gone(k)}
        assert len(kept) < len(tensors), what
        write_safetensors(os.path.join(broken, "model.safetensors"), kept)
        open(os.path.join(broken, "config.json"), "w").write(cfg)
        p = run(ckptfs, "inspect", broken, "--mapping", mapping, check=False)
        assert p.returncode == 4 and why in p.stderr and p.stderr.count("\n") == 1, (what, p.stderr)
        out = os.path.join(d, "broken-out")
        p = run(ckptfs, "convert", broken, out, "--quiet", "--mapping", mapping, check=False)
        assert p.returncode == 4 and not os.path.exists(out), (what, p.stderr)


def convert(ckptfs, src, out, maps=(), *extra):
    """`ckptfs convert` of src through the mappings into out (quietly)."""
    args = [ckptfs, "convert", src, out, "--quiet", *extra]
    for m in maps:
        args += ["--mapping", m]
    return run(*args)


def make_sources(mkckpt, d):
    """The three small models the view tests mount: name -> directory."""
    srcs = {}
    for name, args in [("llama", ["--model", "llama", "--dtype", "BF16", "--shards", "3"]),
                       ("gpt2", ["--model", "gpt2"]), ("mixtral", ["--model", "mixtral", "--shards", "2"])]:
        srcs[name] = os.path.join(d, name)
        run(mkckpt, *args, srcs[name])
    return srcs


VOCAB_KEYS = ("embedding.word_embeddings.weight", "output_layer.weight")


def ep_local_name(k, e, per):
    """Megatron's name of expert tensor k on ep rank e holding `per` experts
    (renumbered from 0, as SequentialMLP stores them), or None when another
    rank holds it."""
    pre, rest = k.split(".local_experts.")
    x, tail = rest.split(".", 1)
    if e * per <= int(x) < (e + 1) * per:
        return f"{pre}.local_experts.{int(x) - e * per}.{tail}"
    return None


def grouped_name(k):
    """TEGroupedMLP's name (Megatron's moe_grouped_gemm) of a SequentialMLP
    expert tensor: experts.local_experts.{e}.linear_fc1.weight ->
    experts.linear_fc1.weight{e}; other names unchanged."""
    if ".local_experts." not in k:
        return k
    pre, rest = k.split(".local_experts.")
    e, mod, param = rest.split(".")
    return f"{pre}.{mod}.{param}{e}"


def pad_vocab(w, multiple):
    """Megatron's padded vocabulary (megatron/training/tokenizer
    _vocab_size_with_padding): zero rows after the last token up to a multiple
    of make_vocab_size_divisible_by x tp."""
    rows = -(-w.shape[0] // multiple) * multiple
    return np.concatenate([w, np.zeros((rows - w.shape[0],) + w.shape[1:], w.dtype)], 0)


def llama_to_megatron_ref(src, cfg, vocab_multiple=128):
    """Megatron-core's names and layouts from an HF Llama / Qwen2 / Qwen3 state
    dict (name -> (dtype, array)): Q, K, V interleaved per query group into
    linear_qkv (Qwen2's biases in the same order into linear_qkv.bias), gate and
    up stacked into linear_fc1, Qwen3's q_norm / k_norm as q_layernorm /
    k_layernorm, Qwen3-MoE's router and experts.local_experts.{e} (fc1 = [gate; up])
    with pre_mlp_layernorm, the vocabulary padded with zero rows to a multiple of
    128 (tp=1);
    written from Megatron's layout, not ckptfs's mapping."""
    H, nh = cfg["hidden_size"], cfg["num_attention_heads"]
    ng = cfg.get("num_key_value_heads", nh)
    emb = src["model.embed_tokens.weight"]
    out = {"embedding.word_embeddings.weight": (emb[0], pad_vocab(emb[1], vocab_multiple)),
           "decoder.final_layernorm.weight": src["model.norm.weight"]}
    if "lm_head.weight" in src:
        out["output_layer.weight"] = (src["lm_head.weight"][0], pad_vocab(src["lm_head.weight"][1], vocab_multiple))
    for L in range(cfg["num_hidden_layers"]):
        p, d = f"model.layers.{L}.", f"decoder.layers.{L}."
        q, k, v = (src[p + f"self_attn.{n}_proj.weight"] for n in "qkv")
        qkv = np.concatenate([q[1].reshape(ng, -1, H), k[1].reshape(ng, -1, H),
                              v[1].reshape(ng, -1, H)], axis=1).reshape(-1, H)
        out[d + "self_attention.linear_qkv.weight"] = (q[0], qkv)
        if p + "self_attn.q_proj.bias" in src:
            qb, kb, vb = (src[p + f"self_attn.{n}_proj.bias"] for n in "qkv")
            out[d + "self_attention.linear_qkv.bias"] = (qb[0], np.concatenate(
                [qb[1].reshape(ng, -1), kb[1].reshape(ng, -1), vb[1].reshape(ng, -1)], axis=1).reshape(-1))
        for n in "qk":
            if p + f"self_attn.{n}_norm.weight" in src:
                out[d + f"self_attention.{n}_layernorm.weight"] = src[p + f"self_attn.{n}_norm.weight"]
        out[d + "self_attention.linear_qkv.layer_norm_weight"] = src[p + "input_layernorm.weight"]
        out[d + "self_attention.linear_proj.weight"] = src[p + "self_attn.o_proj.weight"]
        if p + "mlp.gate.weight" in src:  # Qwen3-MoE: router, experts, pre_mlp_layernorm
            out[d + "pre_mlp_layernorm.weight"] = src[p + "post_attention_layernorm.weight"]
            out[d + "mlp.router.weight"] = src[p + "mlp.gate.weight"]
            for e in range(cfg["num_experts"]):
                x, y = p + f"mlp.experts.{e}.", d + f"mlp.experts.local_experts.{e}."
                g, u = src[x + "gate_proj.weight"], src[x + "up_proj.weight"]
                out[y + "linear_fc1.weight"] = (g[0], np.concatenate([g[1], u[1]], axis=0))
                out[y + "linear_fc2.weight"] = src[x + "down_proj.weight"]
            continue
        g, u = src[p + "mlp.gate_proj.weight"], src[p + "mlp.up_proj.weight"]
        out[d + "mlp.linear_fc1.weight"] = (g[0], np.concatenate([g[1], u[1]], axis=0))
        out[d + "mlp.linear_fc1.layer_norm_weight"] = src[p + "post_attention_layernorm.weight"]
        out[d + "mlp.linear_fc2.weight"] = src[p + "mlp.down_proj.weight"]
    return out


def megatron_rank(glob, tp, r, vocab_multiple=128):
    """Megatron-LM's per-rank tensors (tools/checkpoint conventions); the
    vocabulary padded to a multiple of vocab_multiple x tp first."""
    out = {}
    for k, w in glob.items():
        if k in VOCAB_KEYS:
            out[k] = np.split(pad_vocab(w, vocab_multiple * tp), tp, 0)[r]
        elif k.endswith("linear_qkv.weight") or k.endswith("linear_qkv.bias"):
            out[k] = np.split(w, tp, 0)[r]
        elif k.endswith("linear_fc1.weight"):
            gate, up = np.split(w, 2, 0)
            out[k] = np.concatenate([np.split(gate, tp, 0)[r], np.split(up, tp, 0)[r]], 0)
        elif k.endswith("linear_proj.weight") or k.endswith("linear_fc2.weight"):
            out[k] = np.split(w, tp, 1)[r]
        else:
            out[k] = w
    return out
