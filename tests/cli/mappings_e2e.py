"""Every shipped mapping converts generated checkpoints through the real
`ckptfs convert`, and the result equals a reference computed with numpy from
the source tensors; HF -> Megatron -> HF is an exact round trip; `inspect
--mapping --json` and `--expect` agree with the same reference; a bad mapping
leaves nothing behind."""
import json
import os
import sys
import tempfile

import numpy as np

sys.path.insert(0, os.path.dirname(__file__))
import ckref  # noqa: E402

CKPTFS, MKCKPT = os.environ["CKPTFS"], os.environ["MKCKPT"]
MAPS = os.path.join(os.path.dirname(__file__), "..", "..", "mappings")


def mp(name):
    return os.path.join(MAPS, name)


def arrays(d):
    """name -> (dtype, numpy array of raw elements) for a checkpoint dir."""
    return {k: (v[0], v[2]) for k, v in ckref.read_checkpoint_dir(d).items()}


def assert_same(got, want, what):
    assert set(got) == set(want), f"{what}: names differ: {sorted(set(got) ^ set(want))[:6]}"
    for k in want:
        assert got[k][0] == want[k][0], f"{what}: {k}: dtype {got[k][0]} != {want[k][0]}"
        assert got[k][1].shape == want[k][1].shape, f"{what}: {k}: {got[k][1].shape} != {want[k][1].shape}"
        assert np.array_equal(got[k][1], want[k][1]), f"{what}: {k}: values differ"


def convert(src, out, *maps, extra=()):
    args = [CKPTFS, "convert", src, out, "--quiet", *extra]
    for m in maps:
        args += ["--mapping", m]
    ckref.run(*args)
    return arrays(out)


def bf16_rne(f32):
    """Independent F32 -> BF16 (round to nearest even) with integer numpy."""
    u = f32.view(np.uint32).astype(np.uint64)
    r = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)
    return np.where(np.isnan(f32), np.uint16(0x7FC0), r)


