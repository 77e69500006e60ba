"""Gemma, Gemma 2 and Gemma 3 <-> Megatron-core (issue #18):
{gemma,gemma2,gemma3}-hf-to-megatron and their inverses on `mkckpt --model
gemma|gemma2|gemma3` (head_dim 32 on a 64-wide model, so nothing may assume
head_dim = hidden / heads; tied embeddings). The generations differ in their
norms: Gemma has Llama's two per layer (post_attention_layernorm is the norm
before the MLP), Gemma 2 four (norms after attention and after the MLP too),
Gemma 3 Gemma 2's four plus per-head Q/K norms. All are stored as offsets.

- every Megatron tensor equals a numpy reference written from Megatron-Bridge's
  layouts (grouped QKV, fc1 = [gate; up]; Gemma 2/3: post-attention and
  post-feed-forward norms as linear_proj / linear_fc2 .post_layernorm; Gemma 3:
  q_norm / k_norm as q_layernorm / k_layernorm), with zero-centred gamma (norms
  copied) and with --set layernorm_zero_centered_gamma=false (norms = 1 + w in
  F32, from F32 and BF16 sources: the affine element op, added before any
  narrowing cast);
- tp=2 shards equal numpy's Megatron shards;
- HF -> Megatron -> HF gives every byte back (check-mapping), and in the
  full-gamma mode every value (as F32: w + 1 - 1 is exact for these weights);
- a plain torch forward pass of the HF model (each generation's semantics:
  scaled embeddings, (1 + w) RMSNorm, Gemma 2's query_pre_attn_scalar and
  attention / final logit soft-capping, Gemma 3's Q/K norms and local RoPE
  base, GeGLU) and one written from Megatron's layer semantics over the tensors
  read from a mount give the same logits in both norm conventions; negative
  controls: linear_qkv read ungrouped, and full gammas read as offsets, both
  differ."""
import json
import os
import sys
import tempfile

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import ckref  # noqa: E402
import gguf_source as gs  # noqa: E402  (llama_parts: RoPE on halves, causal mask)
import megatron_forward as mf  # noqa: E402  (split_qkv: Megatron's grouped linear_qkv)
from mountlib import Mount, have_fuse  # noqa: E402

CKPTFS, MKCKPT = os.environ["CKPTFS"], os.environ["MKCKPT"]
TOKS = [1, 5, 9, 200, 31, 77, 128, 3]
FULL = ["--set", "layernorm_zero_centered_gamma=false"]
NORMS = {  # generation -> {HF name in a layer -> Megatron name in a layer}
    1: {"input_layernorm.weight": "self_attention.linear_qkv.layer_norm_weight",
        "post_attention_layernorm.weight": "mlp.linear_fc1.layer_norm_weight"},
    2: {"input_layernorm.weight": "self_attention.linear_qkv.layer_norm_weight",
        "post_attention_layernorm.weight": "self_attention.linear_proj.post_layernorm.weight",
        "pre_feedforward_layernorm.weight": "mlp.linear_fc1.layer_norm_weight",
        "post_feedforward_layernorm.weight": "mlp.linear_fc2.post_layernorm.weight"},
}
NORMS[3] = dict(NORMS[2], **{"self_attn.q_norm.weight": "self_attention.q_layernorm.weight",
                             "self_attn.k_norm.weight": "self_attention.k_layernorm.weight"})
MODEL = {1: "gemma", 2: "gemma2", 3: "gemma3"}
ARCH = {1: "GemmaForCausalLM", 2: "Gemma2ForCausalLM", 3: "Gemma3ForCausalLM"}


def to_megatron(gen):
    return MODEL[gen] + "-hf-to-megatron"


def to_hf(gen):
    return "megatron-to-" + MODEL[gen] + "-hf"


