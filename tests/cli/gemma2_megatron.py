"""Gemma 2 <-> Megatron-core (issue #18): gemma2-hf-to-megatron and its
inverse on `mkckpt --model gemma2` (head_dim 32 on a 64-wide model, so
nothing may assume head_dim = hidden / heads; four norms per layer; tied
embeddings).

- every Megatron tensor equals a numpy reference written from Megatron-Bridge's
  Gemma 2 layout (grouped QKV, fc1 = [gate; up], post-attention and
  post-feed-forward norms as linear_proj / linear_fc2 .post_layernorm), with
  zero-centred gamma (norms copied) and with --set
  layernorm_zero_centered_gamma=false (norms = 1 + w in F32, from F32 and BF16
  sources: the affine element op, added before any narrowing cast);
- tp=2 shards equal numpy's Megatron shards;
- HF -> Megatron -> HF gives every byte back (check-mapping), and in the
  full-gamma mode every value (as F32: w + 1 - 1 is exact for these weights);
- a plain torch forward pass of the HF model (Gemma 2's semantics: scaled
  embeddings, (1 + w) RMSNorm, query_pre_attn_scalar, attention and final
  logit soft-capping, GeGLU, four norms) and one written from Megatron's layer
  semantics over the tensors read from a mount give the same logits in both
  norm conventions; negative controls: linear_qkv read ungrouped, and full
  gammas read as offsets, both differ."""
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
NORMS = {  # HF name in a layer -> Megatron name in a layer
    "input_layernorm.weight": "self_attention.linear_qkv.layer_norm_weight",
    "post_attention_layernorm.weight": "self_attention.linear_proj.post_layernorm.weight",
    "pre_feedforward_layernorm.weight": "mlp.linear_fc1.layer_norm_weight",
    "post_feedforward_layernorm.weight": "mlp.linear_fc2.post_layernorm.weight",
}


def reference(hf, cfg, zero_centred):
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
        for h, m in NORMS.items():
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
    rms0, rot, cos, sin, mask = gs.llama_parts(cfg, cfg["head_dim"], T)

    def gelu_tanh(x):
        return 0.5 * x * (1 + torch.tanh((2 / np.pi) ** 0.5 * (x + 0.044715 * x ** 3)))

    def cap(x, c):
        return torch.tanh(x / c) * c
    return rms0, rot, cos, sin, mask, gelu_tanh, cap


def attention(q, k, v, cfg, cos, sin, rot, mask, cap):
    """q [T, nh, hd], k/v [T, ng, hd] -> [T, nh*hd], Gemma 2's scaling and cap."""
    import torch
    T, nh, hd = q.shape
    hpg = nh // k.shape[1]
    q, k, v = q.transpose(0, 1), k.transpose(0, 1), v.transpose(0, 1)
    q, k = q * cos + rot(q) * sin, k * cos + rot(k) * sin
    k, v = k.repeat_interleave(hpg, 0), v.repeat_interleave(hpg, 0)
    s = cap(q @ k.transpose(1, 2) * cfg["query_pre_attn_scalar"] ** -0.5, cfg["attn_logit_softcapping"])
    return (torch.softmax(s + mask, -1) @ v).transpose(0, 1).reshape(T, nh * hd)