with tempfile.TemporaryDirectory() as d:
    checked = 0
    # --- Llama: several GQA shapes, dtypes and shardings; Qwen2 (Q/K/V biases,
    # tied), Qwen3 (Q/K norms, explicit head_dim) through the same mapping ---
    for k, extra in enumerate([["--dtype", "BF16", "--shards", "3"],
                               ["--kv-heads", "1"],
                               ["--kv-heads", "4", "--dtype", "F16"],
                               ["--head-dim", "8", "--tie"],
                               ["--model", "qwen2", "--dtype", "BF16"],
                               ["--model", "qwen2", "--kv-heads", "1", "--untie"],
                               ["--model", "qwen3", "--shards", "2"],
                               ["--model", "qwen3-moe", "--dtype", "BF16"]]):
        src_dir = os.path.join(d, f"llama{k}")
        ckref.run(MKCKPT, "--model", "llama", *extra, src_dir)
        with open(os.path.join(src_dir, "config.json")) as f:
            cfg = json.load(f)
        src = arrays(src_dir)
        meg = convert(src_dir, os.path.join(d, f"meg{k}"), mp("llama-hf-to-megatron.json"))
        assert_same(meg, ckref.llama_to_megatron_ref(src, cfg), f"llama{k} -> megatron")
        back = convert(os.path.join(d, f"meg{k}"), os.path.join(d, f"back{k}"),
                       mp("megatron-to-llama-hf.json"), extra=["--max-shard-size", "64KiB"])
        assert_same(back, src, f"llama{k} round trip")
        assert len([f for f in os.listdir(os.path.join(d, f"back{k}")) if f.endswith(".safetensors")]) > 1
        checked += len(meg) + len(back)

        # inspect --mapping --json shows the same names, dtypes and shapes
        view = json.loads(ckref.run(CKPTFS, "inspect", src_dir, "--mapping",
                                    mp("llama-hf-to-megatron.json"), "--json").stdout)
        ref = ckref.llama_to_megatron_ref(src, cfg)
        assert {t["name"]: (t["dtype"], tuple(t["shape"])) for t in view["tensors"]} == \
            {n: (v[0], v[1].shape) for n, v in ref.items()}

    # Qwen3-MoE over ep=2 x tp=2: each ep rank holds 2 of the 4 experts,
    # renumbered from 0, whole (expert tensor parallelism 1); a dense model's
    # view has nothing for ep to split
    moe_dir = os.path.join(d, f"llama{k}")
    ref = ckref.llama_to_megatron_ref(src, cfg)
    for r in range(4):
        e, t = divmod(r, 2)
        got = convert(moe_dir, os.path.join(d, f"ep{r}"), mp("llama-hf-to-megatron.json"),
                      extra=["--mesh", "ep=2,tp=2", "--rank", str(r)])
        shard = ckref.megatron_rank({n: a for n, (_, a) in ref.items() if ".local_experts." not in n}, 2, t)
        for n, (_, a) in ref.items():
            if ".local_experts." in n:
                pre, rest = n.split(".local_experts.")
                x, tail = rest.split(".", 1)
                if 2 * e <= int(x) < 2 * e + 2:
                    shard[f"{pre}.local_experts.{int(x) - 2 * e}.{tail}"] = a
        assert set(got) == set(shard), sorted(set(got) ^ set(shard))[:5]
        for n, a in shard.items():
            assert got[n][1].tobytes() == a.tobytes(), (r, n)
        # TEGroupedMLP's names (--set moe_grouped_gemm=true): the same tensors
        # as experts.linear_fc1.weight{e}, numbered from 0 on the rank
        got = convert(moe_dir, os.path.join(d, f"epg{r}"), mp("llama-hf-to-megatron.json"),
                      extra=["--mesh", "ep=2,tp=2", "--rank", str(r), "--set", "moe_grouped_gemm=true"])
        grouped = {ckref.grouped_name(n): a for n, a in shard.items()}
        assert set(got) == set(grouped) and any(".linear_fc1.weight1" in n for n in got), \
            sorted(set(got) ^ set(grouped))[:5]
        for n, a in grouped.items():
            assert got[n][1].tobytes() == a.tobytes(), (r, n)
    p = ckref.run(CKPTFS, "check-mapping", mp("llama-hf-to-megatron.json"), "--inverse",
                  mp("megatron-to-llama-hf.json"), "--source", moe_dir, "--set", "moe_grouped_gemm=true")
    assert "byte for byte" in p.stdout, p.stdout
    p = ckref.run(CKPTFS, "inspect", os.path.join(d, "llama0"), "--mapping", mp("llama-hf-to-megatron.json"),
                  "--mesh", "ep=2", "--rank", "0", check=False)
    assert p.returncode == 2 and "axis ep is used by no partition or select rule" in p.stderr, p.stderr
    print("qwen3-moe: ep=2 x tp=2 ranks hold their experts renumbered (SequentialMLP's local_experts.{e} "
          "or TEGroupedMLP's weight{e}, and back), attention split over tp; ep on a dense llama refused")

    # Qwen3-MoE with a dense layer (mlp_only_layers = [1], as transformers
    # builds it: gate/up/down_proj of intermediate_size, no router or experts):
    # its norm is fused into fc1, the sparse layers keep pre_mlp_layernorm, and
    # back; told no layer is dense, the inverse refuses the dense layer's keys
    rng = np.random.default_rng(7)
    H, I = cfg["hidden_size"], cfg["intermediate_size"]
    mixed = {n: v for n, v in src.items()
             if not n.startswith(("model.layers.1.mlp.experts.", "model.layers.1.mlp.gate."))}
    for w, shape in (("gate_proj", (I, H)), ("up_proj", (I, H)), ("down_proj", (H, I))):
        mixed[f"model.layers.1.mlp.{w}.weight"] = ("BF16", rng.integers(0, 1 << 14, shape, dtype=np.uint16))
    mixed_cfg = dict(cfg, mlp_only_layers=[1])
    mixed_dir = os.path.join(d, "qwen3-moe-mixed")
    os.makedirs(mixed_dir)
    ckref.write_safetensors(os.path.join(mixed_dir, "model.safetensors"),
                            {n: (dt, a.shape, a.tobytes()) for n, (dt, a) in mixed.items()})
    json.dump(mixed_cfg, open(os.path.join(mixed_dir, "config.json"), "w"))
    meg = convert(mixed_dir, os.path.join(d, "meg-mixed"), mp("llama-hf-to-megatron.json"))
    want = ckref.llama_to_megatron_ref(mixed, mixed_cfg)
    assert "decoder.layers.1.mlp.linear_fc1.layer_norm_weight" in want and \
        "decoder.layers.0.pre_mlp_layernorm.weight" in want
    assert_same(meg, want, "qwen3-moe with a dense layer -> megatron")
    back = convert(os.path.join(d, "meg-mixed"), os.path.join(d, "back-mixed"), mp("megatron-to-llama-hf.json"))
    assert_same(back, mixed, "qwen3-moe with a dense layer, round trip")
    json.dump(cfg, open(os.path.join(d, "meg-mixed", "config.json"), "w"))
    p = ckref.run(CKPTFS, "inspect", os.path.join(d, "meg-mixed"), "--mapping", mp("megatron-to-llama-hf.json"),
                  check=False)
    assert p.returncode == 4 and "no key for {L} = 1 (each {L} below num_hidden_layers" in p.stderr \
        and p.stderr.count("\n") == 1, p.stderr
    print("qwen3-moe with mlp_only_layers = [1]: Megatron view = numpy's (the dense layer's norm fused into "
          "fc1), and back byte for byte; with the layer not listed as dense, the inverse refuses it")

    # --expect: a strict load_state_dict style comparison
    expect = os.path.join(d, "expect.json")
    keys = [{"name": n, "dtype": v[0], "shape": list(v[1].shape)} for n, v in ref.items()]
    with open(expect, "w") as f:
        json.dump(keys, f)
    ckref.run(CKPTFS, "inspect", src_dir, "--mapping", mp("llama-hf-to-megatron.json"), "--expect", expect)
    keys[0]["shape"] = [1, 2]
    bad = dict(keys[1], name="not.in.view")
    with open(expect, "w") as f:
        json.dump([keys[0], bad] + keys[2:], f)
    p = ckref.run(CKPTFS, "inspect", src_dir, "--mapping", mp("llama-hf-to-megatron.json"),
                  "--expect", expect, check=False)
    assert p.returncode == 5, p
    assert "size or dtype mismatch for " + keys[0]["name"] in p.stdout, p.stdout
    assert 'Missing key(s) in the view: "not.in.view"' in p.stdout, p.stdout
    assert f'Unexpected key(s) in the view: "{keys[1]["name"]}"' in p.stdout, p.stdout

    # --- identity, with a cast to BF16 ---
    src_dir = os.path.join(d, "llama0")
    src = arrays(src_dir)
    assert_same(convert(src_dir, os.path.join(d, "id"), mp("identity.json")), src, "identity")
    f32_dir = os.path.join(d, "llama1")
    f32 = arrays(f32_dir)
    cast = convert(f32_dir, os.path.join(d, "cast"), extra=["--dtype", "BF16"])
    assert_same(cast, {k: ("BF16", bf16_rne(v[1])) for k, v in f32.items()}, "cast to BF16")

    # --- GPT-2 Conv1D -> Linear ---
    g_dir = os.path.join(d, "gpt2")
    ckref.run(MKCKPT, "--model", "gpt2", "--dtype", "BF16", "--shards", "2", g_dir)
    g = arrays(g_dir)
    want = {}
    for n, v in g.items():
        if n.endswith("attn.c_attn.weight") or n.endswith("attn.c_attn.bias"):
            kind = n.rsplit(".", 1)[1]
            base = n[: -len("c_attn." + kind)]
            arr = v[1].T if kind == "weight" else v[1]
            for part, name in zip(np.split(arr, 3, axis=0), "qkv"):
                want[f"{base}{name}_proj.{kind}"] = (v[0], part)
        elif n.endswith((".c_proj.weight", ".c_fc.weight")):
            want[n] = (v[0], v[1].T)
        else:
            want[n] = v
    assert_same(convert(g_dir, os.path.join(d, "gpt2-lin"), mp("gpt2-conv1d-to-linear.json")), want, "gpt2")

    # --- Mixtral per-expert -> fused experts ---
    x_dir = os.path.join(d, "mixtral")
    ckref.run(MKCKPT, "--model", "mixtral", "--shards", "3", x_dir)
    with open(os.path.join(x_dir, "config.json")) as f:
        E = json.load(f)["num_local_experts"]
    x = arrays(x_dir)
    want = {}
    for n, v in x.items():
        if ".block_sparse_moe." not in n:
            want[n] = v
    for L in range(2):
        p = f"model.layers.{L}.block_sparse_moe."
        w = {j: np.stack([x[f"{p}experts.{e}.w{j}.weight"][1] for e in range(E)]) for j in (1, 2, 3)}
        want[f"model.layers.{L}.mlp.experts.w13_weight"] = ("F32", np.concatenate([w[1], w[3]], axis=1))
        want[f"model.layers.{L}.mlp.experts.w2_weight"] = ("F32", w[2])
        want[f"model.layers.{L}.mlp.gate.weight"] = x[p + "gate.weight"]
    assert_same(convert(x_dir, os.path.join(d, "mix"), mp("mixtral-hf-to-fused-experts.json")), want, "mixtral")
    # an expert missing from a layer is refused, not stacked into a smaller tensor (both the
    # fused-experts and the GGUF mapping count experts per layer with "each")
    for m in ("mixtral-hf-to-fused-experts.json", "hf-mixtral-to-gguf.json"):
        ckref.assert_refused_without(CKPTFS, d, x_dir, mp(m), [
            ("last expert's w2", lambda n: n == f"model.layers.1.block_sparse_moe.experts.{E - 1}.w2.weight",
             f"no key for {{L}} = 1, {{E}} = {E - 1}")])

    # --- wrapper prefixes ---
    w_dir = os.path.join(d, "wrapped")
    os.mkdir(w_dir)
    rng = np.random.default_rng(5)
    plain = {}
    wrapped = {}
    for n, wn in [("layers.0.attn.w", "module._orig_mod.layers.0._fsdp_wrapped_module.attn.w"),
                  ("layers.1.mlp.w", "module.layers.1._checkpoint_wrapped_module.mlp.w"),
                  ("embed.w", "_orig_mod.module.embed.w")]:
        a = rng.standard_normal((3, 5)).astype(np.float32)
        plain[n] = ("F32", a)
        wrapped[wn] = ("F32", (3, 5), a.tobytes())
    ckref.write_safetensors(os.path.join(w_dir, "model.safetensors"), wrapped)
    assert_same(convert(w_dir, os.path.join(d, "canon"), mp("strip-wrapper-prefixes.json")), plain, "strip")

    # --- a bad mapping: clear error, exit 4, nothing written ---
    bad_map = os.path.join(d, "bad.json")
    with open(bad_map, "w") as f:
        json.dump({"rules": [{"from": "model.layers.{L}.self_attn.q_proj.weight",
                              "to": "q.{L}", "expr": "x.view(7, -1)"}]}, f)
    out = os.path.join(d, "never")
    p = ckref.run(CKPTFS, "convert", src_dir, out, "--mapping", bad_map, check=False)
    assert p.returncode == 4, p
    assert p.stderr.count("\n") == 1 and "rule 1" in p.stderr and "q.0" in p.stderr, p.stderr
    assert not os.path.exists(out), "a failed convert created output"
print(f"{checked} converted tensors and every shipped mapping equal their numpy references")