def reference(hf, cfg, zero_centred, gen):
    """Megatron's tensors from HF's (name -> (dtype, array)), from the layout
    description; full gammas are (1 + w) in F32."""
    H, ng = cfg["hidden_size"], cfg["num_key_value_heads"]

    def norm(dt, a):
        return (dt, a) if zero_centred else ("F32", ckref.as_f32(dt, a) + np.float32(1))
    out = {"embedding.word_embeddings.weight": hf["model.embed_tokens.weight"],
           "decoder.final_layernorm.weight": norm(*hf["model.norm.weight"])}
    for L in range(cfg["num_hidden_layers"]):
        p, d = f"model.layers.{L}.", f"decoder.layers.{L}."
        q, k, v = (hf[p + f"self_attn.{n}_proj.weight"] for n in "qkv")
        out[d + "self_attention.linear_qkv.weight"] = (q[0], np.concatenate(
            [q[1].reshape(ng, -1, H), k[1].reshape(ng, -1, H), v[1].reshape(ng, -1, H)], 1).reshape(-1, H))
        out[d + "self_attention.linear_proj.weight"] = hf[p + "self_attn.o_proj.weight"]
        g, u = hf[p + "mlp.gate_proj.weight"], hf[p + "mlp.up_proj.weight"]
        out[d + "mlp.linear_fc1.weight"] = (g[0], np.concatenate([g[1], u[1]], 0))
        out[d + "mlp.linear_fc2.weight"] = hf[p + "mlp.down_proj.weight"]
        for h, m in NORMS[gen].items():
            out[d + m] = norm(*hf[p + h])
    return out


def arrays(d):
    return {k: (v[0], v[2]) for k, v in ckref.read_checkpoint_dir(d).items()}


def torch_weights(w):
    import torch
    return {k: torch.tensor(ckref.as_f32(dt, a)) * (0.25 if a.ndim == 2 else 1.0)
            for k, (dt, a) in w.items()}


def parts(cfg, T):
    import torch
    rms0, rot, _, _, mask = gs.llama_parts(cfg, cfg["head_dim"], T)

    def gelu_tanh(x):
        return 0.5 * x * (1 + torch.tanh((2 / np.pi) ** 0.5 * (x + 0.044715 * x ** 3)))

    def cap(x, c):
        return x if c is None else torch.tanh(x / c) * c
    return rms0, rot, mask, gelu_tanh, cap


def rope(cfg, L, T):
    """cos, sin for layer L: Gemma 3's local (sliding-window) layers use
    rope_local_base_freq, every sliding_window_pattern-th layer rope_theta."""
    local = "rope_local_base_freq" in cfg and (L + 1) % cfg["sliding_window_pattern"]
    theta = cfg["rope_local_base_freq"] if local else cfg["rope_theta"]
    _, _, cos, sin, _ = gs.llama_parts(dict(cfg, rope_theta=theta), cfg["head_dim"], T)
    return cos, sin


def attention(q, k, v, cfg, L, rot, mask, cap):
    """q [T, nh, hd], k/v [T, ng, hd] -> [T, nh*hd]: scaled by
    query_pre_attn_scalar (Gemma 2/3; head_dim on Gemma), capped on Gemma 2."""
    import torch
    T, nh, hd = q.shape
    hpg = nh // k.shape[1]
    cos, sin = rope(cfg, L, T)
    q, k, v = q.transpose(0, 1), k.transpose(0, 1), v.transpose(0, 1)
    q, k = q * cos + rot(q) * sin, k * cos + rot(k) * sin
    k, v = k.repeat_interleave(hpg, 0), v.repeat_interleave(hpg, 0)
    s = cap(q @ k.transpose(1, 2) * cfg.get("query_pre_attn_scalar", hd) ** -0.5,
            cfg.get("attn_logit_softcapping"))
    return (torch.softmax(s + mask, -1) @ v).transpose(0, 1).reshape(T, nh * hd)