def hf_forward(w, cfg, toks):
    """Hugging Face's Gemma 2 in plain torch (RMSNorm multiplies by 1 + w)."""
    H, nh, ng, hd, T = (cfg["hidden_size"], cfg["num_attention_heads"], cfg["num_key_value_heads"],
                        cfg["head_dim"], len(toks))
    rms0, rot, cos, sin, mask, gelu, cap = parts(cfg, T)

    def rms(x, g):
        return rms0(x, 1 + g)
    x = w["model.embed_tokens.weight"][toks] * H ** 0.5
    for L in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{L}."
        h = rms(x, w[p + "input_layernorm.weight"])
        q, k, v = (h @ w[p + f"self_attn.{n}_proj.weight"].T for n in "qkv")
        o = attention(q.view(T, nh, hd), k.view(T, ng, hd), v.view(T, ng, hd), cfg, cos, sin, rot, mask, cap)
        x = x + rms(o @ w[p + "self_attn.o_proj.weight"].T, w[p + "post_attention_layernorm.weight"])
        h = rms(x, w[p + "pre_feedforward_layernorm.weight"])
        m = (gelu(h @ w[p + "mlp.gate_proj.weight"].T) * (h @ w[p + "mlp.up_proj.weight"].T)) \
            @ w[p + "mlp.down_proj.weight"].T
        x = x + rms(m, w[p + "post_feedforward_layernorm.weight"])
    x = rms(x, w["model.norm.weight"])
    return cap(x @ w["model.embed_tokens.weight"].T, cfg["final_logit_softcapping"])


def megatron_forward(w, cfg, toks, zero_centred, grouped=True):
    """Megatron-core's Gemma 2 layer over its own tensors: linear_qkv as ng
    groups of [hpg q heads, k, v], fc1 = [gate; up]; the norm multiplies by
    1 + w with zero-centred gamma, by w otherwise."""
    H, nh, ng, hd, T = (cfg["hidden_size"], cfg["num_attention_heads"], cfg["num_key_value_heads"],
                        cfg["head_dim"], len(toks))
    rms0, rot, cos, sin, mask, gelu, cap = parts(cfg, T)

    def rms(x, g):
        return rms0(x, 1 + g if zero_centred else g)
    x = w["embedding.word_embeddings.weight"][toks] * H ** 0.5
    for L in range(cfg["num_hidden_layers"]):
        a, m = f"decoder.layers.{L}.self_attention.", f"decoder.layers.{L}.mlp."
        qkv = rms(x, w[a + "linear_qkv.layer_norm_weight"]) @ w[a + "linear_qkv.weight"].T
        q, k, v = mf.split_qkv(qkv, nh, ng, hd, grouped)
        o = attention(q, k, v, cfg, cos, sin, rot, mask, cap)
        x = x + rms(o @ w[a + "linear_proj.weight"].T, w[a + "linear_proj.post_layernorm.weight"])
        gate, up = (rms(x, w[m + "linear_fc1.layer_norm_weight"]) @ w[m + "linear_fc1.weight"].T).chunk(2, -1)
        x = x + rms((gelu(gate) * up) @ w[m + "linear_fc2.weight"].T, w[m + "linear_fc2.post_layernorm.weight"])
    x = rms(x, w["decoder.final_layernorm.weight"])
    return cap(x @ w["embedding.word_embeddings.weight"].T, cfg["final_logit_softcapping"])


def served(src, extra, d, tag):
    """The Megatron view's tensors as a mounted model.safetensors (convert's
    output where this machine cannot mount)."""
    if have_fuse():
        with Mount(src, ["gemma2-hf-to-megatron"], extra=extra) as m:
            return {k: (v[0], v[2]) for k, v in ckref.read_safetensors(m.path("model.safetensors")).items()}
    out = os.path.join(d, "served-" + tag)
    ckref.convert(CKPTFS, src, out, ["gemma2-hf-to-megatron"], *extra)
    return arrays(out)


def same(got, want, what):
    assert set(got) == set(want), (what, sorted(set(got) ^ set(want)))
    for k, (dt, a) in want.items():
        assert got[k][0] == dt and got[k][1].tobytes() == a.tobytes(), (what, k, got[k][0], dt)


