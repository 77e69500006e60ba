"""The GGUF view (issue #17): Hugging Face checkpoints served as the
model.gguf llama.cpp loads, checked with clients and references that are
not ckptfs:
- the real llama.cpp (node-llama-cpp) loads MNT/model.gguf and its logits
  equal a plain torch forward pass over the source weights (F32 within 1e-3
  relative, same greedy tokens) for Llama (grouped-query; 3.1's llama3
  rope scaling as rope_freqs.weight), Qwen2 (Q/K/V biases), Qwen3 (Q/K
  norms, explicit head_dim), Qwen3-MoE, Qwen2-MoE (a sigmoid-gated shared
  expert, top-k weights not renormalized), GPT-OSS (MXFP4 experts, sinks,
  sliding window, YaRN), Mixtral (experts),
  Gemma (norms written as 1 + w; a view leaving them as offsets fails) and
  Phi-3 (fused attn_qkv and ffn_up; gate and up swapped fails);
  F16, BF16, Q8_0 and Q4_0 (llama-quantize's mix: the output Q6_K or Q8_0)
  files against the same model with its weights
  rounded as the file holds them;
- negative control: a view whose Q/K rows are not permuted (the user's
  mapping undoes the shipped permutation) fails that check;
- every tensor's bytes: F32/F16/BF16 against numpy's (permuted, rounded
  to nearest even), Q8_0/Q4_0 blocks against ggml's own quantizer
  (ggml_quantize_chunk from the prebuilt library), rows that are not whole
  blocks in F16;
- the file's structure by a GGUF reader written here and by Hugging Face's
  @huggingface/gguf: names, types, dims, aligned offsets, metadata from
  config.json and the tokenizer (tokens, types, merges, special ids, chat
  template), and llama.cpp's own tokenization with the served vocabulary;
  a SentencePiece tokenizer.model (protobuf written here) as "llama";
  the real Llama 2 tokenizer.json (SentencePiece-style BPE, no
  tokenizer.model) as "llama", llama.cpp's tokens of seven texts equal to
  the fast tokenizer's BPE written here;
- convert --format gguf writes the mount's bytes; inspect --format gguf
  lists the same tensors; the library serves model.gguf too;
- hostile inputs: unsupported architectures, per-rank mounts, missing or
  malformed tokenizer files, bad types, a FIFO in place of tokenizer.json,
  missing hyper-parameters: one line, nothing mounted."""
import json
import os
import shutil
import struct
import subprocess
import sys
import tempfile
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import ckref  # noqa: E402
import gguf_source as gs  # noqa: E402  (parse_gguf, llama_forward, llama_cpp, ggml_lib, permute)
from mountlib import Mount, skip_unless_fuse  # noqa: E402

CKPTFS, MKCKPT = os.environ["CKPTFS"], os.environ["MKCKPT"]
HERE = os.path.dirname(os.path.abspath(__file__))
MODULES = os.path.join(gs.TESTS, "..", "build-node", "node_modules")
BLOCK = {0: (1, 4), 1: (1, 2), 30: (1, 2), 8: (32, 34), 2: (32, 18), 14: (256, 210),
         39: (32, 17)}  # ggml type: (elems, bytes)
TYPES = {"F32": 0, "F16": 1, "BF16": 30, "Q8_0": 8, "Q4_0": 2}
FILE_TYPE = {"F32": 0, "F16": 1, "BF16": 32, "Q8_0": 7, "Q4_0": 2}
TOKS = [318, 5, 9, 200, 31, 77, 128, 3, 257, 44]


def read_gguf(path):
    """GGUF v3 through the parser written from the format description
    (gguf_source.parse_gguf), with quantized tensors: the metadata, the infos
    (name, torch-order shape, type, offset) and each tensor's bytes."""
    version, meta, raw_infos, data, b = gs.parse_gguf(path)
    assert version == 3
    infos, tensors = [], {}
    for name, dims, t, off in raw_infos:
        shape = list(reversed(dims))
        assert off % 32 == 0, f"{name}: offset {off} not aligned"
        qk, qb = BLOCK[t]
        n = int(np.prod(shape)) // qk * qb
        assert data + off + n <= len(b), f"{name}: past the end of the file"
        infos.append((name, shape, t, off))
        tensors[name] = b[data + off:data + off + n]
    return meta, infos, tensors


# ---- the models: generated names and shapes, small random weights ----

def make_model(d, arch, rng, extra=()):
    """A checkpoint of the architecture with mkckpt's names, config.json and
    tokenizer files, and weights drawn here (a trained model's scale: the
    generator's values up to 2 would saturate attention)."""
    src = os.path.join(d, arch)
    base = os.path.join(d, arch + "-gen")
    model = arch if arch in ("mixtral", "gemma", "gemma2", "gemma3", "phi3") else \
        {"qwen3moe": "qwen3-moe", "qwen2moe": "qwen2-moe", "olmo2": "olmo2"}.get(arch, "llama")
    args = ["--model", model, "--heads", "8", "--kv-heads", "2", "--vocab", "320", *extra]
    if arch == "qwen3":
        args += ["--head-dim", "16"]
    ckref.run(MKCKPT, *args, base)
    os.makedirs(src)
    for f in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(os.path.join(base, f), src)
    cfg = json.load(open(os.path.join(base, "config.json")))
    names = {k: v[1] for k, v in ckref.read_checkpoint_dir(base).items()}
    if arch == "cohere":  # one LayerNorm per layer, attention and MLP side by side, tied
        names = {k: v for k, v in names.items() if "post_attention_layernorm" not in k and k != "lm_head.weight"}
        cfg.update(architectures=["CohereForCausalLM"], model_type="cohere", layer_norm_eps=1e-5, logit_scale=0.25,
                   tie_word_embeddings=True, use_qk_norm=False)
        cfg.pop("rms_norm_eps")
    if arch == "starcoder2":  # LayerNorms and linears with biases, a GELU MLP (c_fc, c_proj)
        sc = {}
        for k, shape in names.items():
            if ".mlp.gate_proj." in k:
                continue
            k = k.replace(".mlp.up_proj.", ".mlp.c_fc.").replace(".mlp.down_proj.", ".mlp.c_proj.")
            sc[k] = shape
            if k.endswith(".weight") and ("_proj" in k or ".c_" in k or "layernorm" in k or k == "model.norm.weight"):
                sc[k[:-len("weight")] + "bias"] = (shape[0],)
        names = sc
        cfg.update(architectures=["Starcoder2ForCausalLM"], model_type="starcoder2", norm_epsilon=1e-5,
                   use_bias=True, hidden_act="gelu_pytorch_tanh", sliding_window=1024)
        cfg.pop("rms_norm_eps")
    if arch == "smollm3":  # Llama without the rope on every fourth layer
        cfg.update(architectures=["SmolLM3ForCausalLM"], model_type="smollm3", no_rope_layer_interval=4,
                   no_rope_layers=[int((i + 1) % 4 != 0) for i in range(cfg["num_hidden_layers"])],
                   use_sliding_window=False, sliding_window=None)
    if arch == "gemma2":  # caps that bite on small logits (llama.cpp's defaults are 50 and 30)
        cfg["attn_logit_softcapping"], cfg["final_logit_softcapping"] = 2.0, 3.0
    if arch in ("qwen2", "qwen3"):
        cfg["architectures"], cfg["model_type"] = [arch.capitalize() + "ForCausalLM"], arch
        hd = cfg.get("head_dim", cfg["hidden_size"] // cfg["num_attention_heads"])
        for L in range(cfg["num_hidden_layers"]):
            p = f"model.layers.{L}.self_attn."
            if arch == "qwen2":
                names[p + "q_proj.bias"] = (names[p + "q_proj.weight"][0],)
                names[p + "k_proj.bias"] = (names[p + "k_proj.weight"][0],)
                names[p + "v_proj.bias"] = (names[p + "v_proj.weight"][0],)
            else:
                names[p + "q_norm.weight"] = (hd,)
                names[p + "k_norm.weight"] = (hd,)
    json.dump(cfg, open(os.path.join(src, "config.json"), "w"), indent=1)
    w = {}
    for k, shape in sorted(names.items()):
        if len(shape) == 1 and not k.endswith("bias"):  # Gemma's norms are offsets: 1 + w
            w[k] = ((not arch.startswith("gemma")) + rng.standard_normal(shape) * 0.1).astype(np.float32)
        else:
            w[k] = (rng.standard_normal(shape) * (0.05 if k.endswith("bias") else 0.08)).astype(np.float32)
    ckref.write_safetensors(os.path.join(src, "model.safetensors"),
                            {k: ("F32", v.shape, v.tobytes()) for k, v in w.items()})
    return src, cfg, w


GGUF_NAMES = {"input_layernorm": "attn_norm", "post_attention_layernorm": "ffn_norm",
              "self_attn.q_proj": "attn_q", "self_attn.k_proj": "attn_k", "self_attn.v_proj": "attn_v",
              "self_attn.o_proj": "attn_output", "self_attn.q_norm": "attn_q_norm",
              "self_attn.k_norm": "attn_k_norm", "mlp.gate_proj": "ffn_gate", "mlp.up_proj": "ffn_up",
              "mlp.down_proj": "ffn_down", "block_sparse_moe.gate": "ffn_gate_inp",
              "mlp.shared_expert.gate_proj": "ffn_gate_shexp", "mlp.shared_expert.up_proj": "ffn_up_shexp",
              "mlp.shared_expert.down_proj": "ffn_down_shexp", "mlp.shared_expert_gate": "ffn_gate_inp_shexp"}
OLMO2_NAMES = dict(GGUF_NAMES, post_attention_layernorm="post_attention_norm",
                   post_feedforward_layernorm="post_ffw_norm")
GEMMA2_NAMES = dict(GGUF_NAMES, post_attention_layernorm="post_attention_norm",
                    pre_feedforward_layernorm="ffn_norm", post_feedforward_layernorm="post_ffw_norm")


def gguf_reference(w, cfg, arch):
    """convert_hf_to_gguf.py's tensors, in numpy (reference/gguf.md): names,
    Q/K rows permuted for the llama rope (not for qwen2/qwen3/gemma), experts
    stacked, Gemma's norms as full gammas (1 + w) and no output.weight."""
    out = {"token_embd.weight": w["model.embed_tokens.weight"], "output_norm.weight": w["model.norm.weight"]}
    gemma = arch.startswith("gemma")
    if "lm_head.weight" in w and not gemma:
        out["output.weight"] = w["lm_head.weight"]
    perm = arch in ("llama", "mixtral", "smollm3")
    experts = {}
    for k, a in w.items():
        parts = k.split(".")
        if parts[:2] != ["model", "layers"]:
            continue
        L = parts[2]
        if "experts" in parts:
            E, wn = int(parts[5]), parts[6]
            experts.setdefault((L, wn), {})[E] = a
            continue
        names = GEMMA2_NAMES if arch in ("gemma2", "gemma3") else OLMO2_NAMES if arch == "olmo2" else GGUF_NAMES
        g = f"blk.{L}.{names['.'.join(parts[3:-1])]}.{parts[-1]}"
        if perm and g.endswith("attn_q.weight"):
            a = gs.permute(a, cfg["num_attention_heads"])
        if perm and g.endswith("attn_k.weight"):
            a = gs.permute(a, cfg["num_key_value_heads"])
        if g.endswith("ffn_gate_inp_shexp.weight"):  # [1, hidden]: llama.cpp loads a vector
            a = a.reshape(-1)
        out[g] = a + np.float32(1) if gemma and g.endswith("norm.weight") else a
    if gemma:
        out["output_norm.weight"] = out["output_norm.weight"] + np.float32(1)
    for (L, wn), byE in experts.items():
        kind = {"w1": "ffn_gate_exps", "w3": "ffn_up_exps", "w2": "ffn_down_exps"}[wn]
        out[f"blk.{L}.{kind}.weight"] = np.stack([byE[e] for e in sorted(byE)])
    return out


# ---- the element types ----

def bf16_rne(a):
    u = a.view(np.uint32).astype(np.uint64)
    return ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)