def layer(x, n, w, cfg, L, gen, rms, fns):
    """One Gemma layer over named tensors: n(role) is the tensor's name (None:
    not in this generation), w[...] its value. The roles are HF's."""
    rot, mask, gelu, cap, split = fns
    h = rms(x, w[n("input_norm")])
    q, k, v = split(h)
    if gen == 3:  # per-head norms before RoPE
        q, k = rms(q, w[n("q_norm")]), rms(k, w[n("k_norm")])
    o = attention(q, k, v, cfg, L, rot, mask, cap) @ w[n("o")].T
    if gen == 1:
        x = x + o
        h = rms(x, w[n("post_attention_norm")])
    else:
        x = x + rms(o, w[n("post_attention_norm")])
        h = rms(x, w[n("pre_ff_norm")])
    gate, up = n("gate_up")(h)
    m = (gelu(gate) * up) @ w[n("down")].T
    return x + (m if gen == 1 else rms(m, w[n("post_ff_norm")]))


def hf_forward(w, cfg, toks, gen):
    """Hugging Face's Gemma / Gemma 2 / Gemma 3 in plain torch (RMSNorm
    multiplies by 1 + w)."""
    H, nh, ng, hd, T = (cfg["hidden_size"], cfg["num_attention_heads"], cfg["num_key_value_heads"],
                        cfg["head_dim"], len(toks))
    rms0, rot, mask, gelu, cap = parts(cfg, T)

    def rms(x, g):
        return rms0(x, 1 + g)
    x = w["model.embed_tokens.weight"][toks] * H ** 0.5
    for L in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{L}."
        names = {"input_norm": "input_layernorm.weight", "q_norm": "self_attn.q_norm.weight",
                 "k_norm": "self_attn.k_norm.weight", "o": "self_attn.o_proj.weight",
                 "post_attention_norm": "post_attention_layernorm.weight",
                 "pre_ff_norm": "pre_feedforward_layernorm.weight",
                 "post_ff_norm": "post_feedforward_layernorm.weight", "down": "mlp.down_proj.weight"}

        def split(h):
            q, k, v = (h @ w[p + f"self_attn.{c}_proj.weight"].T for c in "qkv")
            return q.view(T, nh, hd), k.view(T, ng, hd), v.view(T, ng, hd)

        def n(role):
            if role == "gate_up":
                return lambda h: (h @ w[p + "mlp.gate_proj.weight"].T, h @ w[p + "mlp.up_proj.weight"].T)
            return p + names[role]
        x = layer(x, n, w, cfg, L, gen, rms, (rot, mask, gelu, cap, split))
    x = rms(x, w["model.norm.weight"])
    return cap(x @ w["model.embed_tokens.weight"].T, cfg.get("final_logit_softcapping"))


def megatron_forward(w, cfg, toks, gen, zero_centred, grouped=True):
    """Megatron-core's Gemma layers over its own tensors: linear_qkv as ng
    groups of [hpg q heads, k, v], fc1 = [gate; up]; the norm multiplies by
    1 + w with zero-centred gamma, by w otherwise."""
    H, nh, ng, hd, T = (cfg["hidden_size"], cfg["num_attention_heads"], cfg["num_key_value_heads"],
                        cfg["head_dim"], len(toks))
    rms0, rot, mask, gelu, cap = parts(cfg, T)

    def rms(x, g):
        return rms0(x, 1 + g if zero_centred else g)
    x = w["embedding.word_embeddings.weight"][toks] * H ** 0.5
    for L in range(cfg["num_hidden_layers"]):
        a, m = f"decoder.layers.{L}.self_attention.", f"decoder.layers.{L}.mlp."
        names = {"input_norm": a + "linear_qkv.layer_norm_weight", "q_norm": a + "q_layernorm.weight",
                 "k_norm": a + "k_layernorm.weight", "o": a + "linear_proj.weight",
                 "post_attention_norm": (m + "linear_fc1.layer_norm_weight" if gen == 1
                                         else a + "linear_proj.post_layernorm.weight"),
                 "pre_ff_norm": m + "linear_fc1.layer_norm_weight",
                 "post_ff_norm": m + "linear_fc2.post_layernorm.weight", "down": m + "linear_fc2.weight"}

        def split(h):
            return mf.split_qkv(h @ w[a + "linear_qkv.weight"].T, nh, ng, hd, grouped)

        def n(role):
            if role == "gate_up":
                return lambda h: (h @ w[m + "linear_fc1.weight"].T).chunk(2, -1)
            return names[role]
        x = layer(x, n, w, cfg, L, gen, rms, (rot, mask, gelu, cap, split))
    x = rms(x, w["decoder.final_layernorm.weight"])
    return cap(x @ w["embedding.word_embeddings.weight"].T, cfg.get("final_logit_softcapping"))


