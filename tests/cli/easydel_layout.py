"""The EasyDeL / Flax layout (issue #18): `llama-hf-to-easydel` turns every
Linear weight [out, in] into a Dense kernel [in, out], the embedding table
into embed_tokens.embedding and RMSNorm weights into kernel, as EasyDeL's
Llama names them (its partition rules: model/embed_tokens/embedding,
self_attn/(q|k|v|o)_proj/kernel, input_layernorm/kernel, lm_head/kernel).

Checked, for Llama (GQA) and Qwen2 (Q/K/V biases): every tensor equals the
reference numpy computes from that description; a forward pass written with
Flax's semantics (Dense: x @ kernel + bias, Embed: embedding[ids]) over the
converted tensors gives the logits of the Hugging Face model in plain torch
(and reading a kernel as a torch weight, x @ kernel.T, does not); the inverse
mapping gives every source byte back (ckptfs check-mapping)."""
import json
import os
import sys
import tempfile

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import ckref  # noqa: E402
import gguf_source as gs  # noqa: E402  (llama_forward: the HF model in plain torch)

CKPTFS, MKCKPT = os.environ["CKPTFS"], os.environ["MKCKPT"]
TOKS = [1, 5, 9, 200, 31, 77, 128, 3]


def easydel_ref(src):
    """name -> array in EasyDeL's layout, from the HF arrays."""
    out = {}
    for k, (_, _, a) in src.items():
        if k == "model.embed_tokens.weight":
            out["model.embed_tokens.embedding"] = a
        elif k.endswith("_proj.weight") or k == "lm_head.weight":
            out[k[:-len("weight")] + "kernel"] = a.T
        elif k.endswith("norm.weight"):
            out[k[:-len("weight")] + "kernel"] = a
        else:
            out[k] = a  # biases
    return out


def flax_forward(w, cfg, toks, as_torch_weight=False):
    """A Llama written with Flax's conventions over EasyDeL's names."""
    import torch
    H, nh = cfg["hidden_size"], cfg["num_attention_heads"]
    ng = cfg["num_key_value_heads"]
    hd, T = cfg.get("head_dim", H // nh), len(toks)

    def dense(x, p):  # flax.linen.Dense: x @ kernel + bias
        k = w[p + ".kernel"]
        y = x @ (k.T if as_torch_weight and k.shape[0] == k.shape[1] else k)
        return y + w[p + ".bias"] if p + ".bias" in w else y

    rms, rot, cos, sin, mask = gs.llama_parts(cfg, hd, T)
    x = w["model.embed_tokens.embedding"][toks]
    for L in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{L}."
        h = rms(x, w[p + "input_layernorm.kernel"])
        q = dense(h, p + "self_attn.q_proj").view(T, nh, hd).transpose(0, 1)
        k = dense(h, p + "self_attn.k_proj").view(T, ng, hd).transpose(0, 1)
        v = dense(h, p + "self_attn.v_proj").view(T, ng, hd).transpose(0, 1)
        q, k = q * cos + rot(q) * sin, k * cos + rot(k) * sin
        k, v = k.repeat_interleave(nh // ng, 0), v.repeat_interleave(nh // ng, 0)
        o = torch.softmax(q @ k.transpose(1, 2) / hd ** 0.5 + mask, -1) @ v
        x = x + dense(o.transpose(0, 1).reshape(T, nh * hd), p + "self_attn.o_proj")
        h = rms(x, w[p + "post_attention_layernorm.kernel"])
        x = x + dense(torch.nn.functional.silu(dense(h, p + "mlp.gate_proj")) * dense(h, p + "mlp.up_proj"),
                      p + "mlp.down_proj")
    x = rms(x, w["model.norm.kernel"])
    return dense(x, "lm_head") if "lm_head.kernel" in w else x @ w["model.embed_tokens.embedding"].T


def tensors(d):
    import torch
    return {k: torch.tensor(v[2].astype(np.float32)) * (0.25 if v[2].ndim == 2 else 1.0)
            for k, v in ckref.read_checkpoint_dir(d).items()}


with tempfile.TemporaryDirectory() as d:
    for model in ("llama", "qwen2"):
        src = os.path.join(d, model)
        ckref.run(MKCKPT, "--model", model, "--heads", "8", "--kv-heads", "2", "--untie", src)
        out = os.path.join(d, "easydel-" + model)
        ckref.convert(CKPTFS, src, out, ["llama-hf-to-easydel"])
        want = easydel_ref(ckref.read_checkpoint_dir(src))
        got = ckref.read_checkpoint_dir(out)
        assert set(got) == set(want), set(got) ^ set(want)
        for k, a in want.items():
            assert got[k][1] == a.shape and got[k][2].tobytes() == np.ascontiguousarray(a).tobytes(), k
        cfg = json.load(open(os.path.join(src, "config.json")))
        ref = gs.llama_forward(tensors(src), cfg, TOKS)
        ed = tensors(out)
        r = gs.rel(flax_forward(ed, cfg, TOKS), ref)
        assert r < 1e-5, (model, r)
        bad = gs.rel(flax_forward(ed, cfg, TOKS, as_torch_weight=True), ref)
        assert bad > 1e-2, (model, bad)
        p = ckref.run(CKPTFS, "check-mapping", "llama-hf-to-easydel", "--inverse", "easydel-to-llama-hf",
                      "--source", src)
        assert "byte for byte" in p.stdout, p.stdout
        print(f"{model}: {len(want)} tensors in EasyDeL's layout equal numpy's; Flax-semantics logits = "
              f"HF logits ({r:.1e} relative; kernels read as torch weights: off by {bad:.1e}); the inverse "
              "restores every byte")
