"""GGUF files as sources (issue #24, the unquantized part), checked with a
GGUF reader and writer written here from the format description
(reference/gguf.md), never with ckptfs's own:
- the real tiny-random Llama GGUF (written by llama.cpp's converter): every
  tensor's name, dtype, torch-order shape and bytes, through inspect and
  convert; the metadata in inspect --json;
- gguf-llama-to-hf.json against a numpy inverse of convert_hf_to_gguf's Q/K
  permutation; the config.json made from the metadata;
- a round trip: a generated HF Llama (grouped-query heads) written as GGUF
  here, read back through the mapping, equals the original (`ckptfs diff`);
  the same GGUF written without the permutation must differ;
- the real llama.cpp (node-llama-cpp) runs the tiny Llama GGUF, and a plain
  torch Llama written here, fed the view through gguf-llama-to-hf.json,
  gives the same logits (1e-3 relative) and the same greedy tokens; fed the
  GGUF's Q/K rows as they are (no un-permutation), it does not;
- quantized tensors (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q2_K to Q6_K, IQ4_NL,
  IQ4_XS, TQ1_0, TQ2_0, MXFP4), made with ggml's own quantizer from the
  prebuilt library, and blocks of random bytes, decode to exactly the
  floats of ggml's own dequantize_row_* (bit for bit), whole and sliced
  mid-block; a Llama GGUF
  in the seven newer types, run by llama.cpp, gives the logits of a torch
  Llama over the mapped view (to llama.cpp's 8-bit activation noise);
- the vocabulary-only GGUFs show their metadata and no tensors;
- hostile headers (truncated, huge counts, bad alignment, a NUL in a key,
  5 dims, data past the end, overlapping tensors, a quantized type) are
  refused with one line."""
import atexit
import json
import math
import os
import shutil
import struct
import subprocess
import sys
import tempfile

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import ckref  # noqa: E402

CKPTFS, MKCKPT = os.environ["CKPTFS"], os.environ["MKCKPT"]
TESTS = os.environ.get("TESTS_DIR", os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
REAL = os.path.join(TESTS, "..", "..", "shared", "fixtures", "real", "gguf")
MAP = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "mappings", "gguf-llama-to-hf.json")
GGML = {0: ("F32", "<f4", 4), 1: ("F16", "<f2", 2), 30: ("BF16", "<u2", 2)}
SCALARS = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?", 10: "<Q", 11: "<q", 12: "<d"}


def run(*args, timeout=120):
    return subprocess.run([CKPTFS, *args], capture_output=True, text=True, timeout=timeout)


def parse_gguf(path, types=None):
    """The file layout: magic, version, counts, key/values, tensor infos
    (dims fastest first), padding to the alignment, data. Returns the version,
    the metadata, the infos (name, dims, type, offset), where the data starts
    and the file's bytes; types (a dict), if given, gets each key's value
    type, in file order."""
    b = open(path, "rb").read()
    pos = 0

    def take(fmt):
        nonlocal pos
        v = struct.unpack_from(fmt, b, pos)
        pos += struct.calcsize(fmt)
        return v[0]

    def string():
        nonlocal pos
        n = take("<Q")
        s = b[pos:pos + n].decode()
        pos += n
        return s

    def value(t):
        if t == 8:
            return string()
        if t == 9:
            et, n = take("<I"), take("<Q")
            return [value(et) for _ in range(n)]
        return take(SCALARS[t])

    assert b[:4] == b"GGUF"
    pos = 4
    version, nt, nkv = take("<I"), take("<Q"), take("<Q")
    meta = {}
    for _ in range(nkv):
        k = string()
        assert k not in meta, f"metadata key {k} twice"
        t = take("<I")
        meta[k] = value(t)
        if types is not None:
            types[k] = t
    infos = []
    for _ in range(nt):
        name, nd = string(), take("<I")
        dims = [take("<Q") for _ in range(nd)]
        infos.append((name, dims, take("<I"), take("<Q")))
    align = meta.get("general.alignment", 32)
    return version, meta, infos, (pos + align - 1) // align * align, b


def read_gguf(path):
    """An unquantized GGUF's tensors: name -> (dtype, torch-order shape, bytes)."""
    version, meta, infos, data, b = parse_gguf(path)
    tensors = {}
    for name, dims, t, off in infos:
        dt, np_t, size = GGML[t]
        n = int(np.prod(dims))
        raw = b[data + off:data + off + n * size]
        tensors[name] = (dt, list(reversed(dims)), raw)
    return version, meta, tensors


def write_gguf(path, meta, tensors, align=32):
    """tensors: name -> (ggml type, torch shape, raw bytes)."""
    out = bytearray(b"GGUF" + struct.pack("<IQQ", 3, len(tensors), len(meta)))

    def string(s):
        e = s.encode()
        return struct.pack("<Q", len(e)) + e

    def value(t, v):
        if t == 8:
            return string(v)
        if t == 9:  # (element type, list)
            et, items = v
            return struct.pack("<IQ", et, len(items)) + b"".join(value(et, x) for x in items)
        return struct.pack(SCALARS[t], v)
    for k, (t, v) in meta.items():
        out += string(k) + struct.pack("<I", t) + value(t, v)
    off, blobs = 0, []
    for name, (t, shape, raw) in tensors.items():
        out += string(name) + struct.pack("<I", len(shape))
        out += b"".join(struct.pack("<Q", d) for d in reversed(shape))
        out += struct.pack("<IQ", t, off)
        blobs.append((off, raw))
        off += (len(raw) + align - 1) // align * align
    out += b"\0" * (-len(out) % align)
    data = len(out)
    out += b"\0" * off
    for o, raw in blobs:
        out[data + o:data + o + len(raw)] = raw
    open(path, "wb").write(bytes(out))


