"""The test-checkpoint tool writes what README documents: the key set and
shapes of each architecture (from config.json), and element values equal to
the formula v(key, i), recomputed here with numpy and read with an
independent safetensors reader."""
import json
import os
import sys
import tempfile

import numpy as np

sys.path.insert(0, os.path.dirname(__file__))
import ckref  # noqa: E402

MKCKPT = os.environ["MKCKPT"]


def expected_shapes(cfg):
    mt = cfg["model_type"]
    if mt == "gpt2":
        E, F, L, V, P = cfg["n_embd"], cfg["n_inner"], cfg["n_layer"], cfg["vocab_size"], cfg["n_positions"]
        s = {"wte.weight": (V, E), "wpe.weight": (P, E), "ln_f.weight": (E,), "ln_f.bias": (E,)}
        for i in range(L):
            p = f"h.{i}."
            s.update({p + "ln_1.weight": (E,), p + "ln_1.bias": (E,),
                      p + "attn.c_attn.weight": (E, 3 * E), p + "attn.c_attn.bias": (3 * E,),
                      p + "attn.c_proj.weight": (E, E), p + "attn.c_proj.bias": (E,),
                      p + "ln_2.weight": (E,), p + "ln_2.bias": (E,),
                      p + "mlp.c_fc.weight": (E, F), p + "mlp.c_fc.bias": (F,),
                      p + "mlp.c_proj.weight": (F, E), p + "mlp.c_proj.bias": (E,)})
        return s
    H, I, V = cfg["hidden_size"], cfg["intermediate_size"], cfg["vocab_size"]
    nh, ng = cfg["num_attention_heads"], cfg["num_key_value_heads"]
    hd = cfg.get("head_dim", H // nh)
    s = {"model.embed_tokens.weight": (V, H), "model.norm.weight": (H,)}
    if not cfg["tie_word_embeddings"]:
        s["lm_head.weight"] = (V, H)
    for i in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{i}."
        s.update({p + "input_layernorm.weight": (H,), p + "post_attention_layernorm.weight": (H,),
                  p + "self_attn.q_proj.weight": (nh * hd, H),
                  p + "self_attn.k_proj.weight": (ng * hd, H),
                  p + "self_attn.v_proj.weight": (ng * hd, H),
                  p + "self_attn.o_proj.weight": (H, nh * hd)})
        if mt == "mixtral":
            E = cfg["num_local_experts"]
            s[p + "block_sparse_moe.gate.weight"] = (E, H)
            for e in range(E):
                q = f"{p}block_sparse_moe.experts.{e}."
                s.update({q + "w1.weight": (I, H), q + "w2.weight": (H, I), q + "w3.weight": (I, H)})
        else:
            s.update({p + "mlp.gate_proj.weight": (I, H), p + "mlp.up_proj.weight": (I, H),
                      p + "mlp.down_proj.weight": (H, I)})
    return s


checked = 0
with tempfile.TemporaryDirectory() as d:
    cases = [("llama", "F32", 1, []), ("llama", "BF16", 3, ["--kv-heads", "1"]),
             ("llama", "F16", 2, ["--head-dim", "8", "--tie"]),
             ("gpt2", "F32", 1, []), ("gpt2", "BF16", 4, []), ("mixtral", "F16", 3, [])]
    for k, (arch, dt, shards, extra) in enumerate(cases):
        out = os.path.join(d, f"c{k}")
        ckref.run(MKCKPT, "--model", arch, "--dtype", dt, "--shards", str(shards), *extra, out)
        with open(os.path.join(out, "config.json")) as f:
            cfg = json.load(f)
        want = expected_shapes(cfg)
        got = ckref.read_checkpoint_dir(out)
        assert set(got) == set(want), f"{arch}: keys differ: {set(got) ^ set(want)}"
        files = [f for f in os.listdir(out) if f.endswith(".safetensors")]
        assert len(files) == shards, f"{arch}: {len(files)} files, want {shards}"
        if shards > 1:
            with open(os.path.join(out, "model.safetensors.index.json")) as f:
                wm = json.load(f)["weight_map"]
            assert set(wm) == set(want)
        for name, (gdt, shape, arr) in got.items():
            assert gdt == dt and shape == want[name], f"{name}: {gdt} {shape}"
            ref = ckref.gen_values(name, int(np.prod(shape, dtype=np.int64)))
            vals = ckref.as_f32(gdt, arr).reshape(-1)
            assert np.array_equal(vals, ref), f"{arch} {dt} {name}: values differ"
            checked += 1
    # sparse: declared sizes, no data blocks
    sp = os.path.join(d, "sparse")
    ckref.run(MKCKPT, "--preset", "1b", "--dtype", "BF16", "--shards", "4", "--sparse", sp)
    size = blocks = 0
    for f in os.listdir(sp):
        st = os.stat(os.path.join(sp, f))
        size, blocks = size + st.st_size, blocks + st.st_blocks * 512
    assert size > 2_000_000_000, size
    assert blocks < size // 1000, f"sparse checkpoint uses {blocks} bytes on disk"
print(f"{checked} generated tensors equal the documented formula")