def served(src, gen, extra, d, tag):
    """The Megatron view's tensors as a mounted model.safetensors (convert's
    output where this machine cannot mount)."""
    if have_fuse():
        with Mount(src, [to_megatron(gen)], extra=extra) as m:
            return {k: (v[0], v[2]) for k, v in ckref.read_safetensors(m.path("model.safetensors")).items()}
    out = os.path.join(d, "served-" + tag)
    ckref.convert(CKPTFS, src, out, [to_megatron(gen)], *extra)
    return arrays(out)


def same(got, want, what):
    assert set(got) == set(want), (what, sorted(set(got) ^ set(want)))
    for k, (dt, a) in want.items():
        assert got[k][0] == dt and got[k][1].tobytes() == a.tobytes(), (what, k, got[k][0], dt)


def layouts(d, gen):
    """Every Megatron tensor against the reference, tp=2 shards, the way back."""
    model = MODEL[gen]
    for dtype in ("F32", "BF16"):
        src = os.path.join(d, f"{model}-{dtype}")
        ckref.run(MKCKPT, "--model", model, "--heads", "8", "--kv-heads", "2", "--dtype", dtype, src)
        cfg = json.load(open(os.path.join(src, "config.json")))
        assert cfg["architectures"] == [ARCH[gen]] and cfg["head_dim"] * 8 != cfg["hidden_size"]
        hf = arrays(src)
        layer0 = {k[len("model.layers.0."):] for k in hf if k.startswith("model.layers.0.")}
        assert "lm_head.weight" not in hf and {k for k in layer0 if "norm" in k} == set(NORMS[gen]), layer0
        for zc, extra in ((True, []), (False, FULL)):
            meg = os.path.join(d, f"meg-{model}-{dtype}-{zc}")
            ckref.convert(CKPTFS, src, meg, [to_megatron(gen)], *extra)
            ref = reference(hf, cfg, zc, gen)
            same(arrays(meg), ref, (model, dtype, zc))
            for r in range(2):
                out = os.path.join(d, f"tp2-{model}-{dtype}-{zc}-{r}")
                ckref.convert(CKPTFS, src, out, [to_megatron(gen)], "--mesh", "tp=2", "--rank", str(r), *extra)
                shard = ckref.megatron_rank({k: a for k, (_, a) in ref.items()}, 2, r)
                got = arrays(out)
                assert set(got) == set(shard) and all(got[k][1].tobytes() == a.tobytes()
                                                      for k, a in shard.items()), (model, dtype, zc, r)
            back = os.path.join(d, f"back-{model}-{dtype}-{zc}")
            ckref.convert(CKPTFS, meg, back, [to_hf(gen)], *extra)
            got = arrays(back)
            assert set(got) == set(hf)
            for k, (dt, a) in hf.items():
                if zc or not k.endswith("norm.weight"):
                    assert got[k][0] == dt and got[k][1].tobytes() == a.tobytes(), (model, dtype, k)
                else:  # offsets come back as F32: w + 1 - 1 == w exactly here
                    assert got[k][0] == "F32" and np.array_equal(got[k][1], ckref.as_f32(dt, a)), (dtype, k)
        print(f"{model} {dtype}: {len(ref)} Megatron tensors equal the reference with zero-centred and "
              f"full gammas (1 + w in F32), tp=2 shards too; Megatron -> HF restores the source")
    src = os.path.join(d, f"{model}-F32")
    p = ckref.run(CKPTFS, "check-mapping", to_megatron(gen), "--inverse", to_hf(gen), "--source", src)
    assert "byte for byte" in p.stdout, p.stdout
    return src