def unpermute(w, heads):  # the inverse of convert_hf_to_gguf's permute (numpy, here)
    rows, cols = w.shape
    return w.reshape(heads, rows // heads // 2, 2, cols).swapaxes(1, 2).reshape(rows, cols)


def permute(w, heads):
    rows, cols = w.shape
    return w.reshape(heads, 2, rows // heads // 2, cols).swapaxes(1, 2).reshape(rows, cols)


def real_fixture(d):
    path = os.path.join(REAL, "ollama-tiny-random", "llama-2-tiny-random.gguf")
    _, meta, want = read_gguf(path)
    js = json.loads(run("inspect", path, "--json").stdout)
    assert js["format"] == "gguf"
    got = {t["name"]: (t["dtype"], t["shape"]) for t in js["tensors"]}
    assert got == {k: (v[0], v[1]) for k, v in want.items()}, got
    assert not [t for t in js["tensors"] if "stored" in t], "F32/F16 tensors said to be stored as blocks"
    assert js["metadata"]["llama.block_count"] == meta["llama.block_count"]
    assert js["metadata"]["tokenizer.ggml.tokens"] == {"type": "string", "count": len(meta["tokenizer.ggml.tokens"])}
    out = os.path.join(d, "raw")
    ckref.run(CKPTFS, "convert", path, out, "--quiet")
    conv = ckref.read_checkpoint_dir(out)
    for k, (dt, shape, raw) in want.items():
        assert conv[k][0] == dt and list(conv[k][1]) == shape and conv[k][2].tobytes() == raw, k
    # through the mapping: HF names, Q/K rows back in HF order
    hf = os.path.join(d, "hf")
    ckref.run(CKPTFS, "convert", path, hf, "--quiet", "--mapping", MAP)
    got = ckref.read_checkpoint_dir(hf)
    nh, nkv = meta["llama.attention.head_count"], meta["llama.attention.head_count_kv"]

    def arr(name):
        dt, shape, raw = want[name]
        return np.frombuffer(raw, dtype=GGML[{"F32": 0, "F16": 1}[dt]][1]).reshape(shape)
    assert (got["model.layers.0.self_attn.q_proj.weight"][2] == unpermute(arr("blk.0.attn_q.weight"), nh)).all()
    assert (got["model.layers.0.self_attn.k_proj.weight"][2] == unpermute(arr("blk.0.attn_k.weight"), nkv)).all()
    assert (got["lm_head.weight"][2] == arr("output.weight")).all()
    assert (got["model.embed_tokens.weight"][2] == arr("token_embd.weight")).all()
    assert len(got) == len(want)
    cfg = json.load(open(os.path.join(hf, "config.json")))
    assert (cfg["hidden_size"], cfg["num_attention_heads"], cfg["num_hidden_layers"], cfg["vocab_size"],
            cfg["intermediate_size"], cfg["tie_word_embeddings"]) == (
        meta["llama.embedding_length"], nh, meta["llama.block_count"], len(meta["tokenizer.ggml.tokens"]),
        meta["llama.feed_forward_length"], False), cfg
    assert cfg["rms_norm_eps"] == 1e-05 and cfg["max_position_embeddings"] == meta["llama.context_length"]
    for f in sorted(os.listdir(os.path.join(REAL, "llama.cpp-vocab"))):
        p = run("inspect", os.path.join(REAL, "llama.cpp-vocab", f), "--json")
        assert p.returncode == 0, (f, p.stderr)
        js = json.loads(p.stdout)
        assert js["tensors"] == [] and "tokenizer.ggml.model" in js["metadata"], f
    if "--mount" in sys.argv:  # the same view through a mount: config.json and every tensor
        from mountlib import Mount
        with Mount(path, maps=[MAP]) as m:
            assert json.load(open(m.path("config.json"))) == cfg
            files = {t["name"]: t["file"] for t in m.plan()["targets"]}
            for k, v in got.items():
                assert open(m.path(files[k]), "rb").read() == v[2].tobytes(), k
        print("the mounted HF view of the GGUF: config.json and every tensor as converted")
    print("real GGUFs: the tiny Llama's 12 tensors exact, through the mapping unpermuted; 6 vocabularies")


def vocab_meta(name):
    """One of llama.cpp's real vocabularies (its vocab-only GGUFs) as
    metadata to write into a model GGUF, with the types gguf-py gives them:
    string arrays, f32 scores, i32 token types, u32 ids, bools, strings."""
    _, meta, _, _, _ = parse_gguf(os.path.join(REAL, "llama.cpp-vocab", f"ggml-vocab-{name}.gguf"))
    elem = {"tokenizer.ggml.tokens": 8, "tokenizer.ggml.merges": 8, "tokenizer.ggml.scores": 6,
            "tokenizer.ggml.token_type": 5}
    return {k: (9, (elem[k], v)) if k in elem else (7 if isinstance(v, bool) else 4 if isinstance(v, int) else 8, v)
            for k, v in meta.items() if k.startswith("tokenizer.")}


def tokenizer_of(meta):
    return {k: v for k, v in meta.items() if k.startswith("tokenizer.")}


def gguf_client(modules, path, text):
    """llama.cpp's token ids for text with the file's vocabulary, and the
    text it detokenizes them to (gguf_client.mjs)."""
    p = subprocess.run(["node", os.path.join(os.path.dirname(os.path.abspath(__file__)), "gguf_client.mjs"),
                        modules, path, text], capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr[-2000:]
    got = json.loads(p.stdout.strip().splitlines()[-1])
    return got["tokens"], got["detokenized"]


def gguf_as_gguf(d):
    """A GGUF source served as a GGUF (`convert --format gguf:TYPE`, `-o
    gguf=TYPE`), the way llama-quantize rewrites one: with no mapping given,
    the source's own gguf-ARCH-to-hf applies first (other_archs checks every
    architecture's tensors), and its tokenizer.* metadata is served as the
    file holds it, so llama.cpp tokenizes and runs the served file as it
    does the source. It used to be refused: the class's mapping matched no
    key, and without tokenizer files beside the GGUF there was no vocabulary."""
    modules = os.path.join(TESTS, "..", "build-node", "node_modules")
    real = os.path.join(REAL, "ollama-tiny-random", "llama-2-tiny-random.gguf")
    out = os.path.join(d, "gg-real")
    p = run("convert", real, out, "--quiet", "--format", "gguf:F32")
    assert p.returncode == 0, p.stderr
    served = os.path.join(out, "model.gguf")
    _, smeta, st = read_gguf(real)
    _, ometa, ot = read_gguf(served)
    assert tokenizer_of(ometa) == tokenizer_of(smeta) and len(tokenizer_of(smeta)) == 7, tokenizer_of(ometa).keys()
    assert ometa["general.name"] == smeta["general.name"] == "LLaMA v2"
    assert set(ot) == set(st)
    for k, (dt, shape, raw) in st.items():  # F16 widened exactly; Q/K permuted back as the source has them
        want = np.frombuffer(raw, GGML[{"F32": 0, "F16": 1}[dt]][1]).astype(np.float32)
        assert ot[k][0] == "F32" and ot[k][1] == shape and (np.frombuffer(ot[k][2], "<f4") == want).all(), k
    # the mapping given by hand makes the same file
    by_hand = os.path.join(d, "gg-real-mapped")
    p = run("convert", real, by_hand, "--quiet", "--format", "gguf:F32", "--mapping", MAP)
    assert p.returncode == 0, p.stderr
    assert open(os.path.join(by_hand, "model.gguf"), "rb").read() == open(served, "rb").read()
    toks = [1, 450, 4996, 17354, 338, 263, 1243]
    want = llama_cpp(modules, real, toks)
    got = llama_cpp(modules, served, toks)
    r = rel(got, want)  # llama.cpp on F16 weights against the same weights as F32
    assert r < 1e-3 and got.argmax(-1).tolist() == want.argmax(-1).tolist(), r
    text = "Hello world, ckptfs serves GGUF files! 12345 \u00fcn\u00efc\u00f8d\u00e9"
    want_t = gguf_client(modules, real, text)
    assert len(want_t[0]) > 10 and gguf_client(modules, served, text) == want_t
    # a generated Llama with GPT-2's byte-level BPE (50,257 tokens, 50,000
    # merges), served as Q8_0 through a mount when the run has one
    src = os.path.join(d, "gg-gen")
    ckref.run(MKCKPT, "--model", "llama", "--vocab", "50257", "--tie", src)
    bpe = os.path.join(d, "gg-bpe.gguf")
    vocab = vocab_meta("gpt-2")
    llama_gguf(src, bpe, True, 0.25, extra_meta=vocab)
    _, bmeta, _ = read_gguf(bpe)
    want_t = gguf_client(modules, bpe, text)
    q8 = os.path.join(d, "gg-bpe-q8")
    p = run("convert", bpe, q8, "--quiet", "--format", "gguf:Q8_0")
    assert p.returncode == 0, p.stderr
    _, qmeta, _, _, _ = parse_gguf(os.path.join(q8, "model.gguf"))
    assert tokenizer_of(qmeta) == tokenizer_of(bmeta) and len(tokenizer_of(qmeta)["tokenizer.ggml.merges"]) == 50000
    assert qmeta["general.file_type"] == 7
    assert gguf_client(modules, os.path.join(q8, "model.gguf"), text) == want_t, "BPE tokens differ"
    # gguf_pre=NAME replaces the source's pre-tokenizer name, and only it
    pre = os.path.join(d, "gg-bpe-pre")
    p = run("convert", bpe, pre, "--quiet", "--format", "gguf:F16", "--gguf-pre", "qwen2")
    assert p.returncode == 0, p.stderr
    _, pmeta, _, _, _ = parse_gguf(os.path.join(pre, "model.gguf"))
    assert pmeta["tokenizer.ggml.pre"] == "qwen2" and bmeta["tokenizer.ggml.pre"] == "gpt-2"
    assert {**tokenizer_of(pmeta), "tokenizer.ggml.pre": "gpt-2"} == tokenizer_of(bmeta)
    if "--mount" in sys.argv:
        from mountlib import Mount
        with Mount(bpe, opts="gguf=Q8_0") as m:
            mounted = open(m.path("model.gguf"), "rb").read()
            assert mounted == open(os.path.join(q8, "model.gguf"), "rb").read(), "the mount serves another file"
            assert gguf_client(modules, m.path("model.gguf"), text) == want_t
        print("the mounted GGUF view of a GGUF: convert's file, byte for byte, tokenizing as the source")
    # hostile tokenizers: each refused with the key named, nothing written
    small = os.path.join(d, "gg-small")
    ckref.run(MKCKPT, "--model", "llama", src + "-small")
    n = json.load(open(os.path.join(src + "-small", "config.json")))["vocab_size"]
    cases = [({"tokenizer.ggml.tokens": (9, (8, [f"t{i}" for i in range(n - 1)]))},
              f"tokenizer.ggml.tokens lists {n - 1} entries, the view's token_embd.weight has {n} rows"),
             ({"tokenizer.ggml.tokens": (9, (5, list(range(n))))}, "tokenizer.ggml.tokens is not an array of strings"),
             ({"tokenizer.ggml.tokens": (8, "t0")}, "tokenizer.ggml.tokens is not an array of strings"),
             ({"tokenizer.ggml.model": (4, 2)}, "tokenizer.ggml.model is missing or not a string"),
             # what llama.cpp indexes by token id: one per token, of its type
             ({"tokenizer.ggml.scores": (9, (6, [0.0] * (n - 3)))},
              f"tokenizer.ggml.scores lists {n - 3} entries, the view's token_embd.weight has {n} rows"),
             ({"tokenizer.ggml.token_type": (9, (6, [1.0] * n))}, "tokenizer.ggml.token_type is not an array of i32"),
             ({"tokenizer.ggml.merges": (9, (5, [1, 2]))}, "tokenizer.ggml.merges is not an array of strings")]
    for k, (meta, says) in enumerate(cases):
        bad = os.path.join(d, f"gg-bad{k}.gguf")
        llama_gguf(src + "-small", bad, True, extra_meta=meta)
        p = run("convert", bad, small, "--quiet", "--format", "gguf:F32")
        assert p.returncode != 0 and says in p.stderr and bad in p.stderr, (says, p.stderr)
        assert len(p.stderr.strip().splitlines()) == 1 and not os.path.exists(small), p.stderr
        p = run("convert", bad, small, "--quiet", "--format", "gguf:F32", "--gguf-vocab", "none")
        assert p.returncode == 0, p.stderr  # placeholders instead: the tensors are fine
        shutil.rmtree(small)
    print(f"GGUF -> GGUF: the real tiny Llama's 12 tensors and 7 tokenizer records as the source's, llama.cpp "
          f"{r:.0e} from the source, the same tokens; GPT-2's BPE (50,000 merges) carried into Q8_0 and "
          f"tokenizing alike; gguf_pre replaces only the pre-tokenizer; {len(cases)} hostile tokenizers refused")


def phi3_unfuse(src, cfg):
    """HF Phi-3 tensors (name -> (dtype, shape, array)) as HF Llama's
    (name -> (dtype, array)): qkv_proj split into q, k, v rows, gate_up_proj
    into its halves."""
    H, nh = cfg["hidden_size"], cfg["num_attention_heads"]
    nkv = cfg["num_key_value_heads"]
    hd = H // nh
    out = {}
    for k, (dt, _, a) in src.items():
        if k.endswith("self_attn.qkv_proj.weight"):
            p = k[:-len("qkv_proj.weight")]
            out[p + "q_proj.weight"] = (dt, a[:nh * hd])
            out[p + "k_proj.weight"] = (dt, a[nh * hd:(nh + nkv) * hd])
            out[p + "v_proj.weight"] = (dt, a[(nh + nkv) * hd:])
        elif k.endswith("mlp.gate_up_proj.weight"):
            p = k[:-len("gate_up_proj.weight")]
            out[p + "gate_proj.weight"] = (dt, a[:a.shape[0] // 2])
            out[p + "up_proj.weight"] = (dt, a[a.shape[0] // 2:])
        else:
            out[k] = (dt, a)
    return out


def llama_parts(cfg, hd, T):
    """What every Llama-style forward pass here shares: RMSNorm, the rotary
    embedding on halves (cos, sin for T positions, over the head's first
    int(hd * partial_rotary_factor) dims) and the causal mask."""
    import torch
    eps = cfg["rms_norm_eps"]

    def rms(x, g):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * g

    def rot(x):
        h = x.shape[-1] // 2
        return torch.cat([-x[..., h:], x[..., :h]], -1)
    hd = int(hd * cfg.get("partial_rotary_factor", 1.0))  # Phi-4-mini: the first 3/4 of a head turn
    inv = 1.0 / (cfg["rope_theta"] ** (torch.arange(0, hd, 2).double() / hd))
    rs = cfg.get("rope_scaling") or {}
    if rs.get("rope_type") == "llama3":  # Hugging Face's _compute_llama3_parameters
        factor, lo, hi = rs["factor"], rs.get("low_freq_factor", 1.0), rs.get("high_freq_factor", 4.0)
        old = rs.get("original_max_position_embeddings", 8192)
        wave = 2 * math.pi / inv
        scaled = torch.where(wave > old / lo, inv / factor, inv)
        smooth = (old / wave - lo) / (hi - lo)
        mid = (wave >= old / hi) & (wave <= old / lo)
        inv = torch.where(mid, (1 - smooth) * scaled / factor + smooth * scaled, scaled)
    att = 1.0
    if rs.get("type", rs.get("rope_type")) in ("longrope", "su"):  # _compute_longrope_parameters
        orig = cfg.get("original_max_position_embeddings")
        factor = cfg["max_position_embeddings"] / orig if orig else rs.get("factor")
        orig = orig or cfg["max_position_embeddings"]
        att = rs.get("attention_factor")
        if att is None:
            att = math.sqrt(1 + math.log(factor) / math.log(orig)) if factor > 1 else 1.0
        inv = inv / torch.tensor(rs["long_factor"] if T > orig else rs["short_factor"], dtype=torch.float64)
    ang = torch.arange(T).double()[:, None] * inv[None]
    ang = torch.cat([ang, ang], -1)
    return rms, rot, (ang.cos() * att).float(), (ang.sin() * att).float(), torch.full((T, T), float("-inf")).triu(1)


def llama_forward(w, cfg, toks):
    """Hugging Face's Llama / Qwen2 / Qwen3 / Mixtral / Qwen2-MoE / OLMo 2 in
    plain torch (OLMo 2: no norm before attention or MLP, RMSNorm after each
    and over each whole Q and K projection): RMSNorm, rotary embedding on halves (of part of the head with
    Phi-3's partial_rotary_factor), grouped-query attention (with Q/K/V
    biases, per-head Q/K norms), SwiGLU or top-k experts (softmax,
    renormalized unless norm_topk_prob is false; Qwen2-MoE's shared expert
    added, scaled by the sigmoid of its gate)."""
    import torch
    H, nh = cfg["hidden_size"], cfg["num_attention_heads"]
    nkv = cfg["num_key_value_heads"]
    hd, T = cfg.get("head_dim", H // nh), len(toks)
    w = {k: v if isinstance(v, torch.Tensor) else torch.tensor(v) for k, v in w.items()}

    def lin(x, p):
        y = x @ w[p + ".weight"].T
        return y + w[p + ".bias"] if p + ".bias" in w else y

    def mlp(h, p):
        if p + "mlp.gate_proj.weight" in w:
            return lin(torch.nn.functional.silu(lin(h, p + "mlp.gate_proj")) * lin(h, p + "mlp.up_proj"),
                       p + "mlp.down_proj")
        e = p + "block_sparse_moe."
        probs = torch.softmax(lin(h, e + "gate"), -1)
        top, idx = probs.topk(cfg["num_experts_per_tok"], -1)
        if cfg.get("norm_topk_prob", True):  # Qwen2-MoE's default is False, Mixtral always does
            top = top / top.sum(-1, keepdim=True)
        out = torch.zeros_like(h)
        for t in range(h.shape[0]):
            for j in range(top.shape[1]):
                x = p + f"block_sparse_moe.experts.{int(idx[t, j])}."
                y = torch.nn.functional.silu(lin(h[t], x + "w1")) * lin(h[t], x + "w3")
                out[t] += top[t, j] * lin(y, x + "w2")
        s = p + "mlp.shared_expert."
        if s + "gate_proj.weight" in w:  # Qwen2-MoE: plus the shared expert, sigmoid-gated
            y = lin(torch.nn.functional.silu(lin(h, s + "gate_proj")) * lin(h, s + "up_proj"), s + "down_proj")
            out = out + torch.sigmoid(lin(h, p + "mlp.shared_expert_gate")) * y
        return out
    rms, rot, cos, sin, mask = llama_parts(cfg, hd, T)

    def turn(x):  # the rope on the first cos.shape[-1] dims, the rest as they are
        y = x[..., :cos.shape[-1]]
        return torch.cat([y * cos + rot(y) * sin, x[..., cos.shape[-1]:]], -1)
    # IBM Granite's four scalars (GraniteConfig: each 1 by default, also the
    # attention multiplier, which replaces 1/sqrt(head_dim))
    gr = cfg.get("model_type") == "granite"
    scale = cfg.get("attention_multiplier", 1.0) if gr else hd ** -0.5
    res = cfg.get("residual_multiplier", 1.0) if gr else 1.0
    x = w["model.embed_tokens.weight"][toks] * (cfg.get("embedding_multiplier", 1.0) if gr else 1.0)
    olmo2 = cfg.get("model_type") == "olmo2"  # norms after attention and MLP, Q/K norms over all heads
    for L in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{L}."
        h = x if olmo2 else rms(x, w[p + "input_layernorm.weight"])
        q, k = lin(h, p + "self_attn.q_proj"), lin(h, p + "self_attn.k_proj")
        if olmo2 and cfg.get("qk_norm_per_head"):  # (a negative control: Qwen3's reading)
            q = rms(q.view(T, nh, hd), w[p + "self_attn.q_norm.weight"].view(nh, hd))
            k = rms(k.view(T, nkv, hd), w[p + "self_attn.k_norm.weight"].view(nkv, hd))
        elif olmo2:
            q, k = rms(q, w[p + "self_attn.q_norm.weight"]), rms(k, w[p + "self_attn.k_norm.weight"])
        q, k = q.reshape(T, nh, hd), k.reshape(T, nkv, hd)
        v = lin(h, p + "self_attn.v_proj").view(T, nkv, hd).transpose(0, 1)
        if p + "self_attn.q_norm.weight" in w and not olmo2:
            q, k = rms(q, w[p + "self_attn.q_norm.weight"]), rms(k, w[p + "self_attn.k_norm.weight"])
        q, k = q.transpose(0, 1), k.transpose(0, 1)
        if cfg.get("no_rope_layers", [1] * (L + 1))[L]:  # SmolLM3: 0 leaves the layer unturned
            q, k = turn(q), turn(k)
        k, v = k.repeat_interleave(nh // nkv, 0), v.repeat_interleave(nh // nkv, 0)
        a = torch.softmax(q @ k.transpose(1, 2) * scale + mask, -1) @ v
        o = lin(a.transpose(0, 1).reshape(T, nh * hd), p + "self_attn.o_proj")
        if olmo2:
            x = x + rms(o, w[p + "post_attention_layernorm.weight"])
            x = x + rms(mlp(x, p), w[p + "post_feedforward_layernorm.weight"])
            continue
        x = x + o * res
        x = x + mlp(rms(x, w[p + "post_attention_layernorm.weight"]), p) * res
    head = w["lm_head.weight"] if "lm_head.weight" in w else w["model.embed_tokens.weight"]
    return rms(x, w["model.norm.weight"]) @ head.T / (cfg.get("logits_scaling", 1.0) if gr else 1.0)


_LLAMA = {}  # node_modules -> the llama_logits.mjs --serve process


def _llama_server(modules):
    p = _LLAMA.get(modules)
    if p is None or p.poll() is not None:
        # stderr to a file: llama.cpp's log lines would fill a pipe nobody reads
        err = tempfile.TemporaryFile()
        p = subprocess.Popen(["node", os.path.join(os.path.dirname(os.path.abspath(__file__)), "llama_logits.mjs"),
                              modules, "--serve"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                             stderr=err, text=True)
        p.err = err
        _LLAMA[modules] = p
        atexit.register(_llama_stop, p)
    return p


def _llama_stop(p):
    if p.poll() is None:
        p.stdin.close()
        try:
            p.wait(timeout=30)
        except subprocess.TimeoutExpired:
            p.kill()


def llama_cpp(modules, path, toks):
    """The real llama.cpp's logits of every position: one node process per
    run answers every request (llama_logits.mjs --serve)."""
    import torch
    p = _llama_server(modules)
    p.stdin.write(json.dumps({"model": os.path.abspath(path), "tokens": list(toks)}) + "\n")
    p.stdin.flush()
    line = p.stdout.readline()
    if not line:
        _LLAMA.pop(modules, None)
        p.wait()
        p.err.seek(0)
        raise AssertionError("llama_logits.mjs exited: " + p.err.read().decode(errors="replace")[-2000:])
    out = json.loads(line)
    assert not isinstance(out, dict), out["error"][-2000:]
    return torch.tensor(out)


def torch_logits(gguf, out, toks):
    """A torch Llama over the Hugging Face view ckptfs makes of a GGUF."""
    import torch
    ckref.run(CKPTFS, "convert", gguf, out, "--quiet", "--mapping", MAP)
    cfg = json.load(open(os.path.join(out, "config.json")))
    w = {k: torch.tensor(v[2].astype(np.float32)) for k, v in ckref.read_checkpoint_dir(out).items()}
    return llama_forward(w, cfg, toks), w, cfg


def rel(a, b):
    return ((a - b).abs().max() / b.abs().max()).item()


def llama_cpp_logits(d):
    modules = os.path.join(TESTS, "..", "build-node", "node_modules")
    assert os.path.isdir(os.path.join(modules, "node-llama-cpp")), \
        f"{modules}: node-llama-cpp is missing (tools/install-deps.sh installs it)"
    # the real tiny Llama written by llama.cpp's converter
    real = os.path.join(REAL, "ollama-tiny-random", "llama-2-tiny-random.gguf")
    toks = [1, 450, 4996, 17354, 338, 263, 1243]
    want = llama_cpp(modules, real, toks)
    got, _, _ = torch_logits(real, os.path.join(d, "real-hf"), toks)
    r_real = rel(got, want)
    assert r_real < 1e-3 and got.argmax(-1).tolist() == want.argmax(-1).tolist(), r_real
    # a generated Llama (values up to 2, 8 heads in 2 groups) as the converter writes it
    src = os.path.join(d, "gen")
    ckref.run(MKCKPT, "--model", "llama", "--heads", "8", "--kv-heads", "2", src)
    good = os.path.join(d, "gen.gguf")
    llama_gguf(src, good, True, 0.25)
    toks = [1, 5, 9, 200, 31, 77, 128, 3]
    want = llama_cpp(modules, good, toks)
    got, w, cfg = torch_logits(good, os.path.join(d, "gen-hf"), toks)
    r_gen = rel(got, want)
    assert r_gen < 1e-3 and got.argmax(-1).tolist() == want.argmax(-1).tolist(), r_gen
    # negative controls: the GGUF's Q/K rows taken as they are (no un-permutation) ...
    import torch
    _, _, raw = read_gguf(good)
    bad_w = dict(w)
    for L in range(cfg["num_hidden_layers"]):
        for name in ("q", "k"):
            dt, shape, b = raw[f"blk.{L}.attn_{name}.weight"]
            bad_w[f"model.layers.{L}.self_attn.{name}_proj.weight"] = torch.tensor(
                np.frombuffer(b, dtype="<f4").reshape(shape).copy())
    r_bad = rel(llama_forward(bad_w, cfg, toks), want)
    assert r_bad > 1e-2, f"without un-permuting Q/K the logits still match ({r_bad:.2e})"
    # ... and a GGUF written without the permutation, run by llama.cpp
    unperm = os.path.join(d, "gen-unpermuted.gguf")
    llama_gguf(src, unperm, False, 0.25)
    r_unp = rel(got, llama_cpp(modules, unperm, toks))
    assert r_unp > 1e-2, f"llama.cpp without the permutation still matches ({r_unp:.2e})"
    # Llama 3.1's rope scaling baked into rope_freqs.weight: the config.json made
    # for it carries the divisors (as longrope, which Hugging Face computes as
    # llama.cpp does); it used to drop them and describe another model
    freqs = np.array([1.0, 3.0, 8.0, 8.0], np.float32)
    assert cfg["hidden_size"] // cfg["num_attention_heads"] == 2 * len(freqs)
    roped = os.path.join(d, "gen-rope.gguf")
    llama_gguf(src, roped, True, 0.25, extra={"rope_freqs.weight": freqs})
    want_r = llama_cpp(modules, roped, toks)
    got_r, _, cfg_r = torch_logits(roped, os.path.join(d, "gen-rope-hf"), toks)
    r_rope = rel(got_r, want_r)
    rs = cfg_r["rope_scaling"]
    assert rs["rope_type"] == "longrope" and rs["long_factor"] == rs["short_factor"] == freqs.tolist() and \
        rs["attention_factor"] == 1 and rs["factor"] == 1, rs
    assert r_rope < 1e-3 and got_r.argmax(-1).tolist() == want_r.argmax(-1).tolist(), r_rope
    r_norope = rel(got, want_r)  # the Hugging Face model without the divisors
    assert r_norope > 100 * max(r_rope, 1e-6), f"rope_freqs changes nothing ({r_norope:.1e})"
    print(f"llama.cpp logits = a torch Llama over the mapped view: real tiny Llama {r_real:.1e}, "
          f"generated {r_gen:.1e} relative (same greedy tokens); Q/K not un-permuted: {r_bad:.1e}; "
          f"GGUF without the permutation: {r_unp:.1e}; rope_freqs.weight carried into config.json "
          f"{r_rope:.1e} (without it: {r_norope:.1e})")


# ggml's types: (type id, elements and bytes per block), as ggml-common.h
# lays out its block_* structs
QUANT = {"Q4_0": (2, 32, 18), "Q4_1": (3, 32, 20), "Q5_0": (6, 32, 22), "Q5_1": (7, 32, 24),
         "Q8_0": (8, 32, 34), "Q2_K": (10, 256, 84), "Q3_K": (11, 256, 110), "Q4_K": (12, 256, 144),
         "Q5_K": (13, 256, 176), "Q6_K": (14, 256, 210), "IQ4_NL": (20, 32, 18), "IQ4_XS": (23, 256, 136),
         "TQ1_0": (34, 256, 54), "TQ2_0": (35, 256, 66), "MXFP4": (39, 32, 17)}


def ggml_lib():
    import ctypes
    import glob
    found = glob.glob(os.path.join(TESTS, "..", "build-node", "node_modules", "@node-llama-cpp", "linux-x64",
                                   "bins", "linux-x64", "libggml-base.so"))
    assert found, "libggml-base.so from node-llama-cpp is missing (tools/install-deps.sh installs it)"
    lib = ctypes.CDLL(found[0])
    lib.ggml_quantize_chunk.restype = ctypes.c_size_t
    lib.ggml_quantize_chunk.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64,
                                        ctypes.c_int64, ctypes.c_int64, ctypes.c_void_p]
    return lib


def ggml_quantize(t, x):
    """x (2-D F32) as blocks of ggml type t, by ggml's own quantizer."""
    qk, qb = next((qk, qb) for tt, qk, qb in QUANT.values() if tt == t)
    x = np.ascontiguousarray(x, np.float32)
    q = np.zeros(x.size // qk * qb, np.uint8)
    assert ggml_lib().ggml_quantize_chunk(t, x.ctypes.data, q.ctypes.data, 0, x.shape[0], x.shape[1],
                                          None) == q.size
    return q.tobytes()


def quantized_model(d):
    """A Llama GGUF as llama.cpp's K-quant and IQ4 presets write one (the
    matrices in Q2_K, Q3_K, Q4_1, Q5_0, Q5_1, IQ4_NL and IQ4_XS in turn, by
    ggml's quantizer; the norms F32) through gguf-llama-to-hf is the model
    llama.cpp runs. llama.cpp quantizes the activations for its dot products
    (to 8 bits), which alone puts its logits about 1e-1 from the exact
    model's here: the same model all in Q8_0 (decoded exactly, its blocks
    tested above) measures that noise, and the mixed file must agree as
    closely; the unquantized weights, which the blocks approximate, must be
    several times further."""
    modules = os.path.join(TESTS, "..", "build-node", "node_modules")
    src = os.path.join(d, "kq")
    ckref.run(MKCKPT, "--model", "llama", "--hidden", "256", "--intermediate", "512", "--heads", "4",
              "--kv-heads", "2", "--layers", "2", "--vocab", "256", src)
    types = [QUANT[n][0] for n in ("Q2_K", "Q3_K", "Q4_1", "Q5_0", "Q5_1", "IQ4_NL", "IQ4_XS")]
    order = []

    def pick(name):
        order.append(name)
        return types[(len(order) - 1) % len(types)]
    toks = [1, 5, 9, 200, 31, 77, 128, 3]
    r, want_mixed = {}, None
    for tag, quant in (("mixed", pick), ("q8", lambda name: QUANT["Q8_0"][0]), ("f32", None)):
        g = os.path.join(d, f"kq-{tag}.gguf")
        llama_gguf(src, g, True, 0.25, quant=quant)
        got, _, _ = torch_logits(g, os.path.join(d, f"kq-{tag}-hf"), toks)
        if quant:
            want = llama_cpp(modules, g, toks)
        r[tag] = rel(got, want if quant else want_mixed)  # f32: against the mixed file's
        want_mixed = want if tag == "mixed" else want_mixed
    assert len(order) >= 2 * len(types), order  # every type, twice
    assert r["mixed"] < 3 * r["q8"] and r["f32"] > 5 * r["mixed"], r
    print(f"a Llama GGUF in Q2_K, Q3_K, Q4_1, Q5_0, Q5_1, IQ4_NL and IQ4_XS through gguf-llama-to-hf: "
          f"{r['mixed']:.1e} from llama.cpp's logits (the same model in Q8_0: {r['q8']:.1e}, llama.cpp's "
          f"8-bit activations), the unquantized weights {r['f32']:.1e}")


def ggml_dequantize(lib, name, q, n):
    """n floats from blocks q by ggml's own dequantize_row_<type>."""
    import ctypes
    deq = getattr(lib, "dequantize_row_" + name.lower().replace("_k", "_K"))
    deq.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64]
    q = np.ascontiguousarray(q, np.uint8)
    y = np.zeros(n, np.float32)
    deq(q.ctypes.data, y.ctypes.data, n)
    return y


def quantized(d):
    lib = ggml_lib()
    rng = np.random.default_rng(7)
    rows, cols = 12, 512  # 6144 elements: a run cast on its way crosses the 4096-element slabs
    tensors, want = {}, {}
    for name, (t, qk, qb) in QUANT.items():
        x = (rng.standard_normal((rows, cols)) * rng.uniform(0.01, 3)).astype(np.float32)
        q = np.frombuffer(ggml_quantize(t, x), np.uint8)
        tensors[f"w.{name}"] = (t, [rows, cols], q.tobytes())
        want[f"w.{name}"] = ggml_dequantize(lib, name, q, rows * cols).reshape(rows, cols)
    # MXFP4 (GPT-OSS's experts in GGUF): every one of the 256 exponent codes
    # (block i has e = i), each with all 16 value codes in both nibbles
    codes = np.zeros((256, 17), np.uint8)
    codes[:, 0] = np.arange(256)
    codes[:, 1:] = (np.arange(16) | (np.arange(16)[::-1] << 4)).astype(np.uint8)
    tensors["w.MXFP4_codes"] = (39, [16, 512], codes.tobytes())
    want["w.MXFP4_codes"] = ggml_dequantize(lib, "MXFP4", codes, 256 * 32).reshape(16, 512)
    # every type's blocks as random bytes (scales of any sign, size and bit
    # pattern, codes a quantizer would not write): the decoding is the
    # format's, not only what ggml's quantizer happens to produce
    raw = {}
    for name, (t, qk, qb) in QUANT.items():
        if name == "MXFP4":
            continue
        q = rng.integers(0, 256, 8 * 1024 // qk * qb, dtype=np.uint8)
        tensors[f"r.{name}"] = (t, [8, 1024], q.tobytes())
        raw[f"r.{name}"] = ggml_dequantize(lib, name, q, 8 * 1024).reshape(8, 1024)
    path = os.path.join(d, "quantized.gguf")
    write_gguf(path, {"general.architecture": (8, "test")}, tensors)
    js = json.loads(run("inspect", path, "--json").stdout)
    assert {t["name"]: (t["dtype"], t["shape"]) for t in js["tensors"]} == \
        {k: ("F32", list(y.shape)) for k, y in {**want, **raw}.items()}, js["tensors"]
    # the blocks as stored: their type's name and bytes, in the JSON and the table
    names = {t: n for n, (t, _, _) in QUANT.items()}
    assert {t["name"]: (t["stored"], t["stored_bytes"]) for t in js["tensors"]} == \
        {k: (names[tensors[k][0]], len(tensors[k][2])) for k in tensors}, js["tensors"]
    table = {ln.split()[0]: ln.split()[1:3] for ln in run("inspect", path).stdout.splitlines()[1:len(tensors) + 1]}
    assert table == {k: ["F32", f"({names[tensors[k][0]]})"] for k in tensors}, table
    out = os.path.join(d, "deq")
    ckref.run(CKPTFS, "convert", path, out, "--quiet")
    got = ckref.read_checkpoint_dir(out)
    for k, y in want.items():
        assert got[k][2].tobytes() == y.tobytes(), f"{k}: not ggml's dequantized floats"
    for k, y in raw.items():  # bit for bit but a NaN's payload (which operand's, C leaves open)
        g, nan = got[k][2], np.isnan(y)
        assert (np.isnan(g) == nan).all() and g[~nan].tobytes() == y[~nan].tobytes(), \
            f"{k}: random blocks not decoded as ggml decodes them"
        assert (~nan).sum() > y.size // 2, f"{k}: the random blocks are mostly NaN: nothing compared"
    for k in list(raw):  # the checks below compare bytes, NaNs included: the quantizer's blocks only
        tensors.pop(k)
    write_gguf(path, {"general.architecture": (8, "test")}, tensors)
    # slices that start and end inside blocks: the engine decodes whole
    # blocks; and runs that do (no cast, one contiguous run), decoded straight
    # into the output, the whole blocks between in place
    def bf16(y):  # round to nearest even, computed here
        u = np.ascontiguousarray(y).view(np.uint32).astype(np.uint64)
        return ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)
    for tag, expr, ref in (("s", "x.narrow(1, 37, 300).narrow(0, 1, 4).t()", lambda y: y[1:5, 37:337].T),
                           ("f", "x.view(-1).narrow(0, 37, 1000)", lambda y: y.reshape(-1)[37:1037]),
                           ("b", "x.view(-1).narrow(0, 37, 6000).to(BF16)",
                            lambda y: bf16(y.reshape(-1)[37:6037]))):
        sl = os.path.join(d, f"slice-{tag}.json")
        json.dump({"rules": [{"from": "w.{q}", "to": tag + ".{q}", "expr": expr}]}, open(sl, "w"))
        out = os.path.join(d, f"deq-slices-{tag}")
        ckref.run(CKPTFS, "convert", path, out, "--quiet", "--mapping", sl)
        got = ckref.read_checkpoint_dir(out)
        for k, y in want.items():
            assert got[f"{tag}.{k[2:]}"][2].tobytes() == np.ascontiguousarray(ref(y)).tobytes(), \
                f"{k}: a mid-block slice differs ({expr})"
    # llama.cpp's Q/K row permutation undone on a Q8_0 tensor (gguf-llama-to-hf's
    # expression, 4 heads of 32 rows): a piece per half head, each reading every
    # other row. Decoded once for all of them, not once per piece (whose blocks
    # span two halves' rows): the source bytes read are the tensor's, once
    x = (rng.standard_normal((128, 512)) * 0.5).astype(np.float32)
    q = np.frombuffer(ggml_quantize(8, x), np.uint8)
    y = ggml_dequantize(lib, "Q8_0", q, 128 * 512)
    perm_src = os.path.join(d, "permuted.gguf")
    write_gguf(perm_src, {"general.architecture": (8, "test")}, {"attn_q": (8, [128, 512], q.tobytes())})
    pm = os.path.join(d, "unpermute.json")
    json.dump({"rules": [{"from": "attn_q", "to": "q_proj",
                          "expr": "x.view(4, -1, 2, 512).transpose(1, 2).reshape(-1, 512)"}]}, open(pm, "w"))
    out = os.path.join(d, "unpermuted")
    said = run("convert", perm_src, out, "--mapping", pm).stderr
    ref = y.reshape(4, 16, 2, 512).transpose(0, 2, 1, 3).reshape(128, 512)
    assert ckref.read_checkpoint_dir(out)["q_proj"][2].tobytes() == ref.tobytes(), "unpermuted Q8_0 differs"
    assert f"(read {q.size} source bytes)" in said, f"the Q8_0 blocks are read more than once: {said}"
    bf = os.path.join(d, "deq-bf16")
    ckref.run(CKPTFS, "convert", path, bf, "--quiet", "--dtype", "BF16")
    got = ckref.read_checkpoint_dir(bf)
    for k, y in want.items():  # round to nearest even, computed here
        u = y.view(np.uint32).astype(np.uint64)
        r = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)
        assert (got[k][2] == r.reshape(y.shape)).all(), f"{k}: BF16 differs"
    print(f"quantized GGUF tensors ({', '.join(QUANT)} from ggml's quantizer; every MXFP4 "
          "exponent and value code; random blocks of every other type): decoded bit for bit "
          "as ggml's dequantize_row_*, whole, mid-block slices, cast to BF16, and a rope permutation "
          "undone on Q8_0 blocks decoded once")
    if "--mount" in sys.argv:
        from mountlib import Mount
        for opts, bf16 in ((None, False), ("gguf_dequant=BF16", True)):
            with Mount(path, opts=opts) as m:
                for k, y in want.items():
                    data = open(m.path("tensors", k), "rb").read()
                    if bf16:
                        u = y.view(np.uint32).astype(np.uint64)
                        ref = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16).tobytes()
                    else:
                        ref = y.tobytes()
                    assert data == ref, (k, opts)
                    tail = open(m.path("tensors", k), "rb")
                    tail.seek(len(ref) - 1000)  # a read that starts mid-block
                    assert tail.read() == ref[-1000:], (k, opts)
                    tail.close()
        print("the mount serves the decoded tensors, as F32 and with -o gguf_dequant=BF16")


def write_split(prefix, meta, tensors, per_file, split_meta=None):
    """tensors as gguf-split writes them (llama.cpp's gguf-split.cpp):
    PREFIX-0000k-of-0000N.gguf of per_file tensors each, in order; the
    first holds meta, every file split.no (u16), split.count (u16) and
    split.tensors.count (i32) after it. split_meta(k, keys) may change a
    file's split keys (hostile cases). Returns the paths."""
    names = list(tensors)
    groups = [names[i:i + per_file] for i in range(0, len(names), per_file)]
    paths = []
    for k, g in enumerate(groups):
        keys = {"split.no": (2, k), "split.count": (2, len(groups)), "split.tensors.count": (5, len(names))}
        if split_meta:
            keys = split_meta(k, keys)
        paths.append(f"{prefix}-{k + 1:05d}-of-{len(groups):05d}.gguf")
        write_gguf(paths[-1], {**(meta if k == 0 else {}), **keys}, {n: tensors[n] for n in g})
    return paths


def llama_gguf(src, path, do_permute, scale=1.0, arch="llama", extra=None, extra_meta=None, quant=None,
               split=0, split_meta=None, gate_2d=False):
    """A Hugging Face Llama (or Qwen2 / Qwen3 / Mixtral: arch "qwen2", "qwen3",
    "llama" with experts) as llama.cpp's converter writes it (reference/gguf.md):
    names, Q/K rows permuted for its rope on the llama architecture (unless
    do_permute is False; qwen2 and qwen3 use the NeoX rope and are not
    permuted), Mixtral's experts stacked into blk.N.ffn_*_exps (experts the
    slowest dim), the metadata llama.cpp needs, a placeholder byte-level
    vocabulary. scale multiplies the matrices (the generator's values reach
    2, far above a trained model's, and would saturate the attention).
    quant: name -> a ggml type id or None (F32) for each matrix, quantized
    with ggml's own quantizer. Qwen2-MoE's [1, hidden] shared-expert gate is
    written squeezed, as older converters did, or with gate_2d as it is, as
    newer ones do (llama.cpp loads either)."""
    cfg = json.load(open(os.path.join(src, "config.json")))
    st = ckref.read_checkpoint_dir(src)
    names = {"model.embed_tokens.weight": "token_embd.weight", "model.norm.weight": "output_norm.weight",
             "lm_head.weight": "output.weight"}
    per = {"input_layernorm": "attn_norm", "post_attention_layernorm": "ffn_norm",
           "self_attn.q_proj": "attn_q", "self_attn.k_proj": "attn_k", "self_attn.v_proj": "attn_v",
           "self_attn.o_proj": "attn_output", "mlp.gate_proj": "ffn_gate", "mlp.up_proj": "ffn_up",
           "mlp.down_proj": "ffn_down", "self_attn.q_norm": "attn_q_norm", "self_attn.k_norm": "attn_k_norm",
           "block_sparse_moe.gate": "ffn_gate_inp", "mlp.gate": "ffn_gate_inp",
           "self_attn.qkv_proj": "attn_qkv", "mlp.gate_up_proj": "ffn_up",
           "mlp.shared_expert.gate_proj": "ffn_gate_shexp", "mlp.shared_expert.up_proj": "ffn_up_shexp",
           "mlp.shared_expert.down_proj": "ffn_down_shexp", "mlp.shared_expert_gate": "ffn_gate_inp_shexp"}
    if arch == "olmo2":  # its norms sit after the sublayers
        per = dict(per, post_attention_layernorm="post_attention_norm", post_feedforward_layernorm="post_ffw_norm")
    vocab, hd = cfg["vocab_size"], cfg.get("head_dim") or cfg["hidden_size"] // cfg["num_attention_heads"]
    meta = {"general.architecture": (8, arch), f"{arch}.context_length": (4, 2048),
            f"{arch}.embedding_length": (4, cfg["hidden_size"]), f"{arch}.block_count": (4, cfg["num_hidden_layers"]),
            f"{arch}.feed_forward_length": (4, cfg["intermediate_size"]),
            f"{arch}.attention.head_count": (4, cfg["num_attention_heads"]),
            f"{arch}.attention.head_count_kv": (4, cfg["num_key_value_heads"]),
            f"{arch}.rope.dimension_count": (4, int(hd * cfg.get("partial_rotary_factor", 1.0))),
            f"{arch}.attention.layer_norm_rms_epsilon": (6, cfg["rms_norm_eps"]),
            f"{arch}.rope.freq_base": (6, float(cfg["rope_theta"])),
            "tokenizer.ggml.model": (8, "gpt2"),
            "tokenizer.ggml.tokens": (9, (8, [f"t{i}" for i in range(vocab)])),
            "tokenizer.ggml.token_type": (9, (5, [1] * vocab)),
            "tokenizer.ggml.merges": (9, (8, []))}
    if "head_dim" in cfg:
        meta[f"{arch}.attention.key_length"] = meta[f"{arch}.attention.value_length"] = (4, hd)
    if "num_local_experts" in cfg or "num_experts" in cfg:
        meta[f"{arch}.expert_count"] = (4, cfg.get("num_local_experts") or cfg["num_experts"])
        meta[f"{arch}.expert_used_count"] = (4, cfg["num_experts_per_tok"])
    if "moe_intermediate_size" in cfg:
        meta[f"{arch}.expert_feed_forward_length"] = (4, cfg["moe_intermediate_size"])
    if "shared_expert_intermediate_size" in cfg:
        meta[f"{arch}.expert_shared_feed_forward_length"] = (4, cfg["shared_expert_intermediate_size"])
    if arch == "phi3":  # as the converter writes them (0: no window)
        meta["phi3.attention.sliding_window"] = (4, cfg.get("sliding_window") or 0)
        meta["phi3.rope.scaling.original_context_length"] = \
            (4, cfg.get("original_max_position_embeddings", cfg["max_position_embeddings"]))
        rs = cfg.get("rope_scaling") or {}
        if rs.get("type") == "longrope":
            orig, ctx = cfg["original_max_position_embeddings"], cfg["max_position_embeddings"]
            meta["phi3.rope.scaling.attn_factor"] = (6, math.sqrt(1 + math.log(ctx / orig) / math.log(orig)))
            extra = dict(extra or {}, **{"rope_factors_long.weight": np.float32(rs["long_factor"]),
                                         "rope_factors_short.weight": np.float32(rs["short_factor"])})
    out, experts = {}, {}
    for k, (dt, shape, a) in st.items():
        g = names.get(k)
        parts = k.split(".")
        if not g and ".experts." in k:  # Mixtral's experts.{E}.w{1,3,2}, Qwen3-MoE's {gate,up,down}_proj
            w = {"w1": "gate", "w3": "up", "w2": "down", "gate_proj": "gate", "up_proj": "up",
                 "down_proj": "down"}[parts[-2]]
            experts.setdefault(f"blk.{parts[2]}.ffn_{w}_exps.weight", {})[int(parts[-3])] = a
            continue
        if not g:
            g = f"blk.{parts[2]}.{per['.'.join(parts[3:-1])]}.{parts[-1]}"
        if g.endswith("ffn_gate_inp_shexp.weight") and not gate_2d:  # squeezed
            a, shape = a.reshape(-1), (shape[-1],)
        if len(shape) == 2 and scale != 1.0:
            a = (a.astype(np.float32) * np.float32(scale))
        if do_permute and arch == "llama" and g.endswith("attn_q.weight"):
            a = permute(a, cfg["num_attention_heads"])
        if do_permute and arch == "llama" and g.endswith("attn_k.weight"):
            a = permute(a, cfg["num_key_value_heads"])
        t = quant(g) if quant and len(shape) == 2 else None
        out[g] = (0, list(shape), np.ascontiguousarray(a).tobytes()) if t is None else \
            (t, list(shape), ggml_quantize(t, np.asarray(a, np.float32)))
    for g, by_e in experts.items():
        a = np.stack([by_e[e] for e in range(len(by_e))])
        out[g] = (0, list(a.shape), np.ascontiguousarray(a).tobytes())
    for g, a in (extra or {}).items():  # F32 tensors of the file's own (rope_freqs.weight)
        out[g] = (0, list(a.shape), np.ascontiguousarray(a, dtype=np.float32).tobytes())
    meta.update(extra_meta or {})  # metadata of another type or value than the config's
    if split:  # gguf-split's files of split tensors each, path the prefix
        return write_split(path, meta, out, split, split_meta)
    write_gguf(path, meta, out)


def phi3_runs(d, src, tag, mp):
    """A Phi-3 GGUF (weights scaled to a trained model's range) through
    gguf-phi3-to-hf is the model llama.cpp runs: llama.cpp's logits on the
    GGUF against a torch forward pass over the converted weights, split into
    q/k/v and gate/up, with the config made from the metadata (LongRoPE's
    short factors and attention factor, the partial rope)."""
    modules = os.path.join(TESTS, "..", "build-node", "node_modules")
    toks = [1, 5, 9, 200, 31, 77, 128, 3]
    g = os.path.join(d, tag + "-run.gguf")
    llama_gguf(src, g, True, 0.25, arch="phi3")
    out = os.path.join(d, "hf-run-" + tag)
    p = run("convert", g, out, "--quiet", "--mapping", mp)
    assert p.returncode == 0, p.stderr
    cfg = json.load(open(os.path.join(out, "config.json")))
    w = {k: a.astype(np.float32) for k, (_, a) in phi3_unfuse(ckref.read_checkpoint_dir(out), cfg).items()}
    want = llama_cpp(modules, g, toks)
    r = rel(llama_forward(w, cfg, toks), want)
    assert r < 1e-3, f"{tag}: llama.cpp vs torch over the converted model {r:.1e}"
    return f"{tag} {r:.0e}"


def other_archs(d):
    """Qwen2 (Q/K/V biases, tied embeddings), Qwen3 (Q/K norms, an explicit
    head_dim), Mixtral (stacked experts, permuted Q/K), Qwen3-MoE (stacked
    experts, Q/K norms), Qwen2-MoE (stacked experts, biases, the shared
    expert and its gate, a vector in the file), OLMo 2 (norms after the
    sublayers, whole-projection Q/K norms) and Phi-3 (fused qkv and gate/up; a 128k one with
    LongRoPE's divisors, which config.json carries; a Phi-4-mini-style one
    whose rope turns 3/4 of each head, partial_rotary_factor in config.json)
    GGUFs, written here,
    map back to the Hugging Face bytes with their shipped mappings, through a
    config.json made from the metadata that says what the source's does; the
    same for the GGUFs ckptfs's own view serves. Each GGUF served as a GGUF
    (no mapping given) is the file's tensors again."""
    runs = []
    for model, arch, extra in (("qwen2", "qwen2", ["--tie"]), ("qwen3", "qwen3", ["--head-dim", "16"]),
                               ("mixtral", "llama", []), ("qwen3-moe", "qwen3moe", []),
                               ("qwen2-moe", "qwen2moe", []), ("olmo2", "olmo2", []), ("phi3", "phi3", []),
                               ("phi3-longrope", "phi3", []), ("phi3-longrope-partial", "phi3", ["--tie"])):
        src = os.path.join(d, "src-" + model)
        ckref.run(MKCKPT, "--model", model.split("-long")[0], *extra, src)
        cfg = json.load(open(os.path.join(src, "config.json")))
        if model == "phi3-longrope":  # a 128k model: LongRoPE's divisors and a window
            cfg.update(original_max_position_embeddings=512, sliding_window=262,
                       rope_scaling={"type": "longrope", "long_factor": [1.0, 1.5, 2.0, 3.0, 4.0, 6.0, 8.0, 12.0],
                                     "short_factor": [1.0, 1.05, 1.1, 1.2, 1.3, 1.5, 1.7, 2.0]})
            json.dump(cfg, open(os.path.join(src, "config.json"), "w"))
        if model == "phi3-longrope-partial":  # Phi-4-mini: 3/4 of each head turns (12 of 16), tied
            assert cfg["hidden_size"] // cfg["num_attention_heads"] == 16, cfg
            cfg.update(original_max_position_embeddings=512, sliding_window=262, partial_rotary_factor=0.75,
                       rope_scaling={"type": "longrope", "long_factor": [1.0, 1.5, 2.0, 3.0, 4.0, 6.0],
                                     "short_factor": [1.0, 1.05, 1.1, 1.2, 1.3, 1.5]})
            json.dump(cfg, open(os.path.join(src, "config.json"), "w"))
        tag, model = model, model.split("-long")[0]  # tag names the files, model the mapping
        mp = MAP.replace("gguf-llama-to-hf", f"gguf-{model.replace('-', '')}-to-hf")
        good = os.path.join(d, tag + ".gguf")
        llama_gguf(src, good, True, arch=arch)
        p = run("diff", src, good, "--mapping", mp)
        assert p.returncode == 0 and " 0 differ in values" in p.stdout, (model, p.stdout + p.stderr)
        # the GGUF served as a GGUF, no mapping given: its own to Hugging Face
        # names applies first, and every tensor comes back as the file has it
        again = os.path.join(d, "again-" + tag)
        p = run("convert", good, again, "--quiet", "--format", "gguf:F32")
        assert p.returncode == 0, (tag, p.stderr)
        _, gm, gt = read_gguf(good)
        _, am, at = read_gguf(os.path.join(again, "model.gguf"))
        assert at == gt and tokenizer_of(am) == tokenizer_of(gm), (tag, set(at) ^ set(gt))
        out = os.path.join(d, "hf-" + tag)
        assert run("convert", good, out, "--quiet", "--mapping", mp).returncode == 0
        got = json.load(open(os.path.join(out, "config.json")))
        keys = ["architectures", "hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
                "num_key_value_heads", "vocab_size", "tie_word_embeddings", "rope_theta"]
        keys += {"qwen3": ["head_dim"], "mixtral": ["num_local_experts", "num_experts_per_tok"],
                 "qwen3-moe": ["head_dim", "num_experts", "num_experts_per_tok", "moe_intermediate_size",
                               "norm_topk_prob", "decoder_sparse_step", "mlp_only_layers"],
                 "qwen2-moe": ["num_experts", "num_experts_per_tok", "moe_intermediate_size",
                               "shared_expert_intermediate_size", "norm_topk_prob", "decoder_sparse_step",
                               "mlp_only_layers"],
                 "phi3": ["sliding_window", "partial_rotary_factor"] +
                 (["original_max_position_embeddings"] if "rope_scaling" in cfg else [])}.get(model, [])
        assert all(got.get(k) == cfg.get(k) for k in keys), (model, {k: (got.get(k), cfg.get(k)) for k in keys})
        assert np.float32(got["rms_norm_eps"]) == np.float32(cfg["rms_norm_eps"]), model
        if cfg.get("rope_scaling"):  # the divisors as the source's, the attention factor as HF derives it
            rs, want = got["rope_scaling"], cfg["rope_scaling"]
            assert rs["rope_type"] == "longrope" and \
                np.array_equal(np.float32(rs["long_factor"]), np.float32(want["long_factor"])) and \
                np.array_equal(np.float32(rs["short_factor"]), np.float32(want["short_factor"])), rs
            ratio = cfg["max_position_embeddings"] / cfg["original_max_position_embeddings"]
            assert np.isclose(rs["attention_factor"], math.sqrt(1 + math.log(ratio) / math.log(
                cfg["original_max_position_embeddings"])), rtol=1e-6) and rs["factor"] == ratio, rs
        if model == "phi3":
            runs.append(phi3_runs(d, src, tag, mp))
        if model == "qwen2-moe":  # the shared expert's gate unsqueezed, as newer converters write it
            p = os.path.join(d, "qwen2moe-gate2d.gguf")
            llama_gguf(src, p, True, arch=arch, gate_2d=True)
            assert [dims for n, dims, _, _ in parse_gguf(p)[2] if n == "blk.0.ffn_gate_inp_shexp.weight"] == \
                [[cfg["hidden_size"], 1]]
            p = run("diff", src, p, "--mapping", mp)
            assert p.returncode == 0 and " 0 differ in values" in p.stdout, p.stdout + p.stderr
        view = os.path.join(d, "view-" + tag)
        assert run("convert", src, view, "--quiet", "--format", "gguf:F32", "--gguf-vocab", "none").returncode == 0
        p = run("diff", src, os.path.join(view, "model.gguf"), "--mapping", mp)
        assert p.returncode == 0, (model, p.stdout + p.stderr)
        if arch == "llama":
            bad = os.path.join(d, model + "-unpermuted.gguf")
            llama_gguf(src, bad, False, arch=arch)
            p = run("diff", src, bad, "--mapping", mp)
            assert p.returncode == 5 and "q_proj" in p.stdout and "v_proj" not in p.stdout, p.stdout
    print("qwen2 (biases, tied), qwen3 (Q/K norms, head_dim), Mixtral, Qwen3-MoE and Qwen2-MoE (stacked experts; "
          "Qwen2-MoE's shared expert), OLMo 2 and Phi-3 "
          "(fused, with and without LongRoPE's divisors; Phi-4-mini's partial rope, tied; llama.cpp's logits on "
          "each equal torch's over the converted model: " + ", ".join(runs) + ") GGUFs, written here "
          "and served by the GGUF view, map back to the Hugging Face bytes with a config.json that says what "
          "the source's does; Mixtral's without the Q/K permutation differs")


def typed(v):
    """A metadata value read by parse_gguf, with a GGUF type to write it
    again: strings, bools, u32 for integers, f32 for floats, arrays of those."""
    if isinstance(v, list):
        return (9, (typed(v[0])[0] if v else 4, v))
    return (8 if isinstance(v, str) else 7 if isinstance(v, bool) else 4 if isinstance(v, int) else 6, v)


def gemma_archs(d):
    """Gemma, Gemma 2 and Gemma 3 GGUFs (llama.cpp's layout: every RMSNorm
    stored as the full gamma 1 + w; here the GGUF view's files of generated
    checkpoints) -> Hugging Face through gguf-gemma{,2,3}-to-hf and the
    config.json made from the metadata. That view must be the model
    llama.cpp runs: llama.cpp's logits on the GGUF against a torch forward
    pass of Hugging Face's Gemma (gemma_megatron.hf_forward) over the
    converted weights and config. The config says what the source's does
    (heads, head_dim, eps, rope bases, window, caps, query scale); every
    tensor but the norms is the source's bytes, and each norm w' gives
    1 + w' equal to the stored gamma. Negative control: the norms taken as
    the stored gammas are off. A gemma3 file with a vision encoder packed in
    (v.*, mm.*, as Ollama ships them) gives the same model."""
    import torch
    import gemma_megatron as gm
    modules = os.path.join(TESTS, "..", "build-node", "node_modules")
    rng = np.random.default_rng(11)
    toks = [3, 17, 250, 9, 41, 77, 120, 5]
    out = []
    for gen, model in ((1, "gemma"), (2, "gemma2"), (3, "gemma3")):
        src = os.path.join(d, "src-" + model)
        ckref.run(MKCKPT, "--model", model, "--heads", "4", "--kv-heads", "2", "--vocab", "260",
                  *(["--layers", "6"] if gen == 3 else []), src)
        cfg = json.load(open(os.path.join(src, "config.json")))
        if gen == 2:  # caps that bite on small logits
            cfg.update(attn_logit_softcapping=2.0, final_logit_softcapping=3.0)
            json.dump(cfg, open(os.path.join(src, "config.json"), "w"))
        w = {k: ((rng.standard_normal(v[1]) * 0.1) if len(v[1]) == 1 else rng.standard_normal(v[1]) * 0.08)
             .astype(np.float32) for k, v in ckref.read_checkpoint_dir(src).items()}
        ckref.write_safetensors(os.path.join(src, "model.safetensors"),
                                {k: ("F32", v.shape, v.tobytes()) for k, v in w.items()})
        view, hf = os.path.join(d, "view-" + model), os.path.join(d, "hf-" + model)
        assert run("convert", src, view, "--quiet", "--format", "gguf:F32", "--gguf-vocab", "none").returncode == 0
        gguf = os.path.join(view, "model.gguf")
        mp = MAP.replace("gguf-llama-to-hf", f"gguf-{model}-to-hf")
        p = run("convert", gguf, hf, "--quiet", "--mapping", mp)
        assert p.returncode == 0, p.stderr
        got_cfg = json.load(open(os.path.join(hf, "config.json")))
        keys = ["architectures", "hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
                "num_key_value_heads", "head_dim", "vocab_size", "rope_theta"]
        keys += {2: ["attn_logit_softcapping", "final_logit_softcapping", "sliding_window", "query_pre_attn_scalar"],
                 3: ["sliding_window", "query_pre_attn_scalar", "rope_local_base_freq", "sliding_window_pattern",
                     "attn_logit_softcapping", "final_logit_softcapping"]}.get(gen, [])
        assert all(got_cfg.get(k) == cfg.get(k, got_cfg.get(k) if k == "query_pre_attn_scalar" else None)
                   for k in keys), (model, {k: (got_cfg.get(k), cfg.get(k)) for k in keys})
        assert np.float32(got_cfg["rms_norm_eps"]) == np.float32(cfg["rms_norm_eps"])
        assert got_cfg["tie_word_embeddings"] is True and "lm_head.weight" not in w
        back = {k: v[2] for k, v in ckref.read_checkpoint_dir(hf).items()}
        assert set(back) == set(w), sorted(set(back) ^ set(w))
        for k, a in w.items():
            if k.endswith("norm.weight"):
                assert np.array_equal(np.float32(1) + back[k], np.float32(1) + a), k
            else:
                assert back[k].tobytes() == a.tobytes(), k
        # served as a GGUF again, no mapping given: the norms' -1 (to HF) and
        # +1 (back) fold to the identity, every tensor the file's bytes
        again = os.path.join(d, "again-" + model)
        p = run("convert", gguf, again, "--quiet", "--format", "gguf:F32")
        assert p.returncode == 0, p.stderr
        assert read_gguf(os.path.join(again, "model.gguf"))[2] == read_gguf(gguf)[2], model
        tw = {k: torch.tensor(v) for k, v in back.items()}
        want = gm.hf_forward(tw, got_cfg, toks, gen)
        got = llama_cpp(modules, gguf, toks)
        r = rel(got, want)
        assert r < 1e-3 and torch.equal(got.argmax(-1), want.argmax(-1)), f"{model}: llama.cpp vs torch {r:.1e}"
        gammas = {k: v + 1 if k.endswith("norm.weight") else v for k, v in tw.items()}
        r_bad = rel(gm.hf_forward(gammas, got_cfg, toks, gen), got)
        assert r_bad > 100 * max(r, 1e-6), f"{model}: norms as the stored gammas still match ({r_bad:.1e})"
        out.append(f"{model} {r:.1e} (gammas: {r_bad:.1e})")
        if gen == 3:  # a vision encoder packed into the file, as Ollama's gemma3 GGUFs have it: dropped
            _, meta, tensors = read_gguf(gguf)
            tensors.update({"v.patch_embd.weight": ("F32", [8, 3, 2, 2], bytes(384)),
                            "v.blk.0.attn_q.weight": ("F32", [8, 8], bytes(256)),
                            "mm.input_projection.weight": ("F32", [8, 64], bytes(2048))})
            packed = os.path.join(d, "gemma3-packed.gguf")
            write_gguf(packed, {k: typed(v) for k, v in meta.items()},
                       {k: ({"F32": 0, "F16": 1, "BF16": 30}[dt], shape, raw) for k, (dt, shape, raw) in tensors.items()})
            p = run("convert", packed, hf + "-packed", "--quiet", "--mapping", mp)
            assert p.returncode == 0, p.stderr
            again = {k: v[2] for k, v in ckref.read_checkpoint_dir(hf + "-packed").items()}
            assert set(again) == set(back) and all(again[k].tobytes() == back[k].tobytes() for k in back)
    print("gemma, gemma2, gemma3 GGUFs -> Hugging Face: config as the source's, tensors its bytes, norms 1 + w' "
          "equal to the stored gammas; llama.cpp's logits on the GGUF against torch over the converted model: " +
          ", ".join(out))


def granite_arch(d):
    """An IBM Granite GGUF (the GGUF view's of a generated Llama saved as
    GraniteForCausalLM, weights scaled to a trained model's range) through
    gguf-llama-to-hf: the config carries the four scalars, and the converted
    model is the one llama.cpp runs (its logits against a torch Granite
    forward pass over the converted weights); the tensors are the source's
    bytes."""
    modules = os.path.join(TESTS, "..", "build-node", "node_modules")
    src = os.path.join(d, "src-granite")
    ckref.run(MKCKPT, "--model", "llama", "--heads", "8", "--kv-heads", "2", src)
    cfg = json.load(open(os.path.join(src, "config.json")))
    scal = {"attention_multiplier": 0.2, "embedding_multiplier": 3.0, "residual_multiplier": 0.5,
            "logits_scaling": 4.0}
    json.dump(dict(cfg, architectures=["GraniteForCausalLM"], model_type="granite", **scal),
              open(os.path.join(src, "config.json"), "w"))
    st = ckref.read_checkpoint_dir(src)
    ckref.write_safetensors(os.path.join(src, "model.safetensors"),
                            {k: ("F32", v[1], (v[2].astype(np.float32) * 0.25).tobytes()) for k, v in st.items()})
    view, hf = os.path.join(d, "view-granite"), os.path.join(d, "hf-granite")
    assert run("convert", src, view, "--quiet", "--format", "gguf:F32", "--gguf-vocab", "none").returncode == 0
    gguf = os.path.join(view, "model.gguf")
    p = run("convert", gguf, hf, "--quiet", "--mapping", MAP)
    assert p.returncode == 0, p.stderr
    got = json.load(open(os.path.join(hf, "config.json")))
    assert got["architectures"] == ["GraniteForCausalLM"] and got["model_type"] == "granite", got
    assert all(np.float32(got[k]) == np.float32(v) for k, v in scal.items()), {k: got[k] for k in scal}
    back = {k: v[2] for k, v in ckref.read_checkpoint_dir(hf).items()}
    src_w = {k: v[2] for k, v in ckref.read_checkpoint_dir(src).items()}
    assert set(back) == set(src_w) and all(back[k].tobytes() == src_w[k].tobytes() for k in back)
    toks = [1, 5, 9, 200, 31, 77, 128, 3]
    r = rel(llama_forward(back, got, toks), llama_cpp(modules, gguf, toks))
    assert r < 1e-3, f"granite GGUF -> HF: llama.cpp vs torch {r:.1e}"
    print(f"granite GGUF -> Hugging Face: the four scalars in config.json, the source's bytes, "
          f"llama.cpp {r:.1e} against torch over the converted model")


def round_trip(d):
    src = os.path.join(d, "llama")
    ckref.run(MKCKPT, "--model", "llama", "--heads", "8", "--kv-heads", "2", src)
    good, bad = os.path.join(d, "good.gguf"), os.path.join(d, "unpermuted.gguf")
    llama_gguf(src, good, True)
    llama_gguf(src, bad, False)
    p = run("diff", src, good, "--mapping", MAP)
    assert p.returncode == 0, p.stdout + p.stderr
    p = run("diff", src, bad, "--mapping", MAP)
    assert p.returncode == 5 and "values differ: model.layers.0.self_attn.q_proj.weight" in p.stdout, p.stdout
    assert "k_proj" in p.stdout and "v_proj" not in p.stdout, p.stdout
    print("round trip: HF -> GGUF (written here) -> ckptfs mapping equals HF; without the permutation it differs")


def split_aliases(d, sdir, pieces):
    """An OUTDIR that would write over a split source's pieces is refused,
    the pieces unchanged: the pieces' directory (named by the first piece,
    or as a directory source, or below it), and another directory a later
    piece is a symbolic link into, also with gguf-split's output, whose
    names could be the pieces' own."""
    def digest(paths):
        return [open(os.path.realpath(x), "rb").read() for x in paths]
    before = digest(pieces)
    away = os.path.join(d, "split-elsewhere")
    linked = os.path.join(d, "split-linked")
    os.mkdir(away)
    os.mkdir(linked)
    for i, piece in enumerate(pieces):  # the second piece lives elsewhere
        if i == 1:
            shutil.copy(piece, os.path.join(away, os.path.basename(piece)))
            os.symlink(os.path.join(away, os.path.basename(piece)), os.path.join(linked, os.path.basename(piece)))
        else:
            shutil.copy(piece, os.path.join(linked, os.path.basename(piece)))
    first = os.path.join(linked, os.path.basename(pieces[0]))
    cases = [(pieces[0], sdir, "contains the source file"), (sdir, sdir, "lies inside the source"),
             (sdir, os.path.join(sdir, "out"), "lies inside the source"),
             (first, away, "contains the source file " + os.path.join(linked, os.path.basename(pieces[1])))]
    moved = digest([os.path.join(linked, os.path.basename(x)) for x in pieces])
    for s, out, says in cases:
        for extra in ([], ["--overwrite"], ["--format", "gguf:Q8_0", "--gguf-vocab", "none",
                                            "--gguf-split-max-tensors", "7", "--overwrite"]):
            p = run("convert", s, out, *(extra or ["--mapping", MAP]), "--quiet")
            assert p.returncode == 2 and len(p.stderr.splitlines()) == 1 and says in p.stderr, (s, out, p.stderr)
    assert digest(pieces) == before and not os.path.exists(os.path.join(sdir, "out"))
    assert digest([os.path.join(linked, os.path.basename(x)) for x in pieces]) == moved
    assert os.listdir(away) == [os.path.basename(pieces[1])], os.listdir(away)
    print(f"{len(cases) * 3} OUTDIRs over a split source's pieces refused (a later piece linked elsewhere too, "
          "gguf-split's output as well); the pieces unchanged")


def split_source(d):
    """A split GGUF (gguf-split's files, written here), named by its first
    file as llama.cpp loads it, is the single file's source: its HF
    checkpoint and its GGUF view the same bytes, no split.* keys in its
    metadata; a missing piece, a piece out of place or of another split, a
    tensor count that disagrees, a later piece named, an unnamed piece and
    keys that are not counts are refused in one line."""
    src = os.path.join(d, "split-llama")
    ckref.run(MKCKPT, "--model", "llama", "--heads", "8", "--kv-heads", "2", "--layers", "3", src)
    one = os.path.join(d, "split-one.gguf")
    named = {"general.name": (8, "split-test")}  # (else the name is the directory's)
    llama_gguf(src, one, True, extra_meta=named)
    sdir = os.path.join(d, "split-dir")
    os.mkdir(sdir)
    pieces = llama_gguf(src, os.path.join(sdir, "split-llama"), True, split=7, extra_meta=named)
    assert len(pieces) >= 3, pieces
    for fmt in ("safetensors", "gguf:Q8_0"):
        outs = []
        for tag, s in (("one", one), ("split", pieces[0]), ("dir", sdir)):
            out = os.path.join(d, f"split-out-{tag}-{fmt[:4]}")
            p = run("convert", s, out, "--mapping" if fmt == "safetensors" else "--format",
                    MAP if fmt == "safetensors" else fmt, "--quiet", *(["--gguf-vocab", "none"] if fmt != "safetensors"
                                                                    else []))
            assert p.returncode == 0, p.stderr
            outs.append({f: open(os.path.join(out, f), "rb").read() for f in sorted(os.listdir(out))})
        assert outs[0] == outs[1] == outs[2], (fmt, sorted(outs[0]), sorted(outs[1]))
    p = run("diff", src, pieces[0], "--mapping", MAP)
    assert p.returncode == 0, p.stdout + p.stderr
    split_aliases(d, sdir, pieces)
    if "--mount" in sys.argv:  # through a mount: the single file's Q8_0 view
        from mountlib import Mount
        with Mount(pieces[0], opts="gguf=Q8_0,gguf_vocab=none") as m:
            assert open(m.path("model.gguf"), "rb").read() == outs[0]["model.gguf"]
        print("mounted, the split GGUF's Q8_0 view is the single file's")
    p = run("inspect", pieces[0], "--json")
    assert p.returncode == 0 and "split." not in p.stdout, p.stdout[:300]
    shutil.copy(one, os.path.join(sdir, "another.gguf"))  # a directory of two GGUFs: which one?
    p = run("inspect", sdir)
    assert p.returncode == 3 and f"{len(pieces) + 1} GGUF files" in p.stderr and \
        "not one split GGUF: name the one to read" in p.stderr, p.stderr
    os.remove(os.path.join(sdir, "another.gguf"))
    os.rename(pieces[2], pieces[2] + ".away")  # a piece missing from the directory: named
    p = run("inspect", sdir)
    assert p.returncode == 3 and os.path.basename(pieces[2]) + ": file does not exist" in p.stderr, p.stderr
    os.rename(pieces[2] + ".away", pieces[2])
    print(f"a split GGUF of {len(pieces)} files (gguf-split's layout, written here), named by its first or by its "
          "directory: the single file's HF checkpoint and Q8_0 GGUF, byte for byte; no split.* keys in its "
          "metadata; a directory of other GGUFs beside it refused, a missing piece named")

    def refused(tag, per, says, split_meta=None, after=None, name=0):
        ps = llama_gguf(src, os.path.join(d, f"bad-{tag}"), True, split=per, split_meta=split_meta)
        if after:
            after(ps)
        r = run("inspect", ps[name] if isinstance(name, int) else name(ps), timeout=20)
        assert r.returncode == 3 and len(r.stderr.splitlines()) == 1 and says in r.stderr, (tag, r.stderr)
    refused("missing", 7, "00002-of-00005.gguf: file does not exist", after=lambda ps: os.remove(ps[1]))
    refused("order", 7, "split.no 2 of split.count", split_meta=lambda k, m: {**m, "split.no": (2, {1: 2, 2: 1}.get(k, k))})
    refused("count", 7, "where its name says", split_meta=lambda k, m: {**m, "split.count": (2, 9)} if k == 1 else m)
    refused("tensors", 7, "split.tensors.count is 5", split_meta=lambda k, m: {**m, "split.tensors.count": (5, 5)})
    refused("later", 7, "piece 2 of a split GGUF", name=1)
    refused("unnamed", 7, "not named as llama.cpp names them",
            after=lambda ps: os.rename(ps[0], os.path.join(d, "unnamed.gguf")),
            name=lambda ps: os.path.join(d, "unnamed.gguf"))
    refused("string", 7, "is not a count", split_meta=lambda k, m: {**m, "split.count": (8, "three")})
    refused("negative", 7, "is not a count", split_meta=lambda k, m: {**m, "split.tensors.count": (5, -1)})
    refused("huge", 7, "is not a count", split_meta=lambda k, m: {**m, "split.count": (12, 1e300)})

    def dup(ps):  # the second file's first tensor again in the third
        _, _, infos2, data2, b2 = parse_gguf(ps[1])
        types = {}
        _, meta3, infos3, data3, b3 = parse_gguf(ps[2], types)
        t = {n: (ty, list(reversed(dims)), b3[data3 + off:data3 + off + int(np.prod(dims)) * 4])
             for n, dims, ty, off in infos3}
        n0, dims0, ty0, off0 = infos2[0]
        t[n0] = (ty0, list(reversed(dims0)), b2[data2 + off0:data2 + off0 + int(np.prod(dims0)) * 4])
        write_gguf(ps[2], {k: (types[k], v) for k, v in meta3.items()}, t)
    refused("dup", 7, "is in both", after=dup)
    print("split GGUF sources refused in one line: a missing piece, pieces out of place, a count that disagrees, "
          "a later piece named, an unnamed piece, keys that are not counts, a tensor in two pieces")


def hostile(d):
    ok = os.path.join(d, "ok.gguf")
    write_gguf(ok, {"general.architecture": (8, "llama")}, {"w": (0, [2, 3], bytes(24))})
    base = open(ok, "rb").read()

    def case(name, data, want):
        p = os.path.join(d, name + ".gguf")
        open(p, "wb").write(data)
        r = run("inspect", p, timeout=20)
        assert r.returncode == 3 and len(r.stderr.splitlines()) == 1 and want in r.stderr, (name, r.stderr)
    hdr = b"GGUF" + struct.pack("<I", 3)
    case("truncated", base[:40], "runs past the end")
    case("version", b"GGUF" + struct.pack("<IQQ", 1, 0, 0), "version 1")
    case("counts", hdr + struct.pack("<QQ", 1 << 40, 0), "counts")
    case("kv-count", hdr + struct.pack("<QQ", 0, 1 << 19), "runs past the end")
    case("array", hdr + struct.pack("<QQ", 0, 1) + struct.pack("<Q", 1) + b"a" + struct.pack("<IIQ", 9, 4, 1 << 60),
         "runs past the end")
    case("string", hdr + struct.pack("<QQ", 0, 1) + struct.pack("<Q", 1 << 62), "too long")
    case("nul", hdr + struct.pack("<QQ", 0, 1) + struct.pack("<Q", 3) + b"a\0b" + struct.pack("<IB", 0, 1), "NUL")
    case("align", hdr + struct.pack("<QQ", 0, 1) + struct.pack("<Q", 17) + b"general.alignment" +
         struct.pack("<II", 4, 3), "power of two")
    case("dup", hdr + struct.pack("<QQ", 0, 2) + (struct.pack("<Q", 1) + b"k" + struct.pack("<IB", 0, 1)) * 2,
         "appears twice")

    def one(dims, t=0, off=0, data=b""):
        b = hdr + struct.pack("<QQ", 1, 0) + struct.pack("<Q", 1) + b"w" + struct.pack("<I", len(dims))
        b += b"".join(struct.pack("<Q", x) for x in dims) + struct.pack("<IQ", t, off)
        return b + b"\0" * (-len(b) % 32) + data
    case("dims", one([1, 1, 1, 1, 1]), "5 dims")
    case("past", one([1000], data=bytes(64)), "runs past the end")
    case("misaligned", one([2], off=4, data=bytes(64)), "misaligned")
    case("quantized", one([256], t=16, data=bytes(256)), "ggml type IQ2_XXS (16) is not supported")
    case("blocks", one([100], t=12, data=bytes(512)), "do not divide into Q4_K blocks of 256")
    case("huge-dim", one([1 << 62]), "too large")
    b = hdr + struct.pack("<QQ", 2, 0)
    for n in (b"a", b"b"):
        b += struct.pack("<Q", 1) + n + struct.pack("<IQIQ", 1, 16, 0, 0)
    case("overlap", b + b"\0" * (-len(b) % 32) + bytes(64), "overlap")
    # rope_freqs.weight, read to make config.json: F32 divisors, positive and finite
    src = os.path.join(d, "hostile-src")
    ckref.run(MKCKPT, "--model", "llama", src)
    for name, freqs, want in (("rope-nan", np.array([1.0, np.nan], np.float32), "rope_freqs.weight[1] is nan"),
                              ("rope-neg", np.array([-1.0], np.float32), "rope_freqs.weight[0] is -1"),
                              ("rope-2d", np.ones((2, 2), np.float32), "rope_freqs.weight must be F32, 1 to")):
        p = os.path.join(d, name + ".gguf")
        llama_gguf(src, p, True, extra={"rope_freqs.weight": freqs})
        r = run("inspect", p, timeout=20)
        assert r.returncode == 3 and len(r.stderr.splitlines()) == 1 and want in r.stderr, (name, r.stderr)
    # a llama GGUF without its hyper-parameters: refused, not served without a config.json
    r = run("inspect", ok, timeout=20)
    assert r.returncode == 3 and len(r.stderr.splitlines()) == 1 and \
        "llama metadata is incomplete (embedding_length" in r.stderr, r.stderr
    # the rotated width (rope.dimension_count) and the divisor lists against it:
    # a config.json cannot say a partial rope outside Phi-3, an odd width, or
    # lists of another length than the rotated pairs
    phi = os.path.join(d, "hostile-phi3")
    ckref.run(MKCKPT, "--model", "phi3", phi)
    lr = {"type": "longrope", "long_factor": [1.0] * 8, "short_factor": [1.0] * 8}
    for name, base, arch, change, extra, want in (
            ("rope-part-llama", src, "llama", {"partial_rotary_factor": 0.5}, None,
             "llama.rope.dimension_count 8 rotates part of the head's 16 dims: Hugging Face's llama rotates all"),
            ("rope-odd", phi, "phi3", {"partial_rotary_factor": 0.6875}, None,
             "phi3.rope.dimension_count 11: must be even, from 2 to the head's 16 dims"),
            ("rope-long-len", phi, "phi3", {"partial_rotary_factor": 0.75, "rope_scaling": lr,
                                            "original_max_position_embeddings": 512}, None,
             "rope_factors_long.weight has 8 numbers: the rope rotates 6 pairs"),
            ("rope-long-only", phi, "phi3", {}, {"rope_factors_long.weight": np.ones(8, np.float32)},
             "rope_factors_long.weight without rope_factors_short.weight")):
        tmp = os.path.join(d, name + "-src")
        shutil.copytree(base, tmp)
        cfg = json.load(open(os.path.join(tmp, "config.json")))
        json.dump(dict(cfg, **change), open(os.path.join(tmp, "config.json"), "w"))
        p = os.path.join(d, name + ".gguf")
        llama_gguf(tmp, p, arch == "llama", arch=arch, extra=extra)
        r = run("inspect", p, timeout=20)
        assert r.returncode == 3 and len(r.stderr.splitlines()) == 1 and want in r.stderr, (name, r.stderr)
    # metadata that does not describe the tensors (they are written as the
    # checkpoint has them, the metadata from an edited config): refused,
    # naming the tensor (a config.json was made from it and the Q/K rows
    # un-permuted by the metadata's head counts, whatever the tensors were)
    c = json.load(open(os.path.join(src, "config.json")))
    H, L, ff, nh, nkv = (c[k] for k in ("hidden_size", "num_hidden_layers", "intermediate_size",
                                        "num_attention_heads", "num_key_value_heads"))
    hd = H // nh
    for name, change, want in (
            ("meta-kv", {"num_key_value_heads": 2 * nkv},
             f"attention.head_count_kv {2 * nkv}, head dim {hd}, feed_forward_length {ff} make blk.0.attn_k.weight "
             f"[{2 * nkv * hd}, {H}], but it is [{nkv * hd}, {H}]"),
            ("meta-keylen", {"head_dim": hd // 2}, f"head dim {hd // 2}"),
            ("meta-hidden", {"hidden_size": 2 * H}, f"output.weight [{c['vocab_size']}, {2 * H}], but it is "
             f"[{c['vocab_size']}, {H}]"),
            ("meta-ff", {"intermediate_size": ff + 2}, f"ffn_down.weight [{H}, {ff + 2}], but it is [{H}, {ff}]"),
            ("meta-more-layers", {"num_hidden_layers": L + 1}, f"block_count {L + 1}, but there is no blk.{L}.*"),
            ("meta-fewer-layers", {"num_hidden_layers": L - 1}, f"block_count {L - 1}, but there is blk.{L - 1}."),
            # a u64 head count past u32 (the products would overflow)
            ("meta-huge-kv", {"num_key_value_heads": {"u64": 1 << 40}},
             f"attention.head_count_kv {1 << 40} is out of range")):
        extra = None
        if isinstance(change.get("num_key_value_heads"), dict):
            extra = {"llama.attention.head_count_kv": (10, change["num_key_value_heads"]["u64"])}
            change = {}
        tmp = os.path.join(d, name + "-src")
        shutil.copytree(src, tmp)
        json.dump(dict(c, **change), open(os.path.join(tmp, "config.json"), "w"))
        p = os.path.join(d, name + ".gguf")
        llama_gguf(tmp, p, False, extra_meta=extra)
        r = run("inspect", p, timeout=20)
        assert r.returncode == 3 and len(r.stderr.splitlines()) == 1 and want in r.stderr and \
            "its metadata does not describe its tensors" in r.stderr, (name, r.stderr)
    # the experts' widths and counts: a qwen2moe file (stacked experts, a
    # shared expert) whose metadata says another width, shared width or
    # count than its tensors have
    moe = os.path.join(d, "hostile-qwen2moe")
    ckref.run(MKCKPT, "--model", "qwen2-moe", moe)
    c = json.load(open(os.path.join(moe, "config.json")))
    H, E, fe, fs = (c[k] for k in ("hidden_size", "num_experts", "moe_intermediate_size",
                                   "shared_expert_intermediate_size"))
    for name, change, want in (
            ("meta-moe-ff", {"moe_intermediate_size": fe + 8},
             f"embedding_length {H}, expert_count {E}, expert_feed_forward_length {fe + 8} make "
             f"blk.0.ffn_down_exps.weight [{E}, {H}, {fe + 8}], but it is [{E}, {H}, {fe}]"),
            ("meta-moe-shared", {"shared_expert_intermediate_size": fs * 2},
             f"expert_shared_feed_forward_length {fs * 2} make blk.0.ffn_down_shexp.weight [{H}, {fs * 2}], "
             f"but it is [{H}, {fs}]"),
            ("meta-moe-count", {"num_experts": E + 1},
             f"expert_count {E + 1}, expert_feed_forward_length {fe} make blk.0.ffn_down_exps.weight "
             f"[{E + 1}, {H}, {fe}], but it is [{E}, {H}, {fe}]")):
        tmp = os.path.join(d, name + "-src")
        shutil.copytree(moe, tmp)
        json.dump(dict(c, **change), open(os.path.join(tmp, "config.json"), "w"))
        p = os.path.join(d, name + ".gguf")
        llama_gguf(tmp, p, False, arch="qwen2moe")
        r = run("inspect", p, timeout=20)
        assert r.returncode == 3 and len(r.stderr.splitlines()) == 1 and want in r.stderr and \
            "its metadata does not describe its tensors" in r.stderr, (name, r.stderr)
    print("hostile GGUF headers: 16 classes refused with one line; rope_freqs.weight NaN, negative or 2-D too; "
          "a partial rope outside Phi-3, an odd one, divisor lists of another length, long without short, "
          "incomplete metadata; metadata that does not describe the tensors (key-value heads, key length, "
          "hidden size, feed-forward length, more or fewer blocks, the experts' count, width and shared width)")


def main():
    if "--mount" in sys.argv:
        from mountlib import skip_unless_fuse
        skip_unless_fuse()
    assert os.path.isdir(REAL), f"{REAL}: the real-file fixtures (../shared) are missing"
    d = tempfile.mkdtemp(prefix="ckptfs-gguf-")
    try:
        real_fixture(d)
        llama_cpp_logits(d)
        gguf_as_gguf(d)
        quantized(d)
        quantized_model(d)
        round_trip(d)
        split_source(d)
        other_archs(d)
        gemma_archs(d)
        granite_arch(d)
        hostile(d)
    finally:
        shutil.rmtree(d, ignore_errors=True)


if __name__ == "__main__":
    main()