def main():
    with tempfile.TemporaryDirectory() as d:
        for dtype in ("F32", "BF16"):
            src = os.path.join(d, "gemma2-" + dtype)
            ckref.run(MKCKPT, "--model", "gemma2", "--heads", "8", "--kv-heads", "2", "--dtype", dtype, src)
            cfg = json.load(open(os.path.join(src, "config.json")))
            assert cfg["architectures"] == ["Gemma2ForCausalLM"] and cfg["head_dim"] * 8 != cfg["hidden_size"]
            hf = arrays(src)
            assert "lm_head.weight" not in hf and any(k.endswith("pre_feedforward_layernorm.weight") for k in hf)
            for zc, extra in ((True, []), (False, FULL)):
                meg = os.path.join(d, f"meg-{dtype}-{zc}")
                ckref.convert(CKPTFS, src, meg, ["gemma2-hf-to-megatron"], *extra)
                ref = reference(hf, cfg, zc)
                same(arrays(meg), ref, (dtype, zc))
                for r in range(2):
                    out = os.path.join(d, f"tp2-{dtype}-{zc}-{r}")
                    ckref.convert(CKPTFS, src, out, ["gemma2-hf-to-megatron"], "--mesh", "tp=2",
                                  "--rank", str(r), *extra)
                    shard = ckref.megatron_rank({k: a for k, (_, a) in ref.items()}, 2, r)
                    got = arrays(out)
                    assert set(got) == set(shard) and all(got[k][1].tobytes() == a.tobytes()
                                                          for k, a in shard.items()), (dtype, zc, r)
                # back to HF
                back = os.path.join(d, f"back-{dtype}-{zc}")
                ckref.convert(CKPTFS, meg, back, ["megatron-to-gemma2-hf"], *extra)
                got = arrays(back)
                assert set(got) == set(hf)
                for k, (dt, a) in hf.items():
                    if zc or not k.endswith("norm.weight"):
                        assert got[k][0] == dt and got[k][1].tobytes() == a.tobytes(), (dtype, k)
                    else:  # offsets come back as F32: w + 1 - 1 == w exactly here
                        assert got[k][0] == "F32" and np.array_equal(got[k][1], ckref.as_f32(dt, a)), (dtype, k)
            print(f"gemma2 {dtype}: {len(ref)} Megatron tensors equal the reference with zero-centred and "
                  f"full gammas (1 + w in F32), tp=2 shards too; Megatron -> HF restores the source")
        src = os.path.join(d, "gemma2-F32")
        p = ckref.run(CKPTFS, "check-mapping", "gemma2-hf-to-megatron", "--inverse", "megatron-to-gemma2-hf",
                      "--source", src)
        assert "byte for byte" in p.stdout, p.stdout

        cfg = json.load(open(os.path.join(src, "config.json")))
        want = hf_forward(torch_weights(arrays(src)), cfg, TOKS)
        for zc, extra in ((True, []), (False, FULL)):
            mg = torch_weights(served(src, extra, d, str(zc)))
            got = megatron_forward(mg, cfg, TOKS, zc)
            rel = gs.rel(got, want)
            assert rel < 1e-5 and got.argmax(-1).tolist() == want.argmax(-1).tolist(), (zc, rel)
            bad = gs.rel(megatron_forward(mg, cfg, TOKS, zc, grouped=False), want)
            assert bad > 1e-2, f"zero-centred={zc}: the ungrouped reading still matches ({bad:.1e})"
            if not zc:  # full gammas misread as offsets (a +1 too many)
                off = gs.rel(megatron_forward(mg, cfg, TOKS, True), want)
                assert off > 1e-2, off
            print(f"gemma2 forward (zero-centred gamma {zc}): Megatron-layout logits from the mount = HF "
                  f"logits ({rel:.1e}); ungrouped linear_qkv off by {bad:.1e}")

        # the affine op's refusals: after a narrowing cast, twice, on integers, c - x
        m = json.load(open(os.path.join(os.path.dirname(__file__), "..", "..", "mappings",
                                        "gemma2-hf-to-megatron.json")))
        for expr, msg in (("x.to(BF16) + 1", "add before narrowing casts"), ("x + 1 + 1", "already has +1 added"),
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
        print("x + c refused after a narrowing cast, twice, as c - x and beyond 2^24")
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