def ggml_quantize(lib, t, a):
    rows, cols = int(np.prod(a.shape[:-1])), a.shape[-1]
    qk, qb = BLOCK[t]
    q = np.zeros(rows * cols // qk * qb, np.uint8)
    x = np.ascontiguousarray(a, dtype=np.float32)
    assert lib.ggml_quantize_chunk(t, x.ctypes.data, q.ctypes.data, 0, rows, cols, None) == q.size
    return q.tobytes()


def dequantize(t, raw, shape):
    """Q8_0 / Q4_0 blocks to floats, from the block layout (reference/gguf.md)."""
    assert t in (8, 2), f"ggml type {t}: no decoder here"
    qk, qb = BLOCK[t]
    blk = np.frombuffer(raw, np.uint8).reshape(-1, qb)
    d = blk[:, :2].copy().view(np.float16).astype(np.float32)
    if t == 8:
        q = blk[:, 2:].view(np.int8).astype(np.float32)
    else:
        lo, hi = (blk[:, 2:] & 0xF).astype(np.float32), (blk[:, 2:] >> 4).astype(np.float32)
        q = np.concatenate([lo, hi], 1) - 8
    return (q * d).reshape(shape)


def expected(name, a, ftype, lib):
    """The bytes and ggml type llama.cpp's converter gives a tensor (Q4_0:
    llama-quantize's mix, which gives the output Q6_K, or Q8_0 for rows
    that are not whole 256-blocks)."""
    t = TYPES[ftype]
    if a.ndim < 2 or "ffn_gate_inp" in name:
        t = 0
    elif t in (8, 2) and a.shape[-1] % 32:
        t = 1
    elif t == 2 and name == "output.weight":
        t = 8 if a.shape[-1] % 256 else 14
    if t == 0:
        return 0, a.astype(np.float32).tobytes()
    if t == 1:
        return 1, a.astype(np.float16).tobytes()
    if t == 30:
        return 30, bf16_rne(a).tobytes()
    return t, ggml_quantize(lib, t, a)


def as_held(t, raw, shape):
    """The floats a file's tensor holds."""
    if t == 0:
        return np.frombuffer(raw, np.float32).reshape(shape)
    if t == 1:
        return np.frombuffer(raw, np.float16).astype(np.float32).reshape(shape)
    if t == 30:
        return (np.frombuffer(raw, np.uint16).astype(np.uint32) << 16).view(np.float32).reshape(shape)
    return dequantize(t, raw, shape)


def held_weights(w, cfg, arch, meta_tensors, infos):
    """The source weights as a file holds them (for the reference forward):
    each HF tensor replaced by its GGUF tensor's floats, un-permuted."""
    types = {n: (t, s) for n, s, t, _ in infos}
    out = dict(w)
    back = {v: k for k, v in GGUF_NAMES.items()}
    for g, raw in meta_tensors.items():
        t, shape = types[g]
        a = as_held(t, raw, shape).astype(np.float32)
        parts = g.split(".")
        if parts[0] != "blk":
            hf = {"token_embd.weight": "model.embed_tokens.weight", "output_norm.weight": "model.norm.weight",
                  "output.weight": "lm_head.weight"}[g]
            out[hf] = a
            continue
        L, kind = parts[1], parts[2]
        if kind.endswith("_exps"):
            wn = {"ffn_gate_exps": "w1", "ffn_up_exps": "w3", "ffn_down_exps": "w2"}[kind]
            for e in range(a.shape[0]):
                out[f"model.layers.{L}.block_sparse_moe.experts.{e}.{wn}.weight"] = a[e]
            continue
        if arch in ("llama", "mixtral") and kind in ("attn_q", "attn_k"):
            heads = cfg["num_attention_heads"] if kind == "attn_q" else cfg["num_key_value_heads"]
            a = gs.unpermute(a, heads)
        out[f"model.layers.{L}.{back[kind]}.{parts[-1]}"] = np.ascontiguousarray(a)
    return out


# ---- the checks ----

def check_file(path, w, cfg, arch, ftype, lib):
    """Structure and every tensor's bytes against the converter's rules."""
    meta, infos, tensors = read_gguf(path)
    ref = gguf_reference(w, cfg, arch)
    assert set(tensors) == set(ref), sorted(set(tensors) ^ set(ref))
    for name, shape, t, _ in infos:
        want_t, want = expected(name, ref[name], ftype, lib)
        assert (t, shape) == (want_t, list(ref[name].shape)), (name, t, shape, want_t)
        assert tensors[name] == want, f"{ftype}: {name}: bytes differ from the reference"
    ga = {"llama": "llama", "mixtral": "llama", "qwen2": "qwen2", "qwen3": "qwen3", "qwen3moe": "qwen3moe",
          "qwen2moe": "qwen2moe", "olmo2": "olmo2", "smollm3": "smollm3",
          "gemma": "gemma", "gemma2": "gemma2", "gemma3": "gemma3"}[arch]
    hd = cfg.get("head_dim", cfg["hidden_size"] // cfg["num_attention_heads"])
    want_meta = {"general.architecture": ga, "general.file_type": FILE_TYPE[ftype],
                 f"{ga}.context_length": cfg["max_position_embeddings"],
                 f"{ga}.embedding_length": cfg["hidden_size"], f"{ga}.block_count": cfg["num_hidden_layers"],
                 f"{ga}.feed_forward_length": cfg["intermediate_size"],
                 f"{ga}.attention.head_count": cfg["num_attention_heads"],
                 f"{ga}.attention.head_count_kv": cfg["num_key_value_heads"],
                 f"{ga}.rope.dimension_count": hd}
    for k, v in want_meta.items():
        assert meta.get(k) == v, (k, meta.get(k), v)
    assert abs(meta[f"{ga}.rope.freq_base"] - cfg["rope_theta"]) < 1e-3 * cfg["rope_theta"]
    assert np.float32(meta[f"{ga}.attention.layer_norm_rms_epsilon"]) == np.float32(cfg["rms_norm_eps"])
    if arch == "mixtral":
        assert meta["llama.expert_count"] == cfg["num_local_experts"]
        assert meta["llama.expert_used_count"] == cfg["num_experts_per_tok"]
    if arch in ("qwen3moe", "qwen2moe"):
        assert (meta[f"{ga}.expert_count"], meta[f"{ga}.expert_used_count"],
                meta[f"{ga}.expert_feed_forward_length"]) == \
            (cfg["num_experts"], cfg["num_experts_per_tok"], cfg["moe_intermediate_size"]), meta
    if arch == "qwen2moe":
        assert meta["qwen2moe.expert_shared_feed_forward_length"] == cfg["shared_expert_intermediate_size"]
    if arch in ("qwen3", "qwen3moe", "gemma", "gemma2", "gemma3"):
        assert meta[f"{ga}.attention.key_length"] == hd == meta[f"{ga}.attention.value_length"]
    if arch == "gemma2":
        for k in ("attn_logit_softcapping", "final_logit_softcapping"):
            assert meta[f"gemma2.{k}"] == cfg[k], (k, meta.get(f"gemma2.{k}"))
        assert meta["gemma2.attention.sliding_window"] == cfg["sliding_window"]
    if arch == "gemma3":  # llama.cpp's gemma3 reads the window; pattern and local base are fixed
        assert meta["gemma3.attention.sliding_window"] == cfg["sliding_window"]
        assert not [k for k in meta if "softcapping" in k or "pattern" in k or "swa" in k], meta.keys()
    return meta, infos, tensors


def check_vocab(meta, src):
    """tokenizer.ggml.* against tokenizer.json / tokenizer_config.json read here."""
    tj = json.load(open(os.path.join(src, "tokenizer.json")))
    tc = json.load(open(os.path.join(src, "tokenizer_config.json")))
    n = len(meta["tokenizer.ggml.tokens"])
    want = ["[PAD%d]" % i for i in range(n)]
    types = [5] * n
    for tok, i in tj["model"]["vocab"].items():
        want[i], types[i] = tok, 1
    ids = {}
    for a in tj["added_tokens"]:
        want[a["id"]], types[a["id"]] = a["content"], 3 if a["special"] else 4
        ids[a["content"]] = a["id"]
    assert meta["tokenizer.ggml.model"] == "gpt2" and meta["tokenizer.ggml.pre"] == "llama-bpe"
    assert meta["tokenizer.ggml.tokens"] == want and meta["tokenizer.ggml.token_type"] == types
    assert meta["tokenizer.ggml.merges"] == tj["model"]["merges"]
    assert meta["tokenizer.ggml.bos_token_id"] == ids[tc["bos_token"]]
    assert meta["tokenizer.ggml.eos_token_id"] == ids[tc["eos_token"]]
    assert meta["tokenizer.ggml.add_bos_token"] is True
    assert meta["tokenizer.chat_template"] == tc["chat_template"]


O200K = ("[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]*[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]+"
         "(?i:'s|'t|'re|'ve|'m|'ll|'d)?|[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]+"
         "[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+"
         "[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+")  # GPT-4o's / GPT-OSS's split, as tokenizer.json has it


def pre_names(d, src):
    """tokenizer.ggml.pre from the Split pattern of tokenizer.json: Llama
    3's llama-bpe, Qwen2's qwen2, o200k's (GPT-4o, GPT-OSS) gpt-4o, anything
    else default."""
    tj = json.load(open(os.path.join(src, "tokenizer.json")))
    split = tj["pre_tokenizer"]["pretokenizers"][0]["pattern"]
    llama3 = split["Regex"]
    cases = [(llama3, "llama-bpe"), (llama3.replace("\\p{N}{1,3}", "\\p{N}"), "qwen2"), (O200K, "gpt-4o"),
             (llama3 + "|x", "default")]
    tmp = os.path.join(d, "pre-names")
    shutil.copytree(src, tmp)
    for regex, name in cases:
        split["Regex"] = regex
        json.dump(tj, open(os.path.join(tmp, "tokenizer.json"), "w"))
        js = json.loads(ckref.run(CKPTFS, "inspect", tmp, "--format", "gguf", "--json").stdout)
        assert js["metadata"]["tokenizer.ggml.pre"] == name, (name, js["metadata"]["tokenizer.ggml.pre"])
    print("tokenizer.ggml.pre from the split pattern: llama-bpe, qwen2, gpt-4o (o200k), else default")


def merge_lowest(syms, rank):
    """BPE over a list of symbols: the lowest-ranked merge first (leftmost
    of equals), until no adjacent pair has a rank."""
    while True:
        pairs = [(rank.get((syms[i], syms[i + 1]), 1 << 30), i) for i in range(len(syms) - 1)]
        r, i = min(pairs, default=(1 << 30, 0))
        if r == 1 << 30:
            return syms
        syms[i:i + 2] = [syms[i] + syms[i + 1]]


def bpe(text, merges):
    """Byte-level BPE of words (space-led), lowest-ranked merge first."""
    rank = {tuple(m.split(" ")): i for i, m in enumerate(merges)}
    out = []
    for k, word in enumerate(text.split(" ")):
        out += merge_lowest(list(("Ġ" if k else "") + word), rank)
    return out


def clients(path, meta, infos, text):
    """@huggingface/gguf's parse and llama.cpp's tokenization of the file."""
    p = subprocess.run(["node", os.path.join(HERE, "gguf_client.mjs"), MODULES, path, text],
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr[-2000:]
    got = json.loads(p.stdout.strip().splitlines()[-1])
    assert [(t["name"], list(reversed(t["shape"])), t["dtype"]) for t in got["tensors"]] == \
        [(n, s, t) for n, s, t, _ in infos]
    for k, v in meta.items():
        g = got["meta"][k]
        if isinstance(v, list):
            assert g["length"] == len(v) and g["first"] == v[:8], k
        elif isinstance(v, float):
            assert abs(g - v) <= 1e-6 * abs(v), k
        else:
            assert g == v, (k, g, v)
    vocab = {t: i for i, t in enumerate(meta["tokenizer.ggml.tokens"])}
    want = [vocab[s] for s in bpe(text, meta["tokenizer.ggml.merges"])]
    assert got["tokens"] == want and got["detokenized"] == text, (got["tokens"], want)


def logits(path, held, cfg, toks=TOKS):
    import torch
    got = gs.llama_cpp(MODULES, path, toks)
    want = gs.llama_forward(held, cfg, toks)
    return gs.rel(got, want), bool(torch.equal(got.argmax(-1), want.argmax(-1)))


def main():
    skip_unless_fuse()
    assert os.path.isdir(os.path.join(MODULES, "node-llama-cpp")), \
        f"{MODULES}: node-llama-cpp is missing (tools/install-deps.sh installs it)"
    lib = gs.ggml_lib()
    rng = np.random.default_rng(17)
    d = tempfile.mkdtemp(prefix="ckptfs-ggufview-")
    try:
        run_all(d, rng, lib)
    finally:
        shutil.rmtree(d, ignore_errors=True)


def lazy(src):
    """The header and infos are literal bytes: reading them evaluates and reads
    nothing; a few blocks of one tensor evaluate that tensor's group only
    (direct_io: every read reaches the daemon, no kernel readahead; no_prefetch:
    no group evaluated ahead)."""
    js = json.loads(ckref.run(CKPTFS, "inspect", src, "--format", "gguf:Q8_0", "--json").stdout)
    first = min(t["offset"] for t in js["tensors"])
    with Mount(src, opts="gguf=Q8_0,direct_io,no_prefetch") as m:
        assert os.path.getsize(m.path("model.gguf")) == js["bytes"]  # ls -l: the final size
        with open(m.path("model.gguf"), "rb", buffering=0) as f:
            assert len(f.read(first)) == first
            s0 = m.stats()
            assert s0["source_bytes_read"] == 0 and s0["groups_evaluated"] == 0, s0
            t = next(t for t in js["tensors"] if t["name"] == "blk.1.ffn_down.weight")
            f.seek(t["offset"] + 34 * 5)  # from the middle of the tensor's blocks
            assert len(f.read(34 * 7)) == 34 * 7
        for _ in range(100):  # the group's other members finish after the reply
            s1 = m.stats()
            if not s1["evaluations_in_flight"]:
                break
            time.sleep(0.05)
        src_bytes = sum(v[2].nbytes for k, v in ckref.read_checkpoint_dir(src).items()
                        if k == "model.layers.1.mlp.down_proj.weight")
        # one dependency group: the GGUF tensor and the view's own down_proj share
        # their source; the view's is a rename (read from the file, never
        # cached), so only the GGUF tensor is evaluated: its source once, its
        # blocks the only bytes in the cache
        assert s1["groups_evaluated"] == 1 and s1["source_bytes_read"] == src_bytes, (s1, src_bytes)
        assert s1["cache_bytes"] == t["bytes"], (s1, t)
    print(f"lazy: the {first}-byte header read nothing; 7 Q8_0 blocks of one tensor evaluated its group "
          f"alone (only that tensor's {src_bytes} source bytes were read, and the group's rename "
          f"was not evaluated)")


def run_all(d, rng, lib):
    src, cfg, w = make_model(d, "llama", rng)
    # F32: every tensor and the metadata, both parsers, llama.cpp's tokens and logits
    with Mount(src, opts="gguf=F32") as m:
        path = m.path("model.gguf")
        meta, infos, tensors = check_file(path, w, cfg, "llama", "F32", lib)
        check_vocab(meta, src)
        clients(path, meta, infos, "abcab the cat")
        r, same = logits(path, w, cfg)
        assert r < 1e-3 and same, f"F32 view: llama.cpp vs torch {r:.2e}, greedy same {same}"
        f32 = open(path, "rb").read()
    print(f"llama F32 view: {len(tensors)} tensors exact, metadata and vocabulary as "
          f"config/tokenizer say (both parsers, llama.cpp's tokens); logits {r:.1e} relative, same greedy")
    lazy(src)
    pre_names(d, src)
    # negative control: the user's mapping undoes the permutation first
    undo = os.path.join(d, "undo.json")
    json.dump({"ckptfs_mapping": 1, "unused": "keep", "params": {"H": "hidden_size", "nh": "num_attention_heads",
                                                             "nkv": "num_key_value_heads"},
               "rules": [{"from": "model.layers.{L}.self_attn.q_proj.weight",
                          "to": "model.layers.{L}.self_attn.q_proj.weight",
                          "expr": "x.view(nh, -1, 2, H).transpose(1, 2).reshape(-1, H)"},
                         {"from": "model.layers.{L}.self_attn.k_proj.weight",
                          "to": "model.layers.{L}.self_attn.k_proj.weight",
                          "expr": "x.view(nkv, -1, 2, H).transpose(1, 2).reshape(-1, H)"}]}, open(undo, "w"))
    with Mount(src, [undo], opts="gguf=F32") as m:
        r_bad, _ = logits(m.path("model.gguf"), w, cfg)
    assert r_bad > 1e-2, f"a view without the Q/K permutation still matches ({r_bad:.2e})"
    print(f"negative control: without the Q/K permutation llama.cpp's logits are off by {r_bad:.1e}")

    # F16, BF16, Q8_0, Q4_0: bytes against numpy and ggml; logits against the rounded model
    tol = {"F16": 5e-3, "BF16": 2e-2, "Q8_0": 3e-2, "Q4_0": 5e-2}
    for ft in ("F16", "BF16", "Q8_0", "Q4_0"):
        with Mount(src, opts="gguf=" + ft) as m:
            path = m.path("model.gguf")
            meta, infos, tensors = check_file(path, w, cfg, "llama", ft, lib)
            r, same = logits(path, held_weights(w, cfg, "llama", tensors, infos), cfg)
            if ft == "Q8_0":
                q8 = open(path, "rb").read()
        assert r < tol[ft], f"{ft}: llama.cpp vs torch over the held weights {r:.2e}"
        print(f"llama {ft}: every tensor's bytes as numpy / ggml_quantize_chunk make them; logits "
              f"{r:.1e} relative to the rounded model (bound {tol[ft]:.0e}), greedy same: {same}")

    # convert and inspect agree with the mount
    out = os.path.join(d, "out")
    ckref.run(CKPTFS, "convert", src, out, "--format", "gguf:Q8_0", "--quiet")
    assert os.listdir(out) == ["model.gguf"] and open(os.path.join(out, "model.gguf"), "rb").read() == q8
    ckref.run(CKPTFS, "convert", src, out + "32", "--format", "gguf:f32", "--quiet")
    assert open(os.path.join(out + "32", "model.gguf"), "rb").read() == f32
    js = json.loads(ckref.run(CKPTFS, "inspect", src, "--format", "gguf:Q8_0", "--json").stdout)
    _, infos, _ = read_gguf(os.path.join(out, "model.gguf"))
    assert [(t["name"], t["shape"], TYPES[t["type"]]) for t in js["tensors"]] == \
        [(n, s, t) for n, s, t, _ in infos] and js["bytes"] == len(q8)
    print("convert --format gguf:Q8_0 / gguf:f32 write the mount's bytes; inspect --format gguf lists its tensors")

    # rows that are not whole blocks fall back to F16; the router stays F32 (Mixtral below)
    os.makedirs(os.path.join(d, "o"))
    osrc, ocfg, ow = make_model(os.path.join(d, "o"), "llama", rng, ["--hidden", "80"])
    with Mount(osrc, opts="gguf=Q8_0") as m:
        meta, infos, tensors = check_file(m.path("model.gguf"), ow, ocfg, "llama", "Q8_0", lib)
    kinds = {t for n, s, t, _ in infos if len(s) == 2}
    assert kinds == {1, 8}, kinds
    print("rows of 80 (not whole 32-blocks): F16, the others Q8_0, as the converter does")

    # the other architectures: F32 logits through the mount
    for arch in ("qwen2", "qwen3", "mixtral"):
        asrc, acfg, aw = make_model(d, arch, rng)
        with Mount(asrc, opts="gguf") as m:
            path = m.path("model.gguf")
            check_file(path, aw, acfg, arch, "F32", lib)
            r, same = logits(path, aw, acfg)
        assert r < 1e-3 and same, f"{arch}: llama.cpp vs torch {r:.2e}, greedy same {same}"
        print(f"{arch}: every tensor exact; llama.cpp's logits {r:.1e} relative to torch, same greedy")

    quantizer_corners(d, rng, lib)
    half_sources(d, rng, lib)
    gemma(d, rng, lib)
    phi3(d, rng, lib)
    qwen3moe(d, rng, lib)
    qwen2moe(d, rng, lib)
    gpt_oss(d, rng, lib)
    olmo2(d, rng, lib)
    smollm3(d, rng, lib)
    cohere(d, rng, lib)
    starcoder2(d, rng, lib)
    llama3_rope(d, src, cfg, w)
    mistral3(d, src, cfg, w)
    mistral3_defaults(d, rng)
    llava(d, rng)
    granite(d, src, cfg, w)
    qwen2vl(d, rng)
    sentencepiece(d, src, lib)
    spm_tokenizer_json(d)
    hostile(d, src)


def hostile_blocks(n, rng):
    """n blocks of 32 F32 values that corner a quantizer: exact .5 ties
    (largest magnitude 127, so the scale is 1), the largest magnitude first or
    last and repeated with both signs, zeros of both signs, subnormals,
    scales whose inverse is coarse or infinite, NaN and infinities among
    ordinary values, the largest floats, random bit patterns (every class)
    and random values from 2^-140 to 2^120."""
    b = (rng.integers(-32768, 32768, (n, 32)) / 256).astype(np.float32)
    b[0] = np.arange(32) * 4 - 62 + np.where(np.arange(32) % 3, 0.5, -0.5)
    b[0, 31] = 127
    b[1] = np.where(np.arange(32) % 2, 0.0, -0.0)
    b[2, 3], b[2, 20] = -8 * np.abs(b[2]).max(), 8 * np.abs(b[2]).max()
    b[3] = (np.arange(32) - 16) * np.float32(1e-45)
    b[4] = (np.arange(32) - 16) * np.float32(3e-39)
    special = np.array([np.nan, -np.nan, np.inf, -np.inf, 0.0, -0.0, 1e-45, 1.1754942e-38,
                        3.4028235e38, -3.4028235e38, 0.49999997, -0.49999997, 0.5, 1.5, -2.5],
                       np.float32)
    k = 5
    for v in special:
        for at in (0, 13, 31):
            b[k, at] = v
            k += 1
    bits = rng.integers(0, 2 ** 32, (n - k) // 2 * 32, dtype=np.uint64).astype(np.uint32)
    b[k:k + len(bits) // 32] = bits.view(np.float32).reshape(-1, 32)
    k += len(bits) // 32
    scale = np.ldexp(np.float32(1), rng.integers(-140, 121, (n - k, 1))).astype(np.float32)
    b[k:] = (rng.standard_normal((n - k, 32)) * scale).astype(np.float32)
    return b


def quantizer_corners(d, rng, lib):
    """One weight filled with hostile_blocks, quantized by the Q8_0 and Q4_0
    views, byte for byte against ggml_quantize_chunk of the same floats."""
    os.makedirs(os.path.join(d, "q"))
    src, cfg, w = make_model(os.path.join(d, "q"), "llama", rng)
    name = "model.layers.0.mlp.down_proj.weight"
    rows, cols = w[name].shape
    with np.errstate(all="ignore"):
        w[name] = hostile_blocks(rows * cols // 32, rng).reshape(rows, cols)
    ckref.write_safetensors(os.path.join(src, "model.safetensors"),
                            {k: ("F32", v.shape, v.tobytes()) for k, v in w.items()})
    for ft in ("Q8_0", "Q4_0"):
        with Mount(src, opts=f"gguf={ft},gguf_vocab=none") as m:
            _, infos, tensors = read_gguf(m.path("model.gguf"))
        t = {n: t for n, _, t, _ in infos}["blk.0.ffn_down.weight"]
        assert t == TYPES[ft], (ft, t)
        want = ggml_quantize(lib, t, w[name])
        got = tensors["blk.0.ffn_down.weight"]
        qb = BLOCK[t][1]
        bad = [i for i in range(len(want) // qb) if got[i * qb:(i + 1) * qb] != want[i * qb:(i + 1) * qb]]
        assert not bad, f"{ft}: {len(bad)} blocks differ from ggml's, first {bad[0]}: " \
            f"{w[name].reshape(-1, 32)[bad[0]]}"
    print(f"{rows * cols // 32} hostile blocks (ties, NaN, infinities, subnormals, random bits): "
          "Q8_0 and Q4_0 as ggml_quantize_chunk makes them")


def half_sources(d, rng, lib):
    """BF16 and F16 checkpoints (the common cases): their Q8_0 and Q4_0 views
    quantize the 2-byte elements as they stand (no F32 copy in between), and
    must give ggml's blocks of the floats those widen to: every tensor (Q/K
    permuted, hostile blocks in one) and reads cut anywhere inside a block
    (direct_io: each read reaches the daemon as asked; 4 KiB cache chunks,
    whose ends fall inside blocks too)."""
    for dt in ("BF16", "F16"):
        os.makedirs(os.path.join(d, dt))
        src, cfg, w = make_model(os.path.join(d, dt), "llama", rng)
        name = "model.layers.0.mlp.down_proj.weight"
        with np.errstate(all="ignore"):
            w[name] = hostile_blocks(w[name].size // 32, rng).reshape(w[name].shape)
            if dt == "BF16":  # the top half of each float's bits, and the floats that widens to
                half = {k: (v.view(np.uint32) >> 16).astype(np.uint16) for k, v in w.items()}
                wide = {k: (h.astype(np.uint32) << 16).view(np.float32) for k, h in half.items()}
            else:  # numpy's rounding to F16, and its widening back
                half = {k: v.astype(np.float16) for k, v in w.items()}
                wide = {k: h.astype(np.float32) for k, h in half.items()}
        ckref.write_safetensors(os.path.join(src, "model.safetensors"),
                                {k: (dt, h.shape, h.tobytes()) for k, h in half.items()})
        for ft in ("Q8_0", "Q4_0"):
            with Mount(src, opts=f"gguf={ft},gguf_vocab=none") as m:
                check_file(m.path("model.gguf"), wide, cfg, "llama", ft, lib)
                whole = open(m.path("model.gguf"), "rb").read()
            with Mount(src, opts=f"gguf={ft},gguf_vocab=none,direct_io,no_prefetch,chunk=4096") as m:
                fd = os.open(m.path("model.gguf"), os.O_RDONLY)
                cuts = [(int(rng.integers(0, len(whole))), int(n)) for n in (1, 2, 17, 33, 35, 1000, 70001)
                        for _ in range(12)]
                for off, n in cuts:
                    assert os.pread(fd, n, off) == whole[off:off + n], (dt, ft, off, n)
                os.close(fd)
    print(f"BF16 and F16 sources: Q8_0 and Q4_0 views quantize them as ggml does the widened floats "
          f"(every tensor, hostile blocks, {len(cuts)} reads cut inside blocks)")


def qwen3moe(d, rng, lib):
    """Qwen3-MoE (arch qwen3moe): Q/K norms, no permutation, the router as
    ffn_gate_inp (F32) and each layer's experts stacked into
    ffn_{gate,up,down}_exps; every tensor against numpy (the weights under
    Mixtral's names, which gguf_reference stacks the same way), the expert
    counts and width in the metadata, and llama.cpp's logits against the
    torch forward (softmax router, top-k renormalized, as
    norm_topk_prob says). Dense layers among the experts and raw top-k
    weights, which llama.cpp's qwen3moe cannot run, are refused."""
    import re
    src, cfg, w = make_model(d, "qwen3moe", rng)
    kind = {"gate": "w1", "up": "w3", "down": "w2"}
    mix = {re.sub(r"\.mlp\.experts\.(\d+)\.(gate|up|down)_proj\.",
                  lambda m: f".block_sparse_moe.experts.{m[1]}.{kind[m[2]]}.",
                  k.replace(".mlp.gate.", ".block_sparse_moe.gate.")): a for k, a in w.items()}
    assert sum("block_sparse_moe.experts" in k for k in mix) == 3 * cfg["num_experts"] * cfg["num_hidden_layers"]
    with Mount(src, opts="gguf") as m:
        path = m.path("model.gguf")
        check_file(path, mix, cfg, "qwen3moe", "F32", lib)
        r, same = logits(path, mix, cfg)
    assert r < 1e-3 and same, f"qwen3moe: llama.cpp vs torch {r:.2e}, greedy same {same}"
    bad = os.path.join(d, "qwen3moe-bad")
    shutil.copytree(src, bad)
    for edit, says in (({"norm_topk_prob": False}, "norm_topk_prob is not true (false)"),
                       ({"norm_topk_prob": None}, "norm_topk_prob is not true (absent, Qwen3MoeConfig's default false)"),
                       ({"mlp_only_layers": [0]}, "dense layers among the experts")):
        json.dump({k: v for k, v in dict(cfg, **edit).items() if v is not None or k not in edit},
                  open(os.path.join(bad, "config.json"), "w"))
        refused(["inspect", bad, "--format", "gguf"], says, 3)
    print(f"qwen3moe: every tensor exact (experts stacked, router F32), expert counts in the metadata; "
          f"llama.cpp's logits {r:.1e} relative to torch, same greedy; raw top-k and dense layers refused")


def qwen2moe(d, rng, lib):
    """Qwen2-MoE (Qwen1.5-MoE, Qwen2-57B-A14B; arch qwen2moe): Q/K/V
    biases, no permutation, the router and stacked experts as Qwen3-MoE's,
    the shared expert as ffn_{gate,up,down}_shexp and its [1, hidden] gate
    as the vector ffn_gate_inp_shexp; every tensor against numpy (F32 and
    Q8_0, the gate's vector F32 in both), the expert widths in the
    metadata, and llama.cpp's logits against the torch forward: top-k
    weights as the softmax gives them (norm_topk_prob false), plus the
    shared expert scaled by the sigmoid of its gate. Negative control: the
    same file with the shared expert's gate zeroed is off. Refused: what
    llama.cpp's qwen2moe cannot run (renormalized top-k, dense layers, a
    tied output) and expert widths the tensors do not have, in one line."""
    import re
    src, cfg, w = make_model(d, "qwen2moe", rng)
    assert cfg["norm_topk_prob"] is False and cfg["shared_expert_intermediate_size"] != cfg["moe_intermediate_size"]
    kind = {"gate": "w1", "up": "w3", "down": "w2"}
    mix = {re.sub(r"\.mlp\.experts\.(\d+)\.(gate|up|down)_proj\.",
                  lambda m: f".block_sparse_moe.experts.{m[1]}.{kind[m[2]]}.",
                  k.replace(".mlp.gate.", ".block_sparse_moe.gate.")): a for k, a in w.items()}
    assert sum(".shared_expert." in k for k in mix) == 3 * cfg["num_hidden_layers"]
    with Mount(src, opts="gguf") as m:
        path = m.path("model.gguf")
        check_file(path, mix, cfg, "qwen2moe", "F32", lib)
        r, same = logits(path, mix, cfg)
        with Mount(src, opts="gguf=Q8_0") as q:
            check_file(q.path("model.gguf"), mix, cfg, "qwen2moe", "Q8_0", lib)
    assert r < 1e-3 and same, f"qwen2moe: llama.cpp vs torch {r:.2e}, greedy same {same}"
    # negative controls: the torch forward without the shared expert, and
    # with the top-k weights renormalized, must not match llama.cpp's logits
    plain = {k: a for k, a in mix.items() if ".shared_expert" not in k}
    out = os.path.join(d, "qwen2moe-out")
    ckref.run(CKPTFS, "convert", src, out, "--format", "gguf", "--quiet")
    got = gs.llama_cpp(MODULES, os.path.join(out, "model.gguf"), TOKS)
    off_shared = gs.rel(got, gs.llama_forward(plain, cfg, TOKS))
    off_norm = gs.rel(got, gs.llama_forward(mix, dict(cfg, norm_topk_prob=True), TOKS))
    assert off_shared > 1e-2 and off_norm > 1e-2, (off_shared, off_norm)
    assert gs.rel(got, gs.llama_forward(mix, cfg, TOKS)) < 1e-3
    # qkv_bias false (Qwen2MoeConfig's default is true): no biases, served without them
    nob = os.path.join(d, "qwen2moe-nobias")
    os.makedirs(nob)
    json.dump(dict(cfg, qkv_bias=False), open(os.path.join(nob, "config.json"), "w"))
    ckref.write_safetensors(os.path.join(nob, "model.safetensors"),
                            {k: ("F32", a.shape, a.tobytes()) for k, a in w.items() if not k.endswith("bias")})
    with Mount(nob, opts="gguf,gguf_vocab=none") as m:
        r_nob = gs.rel(gs.llama_cpp(MODULES, m.path("model.gguf"), TOKS),
                       gs.llama_forward({k: a for k, a in mix.items() if not k.endswith("bias")}, cfg, TOKS))
    assert r_nob < 1e-3, r_nob
    bad = os.path.join(d, "qwen2moe-bad")
    shutil.copytree(src, bad)
    for edit, says in (({"norm_topk_prob": True}, "norm_topk_prob is true: llama.cpp's qwen2moe never"),
                       ({"mlp_only_layers": [0]}, "dense layers among the experts"),
                       ({"tie_word_embeddings": True}, "qwen2moe has no tied output"),
                       ({"moe_intermediate_size": cfg["moe_intermediate_size"] * 2},
                        f"moe_intermediate_size {cfg['moe_intermediate_size'] * 2} make blk.0.ffn_down_exps.weight"),
                       ({"shared_expert_intermediate_size": None},  # Qwen2MoeConfig's default, 5632
                        "shared_expert_intermediate_size 5632 make blk.0.ffn_down_shexp.weight"),
                       ({"use_sliding_window": True}, "use_sliding_window: llama.cpp's qwen2moe attends")):
        json.dump({k: v for k, v in dict(cfg, **edit).items() if v is not None},
                  open(os.path.join(bad, "config.json"), "w"))
        refused(["inspect", bad, "--format", "gguf"], says, 3)
    print(f"qwen2moe: every tensor exact in F32 and Q8_0 (experts stacked, shared expert, its gate a vector); "
          f"llama.cpp's logits {r:.1e} relative to torch, same greedy (without the shared expert {off_shared:.1e}, "
          f"renormalized {off_norm:.1e}; without Q/K/V biases {r_nob:.1e}); renormalized top-k, dense layers, tied "
          f"output, a sliding window and wrong widths refused")


def qkv(h, p, lin, turn, cfg, T, hd):
    """One layer's Q and K (turned) and V, [heads, T, head_dim], K and V
    repeated for grouped-query attention."""
    nh, nkv = cfg["num_attention_heads"], cfg["num_key_value_heads"]
    q = turn(lin(h, p + "self_attn.q_proj").view(T, nh, hd).transpose(0, 1))
    k = turn(lin(h, p + "self_attn.k_proj").view(T, nkv, hd).transpose(0, 1))
    v = lin(h, p + "self_attn.v_proj").view(T, nkv, hd).transpose(0, 1)
    return q, k.repeat_interleave(nh // nkv, 0), v.repeat_interleave(nh // nkv, 0)


def yarn_inv_freq(cfg, hd):
    """Hugging Face's _compute_yarn_parameters (written here from its
    description): each pair's frequency blended between the extrapolated
    base**(-2i/d) and the interpolated one (divided by factor) by a linear
    ramp over the correction range of beta_fast / beta_slow rotations in the
    original context, rounded outwards when truncate (its default) is
    true; cos and sin scaled by 0.1 ln(factor) + 1."""
    import math
    import torch
    rs, base = cfg["rope_scaling"], cfg["rope_theta"]
    factor, orig = rs["factor"], rs["original_max_position_embeddings"]

    def dim_of(rot):
        return hd * math.log(orig / (rot * 2 * math.pi)) / (2 * math.log(base))
    lo, hi = dim_of(rs.get("beta_fast", 32)), dim_of(rs.get("beta_slow", 1))
    if rs.get("truncate", True):
        lo, hi = math.floor(lo), math.ceil(hi)
    lo, hi = max(lo, 0), min(hi, hd - 1)
    ramp = ((torch.arange(hd // 2, dtype=torch.float32) - lo) / (hi - lo if hi > lo else 0.001)).clamp(0, 1)
    pos = base ** (torch.arange(0, hd, 2).float() / hd)
    extra = 1 - ramp
    return (1 / (factor * pos)) * (1 - extra) + (1 / pos) * extra, 0.1 * math.log(factor) + 1


def gpt_oss_forward(w, cfg, toks):
    """Hugging Face's GptOssForCausalLM in plain torch, from its
    description: RMSNorm; attention with Q/K/V/O biases, the NeoX (halves)
    YaRN rope, a learned sink logit per head joining each row's softmax and
    dropped after it, a sliding window on the even layers; the router's
    top-k logits softmaxed among themselves; each expert's gate and up
    (interleaved columns of gate_up_proj [E, H, 2I]) with their biases, gate
    clamped above at 7, up to [-7, 7], (up + 1) * gate * sigmoid(1.702 *
    gate), down_proj [E, I, H] and its bias."""
    import torch
    nh, hd = cfg["num_attention_heads"], cfg["head_dim"]
    T, eps, lim = len(toks), cfg["rms_norm_eps"], cfg["swiglu_limit"]
    w = {k: torch.tensor(np.asarray(v, np.float32)) for k, v in w.items()}

    def rms(x, g):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * g

    def lin(x, p):
        return x @ w[p + ".weight"].T + w[p + ".bias"]
    inv, att = yarn_inv_freq(cfg, hd)
    ang = torch.arange(T).float()[:, None] * inv[None]
    cos, sin = ang.cos() * att, ang.sin() * att

    def turn(x):  # [heads, T, hd]: the first half with the second, as HF's _apply_rotary_emb
        a, b = x[..., :hd // 2], x[..., hd // 2:]
        return torch.cat([a * cos - b * sin, b * cos + a * sin], -1)
    i = torch.arange(T)
    causal = i[None, :] <= i[:, None]
    x = w["model.embed_tokens.weight"][toks]
    for L in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{L}."
        q, k, v = qkv(rms(x, w[p + "input_layernorm.weight"]), p, lin, turn, cfg, T, hd)
        allowed = causal & ((i[:, None] - i[None, :] < cfg["sliding_window"]) if L % 2 == 0 else causal)
        s = (q @ k.transpose(1, 2)) * hd ** -0.5 + torch.where(allowed, 0.0, float("-inf"))
        s = torch.cat([s, w[p + "self_attn.sinks"].view(nh, 1, 1).expand(nh, T, 1)], -1)
        a = torch.softmax(s - s.max(-1, keepdim=True).values, -1)[..., :-1] @ v
        x = x + lin(a.transpose(0, 1).reshape(T, nh * hd), p + "self_attn.o_proj")
        h = rms(x, w[p + "post_attention_layernorm.weight"])
        top, idx = lin(h, p + "mlp.router").topk(cfg["num_experts_per_tok"], -1)
        top = torch.softmax(top, -1)
        e = p + "mlp.experts."
        out = torch.zeros_like(h)
        for t in range(T):
            for j in range(top.shape[1]):
                n = int(idx[t, j])
                gu = h[t] @ w[e + "gate_up_proj"][n] + w[e + "gate_up_proj_bias"][n]
                gate, up = gu[0::2].clamp(max=lim), gu[1::2].clamp(-lim, lim)
                y = (up + 1) * gate * torch.sigmoid(gate * 1.702)
                out[t] += top[t, j] * (y @ w[e + "down_proj"][n] + w[e + "down_proj_bias"][n])
        x = x + out
    return rms(x, w["model.norm.weight"]) @ w["lm_head.weight"].T


def olmo2(d, rng, lib):
    """OLMo 2 (arch olmo2): no norm before attention or MLP,
    post_attention_norm and post_ffw_norm after them, the Q and K norms over
    each whole projection (attn_q_norm [heads * head_dim]); every tensor
    against numpy in F32 and Q8_0; llama.cpp's logits against the torch
    forward, and off when the Q/K norms are taken per head (Qwen3's) or the
    norms before the sublayers (Llama's); the file back to Hugging Face
    (gguf-olmo2-to-hf) and a config.json from its metadata. Refused: a tied
    output and a head_dim llama.cpp's olmo2 cannot take."""
    src, cfg, w = make_model(d, "olmo2", rng)
    with Mount(src, opts="gguf") as m:
        path = m.path("model.gguf")
        check_file(path, w, cfg, "olmo2", "F32", lib)
        r, same = logits(path, w, cfg)
        f32 = open(path, "rb").read()
        with Mount(src, opts="gguf=Q8_0") as q:
            check_file(q.path("model.gguf"), w, cfg, "olmo2", "Q8_0", lib)
    assert r < 1e-3 and same, f"olmo2: llama.cpp vs torch {r:.2e}, greedy same {same}"
    out = os.path.join(d, "olmo2-out")
    os.makedirs(out)
    path = os.path.join(out, "model.gguf")
    open(path, "wb").write(f32)
    got = gs.llama_cpp(MODULES, path, TOKS)
    nh = cfg["num_attention_heads"]
    off_head = gs.rel(got, gs.llama_forward(w, dict(cfg, qk_norm_per_head=True), TOKS))
    pre = {k.replace("post_attention_layernorm", "input_layernorm").replace("post_feedforward_layernorm",
                                                                           "post_attention_layernorm"): a
           for k, a in w.items() if "_norm." not in k}
    off_pre = gs.rel(got, gs.llama_forward(pre, dict(cfg, model_type="llama"), TOKS))
    assert off_head > 1e-2 and off_pre > 1e-2, (off_head, off_pre)
    hfd = os.path.join(d, "olmo2-hf")
    ckref.run(CKPTFS, "convert", path, hfd, "--mapping", "gguf-olmo2-to-hf", "--quiet")
    back = {k: v[2] for k, v in ckref.read_checkpoint_dir(hfd).items()}
    assert set(back) == set(w) and all(np.array_equal(back[k], w[k]) for k in w), sorted(set(back) ^ set(w))
    hc = json.load(open(os.path.join(hfd, "config.json")))
    assert all(hc[k] == cfg[k] for k in ("architectures", "model_type", "hidden_size", "intermediate_size",
                                        "num_hidden_layers", "num_attention_heads", "num_key_value_heads")), hc
    bad = os.path.join(d, "olmo2-bad")
    shutil.copytree(src, bad)
    for edit, says in (({"tie_word_embeddings": True}, "olmo2 has no tied output"),
                       ({"head_dim": 2 * cfg["hidden_size"] // nh}, "llama.cpp's olmo2 takes hidden_size /")):
        json.dump(dict(cfg, **edit), open(os.path.join(bad, "config.json"), "w"))
        refused(["inspect", bad, "--format", "gguf"], says, 3)
    print(f"olmo2: every tensor exact in F32 and Q8_0 (whole-projection Q/K norms, norms after the sublayers); "
          f"llama.cpp's logits {r:.1e} relative to torch, same greedy (per-head Q/K norms {off_head:.1e}, norms "
          f"before {off_pre:.1e}); back to Hugging Face exactly; a tied output and another head_dim refused")


def smollm3(d, rng, lib):
    """SmolLM3 (arch smollm3): Llama (Q/K permuted for the NORM rope)
    without the rope on every fourth layer, as no_rope_layers says; every
    tensor against numpy, llama.cpp's logits against the torch forward
    (eight layers: two unturned), and off with the rope on every layer; the
    file back to Hugging Face (gguf-llama-to-hf) with no_rope_layers in
    the config made from its metadata. Refused: another pattern, another
    interval, a sliding window."""
    src, cfg, w = make_model(d, "smollm3", rng, ["--layers", "8"])
    assert cfg["no_rope_layers"].count(0) == 2
    with Mount(src, opts="gguf") as m:
        path = m.path("model.gguf")
        check_file(path, w, cfg, "smollm3", "F32", lib)
        r, same = logits(path, w, cfg)
        got = gs.llama_cpp(MODULES, path, TOKS)
        f32 = open(path, "rb").read()
    assert r < 1e-3 and same, f"smollm3: llama.cpp vs torch {r:.2e}, greedy same {same}"
    off = gs.rel(got, gs.llama_forward(w, dict(cfg, no_rope_layers=[1] * cfg["num_hidden_layers"]), TOKS))
    assert off > 1e-2, off
    gpath = os.path.join(d, "smollm3.gguf")
    open(gpath, "wb").write(f32)
    hfd = os.path.join(d, "smollm3-hf")
    ckref.run(CKPTFS, "convert", gpath, hfd, "--mapping", "gguf-llama-to-hf", "--quiet")
    back = {k: v[2] for k, v in ckref.read_checkpoint_dir(hfd).items()}
    assert set(back) == set(w) and all(np.array_equal(back[k], w[k]) for k in w), sorted(set(back) ^ set(w))
    hc = json.load(open(os.path.join(hfd, "config.json")))
    assert (hc["architectures"], hc["no_rope_layers"], hc["no_rope_layer_interval"]) == \
        (cfg["architectures"], cfg["no_rope_layers"], 4), hc
    bad = os.path.join(d, "smollm3-bad")
    shutil.copytree(src, bad)
    every3 = [int((i + 1) % 3 != 0) for i in range(cfg["num_hidden_layers"])]
    for edit, says in (({"no_rope_layers": every3}, "no_rope_layers[2] is not 1"),
                       ({"no_rope_layers": None, "no_rope_layer_interval": 3}, "no_rope_layer_interval 3"),
                       ({"no_rope_layers": [1, 1]}, "no_rope_layers must list the 8 layers"),
                       ({"use_sliding_window": True}, "use_sliding_window")):
        json.dump({k: v for k, v in dict(cfg, **edit).items() if v is not None or k not in edit},
                  open(os.path.join(bad, "config.json"), "w"))
        refused(["inspect", bad, "--format", "gguf"], says, 3)
    print(f"smollm3: every tensor exact (Q/K permuted), llama.cpp's logits {r:.1e} relative to torch with two "
          f"unturned layers of eight, same greedy ({off:.1e} with the rope on every layer); back to Hugging Face "
          f"with no_rope_layers; another pattern or interval and a sliding window refused")


def cohere_forward(w, cfg, toks, halves=False, rms=False):
    """Hugging Face's CohereForCausalLM in plain torch, from its
    description: a LayerNorm without bias (mean and variance) per layer,
    attention and the SwiGLU MLP both on its output, added to the residual
    together; the rope on adjacent pairs (cos and sin repeated per pair,
    (-x2, x1) interleaved); the tied embedding as the output, times
    logit_scale. halves, rms: negative controls (the rope on halves, as
    Llama's in Hugging Face; RMSNorm instead of LayerNorm)."""
    import torch
    H, nh = cfg["hidden_size"], cfg["num_attention_heads"]
    hd, T, eps = H // nh, len(toks), cfg["layer_norm_eps"]
    w = {k: torch.tensor(np.asarray(v, np.float32)) for k, v in w.items()}

    def ln(x, g):
        x = x if rms else x - x.mean(-1, keepdim=True)
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * g

    def lin(x, p):
        return x @ w[p + ".weight"].T
    inv = 1.0 / (cfg["rope_theta"] ** (torch.arange(0, hd, 2).double() / hd))
    ang = torch.arange(T).double()[:, None] * inv[None]
    ang = torch.cat([ang, ang], -1) if halves else ang.repeat_interleave(2, -1)
    cos, sin = ang.cos().float(), ang.sin().float()

    def turn(x):
        if halves:
            rot = torch.cat([-x[..., hd // 2:], x[..., :hd // 2]], -1)
        else:
            rot = torch.stack([-x[..., 1::2], x[..., 0::2]], -1).flatten(-2)
        return x * cos + rot * sin
    mask = torch.full((T, T), float("-inf")).triu(1)
    x = w["model.embed_tokens.weight"][toks]
    for L in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{L}."
        h = ln(x, w[p + "input_layernorm.weight"])
        q, k, v = qkv(h, p, lin, turn, cfg, T, hd)
        a = torch.softmax(q @ k.transpose(1, 2) * hd ** -0.5 + mask, -1) @ v
        attn = lin(a.transpose(0, 1).reshape(T, H), p + "self_attn.o_proj")
        mlp = lin(torch.nn.functional.silu(lin(h, p + "mlp.gate_proj")) * lin(h, p + "mlp.up_proj"), p + "mlp.down_proj")
        x = x + attn + mlp
    return ln(x, w["model.norm.weight"]) @ w["model.embed_tokens.weight"].T * cfg["logit_scale"]


def cohere(d, rng, lib):
    """Cohere Command R (arch command-r): every tensor against numpy (no
    output.weight: tied), llama.cpp's logits against the forward above, and
    off with the rope on halves (the NeoX reading), with RMSNorm, or
    without the logit scale. Refused: an untied output, and Q/K norms on
    fewer than 64 layers (llama.cpp decides them by the layer count)."""
    src, cfg, w = make_model(d, "cohere", rng)
    with Mount(src, opts="gguf") as m:
        path = m.path("model.gguf")
        meta, infos, tensors = read_gguf(path)
        want = {"token_embd.weight": w["model.embed_tokens.weight"], "output_norm.weight": w["model.norm.weight"]}
        for k, a in w.items():
            if k.startswith("model.layers."):
                parts = k.split(".")
                g = f"blk.{parts[2]}.{'attn_norm' if parts[3] == 'input_layernorm' else GGUF_NAMES['.'.join(parts[3:-1])]}"
                want[g + ".weight"] = a
        assert {n: tensors[n] for n in tensors} == {n: a.astype(np.float32).tobytes() for n, a in want.items()}
        assert (meta["general.architecture"], meta["command-r.logit_scale"],
                np.float32(meta["command-r.attention.layer_norm_epsilon"])) == \
            ("command-r", 0.25, np.float32(cfg["layer_norm_eps"])), meta
        got = gs.llama_cpp(MODULES, path, TOKS)
        gpath = os.path.join(d, "cohere.gguf")
        open(gpath, "wb").write(open(path, "rb").read())
    # back to Hugging Face (gguf-command-r-to-hf), the config from the metadata
    hfd = os.path.join(d, "cohere-hf")
    ckref.run(CKPTFS, "convert", gpath, hfd, "--mapping", "gguf-command-r-to-hf", "--quiet")
    back = {k: v[2] for k, v in ckref.read_checkpoint_dir(hfd).items()}
    assert set(back) == set(w) and all(np.array_equal(back[k], w[k]) for k in w), sorted(set(back) ^ set(w))
    hc = json.load(open(os.path.join(hfd, "config.json")))
    assert all(hc.get(k) == cfg[k] for k in ("architectures", "model_type", "logit_scale", "use_qk_norm",
                                            "tie_word_embeddings", "num_key_value_heads")) and \
        np.float32(hc["layer_norm_eps"]) == np.float32(cfg["layer_norm_eps"]) and "rms_norm_eps" not in hc, hc
    ref = cohere_forward(w, cfg, TOKS)
    import torch
    r, same = gs.rel(got, ref), bool(torch.equal(got.argmax(-1), ref.argmax(-1)))
    assert r < 1e-3 and same, f"command-r: llama.cpp vs torch {r:.2e}, greedy same {same}"
    off_scale = gs.rel(got, cohere_forward(w, dict(cfg, logit_scale=1.0), TOKS))
    off_halves = gs.rel(got, cohere_forward(w, cfg, TOKS, halves=True))
    off_rms = gs.rel(got, cohere_forward(w, cfg, TOKS, rms=True))
    assert min(off_scale, off_halves, off_rms) > 1e-2, (off_scale, off_halves, off_rms)
    bad = os.path.join(d, "cohere-bad")
    shutil.copytree(src, bad)
    for edit, says in (({"tie_word_embeddings": False}, "tie_word_embeddings is not true"),
                       ({"use_qk_norm": True}, "use_qk_norm is true with 2 layers")):
        json.dump(dict(cfg, **edit), open(os.path.join(bad, "config.json"), "w"))
        refused(["inspect", bad, "--format", "gguf"], says, 3)
    print(f"command-r: every tensor exact (tied, no output.weight), logit scale and LayerNorm epsilon in the "
          f"metadata; llama.cpp's logits {r:.1e} relative to torch, same greedy ({off_scale:.1e} without the logit "
          f"scale, {off_halves:.1e} with the rope on halves, {off_rms:.1e} with RMSNorm); back to Hugging Face "
          f"(gguf-command-r-to-hf) exactly; an untied output and Q/K norms on 2 layers refused")


def starcoder2_forward(w, cfg, toks):
    """Hugging Face's Starcoder2ForCausalLM in plain torch, from its
    description: LayerNorms with biases before attention and the MLP, Q/K/V/O
    with biases, the rope on halves, the MLP c_proj(gelu_tanh(c_fc(x)))."""
    import torch
    H, nh = cfg["hidden_size"], cfg["num_attention_heads"]
    hd, T, eps = H // nh, len(toks), cfg["norm_epsilon"]
    w = {k: torch.tensor(np.asarray(v, np.float32)) for k, v in w.items()}

    def ln(x, p):
        return torch.nn.functional.layer_norm(x, (H,), w[p + ".weight"], w[p + ".bias"], eps)

    def lin(x, p):
        return x @ w[p + ".weight"].T + w[p + ".bias"]
    _, rot, cos, sin, mask = gs.llama_parts(dict(cfg, rms_norm_eps=eps), hd, T)
    x = w["model.embed_tokens.weight"][toks]
    for L in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{L}."
        q, k, v = qkv(ln(x, p + "input_layernorm"), p, lin, lambda y: y * cos + rot(y) * sin, cfg, T, hd)
        a = torch.softmax(q @ k.transpose(1, 2) * hd ** -0.5 + mask, -1) @ v
        x = x + lin(a.transpose(0, 1).reshape(T, H), p + "self_attn.o_proj")
        h = ln(x, p + "post_attention_layernorm")
        x = x + lin(torch.nn.functional.gelu(lin(h, p + "mlp.c_fc"), approximate="tanh"), p + "mlp.c_proj")
    head = w["lm_head.weight"] if "lm_head.weight" in w else w["model.embed_tokens.weight"]
    return ln(x, "model.norm") @ head.T


def starcoder2(d, rng, lib):
    """StarCoder2 (arch starcoder2): LayerNorms and linears with biases, the
    GELU MLP as ffn_up / ffn_down; every tensor against numpy; llama.cpp's
    logits against the forward above, and off without the MLP's biases;
    the context served
    as the sliding window (1024 of 2048), where llama.cpp's full attention
    and Hugging Face's windowed one agree. Refused: use_bias false."""
    src, cfg, w = make_model(d, "starcoder2", rng)
    sc = {"input_layernorm": "attn_norm", "post_attention_layernorm": "ffn_norm", "self_attn.q_proj": "attn_q",
          "self_attn.k_proj": "attn_k", "self_attn.v_proj": "attn_v", "self_attn.o_proj": "attn_output",
          "mlp.c_fc": "ffn_up", "mlp.c_proj": "ffn_down"}
    want = {"token_embd.weight": w["model.embed_tokens.weight"], "output.weight": w["lm_head.weight"],
            "output_norm.weight": w["model.norm.weight"], "output_norm.bias": w["model.norm.bias"]}
    for k, a in w.items():
        if k.startswith("model.layers."):
            parts = k.split(".")
            want[f"blk.{parts[2]}.{sc['.'.join(parts[3:-1])]}.{parts[-1]}"] = a
    with Mount(src, opts="gguf,gguf_vocab=none") as m:
        path = m.path("model.gguf")
        meta, infos, tensors = read_gguf(path)
        assert tensors == {n: a.astype(np.float32).tobytes() for n, a in want.items()}, sorted(set(tensors) ^ set(want))
        assert (meta["starcoder2.context_length"], np.float32(meta["starcoder2.attention.layer_norm_epsilon"])) == \
            (1024, np.float32(1e-5)), meta
        got = gs.llama_cpp(MODULES, path, TOKS)
    import torch
    ref = starcoder2_forward(w, cfg, TOKS)
    r, same = gs.rel(got, ref), bool(torch.equal(got.argmax(-1), ref.argmax(-1)))
    assert r < 1e-3 and same, f"starcoder2: llama.cpp vs torch {r:.2e}, greedy same {same}"
    nob = {k: (a * 0 if ".mlp.c_" in k and k.endswith("bias") else a) for k, a in w.items()}
    off = gs.rel(got, starcoder2_forward(nob, cfg, TOKS))
    assert off > 1e-2, off
    bad = os.path.join(d, "starcoder2-bad")
    shutil.copytree(src, bad)
    json.dump(dict(cfg, use_bias=False), open(os.path.join(bad, "config.json"), "w"))
    refused(["inspect", bad, "--format", "gguf"], "use_bias is not true", 3)
    print(f"starcoder2: every tensor exact (biases everywhere), the context served as the 1024-token window; "
          f"llama.cpp's logits {r:.1e} relative to torch, same greedy ({off:.1e} without the MLP's biases); "
          f"use_bias false refused")


def same_but_name(a, b):
    """Two GGUFs with the same tensors and metadata but general.name (a
    checkpoint's directory)."""
    (ma, ia, ta), (mb, ib, tb) = read_gguf(a), read_gguf(b)
    return (ia, ta) == (ib, tb) and {k: v for k, v in ma.items() if k != "general.name"} == \
        {k: v for k, v in mb.items() if k != "general.name"}


def gpt_oss(d, rng, lib):
    """GPT-OSS (arch gpt-oss) from its released form, BF16 with MXFP4
    experts, weights drawn here: every tensor of the F32 file against
    numpy (the experts dequantised by the OCP MX reference of
    gpt_oss_megatron.py, gate the even rows of gate_up_proj, up the odd;
    the 2-D expert biases F32, as they are not weights), the default file
    BF16 (MXFP4 is exact in it), Q8_0 blocks as ggml's; llama.cpp's logits
    against the torch forward above (sinks, a 4-token sliding window on
    the even layers, YaRN, 2 of 4 experts, the clamped SwiGLU); negative
    controls: without the sinks, and with gate and up swapped, they are
    off. transformers' dequantised form (gate_up_proj [E, H, 2I]) serves the
    same bytes. With GPT-OSS's own "truncate": false, which no GGUF key
    carries, llama.cpp rounds the YaRN range as with true: its logits equal
    that reference, and the difference from Hugging Face's is printed.
    Refused: a limit, window pattern, tied output, YaRN betas or attention
    factor llama.cpp's gpt-oss does not run."""
    import gpt_oss_megatron as gom
    src = os.path.join(d, "gpt-oss")
    ckref.run(MKCKPT, "--model", "gpt-oss", "--vocab", "320", "--intermediate", "96", "--layers", "3", src)
    cfg = json.load(open(os.path.join(src, "config.json")))
    cfg.update(sliding_window=4, num_experts_per_tok=2, experts_per_token=2,
               rope_scaling=dict(cfg["rope_scaling"], truncate=True))
    json.dump(cfg, open(os.path.join(src, "config.json"), "w"), indent=1)
    st = ckref.read_checkpoint_dir(src)
    raw, hf = {}, {}  # what the file holds; the floats it means (experts in transformers' layout)
    for k, (dt, shape, _) in sorted(st.items()):
        if dt == "U8":
            a = rng.integers(0, 256, shape, dtype=np.uint8) if k.endswith("_blocks") else \
                rng.integers(118, 123, shape, dtype=np.uint8)  # 2^-9 .. 2^-5: a trained scale
            raw[k] = ("U8", shape, a.tobytes())
            hf[k] = a
            continue
        a = (rng.standard_normal(shape) * (0.5 if k.endswith("sinks") else 0.05 if "bias" in k else 0.08))
        if len(shape) == 1 and "norm" in k:
            a = 1 + rng.standard_normal(shape) * 0.1
        h = bf16_rne(a.astype(np.float32))
        raw[k] = ("BF16", shape, h.tobytes())
        hf[k] = (h.astype(np.uint32) << 16).view(np.float32)
    ckref.write_safetensors(os.path.join(src, "model.safetensors"), raw)
    w = {k: a for k, a in hf.items() if not k.endswith(("_blocks", "_scales"))}
    ref = {"token_embd.weight": w["model.embed_tokens.weight"], "output_norm.weight": w["model.norm.weight"],
           "output.weight": w["lm_head.weight"]}
    names = {"input_layernorm.weight": "attn_norm.weight", "post_attention_layernorm.weight": "post_attention_norm.weight",
             "self_attn.sinks": "attn_sinks.weight", "mlp.router.weight": "ffn_gate_inp.weight",
             "mlp.router.bias": "ffn_gate_inp.bias"}
    for x in "qkvo":
        for b in ("weight", "bias"):
            names[f"self_attn.{x}_proj.{b}"] = f"attn_{'output' if x == 'o' else x}.{b}"
    for L in range(cfg["num_hidden_layers"]):
        p, g = f"model.layers.{L}.", f"blk.{L}."
        for hn, gn in names.items():
            ref[g + gn] = w[p + hn]
        e = p + "mlp.experts."
        gu = gom.mxfp4_ref(hf[e + "gate_up_proj_blocks"], hf[e + "gate_up_proj_scales"]).astype(np.float32)
        dn = gom.mxfp4_ref(hf[e + "down_proj_blocks"], hf[e + "down_proj_scales"]).astype(np.float32)
        ref[g + "ffn_gate_exps.weight"], ref[g + "ffn_up_exps.weight"] = gu[:, 0::2], gu[:, 1::2]
        ref[g + "ffn_down_exps.weight"] = dn
        gb = w[e + "gate_up_proj_bias"]
        ref[g + "ffn_gate_exps.bias"], ref[g + "ffn_up_exps.bias"] = gb[:, 0::2], gb[:, 1::2]
        ref[g + "ffn_down_exps.bias"] = w[e + "down_proj_bias"]
        w[e + "gate_up_proj"] = np.ascontiguousarray(gu.transpose(0, 2, 1))  # transformers' [E, H, 2I]
        w[e + "down_proj"] = np.ascontiguousarray(dn.transpose(0, 2, 1))  # [E, I, H]
    f32s = {n for n, a in ref.items() if a.ndim < 2 or "ffn_gate_inp" in n or not n.endswith(".weight")}
    files, mx = {}, None
    for ft, opts in (("F32", "gguf=F32"), ("BF16", "gguf"), ("Q8_0", "gguf=Q8_0"), ("MXFP4_MOE", "gguf=MXFP4_MOE")):
        with Mount(src, opts=opts + ",gguf_vocab=none") as m:
            files[ft] = open(m.path("model.gguf"), "rb").read()
            meta, infos, tensors = read_gguf(m.path("model.gguf"))
            if ft == "MXFP4_MOE":
                mx = (infos, tensors)
        assert set(tensors) == set(ref), sorted(set(tensors) ^ set(ref))
        for name, shape, t, _ in infos:
            a = ref[name]  # MXFP4_MOE: llama-quantize's, the experts MXFP4 and the other matrices Q8_0
            want_t = 0 if name in f32s else (39 if "_exps" in name else 8) if ft == "MXFP4_MOE" else TYPES[ft]
            assert (t, shape) == (want_t, list(a.shape)), (ft, name, t, shape)
            want = a.astype(np.float32).tobytes() if want_t == 0 else bf16_rne(a).tobytes() if want_t == 30 else \
                ggml_quantize(lib, want_t, a)
            assert tensors[name] == want, f"gpt-oss {ft}: {name}: bytes differ from the reference"
    want_meta = {"general.architecture": "gpt-oss", "gpt-oss.expert_count": 4, "gpt-oss.expert_used_count": 2,
                 "gpt-oss.expert_feed_forward_length": 96, "gpt-oss.attention.sliding_window": 4,
                 "gpt-oss.attention.key_length": cfg["head_dim"], "gpt-oss.rope.scaling.type": "yarn",
                 "gpt-oss.rope.scaling.factor": 32.0, "gpt-oss.rope.scaling.original_context_length": 4096,
                 "general.file_type": 0}
    out = os.path.join(d, "gpt-oss-out")
    ckref.run(CKPTFS, "convert", src, out, "--format", "gguf:F32", "--gguf-vocab", "none", "--quiet")
    path = os.path.join(out, "model.gguf")
    assert open(path, "rb").read() == files["F32"]
    meta = read_gguf(path)[0]
    assert all(meta.get(k) == v for k, v in want_meta.items()), {k: (meta.get(k), v) for k, v in want_meta.items()}
    got = gs.llama_cpp(MODULES, path, TOKS)
    want = gpt_oss_forward(w, cfg, TOKS)
    import torch
    r, same = gs.rel(got, want), bool(torch.equal(got.argmax(-1), want.argmax(-1)))
    assert r < 1e-3 and same, f"gpt-oss: llama.cpp vs torch {r:.2e}, greedy same {same}"
    no_sinks = gs.rel(got, gpt_oss_forward({k: (a * 0 - 1e9 if k.endswith("sinks") else a) for k, a in w.items()},
                                           cfg, TOKS))
    swapped = {k: a for k, a in w.items()}
    for L in range(cfg["num_hidden_layers"]):
        k = f"model.layers.{L}.mlp.experts.gate_up_proj"
        swapped[k] = np.ascontiguousarray(w[k].reshape(*w[k].shape[:2], -1, 2)[..., ::-1].reshape(w[k].shape))
    off_swap = gs.rel(got, gpt_oss_forward(swapped, cfg, TOKS))
    no_window = gs.rel(got, gpt_oss_forward(w, dict(cfg, sliding_window=10 ** 6), TOKS))
    assert min(no_sinks, off_swap, no_window) > 1e-2, (no_sinks, off_swap, no_window)
    # MXFP4_MOE: the released experts come back exactly (their values fit
    # ggml's grid: the block's largest magnitude fixes a scale no coarser),
    # decoded here from the GGUF block layout; llama.cpp's logits against
    # the model with the other matrices as their Q8_0 blocks hold them
    back = {g: h for h, g in names.items()}
    held = dict(w)
    for name, shape, t, _ in mx[0]:
        blob = mx[1][name]
        if t == 39:
            blk = np.frombuffer(blob, np.uint8).reshape(-1, 17)
            codes = np.concatenate([blk[:, 1:] & 15, blk[:, 1:] >> 4], 1)
            vals = gom.E2M1[codes] * np.ldexp(1.0, blk[:, :1].astype(np.int64) - 127)
            assert np.array_equal(vals.reshape(shape).astype(np.float32), ref[name]), name
        elif t == 8:
            a = dequantize(8, blob, shape)
            hn = {"token_embd.weight": "model.embed_tokens.weight", "output.weight": "lm_head.weight"}.get(name)
            held[hn or f"model.layers.{name.split('.')[1]}." + back[".".join(name.split(".")[2:])]] = a
    mpath = os.path.join(out, "mxfp4.gguf")
    open(mpath, "wb").write(files["MXFP4_MOE"])
    r_mx = gs.rel(gs.llama_cpp(MODULES, mpath, TOKS), gpt_oss_forward(held, cfg, TOKS))
    assert r_mx < 3e-2, f"gpt-oss MXFP4_MOE: llama.cpp vs torch over the held weights {r_mx:.2e}"
    # the other way: the F32 file and the MXFP4_MOE one as Hugging Face
    # (gguf-gpt-oss-to-hf, a config.json made from the metadata): the
    # weights each file holds, the experts in transformers' dequantised
    # layout, the released ones exactly; served as a GGUF again, the
    # file's own tensors
    for tag, gpath, want_w in (("F32", path, w), ("MXFP4_MOE", mpath, held)):
        hfd = os.path.join(d, "gpt-oss-hf-" + tag)
        ckref.run(CKPTFS, "convert", gpath, hfd, "--mapping", "gguf-gpt-oss-to-hf", "--quiet")
        got_w = {k: v[2] for k, v in ckref.read_checkpoint_dir(hfd).items()}
        assert set(got_w) == set(want_w), sorted(set(got_w) ^ set(want_w))
        bad_keys = [k for k in got_w if not np.array_equal(got_w[k], np.asarray(want_w[k], np.float32))]
        assert not bad_keys, (tag, bad_keys[:3])
        hc = json.load(open(os.path.join(hfd, "config.json")))
        for k in ("architectures", "hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
                  "num_key_value_heads", "head_dim", "num_local_experts", "num_experts_per_tok", "experts_per_token",
                  "sliding_window", "layer_types", "swiglu_limit", "rope_theta", "max_position_embeddings"):
            assert hc.get(k) == cfg.get(k), (tag, k, hc.get(k), cfg.get(k))
        assert {k: hc["rope_scaling"].get(k) for k in ("rope_type", "factor", "original_max_position_embeddings")} \
            == {k: cfg["rope_scaling"][k] for k in ("rope_type", "factor", "original_max_position_embeddings")}
        again = os.path.join(d, "gpt-oss-again-" + tag)
        ckref.run(CKPTFS, "convert", gpath, again, "--format", "gguf:" + tag, "--gguf-vocab", "none", "--quiet")
        assert read_gguf(os.path.join(again, "model.gguf"))[1:] == read_gguf(gpath)[1:], tag
    # a gpt-oss GGUF whose metadata lies: a block count of 4e9 (the window
    # pattern is one entry per layer: not built, refused by the tensor
    # check) and an expert width the stacks do not have
    types = {}
    _, gmeta, ginfos, gdata, gb = gs.parse_gguf(path, types)
    gt = {n: (t, list(reversed(dims)), gb[gdata + off:gdata + off + int(np.prod(dims)) * 4])
          for n, dims, t, off in ginfos}
    for key, val, says in (("gpt-oss.block_count", 4000000000, "block_count 4000000000"),
                           ("gpt-oss.expert_feed_forward_length", 64, "expert_feed_forward_length 64 make")):
        liar = os.path.join(d, "gpt-oss-liar.gguf")
        arr = {k: (9, (8 if not v or isinstance(v[0], str) else 5 if isinstance(v[0], int) else 6, v))
               for k, v in gmeta.items() if types[k] == 9}  # tokens, types, merges: their element types
        gs.write_gguf(liar, {k: arr.get(k, (types[k], val if k == key else v)) for k, v in gmeta.items()}, gt)
        p = subprocess.run([CKPTFS, "inspect", liar], capture_output=True, text=True, timeout=20)
        assert p.returncode == 3 and len(p.stderr.splitlines()) == 1 and says in p.stderr, (key, p.stderr)
    # transformers' dequantised experts: the same bytes
    deq = os.path.join(d, "gpt-oss-deq")
    os.makedirs(deq)
    json.dump(cfg, open(os.path.join(deq, "config.json"), "w"))
    t2 = {k: v for k, v in raw.items() if not k.endswith(("_blocks", "_scales"))}
    for L in range(cfg["num_hidden_layers"]):
        e = f"model.layers.{L}.mlp.experts."
        for n in ("gate_up_proj", "down_proj"):
            t2[e + n] = ("BF16", w[e + n].shape, bf16_rne(w[e + n]).tobytes())
    ckref.write_safetensors(os.path.join(deq, "model.safetensors"), t2)
    ckref.run(CKPTFS, "convert", deq, out + "-deq", "--format", "gguf:F32", "--gguf-vocab", "none", "--quiet")
    assert same_but_name(os.path.join(out + "-deq", "model.gguf"), path)
    # GPT-OSS's own truncate: false: the same file, llama.cpp's rounded range
    real = os.path.join(d, "gpt-oss-real")
    shutil.copytree(src, real)
    rcfg = dict(cfg, rope_scaling=dict(cfg["rope_scaling"], truncate=False))
    json.dump(rcfg, open(os.path.join(real, "config.json"), "w"))
    ckref.run(CKPTFS, "convert", real, out + "-real", "--format", "gguf:F32", "--gguf-vocab", "none", "--quiet")
    assert same_but_name(os.path.join(out + "-real", "model.gguf"), path)
    hf_untruncated = gs.rel(got, gpt_oss_forward(w, rcfg, TOKS))
    bad = os.path.join(d, "gpt-oss-bad")
    shutil.copytree(src, bad)
    for edit, says in (({"swiglu_limit": 8.0}, "swiglu_limit 8: llama.cpp's gpt-oss clamps at 7 only"),
                       ({"layer_types": ["full_attention"] * cfg["num_hidden_layers"]},
                        "layer_types[0] is not \"sliding_attention\""),
                       ({"tie_word_embeddings": True}, "gpt-oss has no tied output"),
                       ({"rope_scaling": dict(cfg["rope_scaling"], beta_fast=16.0)},
                        "rope_scaling.beta_fast 16: llama.cpp's yarn takes 32 only"),
                       ({"rope_scaling": dict(cfg["rope_scaling"], attention_factor=1.5)},
                        "rope_scaling.attention_factor: the GGUF view serves yarn")):
        json.dump(dict(cfg, **edit), open(os.path.join(bad, "config.json"), "w"))
        refused(["inspect", bad, "--format", "gguf"], says, 3)
    print(f"gpt-oss (MXFP4 experts): every tensor exact in F32, BF16 (the default), Q8_0 and MXFP4_MOE (the "
          f"released experts back exactly; logits {r_mx:.1e} from the held model), expert biases F32; both files "
          f"back to Hugging Face (gguf-gpt-oss-to-hf) as they hold it, config.json from the metadata, and as a GGUF "
          f"again their own tensors; "
          f"transformers' dequantised experts serve the same file; llama.cpp's logits {r:.1e} relative to torch, "
          f"same greedy (without the sinks {no_sinks:.1e}, gate and up swapped {off_swap:.1e}, no window "
          f"{no_window:.1e}); with truncate false llama.cpp differs from Hugging Face's unrounded YaRN range by "
          f"{hf_untruncated:.1e}; a limit, window pattern, tied output, YaRN beta or attention factor llama.cpp "
          f"does not run refused")


def llama3_rope(d, src, cfg, w):
    """Llama 3.1's rope scaling (rope_type llama3): llama.cpp takes it as a
    tensor rope_freqs.weight of head_dim / 2 divisors, which the view
    computes from config.json; its values against the converter's formula
    (numpy, float32, written here), and llama.cpp's logits against the torch
    forward with Hugging Face's llama3 frequencies. The original context is
    small (256) so that the head's 4 frequencies fall in all three bands and
    the scaled ones turn within the test's 10 positions; negative control:
    the file without the tensor must differ."""
    rs = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
          "original_max_position_embeddings": 256}
    l3 = os.path.join(d, "llama3-rope")
    shutil.copytree(src, l3)
    c3 = dict(cfg, rope_scaling=rs, _name_or_path="llama3-rope")
    json.dump(c3, open(os.path.join(l3, "config.json"), "w"))
    # the same model as transformers 5 saves it: rope_theta and the scaling
    # in rope_parameters (read as the old keys only, it was served with
    # rope_theta's default and no scaling)
    v5 = os.path.join(d, "llama3-rope-v5")
    shutil.copytree(src, v5)
    c5 = {k: v for k, v in c3.items() if k not in ("rope_theta", "rope_scaling")}
    json.dump(dict(c5, rope_parameters=dict(rs, rope_theta=cfg["rope_theta"])), open(os.path.join(v5, "config.json"), "w"))
    hd = cfg["hidden_size"] // cfg["num_attention_heads"]
    freq = np.float32(1) / np.float32(cfg["rope_theta"]) ** (np.arange(0, hd, 2, dtype=np.float32) / np.float32(hd))
    wave = np.float32(2 * np.pi) / freq
    smooth = (np.float32(256) / wave - np.float32(1)) / np.float32(3)
    want = np.where(wave < 256 / 4, np.float32(1), np.where(wave > 256 / 1, np.float32(8),
                    np.float32(1) / ((np.float32(1) - smooth) / np.float32(8) + smooth))).astype(np.float32)
    assert len(set(want.tolist())) >= 3, want  # unscaled, scaled and smoothed frequencies
    with Mount(l3, opts="gguf=F32") as m:
        path = m.path("model.gguf")
        meta, infos, tensors = read_gguf(path)
        info = [i for i in infos if i[0] == "rope_freqs.weight"]
        assert info and info[0][1:3] == ([hd // 2], 0), info
        got = np.frombuffer(tensors["rope_freqs.weight"], np.float32)
        assert np.allclose(got, want, rtol=1e-6, atol=0), (got, want)
        assert not [k for k in meta if "rope.scaling" in k], [k for k in meta if "rope" in k]
        r, same = logits(path, w, c3)
        legacy = open(path, "rb").read()
    with Mount(v5, opts="gguf=F32") as m:
        assert open(m.path("model.gguf"), "rb").read() == legacy, "rope_parameters: another model.gguf"
    assert r < 1e-3 and same, f"llama3 rope: llama.cpp vs torch {r:.2e}, greedy same {same}"
    with Mount(src, opts="gguf=F32") as m:
        r_bad, _ = logits(m.path("model.gguf"), w, c3)
    assert r_bad > 100 * max(r, 1e-6), f"llama3 rope: the file without rope_freqs still matches ({r_bad:.1e})"
    p = subprocess.run([CKPTFS, "inspect", l3, "--format", "gguf"], capture_output=True, text=True, timeout=60)
    assert p.returncode == 0 and f"{len(infos)} tensors" in p.stdout.splitlines()[0] and \
        "rope_freqs.weight" in p.stdout, p.stdout[:400]
    print(f"llama3 rope scaling: rope_freqs.weight as the converter computes it ({got.tolist()}); "
          f"llama.cpp's logits {r:.1e} relative to torch with Hugging Face's llama3 frequencies; "
          f"without the tensor: off by {r_bad:.1e}; transformers 5's rope_parameters: the same bytes")


PHI3_NAMES = {"self_attn.qkv_proj": "attn_qkv", "self_attn.o_proj": "attn_output",
              "input_layernorm": "attn_norm", "post_attention_layernorm": "ffn_norm",
              "mlp.gate_up_proj": "ffn_up", "mlp.down_proj": "ffn_down"}


def granite(d, src, cfg, w):
    """IBM Granite (GraniteForCausalLM, dense): Llama's tensors and Q/K
    permutation, and four scalars llama.cpp reads from the metadata
    (attention, embedding, residual and logit scales). llama.cpp's logits
    against a torch Granite forward pass; taken as a Llama (no scalars) they
    are off. A config that leaves them out gets Hugging Face's defaults, 1
    each: also for the attention, where llama.cpp without the key would use
    1/sqrt(head_dim)."""
    scal = {"attention_multiplier": 0.2, "embedding_multiplier": 3.0, "residual_multiplier": 0.5,
            "logits_scaling": 4.0}
    keys = ["granite.attention.scale", "granite.embedding_scale", "granite.residual_scale", "granite.logit_scale"]
    gr = os.path.join(d, "granite")
    shutil.copytree(src, gr)
    base = dict(cfg, architectures=["GraniteForCausalLM"], model_type="granite")
    out = []
    for c in (dict(base, **scal), base):
        json.dump(c, open(os.path.join(gr, "config.json"), "w"))
        with Mount(gr, opts="gguf=F32") as m:
            path = m.path("model.gguf")
            meta, _, _ = read_gguf(path)
            assert meta["general.architecture"] == "granite", meta["general.architecture"]
            assert [meta[k] for k in keys] == [np.float32(c.get(k, 1.0)) for k in scal], [meta[k] for k in keys]
            r, same = logits(path, w, c)
            r_llama, _ = logits(path, w, dict(c, model_type="llama"))
        assert r < 1e-3 and same, f"granite: llama.cpp vs torch {r:.2e}, greedy same {same}"
        assert r_llama > 100 * max(r, 1e-6), f"granite: the Llama forward matches too ({r_llama:.1e})"
        out.append(f"{r:.1e} (as a Llama {r_llama:.1e})")
    json.dump(dict(base, attention_multiplier=0), open(os.path.join(gr, "config.json"), "w"))
    refused(["inspect", gr, "--format", "gguf"], "attention_multiplier", 3)
    print(f"granite: the four scalars in the metadata, llama.cpp {out[0]}; left out, Hugging Face's 1 each: "
          f"{out[1]}")


def vlm_checkpoint(dst, src, config, tensors):
    """A checkpoint directory: src's tokenizer files, config, F32 tensors."""
    os.makedirs(dst)
    for f in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(os.path.join(src, f), dst)
    json.dump(config, open(os.path.join(dst, "config.json"), "w"))
    ckref.write_safetensors(os.path.join(dst, "model.safetensors"),
                            {k: ("F32", v.shape, v.tobytes()) for k, v in tensors.items()})
    return dst


def mistral3(d, src, cfg, w):
    """Mistral Small 3.1 / 3.2 (Mistral3ForConditionalGeneration): the
    language model's fields under text_config, its keys under
    language_model.model. (transformers 4.50) or model.language_model.
    (later), the head as language_model.lm_head or lm_head, beside a vision
    tower and a projector. Both namings serve the bytes of the same model
    saved as MistralForCausalLM, and llama.cpp's logits on them equal the
    torch forward pass. A text_config without the key-value heads gets
    MistralConfig's 8, not the query heads (mistral3_defaults): on this
    model with 2 the config does not describe the weights and is refused
    (it was refused before for the missing field), and so is a key no rule
    takes (the GGUF mappings are strict about leftovers also after another
    mapping)."""
    hd = cfg["hidden_size"] // cfg["num_attention_heads"]
    text = os.path.join(d, "m3-text")
    shutil.copytree(src, text)
    json.dump(dict(cfg, architectures=["MistralForCausalLM"], model_type="mistral", _name_or_path="m3"),
              open(os.path.join(text, "config.json"), "w"))
    with Mount(text, opts="gguf=F32") as m:
        want_bytes = open(m.path("model.gguf"), "rb").read()
    tc = dict({k: v for k, v in cfg.items() if k != "architectures"}, model_type="mistral")
    outer = {"architectures": ["Mistral3ForConditionalGeneration"], "model_type": "mistral3",
             "_name_or_path": "m3", "image_token_index": 10, "spatial_merge_size": 2, "text_config": tc,
             "vision_config": {"model_type": "pixtral", "hidden_size": 16}}
    vision = {"vision_tower.patch_conv.weight": (16, 3, 2, 2), "vision_tower.ln_pre.weight": (16,),
              "multi_modal_projector.linear_1.weight": (cfg["hidden_size"], 64),
              "multi_modal_projector.norm.weight": (64,)}
    rng = np.random.default_rng(8)
    for tag, lm, head, vis in (("4.50", "language_model.model.", "language_model.lm_head.weight", ""),
                               ("later", "model.language_model.", "lm_head.weight", "model.")):
        t = {(head if k == "lm_head.weight" else lm + k[len("model."):]): v for k, v in w.items()}
        assert head in t, sorted(t)[:3]
        t.update({vis + k: rng.standard_normal(shape).astype(np.float32) for k, shape in vision.items()})
        vlm = vlm_checkpoint(os.path.join(d, "m3-" + tag), src, outer, t)
        with Mount(vlm, opts="gguf=F32") as m:
            path = m.path("model.gguf")
            assert open(path, "rb").read() == want_bytes, f"mistral3 {tag}: another model.gguf"
            r, same = logits(path, w, cfg)
        assert r < 1e-3 and same, f"mistral3 {tag}: llama.cpp vs torch {r:.2e}, greedy same {same}"
    bad = os.path.join(d, "m3-later")
    json.dump(dict(outer, text_config={k: v for k, v in tc.items() if k != "num_key_value_heads"}),
              open(os.path.join(bad, "config.json"), "w"))
    refused(["inspect", bad, "--format", "gguf"], f"[nkv * hd, H] = [{8 * hd}, {cfg['hidden_size']}]: the config "
            "does not describe this checkpoint", 3)
    json.dump(outer, open(os.path.join(bad, "config.json"), "w"))
    extra = dict(t, **{"model.language_model.layers.0.self_attn.rotary.scale": np.ones(4, np.float32)})
    ckref.write_safetensors(os.path.join(bad, "model.safetensors"),
                            {k: ("F32", v.shape, v.tobytes()) for k, v in extra.items()})
    refused(["inspect", bad, "--format", "gguf"], "used by no rule, first \"model.layers.0.self_attn.rotary.scale\"")
    print(f"mistral3 (Mistral Small 3.1): both key namings serve the text model's bytes, llama.cpp {r:.1e}; "
          "MistralConfig's 8 key-value heads on a model of 2 and a stray key refused")


def text_model(d, name, rng, heads, kv_heads):
    """A llama model in its own directory (make_model's names), and its
    weights, for the classes whose defaults depend on the head counts."""
    sub = os.path.join(d, name)
    os.makedirs(sub)
    return make_model(sub, "llama", rng, ("--heads", str(heads), "--kv-heads", str(kv_heads)))


def served_as(src, config, tensors, d, name):
    """model.gguf (F32) of a checkpoint of these tensors and this config."""
    v = vlm_checkpoint(os.path.join(d, name), src, config, tensors)
    with Mount(v, opts="gguf=F32") as m:
        return open(m.path("model.gguf"), "rb").read()


def mistral3_defaults(d, rng):
    """Mistral3's text_config without num_key_value_heads: MistralConfig's
    8, where the mapping's own default would be the query heads. With 16
    heads and 8 key-value heads the file equals MistralForCausalLM's with 8
    spelled out (the mapping's Q/K permutation now reads the view's config:
    it used to read the file's, and was refused here), and llama.cpp's
    logits equal the torch forward pass with 8. A text_config of model_type
    llama gets LlamaConfig's default instead, the query heads, which do not
    describe these weights: refused."""
    src, cfg, w = text_model(d, "m3kv", rng, 16, 8)
    spelled = dict(cfg, architectures=["MistralForCausalLM"], model_type="mistral", _name_or_path="m3kv")
    want = served_as(src, spelled, w, d, "m3kv-text")
    # with model_type mistral, and with none (Mistral3Config's default type);
    # a llama text model's default would be the 16 query heads
    tc = {k: v for k, v in cfg.items() if k not in ("architectures", "num_key_value_heads", "model_type")}
    lm = {(k if k == "lm_head.weight" else "model.language_model." + k[len("model."):]): v for k, v in w.items()}
    outer = {"architectures": ["Mistral3ForConditionalGeneration"], "model_type": "mistral3",
             "_name_or_path": "m3kv", "text_config": tc}
    for typed in (dict(tc, model_type="mistral"), tc):
        got = served_as(src, dict(outer, text_config=typed), lm, d, f"m3kv-vlm-{len(typed)}")
        assert got == want, f"mistral3 without num_key_value_heads ({typed.get('model_type')}): " \
            "not MistralForCausalLM's file with 8"
    v = vlm_checkpoint(os.path.join(d, "m3kv-llama"), src, dict(outer, text_config=dict(tc, model_type="llama")), lm)
    refused(["inspect", v, "--format", "gguf"], f"[nkv * hd, H] = [64, {cfg['hidden_size']}]", 3)
    path = os.path.join(d, "m3kv.gguf")
    open(path, "wb").write(got)
    r, same = logits(path, w, cfg)
    assert r < 1e-3 and same, f"mistral3 defaults: llama.cpp vs torch {r:.2e}, greedy same {same}"
    print(f"mistral3: a text_config without the key-value heads serves MistralConfig's 8 (16 query heads), "
          f"llama.cpp {r:.1e}")


def llava(d, rng):
    """LLaVA (LlavaForConditionalGeneration: LLaVA 1.5, Pixtral 12B): the
    text model under text_config, which LLaVA 1.5's config.json fills only
    in part: the rest are LlamaConfig's defaults (key-value heads = the
    query heads, rope_theta 10000, rms_norm_eps 1e-6), or MistralConfig's
    for model_type mistral. Keys as transformers 4.50 (language_model.model.*,
    language_model.lm_head, vision_tower.*, multi_modal_projector.*) or later
    (model.language_model.*, lm_head, model.vision_tower.*): both serve the
    file of the LlamaForCausalLM with those defaults spelled out, and
    llama.cpp's logits on it equal the torch forward pass. A text model of
    another type is refused (llama.cpp reads LLaVA's as llama), and so is a
    config whose defaults do not describe the weights (a GQA model whose
    text_config leaves out the key-value heads)."""
    src, cfg, w = text_model(d, "llava", rng, 8, 8)
    ref = dict(cfg, architectures=["LlamaForCausalLM"], _name_or_path="llava", rope_theta=10000.0,
               rms_norm_eps=1e-6, max_position_embeddings=4096)
    want = served_as(src, ref, w, d, "llava-text")
    given = ("hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads", "vocab_size")
    tc = dict({k: cfg[k] for k in given}, model_type="llama", max_position_embeddings=4096)
    outer = {"architectures": ["LlavaForConditionalGeneration"], "model_type": "llava", "_name_or_path": "llava",
             "image_token_index": 300, "text_config": tc,
             "vision_config": {"model_type": "clip_vision_model", "hidden_size": 16}}
    vision = {"vision_tower.vision_model.embeddings.patch_embedding.weight": (16, 3, 2, 2),
              "multi_modal_projector.linear_1.weight": (32, 16),
              "multi_modal_projector.linear_2.weight": (cfg["hidden_size"], 32)}
    for tag, lm, head, vis in (("4.50", "language_model.model.", "language_model.lm_head.weight", ""),
                               ("later", "model.language_model.", "lm_head.weight", "model.")):
        t = {(head if k == "lm_head.weight" else lm + k[len("model."):]): v for k, v in w.items()}
        t.update({vis + k: rng.standard_normal(shape).astype(np.float32) for k, shape in vision.items()})
        for typed in (True, False):
            conf = dict(outer, text_config=tc if typed else {k: v for k, v in tc.items() if k != "model_type"})
            got = served_as(src, conf, t, d, f"llava-{tag}-{typed}")
            assert got == want, f"llava {tag} (model_type given: {typed}): not the spelled-out model's file"
    path = os.path.join(d, "llava.gguf")
    open(path, "wb").write(want)
    r, same = logits(path, w, ref)
    assert r < 1e-3 and same, f"llava: llama.cpp vs torch {r:.2e}, greedy same {same}"
    bad = os.path.join(d, "llava-later-True")
    for text, says in ((dict(tc, model_type="qwen2"), 'text_config\'s model_type "qwen2"'),
                       (dict(tc, model_type=7), "text_config's \"model_type\" is not a string")):
        json.dump(dict(outer, text_config=text), open(os.path.join(bad, "config.json"), "w"))
        refused(["inspect", bad, "--format", "gguf"], says, 3)
    gqa, gcfg, gw = text_model(d, "llava-gqa", rng, 8, 2)
    t = {(k if k == "lm_head.weight" else "model.language_model." + k[len("model."):]): v for k, v in gw.items()}
    v = vlm_checkpoint(os.path.join(d, "llava-gqa-vlm"), gqa, dict(outer, text_config=tc), t)
    refused(["inspect", v, "--format", "gguf"], f"[nkv * hd, H] = [{gcfg['hidden_size']}, {gcfg['hidden_size']}]", 3)
    print(f"llava: both key namings, with and without the text model's type, serve LlamaConfig's defaults "
          f"spelled out, llama.cpp {r:.1e}; a qwen2 text model and a GQA model without its key-value heads refused")


def qwen2vl(d, rng):
    """Qwen2-VL / Qwen2.5-VL: the language model (Qwen2 with Q/K/V biases)
    as llama.cpp's qwen2vl, its multimodal rope's sections (mrope_section)
    as rope.dimension_sections padded to four. Fields at the top level and
    keys model.* beside visual.* (transformers 4.49), or text_config and
    model.language_model.* beside model.visual.* (later): both serve the
    same file, and llama.cpp's logits on it equal the 1-D rope's torch
    forward pass (for text the three positions are equal). This llama.cpp's
    qwen2vl leaves the RMSNorm epsilon at 0 whatever the metadata says
    (node-llama-cpp 3.22; qwen2 reads it): the file is checked to hold the
    config's, and the forward pass compared with takes 0. Sections that do
    not cover the rotated pairs are refused."""
    os.makedirs(os.path.join(d, "q2vl"))
    src, cfg, w = make_model(os.path.join(d, "q2vl"), "qwen2", rng)
    hd = cfg["hidden_size"] // cfg["num_attention_heads"]
    assert hd == 8, hd
    rs = {"type": "mrope", "mrope_section": [1, 2, 1]}
    vision = {"visual.patch_embed.proj.weight": (16, 3, 2, 2, 2), "visual.blocks.0.norm1.weight": (16,),
              "visual.merger.mlp.0.weight": (64, 64)}
    top = {k: v for k, v in cfg.items() if k != "architectures"}
    old = dict(top, architectures=["Qwen2_5_VLForConditionalGeneration"], model_type="qwen2_5_vl",
               rope_scaling=rs, _name_or_path="q2vl", vision_config={"hidden_size": 16})
    new = {"architectures": ["Qwen2_5_VLForConditionalGeneration"], "model_type": "qwen2_5_vl",
           "_name_or_path": "q2vl", "vision_config": {"hidden_size": 16},
           "text_config": dict(top, model_type="qwen2_5_vl_text",
                               rope_scaling={"mrope_section": [1, 2, 1], "rope_type": "default", "type": "default"})}
    files = {}
    for tag, c, lm, vis in (("4.49", old, "model.", ""), ("later", new, "model.language_model.", "model.")):
        t = {(k if k == "lm_head.weight" else lm + k[len("model."):]): v for k, v in w.items()}
        t.update({vis + k: rng.standard_normal(shape).astype(np.float32) for k, shape in vision.items()})
        vl = vlm_checkpoint(os.path.join(d, "q2vl-" + tag), src, c, t)
        with Mount(vl, opts="gguf=F32") as m:
            path = m.path("model.gguf")
            files[tag] = open(path, "rb").read()
            meta, _, tensors = read_gguf(path)
            assert meta["general.architecture"] == "qwen2vl" and \
                meta["qwen2vl.rope.dimension_sections"] == [1, 2, 1, 0], meta.get("qwen2vl.rope.dimension_sections")
            assert not any(k.startswith(("v.", "visual", "model.")) for k in tensors), sorted(tensors)
            assert np.float32(meta["qwen2vl.attention.layer_norm_rms_epsilon"]) == np.float32(cfg["rms_norm_eps"])
            # this llama.cpp's qwen2vl does not read the epsilon (the file holds the
            # config's, above): it normalizes with 0, which the forward pass takes too
            r, same = logits(path, w, dict(cfg, rms_norm_eps=0.0))
            r_eps, _ = logits(path, w, cfg)
        assert r < 1e-5 and same, f"qwen2vl {tag}: llama.cpp vs torch {r:.2e}, greedy same {same}"
    assert files["4.49"] == files["later"], "the two namings serve different files"
    json.dump(dict(old, rope_scaling={"type": "mrope", "mrope_section": [1, 1, 1]}),
              open(os.path.join(d, "q2vl-4.49", "config.json"), "w"))
    refused(["inspect", os.path.join(d, "q2vl-4.49"), "--format", "gguf"],
            "mrope_section covers 3 rotated pairs, the head has 4", 3)
    for sec, says in (("1,2,1", "must be a list of 1 to 4 section sizes"), ([1, 1, 1, 1, 0], "1 to 4 section"),
                      ([], "1 to 4 section"), ([1, -1, 4], "mrope_section[1] is not a size"),
                      ([1.5, 2.5], "mrope_section[0] is not a size"), ([1, 2, 1e30], "[2] is not a size")):
        json.dump(dict(old, rope_scaling={"type": "mrope", "mrope_section": sec}),
                  open(os.path.join(d, "q2vl-4.49", "config.json"), "w"))
        refused(["inspect", os.path.join(d, "q2vl-4.49"), "--format", "gguf"], says, 3)
    print(f"qwen2.5-vl: the language model as qwen2vl, sections [1, 2, 1, 0], both namings the same file, "
          f"llama.cpp {r:.1e} (it normalizes with epsilon 0 whatever the file says: {r_eps:.1e} against the "
          f"config's); sections short of the head refused")


def phi3(d, rng, lib):
    """Phi-3 (arch phi3): the fused qkv_proj and gate_up_proj served as
    attn_qkv and ffn_up as they are (llama.cpp splits both; the NeoX rope,
    no Q/K permutation), every tensor's bytes as the converter names them,
    the sliding window and rope context in the metadata; llama.cpp's logits
    against the torch Llama forward over the weights split into q/k/v and
    gate/up (gguf_source.phi3_unfuse). Negative control: a source with the
    gate and up halves swapped must differ. Then LongRoPE, and Phi-4-mini's
    partial rope."""
    import torch
    src, cfg, w = make_model(d, "phi3", rng)
    cfg["sliding_window"] = 2047  # Phi-3-mini-4k's
    json.dump(cfg, open(os.path.join(src, "config.json"), "w"), indent=1)
    # Phi-3's SentencePiece vocabulary: llama.cpp looks up its special
    # tokens by text for a model named phi3 (and fails to load without them)
    os.unlink(os.path.join(src, "tokenizer.json"))
    pieces = [("<unk>", 0.0, 2), ("<s>", 0.0, 3), ("</s>", 0.0, 3), ("<|endoftext|>", 0.0, 3)]
    pieces += [(f"<0x{b:02X}>", 0.0, 6) for b in range(256)] + [("▁a", -1.0, 1), ("▁b", -2.0, 1)]
    open(os.path.join(src, "tokenizer.model"), "wb").write(spm_model(pieces))
    json.dump({"bos_token": "<s>", "eos_token": "<|endoftext|>"}, open(os.path.join(src, "tokenizer_config.json"), "w"))
    llama = {k: a for k, (_, a) in gs.phi3_unfuse({k: ("F32", v.shape, v) for k, v in w.items()},
                                                   cfg).items()}
    top = {"model.embed_tokens.weight": "token_embd.weight", "model.norm.weight": "output_norm.weight",
           "lm_head.weight": "output.weight"}
    ref = {}
    for k, a in w.items():
        p = k.split(".")
        ref[top[k] if k in top else f"blk.{p[2]}.{PHI3_NAMES['.'.join(p[3:-1])]}.{p[-1]}"] = a
    H, nh = cfg["hidden_size"], cfg["num_attention_heads"]
    want_meta = {"general.architecture": "phi3", "phi3.context_length": cfg["max_position_embeddings"],
                 "phi3.embedding_length": H, "phi3.block_count": cfg["num_hidden_layers"],
                 "phi3.feed_forward_length": cfg["intermediate_size"], "phi3.attention.head_count": nh,
                 "phi3.attention.head_count_kv": cfg["num_key_value_heads"],
                 "phi3.rope.dimension_count": H // nh, "phi3.attention.sliding_window": 2047,
                 "phi3.rope.scaling.original_context_length": cfg["max_position_embeddings"]}
    with Mount(src, opts="gguf=F32") as m:
        path = m.path("model.gguf")
        meta, infos, tensors = read_gguf(path)
        assert set(tensors) == set(ref), sorted(set(tensors) ^ set(ref))
        for name, shape, t, _ in infos:
            assert (t, shape) == (0, list(ref[name].shape)) and tensors[name] == ref[name].tobytes(), name
        for k, v in want_meta.items():
            assert meta.get(k) == v, (k, meta.get(k), v)
        r, same = logits(path, llama, cfg)
    assert r < 1e-3 and same, f"phi3: llama.cpp vs torch {r:.2e}, greedy same {same}"
    bad = os.path.join(d, "phi3-upgate")
    shutil.copytree(src, bad)
    swap = {k: np.concatenate([v[len(v) // 2:], v[:len(v) // 2]]) if "gate_up" in k else v for k, v in w.items()}
    ckref.write_safetensors(os.path.join(bad, "model.safetensors"),
                            {k: ("F32", v.shape, v.tobytes()) for k, v in swap.items()})
    with Mount(bad, opts="gguf=F32") as m:
        r_bad, _ = logits(m.path("model.gguf"), llama, cfg)
    assert r_bad > 100 * max(r, 1e-6), f"phi3: gate and up swapped still match ({r_bad:.1e})"
    r_long = phi3_longrope(d, src, cfg, llama)
    r_part, r_whole = phi4_mini(d, src, cfg, w, llama)
    print(f"phi3: fused attn_qkv and ffn_up exact, sliding window in the metadata; llama.cpp's logits "
          f"{r:.1e} relative to torch, same greedy; gate and up swapped: off by {r_bad:.1e}; "
          f"LongRoPE (128k-style) {r_long:.1e}; Phi-4-mini's partial rope, tied, {r_part:.1e} "
          f"(against the whole head turned {r_whole:.1e}); an odd or empty rotated width refused")


def phi4_mini(d, src, cfg, w, llama):
    """Phi-4-mini: partial_rotary_factor 0.75 turns the first 6 of each
    head's 8 dims (Hugging Face takes int(head_dim * factor)), with LongRoPE
    lists of one number per turned pair and tied embeddings (no lm_head).
    The metadata says 6 dims, the factor tensors hold 3 and there is no
    output.weight; llama.cpp's logits against torch turning those 6 dims,
    and against torch turning the whole head they differ. A factor that
    turns an odd number of dims, or none, is refused."""
    hd = cfg["hidden_size"] // cfg["num_attention_heads"]
    assert hd == 8, hd
    rs = {"type": "longrope", "long_factor": [1.0, 2.5, 9.0], "short_factor": [1.0, 1.2, 1.6]}
    c = dict(cfg, partial_rotary_factor=0.75, rope_scaling=rs, original_max_position_embeddings=8,
             tie_word_embeddings=True, _name_or_path="phi4-mini")
    p4 = os.path.join(d, "phi4-mini")
    shutil.copytree(src, p4)
    tied = {k: v for k, v in w.items() if k != "lm_head.weight"}
    ckref.write_safetensors(os.path.join(p4, "model.safetensors"),
                            {k: ("F32", v.shape, v.tobytes()) for k, v in tied.items()})
    json.dump(c, open(os.path.join(p4, "config.json"), "w"))
    held = {k: a for k, a in llama.items() if k != "lm_head.weight"}
    whole = dict(c, partial_rotary_factor=1.0, rope_scaling=dict(rs, long_factor=rs["long_factor"] + [1.0],
                                                                  short_factor=rs["short_factor"] + [1.0]))
    with Mount(p4, opts="gguf=F32") as m:
        path = m.path("model.gguf")
        meta, infos, tensors = read_gguf(path)
        assert meta["phi3.rope.dimension_count"] == 6, meta["phi3.rope.dimension_count"]
        assert "output.weight" not in tensors and "token_embd.weight" in tensors, sorted(tensors)
        for name, key in (("rope_factors_long.weight", "long_factor"), ("rope_factors_short.weight", "short_factor")):
            assert np.array_equal(np.frombuffer(tensors[name], np.float32), np.float32(rs[key])), name
        r, same = logits(path, held, c)
        r_whole, _ = logits(path, held, whole)
    assert r < 1e-3 and same, f"phi4-mini: llama.cpp vs torch {r:.2e}, greedy same {same}"
    assert r_whole > 100 * max(r, 1e-6), f"phi4-mini: the whole head turned matches too ({r_whole:.1e})"
    for f, says in ((0.625, "partial_rotary_factor 0.625 turns 5 of the head's 8 dims"),
                    (0.1, "partial_rotary_factor 0.1 turns 0 of the head's 8 dims")):
        json.dump(dict(c, partial_rotary_factor=f), open(os.path.join(p4, "config.json"), "w"))
        refused(["inspect", p4, "--format", "gguf"], says, 3)
    return r, r_whole


def phi3_longrope(d, src, cfg, llama):
    """Phi-3's LongRoPE (Phi-3-mini-128k, Phi-3.5-mini): llama.cpp takes the
    long and short per-frequency divisors as tensors and the attention
    factor as metadata. The original context (8) is shorter than the test's
    10 tokens and llama.cpp's context of 64, so both Hugging Face and
    llama.cpp take the long factors. The tensors and the factor against the
    config, llama.cpp's logits against torch with Hugging Face's LongRoPE
    frequencies and cos/sin scaling; against the short factors they differ."""
    hd = cfg["hidden_size"] // cfg["num_attention_heads"]
    rs = {"type": "longrope", "long_factor": [1.0, 1.5, 4.0, 12.0][:hd // 2],
          "short_factor": [1.0, 1.1, 1.3, 2.0][:hd // 2]}
    assert hd // 2 == 4, hd
    c = dict(cfg, rope_scaling=rs, original_max_position_embeddings=8, _name_or_path="phi3-lr")
    lr = os.path.join(d, "phi3-longrope")
    shutil.copytree(src, lr)
    json.dump(c, open(os.path.join(lr, "config.json"), "w"))
    # as transformers 5 writes it: all of it in rope_parameters
    v5 = os.path.join(d, "phi3-longrope-v5")
    shutil.copytree(src, v5)
    c5 = {k: v for k, v in c.items() if k not in ("rope_scaling", "rope_theta", "original_max_position_embeddings")}
    json.dump(dict(c5, rope_parameters=dict(rs, rope_type="longrope", rope_theta=cfg["rope_theta"],
                                            original_max_position_embeddings=8)),
              open(os.path.join(v5, "config.json"), "w"))
    att = np.sqrt(1 + np.log(c["max_position_embeddings"] / 8) / np.log(8))
    with Mount(lr, opts="gguf=F32") as m:
        path = m.path("model.gguf")
        meta, infos, tensors = read_gguf(path)
        for name, key in (("rope_factors_long.weight", "long_factor"), ("rope_factors_short.weight", "short_factor")):
            assert np.array_equal(np.frombuffer(tensors[name], np.float32), np.float32(rs[key])), name
        assert np.isclose(meta["phi3.rope.scaling.attn_factor"], att, rtol=1e-6), meta["phi3.rope.scaling.attn_factor"]
        assert meta["phi3.rope.scaling.original_context_length"] == 8
        r, same = logits(path, llama, c)
        short = dict(c, rope_scaling=dict(rs, long_factor=rs["short_factor"]))
        r_short, _ = logits(path, llama, short)
        legacy = open(path, "rb").read()
    with Mount(v5, opts="gguf=F32") as m:
        assert open(m.path("model.gguf"), "rb").read() == legacy, "rope_parameters: another model.gguf"
    assert r < 1e-3 and same, f"phi3 longrope: llama.cpp vs torch {r:.2e}, greedy same {same}"
    assert r_short > 100 * max(r, 1e-6), f"phi3 longrope: the short factors match too ({r_short:.1e})"
    json.dump(dict(c, rope_scaling=dict(rs, long_factor=[1.0])), open(os.path.join(lr, "config.json"), "w"))
    refused(["inspect", lr, "--format", "gguf"], "rope_scaling.long_factor must be a list of 4 numbers", 3)
    return r


def gemma(d, rng, lib):
    """Gemma (arch gemma), Gemma 2 (gemma2) and Gemma 3 (gemma3): llama.cpp's
    logits against Hugging Face's model in plain torch
    (gemma_megatron.hf_forward: sqrt(hidden)-scaled embedding, RMSNorm times
    1 + w, GeGLU, head_dim 32 on a 64-wide model, tied embedding; Gemma 2's
    four norms and attention and final soft-capping, here at 2 and 3 so they
    change the logits; Gemma 3's per-head Q/K norms and, over 6 layers, five
    sliding-window layers on RoPE base 10000 and a sixth global one on 1e6).
    Negative controls: a file whose norms are the stored offsets (what a view
    without the + 1 serves), for Gemma 2 one without the soft-capping
    metadata (llama.cpp then caps at its defaults), for Gemma 3 one with only
    the Q/K norms left as offsets, must differ."""
    import torch
    import gemma_megatron as gm
    for gen, arch in ((1, "gemma"), (2, "gemma2"), (3, "gemma3")):
        src, cfg, w = make_model(d, arch, rng, ["--layers", "6"] if gen == 3 else [])
        want = gm.hf_forward({k: torch.tensor(v) for k, v in w.items()}, cfg, TOKS, gen)
        with Mount(src, opts="gguf") as m:
            path = m.path("model.gguf")
            check_file(path, w, cfg, arch, "F32", lib)
            got = gs.llama_cpp(MODULES, path, TOKS)
        r, same = gs.rel(got, want), bool(torch.equal(got.argmax(-1), want.argmax(-1)))
        assert r < 1e-3 and same, f"{arch}: llama.cpp vs torch {r:.2e}, greedy same {same}"
        # the file a view without the + 1 would serve: the same checkpoint with
        # each norm 1 lower (the shipped mapping's + 1 gives back the stored offset)
        bad = os.path.join(d, arch + "-offsets")
        shutil.copytree(src, bad)
        ckref.write_safetensors(os.path.join(bad, "model.safetensors"), {
            k: ("F32", v.shape, (v - np.float32(1) if k.endswith("norm.weight") else v).tobytes())
            for k, v in w.items()})
        with Mount(bad, opts="gguf") as m:
            r_bad = gs.rel(gs.llama_cpp(MODULES, m.path("model.gguf"), TOKS), want)
        assert r_bad > 100 * max(r, 1e-6), f"{arch}: norms left as offsets still match ({r_bad:.1e})"
        caps = ""
        if gen == 2:  # the caps from config.json reach llama.cpp only through the metadata
            nocap = os.path.join(d, "gemma2-nocap")
            shutil.copytree(src, nocap)
            c2 = {k: v for k, v in cfg.items() if not k.endswith("softcapping")}
            json.dump(c2, open(os.path.join(nocap, "config.json"), "w"))
            with Mount(nocap, opts="gguf") as m:
                r_cap = gs.rel(gs.llama_cpp(MODULES, m.path("model.gguf"), TOKS), want)
            assert r_cap > 100 * max(r, 1e-6), f"gemma2: caps missing, still matches ({r_cap:.1e})"
            caps = f"; without the caps: off by {r_cap:.1e}"
            # a query scale llama.cpp does not apply: refused, not served wrong
            json.dump(dict(cfg, query_pre_attn_scalar=100), open(os.path.join(nocap, "config.json"), "w"))
            refused(["inspect", nocap, "--format", "gguf"], "query_pre_attn_scalar 100")
            mnt = tempfile.mkdtemp(dir=d)
            refused(["mount", nocap, mnt, "-o", "gguf"], "query_pre_attn_scalar 100")
            assert not os.listdir(mnt)
            # null is Hugging Face's "no capping", which llama.cpp's gemma2 cannot
            # express; a cap of 0 would divide by zero
            for key, val, says in (("final_logit_softcapping", None, "is null (no capping)"),
                                   ("attn_logit_softcapping", None, "is null (no capping)"),
                                   ("attn_logit_softcapping", 0, "attn_logit_softcapping\" must be")):
                json.dump(dict(cfg, **{key: val}), open(os.path.join(nocap, "config.json"), "w"))
                refused(["mount", nocap, mnt, "-o", "gguf"], says)
                assert not os.listdir(mnt)
        # no head_dim: the classes' 256, not hidden / heads (these heads are 32)
        nohd = os.path.join(d, arch + "-nohd")
        shutil.copytree(src, nohd)
        json.dump({k: v for k, v in cfg.items() if k != "head_dim"}, open(os.path.join(nohd, "config.json"), "w"))
        refused(["inspect", nohd, "--format", "gguf"], f"head_dim 256, intermediate_size {cfg['intermediate_size']} "
                f"make blk.0.attn_k.weight [{cfg['num_key_value_heads'] * 256}, {cfg['hidden_size']}]", 3)
        if gen == 3:
            caps = gemma3_controls(d, src, cfg, w, want, r) + gemma3_vlm(d, src, cfg, w, want)
        print(f"{arch}: every tensor exact (norms 1 + w); llama.cpp's logits {r:.1e} relative to a torch "
              f"{arch}, same greedy; norms left as offsets: off by {r_bad:.1e}{caps}")


def gemma3_controls(d, src, cfg, w, want, r):
    """Gemma 3: the Q/K norms' + 1 matters on its own; what llama.cpp's gemma3
    fixes (the 5:1 layer pattern, RoPE base 10000 on the sliding layers, no
    soft-capping, the query scale) is refused when config.json says otherwise."""
    qk = os.path.join(d, "gemma3-qk-offsets")
    shutil.copytree(src, qk)
    ckref.write_safetensors(os.path.join(qk, "model.safetensors"), {
        k: ("F32", v.shape, (v - np.float32(1) if k.endswith(("q_norm.weight", "k_norm.weight")) else v).tobytes())
        for k, v in w.items()})
    with Mount(qk, opts="gguf") as m:
        r_qk = gs.rel(gs.llama_cpp(MODULES, m.path("model.gguf"), TOKS), want)
    assert r_qk > 100 * max(r, 1e-6), f"gemma3: Q/K norms left as offsets still match ({r_qk:.1e})"
    bad = os.path.join(d, "gemma3-bad")
    shutil.copytree(src, bad)
    mnt = tempfile.mkdtemp(dir=d)
    full = ["full_attention" if (i + 1) % 6 == 0 else "sliding_attention" for i in range(6)]
    for edit, says in (({"sliding_window_pattern": 4}, "sliding_window_pattern 4"),
                       ({"rope_local_base_freq": 20000.0}, "rope_local_base_freq 20000"),
                       ({"final_logit_softcapping": 30.0}, "\"final_logit_softcapping\" is set"),
                       ({"attn_logit_softcapping": 50.0}, "\"attn_logit_softcapping\" is set"),
                       ({"query_pre_attn_scalar": 100}, "query_pre_attn_scalar 100"),
                       ({"layer_types": full[::-1]}, "layer_types[0] is full_attention"),
                       ({"layer_types": full[:5]}, "\"layer_types\" must list the 6 layers"),
                       ({"layer_types": "sliding_attention"}, "\"layer_types\" must list")):
        json.dump(dict(cfg, **edit), open(os.path.join(bad, "config.json"), "w"))
        refused(["mount", bad, mnt, "-o", "gguf"], says)
        assert not os.listdir(mnt)
    refused(["inspect", bad, "--format", "gguf"], "layer_types")
    # the config as newer transformers write it: layer_types, no pattern
    c2 = {k: v for k, v in cfg.items() if k != "sliding_window_pattern"}
    json.dump(dict(c2, layer_types=full), open(os.path.join(bad, "config.json"), "w"))
    with Mount(bad, opts="gguf") as m:
        assert gs.rel(gs.llama_cpp(MODULES, m.path("model.gguf"), TOKS), want) < 1e-3
    # as transformers 5 writes it: the rope per attention type in
    # rope_parameters (no rope_theta, no rope_local_base_freq): the same file
    json.dump(dict(cfg, _name_or_path="g3"), open(os.path.join(bad, "config.json"), "w"))
    with Mount(bad, opts="gguf") as m:
        legacy = open(m.path("model.gguf"), "rb").read()
    c5 = {k: v for k, v in c2.items() if k not in ("rope_theta", "rope_local_base_freq")}
    rp = {"full_attention": {"rope_type": "default", "rope_theta": cfg["rope_theta"]},
          "sliding_attention": {"rope_type": "default", "rope_theta": cfg["rope_local_base_freq"]}}
    json.dump(dict(c5, _name_or_path="g3", layer_types=full, rope_parameters=rp),
              open(os.path.join(bad, "config.json"), "w"))
    with Mount(bad, opts="gguf") as m:
        assert open(m.path("model.gguf"), "rb").read() == legacy, "rope_parameters: another model.gguf"
    for sl, says in (({"rope_type": "linear", "factor": 2.0, "rope_theta": 10000.0}, "sliding_attention is scaled"),
                     ({"rope_type": "default", "rope_theta": 20000.0},
                      "rope_parameters.sliding_attention.rope_theta 20000")):
        json.dump(dict(c5, layer_types=full, rope_parameters=dict(rp, sliding_attention=sl)),
                  open(os.path.join(bad, "config.json"), "w"))
        refused(["inspect", bad, "--format", "gguf"], says, 3)
    return (f"; Q/K norms alone left as offsets: off by {r_qk:.1e}; 10 configs llama.cpp cannot run "
            "refused; transformers 5's rope_parameters: the same bytes")


def gemma3_vlm(d, src, cfg, w, want):
    """Gemma 3's multimodal checkpoints (Gemma3ForConditionalGeneration: the
    4B, 12B, 27B): the text model's fields under text_config, most left to
    Gemma3TextConfig's defaults (the 4B's lists five), its keys under
    language_model.model. (transformers 4.50) or model.language_model.
    (later), beside a vision tower and a projector llama.cpp keeps in
    another file. The defaults, as transformers documents them, are written
    out here: 8 heads, eps 1e-6, rope bases 1e6 and 10000, the 5:1 pattern,
    context 131072, window 4096. Both namings serve the bytes of the text
    model with its config spelled out, and llama.cpp's logits on them equal
    the torch forward pass. A Gemma3ForCausalLM config without the rope
    bases is read with the same defaults (before this, with the other
    families' 10000)."""
    import torch
    defaults = {"num_attention_heads": 8, "rms_norm_eps": 1e-6, "rope_theta": 1e6,
                "rope_local_base_freq": 10000.0, "sliding_window_pattern": 6,
                "max_position_embeddings": 131072, "sliding_window": 4096}
    assert all(cfg[k] == v for k, v in defaults.items() if k not in ("max_position_embeddings", "sliding_window"))
    full = dict(cfg, _name_or_path="g3vlm", **defaults)
    text = os.path.join(d, "g3-text")
    shutil.copytree(src, text)
    json.dump(full, open(os.path.join(text, "config.json"), "w"))
    with Mount(text, opts="gguf") as m:
        want_bytes = open(m.path("model.gguf"), "rb").read()
        meta, _, _ = read_gguf(m.path("model.gguf"))
    assert (meta["gemma3.rope.freq_base"], meta["gemma3.context_length"], meta["gemma3.attention.sliding_window"],
            meta["gemma3.attention.head_count"]) == (1e6, 131072, 4096, 8), meta
    tc = {k: v for k, v in cfg.items() if k not in defaults and k not in (
        "architectures", "attn_logit_softcapping", "final_logit_softcapping", "tie_word_embeddings")}
    outer = {"architectures": ["Gemma3ForConditionalGeneration"], "model_type": "gemma3", "_name_or_path": "g3vlm",
             "text_config": dict(tc, model_type="gemma3_text"),
             "vision_config": {"model_type": "siglip_vision_model", "hidden_size": 16}}
    rng = np.random.default_rng(5)
    vision = {"vision_tower.vision_model.embeddings.patch_embedding.weight": (16, 3, 2, 2),
              "vision_tower.vision_model.post_layernorm.weight": (16,),
              "multi_modal_projector.mm_input_projection_weight": (16, cfg["hidden_size"]),
              "multi_modal_projector.mm_soft_emb_norm.weight": (16,)}
    got = {}
    for tag, lm, vis in (("4.50", "language_model.model.", ""), ("later", "model.language_model.", "model.")):
        t = {lm + k[len("model."):]: v for k, v in w.items()}
        t.update({vis + k: rng.standard_normal(shape).astype(np.float32) for k, shape in vision.items()})
        if tag == "later":  # saved with the tied head
            t["lm_head.weight"] = w["model.embed_tokens.weight"]
        vlm = vlm_checkpoint(os.path.join(d, "g3-vlm-" + tag), src, outer, t)
        with Mount(vlm, opts="gguf") as m:
            assert open(m.path("model.gguf"), "rb").read() == want_bytes, f"{tag}: another model.gguf"
            got[tag] = gs.llama_cpp(MODULES, m.path("model.gguf"), TOKS)
    r = gs.rel(got["4.50"], want)
    assert r < 1e-3 and torch.equal(got["4.50"].argmax(-1), want.argmax(-1)), f"gemma3 vlm: {r:.1e}"
    # a Gemma3ForCausalLM config that leaves the rope bases and the rest out
    json.dump({k: v for k, v in full.items() if k not in defaults}, open(os.path.join(text, "config.json"), "w"))
    with Mount(text, opts="gguf") as m:
        assert open(m.path("model.gguf"), "rb").read() == want_bytes, "Gemma3ForCausalLM: defaults not Gemma 3's"
    json.dump(dict(outer, text_config="gemma3_text"), open(os.path.join(d, "g3-vlm-later", "config.json"), "w"))
    refused(["inspect", os.path.join(d, "g3-vlm-later"), "--format", "gguf"], "\"text_config\" is not an object", 3)
    return (f"; Gemma3ForConditionalGeneration (text_config, Gemma3TextConfig's defaults, both key namings, "
            f"the vision tower dropped): the text model's bytes, llama.cpp {r:.1e}")


def spm_model(pieces):
    """A SentencePiece ModelProto: repeated pieces (field 1: {1 piece, 2 score,
    3 type}), written from the protobuf wire format."""
    def varint(v):
        out = b""
        while True:
            b = v & 0x7F
            v >>= 7
            out += bytes([b | (0x80 if v else 0)])
            if not v:
                return out

    def field(n, wire, payload):
        return varint(n << 3 | wire) + payload
    blob = b""
    for text, score, typ in pieces:
        t = text.encode()
        body = field(1, 2, varint(len(t)) + t) + field(2, 5, struct.pack("<f", score)) + field(3, 0, varint(typ))
        blob += field(1, 2, varint(len(body)) + body)
    return blob


def sentencepiece(d, src, lib):
    sp = os.path.join(d, "llama-spm")
    shutil.copytree(src, sp)
    os.unlink(os.path.join(sp, "tokenizer.json"))
    pieces = [("<unk>", 0.0, 2), ("<s>", 0.0, 3), ("</s>", 0.0, 3)]
    pieces += [(f"<0x{b:02X}>", 0.0, 6) for b in range(256)]
    pieces += [("▁a", -1.0, 1), ("▁b", -2.0, 1), ("ab", -3.0, 1)]
    open(os.path.join(sp, "tokenizer.model"), "wb").write(spm_model(pieces))
    json.dump({"bos_token": "<s>", "eos_token": "</s>"}, open(os.path.join(sp, "tokenizer_config.json"), "w"))
    with Mount(sp, opts="gguf") as m:
        meta, infos, _ = read_gguf(m.path("model.gguf"))
        n = len(meta["tokenizer.ggml.tokens"])
        want = [p[0] for p in pieces] + [f"[PAD{i}]" for i in range(len(pieces), n)]
        assert meta["tokenizer.ggml.model"] == "llama" and meta["tokenizer.ggml.tokens"] == want
        assert meta["tokenizer.ggml.token_type"] == [p[2] for p in pieces] + [5] * (n - len(pieces))
        assert [np.float32(s) for s in meta["tokenizer.ggml.scores"][:len(pieces)]] == \
            [np.float32(p[1]) for p in pieces]
        assert meta["tokenizer.ggml.bos_token_id"] == 1 and meta["tokenizer.ggml.eos_token_id"] == 2
        assert "tokenizer.ggml.merges" not in meta
        gs.llama_cpp(MODULES, m.path("model.gguf"), [1, 259, 260])  # llama.cpp loads and runs it
    print("SentencePiece tokenizer.model: pieces, scores, types and special ids as written; llama.cpp runs it")


SPM_TEXTS = ["Hello world, this is a test of tokenization: naïve café 東京 🙂",
             "  two leading spaces and  double  spaces  ",
             "The quick brown fox jumps over the lazy dog. 1234567890 3.14159",
             "def f(x):\n    return x**2  # a comment\n\ttabbed",
             "supercalifragilisticexpialidocious antidisestablishmentarianism",
             "Ünïcödé ñ ß æ ø å Ελληνικά русский العربية हिन्दी 한국어 日本語",
             "<s> not special </s> [INST] x [/INST]"]


def spm_bpe(text, vocab, merges):
    """tokenizer.json's SentencePiece-style BPE as the fast tokenizer runs it
    (its normalizer: the mark U+2581 before the text and for every space;
    no pre-tokenizer): characters, the lowest-ranked merge first, and a
    character outside the vocabulary as its UTF-8 bytes' <0xHH> pieces."""
    rank = {}
    for i, m in enumerate(merges):
        rank.setdefault(tuple(m.split(" ")) if isinstance(m, str) else tuple(m), i)
    out = []
    for sym in merge_lowest(list("▁" + text.replace(" ", "▁")), rank):
        out += [vocab[sym]] if sym in vocab else [vocab[f"<0x{b:02X}>"] for b in sym.encode()]
    return out


def spm_tokenizer_json(d):
    """A repository with only tokenizer.json whose BPE came from
    SentencePiece (the real Llama 2 tokenizer of
    hf-internal-testing/tiny-random-LlamaForCausalLM: 32000 pieces, 61249
    merges, byte fallback): served as GGUF's "llama" vocabulary, which it
    used to refuse ("needs tokenizer.model"). llama.cpp scores merges by the
    merged piece; ckptfs derives the scores from the merges' ranks, and
    llama.cpp's tokenization of texts in six scripts equals the fast
    tokenizer's algorithm written here over the same file."""
    real = os.path.join(gs.TESTS, "..", "..", "shared", "fixtures", "real", "tokenizer",
                        "hf-internal-testing-tiny-random-LlamaForCausalLM")
    src = os.path.join(d, "llama-spm-json")
    ckref.run(MKCKPT, "--model", "llama", "--vocab", "32000", "--hidden", "64", "--heads", "4",
              "--kv-heads", "2", "--layers", "1", src)
    for f in ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"):
        shutil.copy(os.path.join(real, f), src)
    tok = json.load(open(os.path.join(src, "tokenizer.json")))
    vocab, merges = tok["model"]["vocab"], tok["model"]["merges"]
    with Mount(src, opts="gguf=F32") as m:
        path = m.path("model.gguf")
        meta, _, _ = read_gguf(path)
        by_id = sorted(vocab, key=vocab.get)
        assert meta["tokenizer.ggml.model"] == "llama" and meta["tokenizer.ggml.tokens"] == by_id
        assert "tokenizer.ggml.merges" not in meta and meta["tokenizer.ggml.add_space_prefix"] is True
        types = meta["tokenizer.ggml.token_type"]
        assert types[:3] == [2, 3, 3] and set(types[3:259]) == {6} and set(types[259:]) == {1}
        assert (meta["tokenizer.ggml.unknown_token_id"], meta["tokenizer.ggml.bos_token_id"],
                meta["tokenizer.ggml.eos_token_id"]) == (0, 1, 2)
        first = {}  # a piece's score: minus the rank of the first merge that makes it
        for i, mg in enumerate(merges):
            first.setdefault("".join(mg.split(" ") if isinstance(mg, str) else mg), i + 1)
        scores = meta["tokenizer.ggml.scores"]
        assert all(scores[vocab[t]] == -r for t, r in first.items()), "scores"
        for text in SPM_TEXTS:
            p = subprocess.run(["node", os.path.join(HERE, "gguf_client.mjs"), MODULES, path, text],
                               capture_output=True, text=True, timeout=300)
            assert p.returncode == 0, p.stderr[-2000:]
            got = json.loads(p.stdout.strip().splitlines()[-1])
            want = spm_bpe(text, vocab, merges)
            assert got["tokens"] == want, (text, got["tokens"], want)
            assert got["detokenized"] == text, (text, got["detokenized"])

    def edited(name, fn):
        v = os.path.join(d, name)
        shutil.copytree(src, v)
        t = json.load(open(os.path.join(v, "tokenizer.json")))
        fn(t)
        json.dump(t, open(os.path.join(v, "tokenizer.json"), "w"))
        return v
    mnt = os.path.join(d, "mnt-spm")
    os.mkdir(mnt)
    for v, says in (
            (edited("spm-badmerge", lambda t: t["model"]["merges"].append("▁zzz qqq")),
             "merge 61249 makes \"▁zzzqqq\", which is not in the vocabulary"),
            (edited("spm-mark", lambda t: t.update(pre_tokenizer={"type": "Metaspace", "replacement": "_"})),
             "Metaspace replacement \"_\" is not U+2581"),
            (edited("spm-neither", lambda t: (t["model"].update(byte_fallback=False),
                                              t.update(normalizer=None, decoder=None))),
             "a BPE neither byte-level")):
        refused(["mount", v, mnt, "-o", "gguf"], says, 3)
        assert not os.listdir(mnt)
    # a Metaspace pre-tokenizer that never prepends: add_space_prefix false
    v = edited("spm-never", lambda t: t.update(normalizer=None, pre_tokenizer={
        "type": "Metaspace", "replacement": "▁", "prepend_scheme": "never", "split": False}))
    with Mount(v, opts="gguf") as m:
        meta, _, _ = read_gguf(m.path("model.gguf"))
        assert meta["tokenizer.ggml.add_space_prefix"] is False, meta.get("tokenizer.ggml.add_space_prefix")
    print(f"SentencePiece-style tokenizer.json (the real Llama 2 one, {len(merges)} merges): "
          f"\"llama\" vocabulary, scores from the merge ranks; llama.cpp's tokens of {len(SPM_TEXTS)} texts "
          "equal the fast tokenizer's BPE; a merge outside the vocabulary, another mark, neither style refused")


def refused(args, says, code=None):
    p = subprocess.run([CKPTFS, *args], capture_output=True, text=True, timeout=60)
    lines = p.stderr.strip().splitlines()
    assert p.returncode != 0 and len(lines) == 1 and says in lines[0], (args, p.returncode, p.stderr)
    if code is not None:
        assert p.returncode == code, (args, p.returncode, p.stderr)


def hostile(d, src):
    mnt = os.path.join(d, "mnt")
    os.mkdir(mnt)

    def variant(name, edit):
        v = os.path.join(d, name)
        shutil.copytree(src, v)
        edit(v)
        return v

    def mount_refused(v, opts, says, code=None, extra=()):
        refused(["mount", v, mnt, "-o", opts, *extra], says, code)
        assert not os.listdir(mnt) and not os.path.ismount(mnt)

    def cfg_edit(**kv):
        def e(v):
            c = json.load(open(os.path.join(v, "config.json")))
            c.update(kv)
            json.dump(c, open(os.path.join(v, "config.json"), "w"))
        return e

    def tok_edit(fn):
        def e(v):
            p = os.path.join(v, "tokenizer.json")
            t = json.load(open(p))
            fn(t)
            json.dump(t, open(p, "w"))
        return e
    gpt2 = os.path.join(d, "gpt2")
    ckref.run(MKCKPT, "--model", "gpt2", gpt2)
    mount_refused(gpt2, "gguf", "architecture GPT2LMHeadModel has no GGUF view", 3)
    mount_refused(src, "gguf=Q5_K", "gguf=Q5_K", 2)
    mount_refused(src, "gguf_pure", "go with -o gguf=TYPE", 2)
    mount_refused(src, "gguf=Q4_K_M,gguf_output_type=Q7", 'the output tensor type "Q7"')
    mount_refused(src, "gguf=BF16,gguf_embd_type=Q8_0", "go with a quantized type, Q8_0 or a mix, not BF16")
    mount_refused(src, "gguf_tensor_type_file=/dev/null", "go with -o gguf=TYPE", 2)
    mount_refused(src, "gguf=Q4_K_M,gguf_tensor_type=attn_(q=q4_k", '"attn_(q=q4_k": the pattern: at 7: a ( without', 2)
    mount_refused(src, "gguf=Q4_K_M,gguf_tensor_type_file=/dev/null", "/dev/null: not a regular file", 2)
    mount_refused(src, "gguf=Q4_K_M,gguf_tensor_type=", "PATTERN=TYPE", 2)
    mount_refused(src, "gguf_split_max_size=1M", "go with -o gguf=TYPE", 2)
    mount_refused(src, "gguf=Q8_0,gguf_split_max_size=1M,gguf_split_max_tensors=4", "not both", 2)
    mount_refused(src, "gguf=Q8_0,gguf_split_max_tensors=-1", "-o gguf_split_max_tensors \"-1\": a count", 2)
    mount_refused(src, "gguf", "not per rank", 2, ["--mapping", "llama-hf-to-megatron", "--mesh", "tp=2",
                                                    "--rank", "0"])
    v = variant("notok", lambda v: os.unlink(os.path.join(v, "tokenizer.json")))
    mount_refused(v, "gguf", "no tokenizer.json or tokenizer.model", 3)
    with Mount(v, opts="gguf,gguf_vocab=none") as m:  # placeholder tokens: loads, runs by id
        meta, _, _ = read_gguf(m.path("model.gguf"))
        assert meta["tokenizer.ggml.tokens"][:2] == ["<tok_0>", "<tok_1>"]
        gs.llama_cpp(MODULES, m.path("model.gguf"), [1, 2, 3])
    mount_refused(variant("noctx", cfg_edit(max_position_embeddings=None)), "gguf",
                  "max_position_embeddings", 3)
    # a config that does not describe the weights: refused, naming the
    # tensor (it used to make a file llama.cpp refuses, or with hidden_size
    # 128, Q/K rows permuted as another shape's: the elements still divide).
    # The Q/K rules' "shape" in hf-llama-to-gguf speaks first for the head
    # counts and widths; the view's own check for the layers and the
    # feed-forward width, which no rule declares
    c = json.load(open(os.path.join(src, "config.json")))
    H, nh, L, ff = c["hidden_size"], c["num_attention_heads"], c["num_hidden_layers"], c["intermediate_size"]
    for name, edit, says in (
            ("wideh", dict(hidden_size=2 * H), f"[nh * hd, H] = [{2 * H}, {2 * H}]"),
            ("morel", dict(num_hidden_layers=L + 1), f"but there is no blk.{L}.*"),
            ("fewerl", dict(num_hidden_layers=L - 1), f"but there is blk.{L - 1}."),
            ("ff", dict(intermediate_size=ff + 2), f"ffn_down.weight [{H}, {ff + 2}], but it is [{H}, {ff}]"),
            ("kvmha", dict(num_key_value_heads=None), f"[nkv * hd, H] = [{H}, {H}]"),
            ("hd", dict(head_dim=2 * H // nh), f"[nh * hd, H] = [{2 * H}, {H}]"),
            ("heads", dict(num_attention_heads=nh // 2), "[nkv * hd, H] = [")):
        mount_refused(variant("shape-" + name, cfg_edit(**edit)), "gguf", says, 3)
        assert "the config does not describe this checkpoint" in subprocess.run(
            [CKPTFS, "inspect", os.path.join(d, "shape-" + name), "--format", "gguf"],
            capture_output=True, text=True).stderr, name
    mount_refused(variant("rope3", cfg_edit(rope_scaling={"rope_type": "llama3", "factor": 8.0,
                                                          "low_freq_factor": 4.0, "high_freq_factor": 1.0})),
                  "gguf", "high_freq_factor 1 must exceed low_freq_factor 4", 3)
    mount_refused(variant("ropex", cfg_edit(rope_scaling={"rope_type": "dynamic", "factor": 2.0})),
                  "gguf", "rope_scaling type dynamic", 3)
    mount_refused(variant("bigid", tok_edit(lambda t: t["model"]["vocab"].update({"zz": 4000}))), "gguf",
                  "tokenizer.json: token \"zz\": id outside", 3)
    mount_refused(variant("dupid", tok_edit(lambda t: t["model"]["vocab"].update({"zz": 7}))), "gguf",
                  "share id 7", 3)
    mount_refused(variant("badmerge", tok_edit(lambda t: t["model"].update({"merges": [1]}))), "gguf",
                  "merge 0", 3)
    mount_refused(variant("wordpiece", tok_edit(lambda t: t["model"].update({"type": "WordPiece"}))), "gguf",
                  "model.type is not \"BPE\"", 3)
    mount_refused(variant("trunc", lambda v: open(os.path.join(v, "tokenizer.json"), "w").write('{"model": {')),
                  "gguf", "tokenizer.json", 3)

    def fifo(v):
        os.unlink(os.path.join(v, "tokenizer.json"))
        os.mkfifo(os.path.join(v, "tokenizer.json"))
    mount_refused(variant("fifo", fifo), "gguf", "tokenizer.json", 3)

    def bad_spm(v):
        os.unlink(os.path.join(v, "tokenizer.json"))
        open(os.path.join(v, "tokenizer.model"), "wb").write(b"\x0a\xff\xff\xff\xff\x0f" + b"x" * 10)
    mount_refused(variant("badspm", bad_spm), "gguf", "tokenizer.model: not a SentencePiece model", 3)

    def nul_spm(v):
        os.unlink(os.path.join(v, "tokenizer.json"))
        open(os.path.join(v, "tokenizer.model"), "wb").write(spm_model([("<unk>", 0.0, 2), ("a\0b", 0.0, 1)]))
    mount_refused(variant("nulspm", nul_spm), "gguf", "piece 1 holds a NUL byte", 3)
    refused(["convert", src, os.path.join(d, "x"), "--format", "gguf:Q3"], "gguf", 2)
    refused(["convert", src, os.path.join(d, "x"), "--format", "gguf", "--dtype", "F16"], "--format gguf", 2)
    assert not os.path.exists(os.path.join(d, "x"))
    print("refused with one line, nothing mounted or written: an unsupported architecture, a bad type, a "
          "per-rank mount, no tokenizer (placeholder with gguf_vocab=none), missing max_position_embeddings, "
          "a llama3 rope scaling with high <= low, a dynamic one, tokenizer ids outside or shared, bad merges, WordPiece, truncated JSON, a FIFO, "
          "a malformed tokenizer.model, a piece with a NUL byte; a config that does not describe the weights "
          "(hidden size, layers either way, intermediate size, key-value heads, head_dim, heads)")


if __name__ == "__main__":
    main()