def forward(d, gen, src):
    """HF logits from the source = Megatron-layout logits from the mount."""
    cfg = json.load(open(os.path.join(src, "config.json")))
    want = hf_forward(torch_weights(arrays(src)), cfg, TOKS, gen)
    for zc, extra in ((True, []), (False, FULL)):
        mg = torch_weights(served(src, gen, extra, d, f"{gen}-{zc}"))
        got = megatron_forward(mg, cfg, TOKS, gen, zc)
        rel = gs.rel(got, want)
        assert rel < 1e-5 and got.argmax(-1).tolist() == want.argmax(-1).tolist(), (gen, zc, rel)
        bad = gs.rel(megatron_forward(mg, cfg, TOKS, gen, zc, grouped=False), want)
        assert bad > 1e-2, f"{MODEL[gen]}, zero-centred={zc}: the ungrouped reading still matches ({bad:.1e})"
        if not zc:  # full gammas misread as offsets (a +1 too many)
            off = gs.rel(megatron_forward(mg, cfg, TOKS, gen, True), want)
            assert off > 1e-2, (gen, off)
        print(f"{MODEL[gen]} forward (zero-centred gamma {zc}): Megatron-layout logits from the mount = HF "
              f"logits ({rel:.1e}); ungrouped linear_qkv off by {bad:.1e}")


def main():
    with tempfile.TemporaryDirectory() as d:
        for gen in (1, 2, 3):
            src = layouts(d, gen)
            forward(d, gen, src)
        src = os.path.join(d, "gemma2-F32")

        # the affine op's refusals: after a narrowing cast, twice, on integers, c - x
        m = json.load(open(os.path.join(os.path.dirname(__file__), "..", "..", "mappings",
                                        "gemma2-hf-to-megatron.json")))
        for expr, msg in (("x.to(BF16) + 1", "add before narrowing casts"), ("x + 16777216 + 1", "their sum is not exact in F32"),
                          ("1 - x", "only x + c, c + x and x - c"), ("x + 16777217", "within 2^24"),
                          ("pad(x, 0, 10)", "smaller than dim"), ("pad(x, 0, 4611686018427387904)", "2^60"),
                          ("pad(x, 1, 99)", "dim 1")):
            bad_map = json.loads(json.dumps(m))
            for rule in bad_map["rules"]:
                if rule.get("if") == "!zc" and rule["from"] == "model.norm.weight":
                    rule["expr"] = expr
            path = os.path.join(d, "bad.json")
            json.dump(bad_map, open(path, "w"))
            p = ckref.run(CKPTFS, "inspect", src, "--mapping", path, *FULL, check=False)
            assert p.returncode == 4 and msg in p.stderr and p.stderr.count("\n") == 1, (expr, p.stderr)
        print("x + c refused after a narrowing cast, twice past 2^24, as c - x and beyond 2^24")
        # narrowing after the add rounds the F32 sum (round to nearest even)
        ok_map = json.loads(json.dumps(m))
        for rule in ok_map["rules"]:
            if rule.get("if") == "!zc" and rule["from"] == "model.norm.weight":
                rule["expr"] = "(x - 3).to(BF16)"
        path = os.path.join(d, "narrow.json")
        json.dump(ok_map, open(path, "w"))
        out = os.path.join(d, "narrowed")
        ckref.convert(CKPTFS, src, out, [path], *FULL)
        got = arrays(out)["decoder.final_layernorm.weight"]
        f = arrays(src)["model.norm.weight"][1].astype(np.float32) - np.float32(3)  # k/64 - 5: 9 bits
        x3 = f.view(np.uint32).astype(np.uint64)
        want = ((x3 + 0x7FFF + ((x3 >> 16) & 1)) >> 16).astype(np.uint16)
        assert got[0] == "BF16" and np.array_equal(got[1], want), got[0]
        assert (want.astype(np.uint32) << 16 != f.view(np.uint32)).any()  # some values did round
        print("(x - 3).to(BF16): the F32 difference rounded to BF16 as numpy rounds it")


if __name__ == "__main__":
    main()
