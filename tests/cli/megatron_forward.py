"""The Megatron layout runs (issue #18, the Qwen part): a plain torch forward
pass of the Hugging Face model (Llama, Qwen2 with Q/K/V biases, Qwen3 with
Q/K norms and an explicit head_dim) and a forward pass written from
Megatron-core's layer semantics over the tensors `convert --mapping
llama-hf-to-megatron` writes give the same logits: linear_qkv (+ bias) read
as ng groups of [hpg query heads, one key head, one value head], fc1 as
[gate; up], q_layernorm / k_layernorm per head. Negative control: reading
linear_qkv as [all q; all k; all v] (the layout a careless converter writes)
gives different logits."""
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


def split_qkv(qkv, nh, ng, hd, grouped=True):
    """Megatron's linear_qkv output [T, ng * (hpg + 2) * hd] as q [T, nh, hd],
    k and v [T, ng, hd]: per KV group its hpg query heads, then k, then v.
    grouped=False misreads it as [all q; all k; all v]."""
    T, hpg = qkv.shape[0], nh // ng
    if grouped:
        g = qkv.view(T, ng, hpg + 2, hd)
        return g[:, :, :hpg].reshape(T, nh, hd), g[:, :, hpg], g[:, :, hpg + 1]
    q, k, v = qkv.split([nh * hd, ng * hd, ng * hd], -1)
    return q.view(T, nh, hd), k.view(T, ng, hd), v.view(T, ng, hd)


def megatron_forward(w, cfg, toks, grouped=True):
    """Megatron-core's GPT layer over its own tensors (Transformer Engine
    names), in plain torch. grouped=False misreads linear_qkv as [q; k; v]."""
    import torch
    H, nh = cfg["hidden_size"], cfg["num_attention_heads"]
    ng = cfg["num_key_value_heads"]
    hd, T, hpg = cfg.get("head_dim", H // nh), len(toks), nh // ng

    rms, rot, cos, sin, mask = gs.llama_parts(cfg, hd, T)
    x = w["embedding.word_embeddings.weight"][toks]
    for L in range(cfg["num_hidden_layers"]):
        p = f"decoder.layers.{L}."
        a = p + "self_attention."
        h = rms(x, w[a + "linear_qkv.layer_norm_weight"])
        qkv = h @ w[a + "linear_qkv.weight"].T
        if a + "linear_qkv.bias" in w:
            qkv = qkv + w[a + "linear_qkv.bias"]
        q, k, v = split_qkv(qkv, nh, ng, hd, grouped)
        if a + "q_layernorm.weight" in w:
            q, k = rms(q, w[a + "q_layernorm.weight"]), rms(k, w[a + "k_layernorm.weight"])
        q, k, v = q.transpose(0, 1), k.transpose(0, 1), v.transpose(0, 1)
        q, k = q * cos + rot(q) * sin, k * cos + rot(k) * sin
        k, v = k.repeat_interleave(hpg, 0), v.repeat_interleave(hpg, 0)
        o = torch.softmax(q @ k.transpose(1, 2) / hd ** 0.5 + mask, -1) @ v
        x = x + o.transpose(0, 1).reshape(T, nh * hd) @ w[a + "linear_proj.weight"].T
        m = p + "mlp."
        h = rms(x, w[m + "linear_fc1.layer_norm_weight"])
        gate, up = (h @ w[m + "linear_fc1.weight"].T).chunk(2, -1)
        x = x + (torch.nn.functional.silu(gate) * up) @ w[m + "linear_fc2.weight"].T
    head = w.get("output_layer.weight", w["embedding.word_embeddings.weight"])
    return rms(x, w["decoder.final_layernorm.weight"]) @ head.T


def weights(d):
    import torch
    return {k: torch.tensor(v[2].astype(np.float32)) for k, v in ckref.read_checkpoint_dir(d).items()}


def main():
    with tempfile.TemporaryDirectory() as d:
        for model, extra in (("llama", []), ("qwen2", ["--untie"]), ("qwen2", ["--tie"]), ("qwen3", [])):
            src = os.path.join(d, model + "".join(extra))
            ckref.run(MKCKPT, "--model", model, "--heads", "8", "--kv-heads", "2", *extra, src)
            meg = os.path.join(d, "meg-" + os.path.basename(src))
            ckref.convert(CKPTFS, src, meg, ["llama-hf-to-megatron"])
            cfg = json.load(open(os.path.join(src, "config.json")))
            # the generator's values reach 2; scale the matrices to a trained model's range
            hf = {k: v * (0.25 if v.dim() == 2 else 1.0) for k, v in weights(src).items()}
            mg = {k: v * (0.25 if v.dim() == 2 else 1.0) for k, v in weights(meg).items()}
            want = gs.llama_forward(hf, cfg, TOKS)
            got = megatron_forward(mg, cfg, TOKS)
            r = gs.rel(got, want)
            assert r < 1e-5 and got.argmax(-1).tolist() == want.argmax(-1).tolist(), (model, extra, r)
            bad = gs.rel(megatron_forward(mg, cfg, TOKS, grouped=False), want)
            assert bad > 1e-2, f"{model}: the ungrouped reading still matches ({bad:.1e})"
            print(f"{os.path.basename(src)}: Megatron-layout logits = HF logits ({r:.1e} relative); "
                  f"linear_qkv read ungrouped: off by {bad:.1e}")


if __name__ == "__main__":
    main()
