"""GPT-OSS <-> Megatron-core and MXFP4 dequantisation (issue #18):
gpt-oss-hf-to-megatron and its inverse on `mkckpt --model gpt-oss`.

The MXFP4 reference here is written from the OCP Microscaling spec v1.0 (and
GPT-OSS's packing as its model card and transformers describe it), never from
ckptfs: a U8 block byte holds two E2M1 values, low nibble first; E2M1 is
1 sign, 2 exponent (bias 1), 1 mantissa bit; a U8 scale is E8M0, 2^(code-127),
code 0xFF NaN; one scale per 32 values.

- mxfp4(): every one of the 256 byte values (so all 16 E2M1 codes in both
  nibbles) under every one of the 256 scale codes, to F32 and to BF16, equal
  numpy's bits (NaN canonical, -0 kept, overflow to inf), through convert and
  a mount; wrong dtypes and shapes refused with one line;
- every Megatron tensor equals a numpy reference of Megatron-Bridge's GPT-OSS
  layout: grouped QKV and its biases, sinks -> softmax_offset, experts
  dequantised with gate/up rows de-interleaved into fc1 = [gate; up];
- tp=2 x ep=2 ranks equal numpy's shards;
- MXFP4 -> Megatron -> HF gives numpy's dequantised HF form (gate_up_proj
  [E, H, 2I] interleaved again, down_proj [E, I, H]), and that BF16 checkpoint
  -> Megatron gives the very bytes of the first conversion; HF BF16 -> Megatron
  -> HF is byte-identical (check-mapping);
- an expert MLP in numpy with GPT-OSS's semantics (interleaved gate/up,
  clamped SwiGLU with the +1) over HF's tensors and with Megatron's ([gate; up]
  chunks) over the files of a mount agree; negative control: fc1 read as
  [up; gate] differs;
- the sparse 120B preset: ranks of an ep=8 x tp=8 mesh request exactly their
  local source bytes (MXFP4 blocks and scales for their experts)."""
import json
import os
import sys
import tempfile

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import ckref  # noqa: E402
from mountlib import Mount, have_fuse  # noqa: E402

CKPTFS, MKCKPT = os.environ["CKPTFS"], os.environ["MKCKPT"]
MAP, INV = "gpt-oss-hf-to-megatron", "megatron-to-gpt-oss-hf"

E2M1 = [0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0]
E2M1 = np.array(E2M1 + [-x for x in E2M1], dtype=np.float64)  # codes 8..15: the sign bit


def mxfp4_ref(blocks, scales):
    """float64 values [..., G * 2B]: element 2j of a block is byte j's low nibble."""
    vals = np.empty(blocks.shape[:-1] + (2 * blocks.shape[-1],), np.float64)
    vals[..., 0::2] = E2M1[blocks & 15]
    vals[..., 1::2] = E2M1[blocks >> 4]
    s = scales.astype(np.int64)
    scale = np.where(s == 255, np.nan, np.ldexp(1.0, s - 127))
    return (vals * scale[..., None]).reshape(blocks.shape[:-2] + (-1,))


def f32_bits(x):
    """float64 -> F32 bits, NaN as the canonical 0x7FC00000."""
    with np.errstate(over="ignore"):
        b = x.astype(np.float32).view(np.uint32).copy()
    b[np.isnan(x)] = 0x7FC00000
    return b


def bf16_bits(x):
    """Exact values (as every MXFP4 value is in BF16's range) keep their top
    half; overflow is inf, NaN 0x7FC0."""
    b = f32_bits(x)
    out = (b >> 16).astype(np.uint16)
    assert np.all((b & 0xFFFF) == 0) or np.isnan(x).any()
    out[np.isnan(x)] = 0x7FC0
    return out


def test_codes(d):
    src = os.path.join(d, "codes")
    os.makedirs(src)
    blocks = np.broadcast_to(np.arange(256, dtype=np.uint8).reshape(16, 16), (256, 16, 16)).copy()
    scales = np.broadcast_to(np.arange(256, dtype=np.uint8)[:, None], (256, 16)).copy()
    ckref.write_safetensors(os.path.join(src, "model.safetensors"), {
        "w_blocks": ("U8", blocks.shape, blocks.tobytes()),
        "w_scales": ("U8", scales.shape, scales.tobytes()),
        "bad_blocks": ("BF16", (4, 16), bytes(128)),
        "bad_scales": ("U8", (4,), bytes(4)),
        "f16_blocks": ("U8", (2, 16), bytes(32)),
        "f16_scales": ("F16", (2,), bytes(4))})
    ref = mxfp4_ref(blocks, scales)
    with np.errstate(over="ignore"):  # 6 x 2^127 and up overflow F32, as they should
        assert np.isnan(ref).sum() == 512 and np.isinf(ref.astype(np.float32)).sum() > 0
    maps = {}
    for dt in ("F32", "BF16"):
        maps[dt] = os.path.join(d, f"mx-{dt}.json")
        json.dump({"ckptfs_mapping": 1, "unused": "drop", "rules": [
            {"from": {"b": "w_blocks", "s": "w_scales"}, "to": {"w": "w", "odd": "odd"},
             "expr": {"w": f"mxfp4(b, s).to({dt})",
                      "odd": f"mxfp4(b, s).narrow(1, 3, 301).t().to({dt})"}}]},
            open(maps[dt], "w"))
        out = os.path.join(d, "codes-" + dt)
        ckref.convert(CKPTFS, src, out, [maps[dt]])
        got = ckref.arrays(out)
        bits = f32_bits if dt == "F32" else bf16_bits
        want = bits(ref)
        assert got["w"][1].view(want.dtype).tobytes() == want.tobytes(), dt
        # from an odd nibble (a high one) on, transposed: the packed source
        # read along a strided dim
        want = np.ascontiguousarray(bits(ref[:, 3:304]).T)
        assert got["odd"][1].view(want.dtype).tobytes() == want.tobytes(), dt
    if have_fuse():
        with Mount(src, [maps["F32"]]) as m:
            got = np.fromfile(m.path("tensors", "w"), np.uint32)
            assert got.tobytes() == f32_bits(ref).tobytes()
    print("mxfp4: all 256 block bytes x all 256 scale codes equal the OCP MX reference bit for bit "
          f"(F32 and BF16{', convert and mount' if have_fuse() else ''}; NaN, -0 and inf included)")
    for frm, why in ((["bad_blocks", "w_scales"], "the blocks are BF16, not U8"),
                     (["w_blocks", "bad_scales"], "blocks of 3 dims and scales of 1"),
                     (["f16_blocks", "f16_scales"], "the scales are F16, not U8 or F8_E8M0")):
        bad = os.path.join(d, "bad.json")
        json.dump({"ckptfs_mapping": 1, "unused": "drop", "rules": [
            {"from": {"b": frm[0], "s": frm[1]}, "to": "w", "expr": "mxfp4(b, s)"}]}, open(bad, "w"))
        p = ckref.run(CKPTFS, "inspect", src, "--mapping", bad, check=False)
        assert p.returncode == 4 and why in p.stderr and p.stderr.count("\n") == 1, p.stderr
    print("mxfp4 of BF16 blocks, of scales of the wrong shape or of F16 scales: refused in one line")


def reference(hf, cfg):
    """Megatron's tensors (name -> (dtype, array)) from HF GPT-OSS, written
    from Megatron-Bridge's layout: experts per local_experts.{e}, fc1 rows
    [even rows of gate_up (gate); odd rows (up)]."""
    H, nh, ng, hd = (cfg["hidden_size"], cfg["num_attention_heads"], cfg["num_key_value_heads"],
                     cfg["head_dim"])
    out = {"embedding.word_embeddings.weight": ("BF16", ckref.pad_vocab(hf["model.embed_tokens.weight"][1], 128)),
           "output_layer.weight": ("BF16", ckref.pad_vocab(hf["lm_head.weight"][1], 128)),
           "decoder.final_layernorm.weight": hf["model.norm.weight"]}
    for L in range(cfg["num_hidden_layers"]):
        p, m = f"model.layers.{L}.", f"decoder.layers.{L}."
        a = p + "self_attn."
        for s, shp in ((".weight", (H,)), (".bias", ())):
            q, k, v = (hf[a + n + "_proj" + s][1] for n in "qkv")
            q, k, v = (x.reshape((ng, -1) + shp) for x in (q, k, v))
            out[m + "self_attention.linear_qkv" + s] = ("BF16", np.concatenate([q, k, v], 1).reshape((-1,) + shp))
        out[m + "self_attention.linear_qkv.layer_norm_weight"] = hf[p + "input_layernorm.weight"]
        out[m + "self_attention.linear_proj.weight"] = hf[a + "o_proj.weight"]
        out[m + "self_attention.linear_proj.bias"] = hf[a + "o_proj.bias"]
        out[m + "self_attention.core_attention.softmax_offset"] = hf[a + "sinks"]
        out[m + "pre_mlp_layernorm.weight"] = hf[p + "post_attention_layernorm.weight"]
        out[m + "mlp.router.weight"] = hf[p + "mlp.router.weight"]
        out[m + "mlp.router.bias"] = hf[p + "mlp.router.bias"]
        x = p + "mlp.experts."
        if x + "gate_up_proj_blocks" in hf:
            gu = bf16_bits(mxfp4_ref(hf[x + "gate_up_proj_blocks"][1], hf[x + "gate_up_proj_scales"][1]))
            dn = bf16_bits(mxfp4_ref(hf[x + "down_proj_blocks"][1], hf[x + "down_proj_scales"][1]))
        else:  # transformers' dequantised layout: [E, in, out]
            gu = hf[x + "gate_up_proj"][1].transpose(0, 2, 1)
            dn = hf[x + "down_proj"][1].transpose(0, 2, 1)
        gub, dnb = hf[x + "gate_up_proj_bias"][1], hf[x + "down_proj_bias"][1]
        for e in range(cfg["num_local_experts"]):
            le = m + f"mlp.experts.local_experts.{e}."
            out[le + "linear_fc1.weight"] = ("BF16", np.concatenate([gu[e][0::2], gu[e][1::2]], 0))
            out[le + "linear_fc1.bias"] = ("BF16", np.concatenate([gub[e][0::2], gub[e][1::2]], 0))
            out[le + "linear_fc2.weight"] = ("BF16", dn[e])
            out[le + "linear_fc2.bias"] = ("BF16", dnb[e])
    return out


def rank_of(glob, tp, t, ep, e, n_experts):
    """Megatron's shards on tp rank t, ep rank e (expert tensor parallelism 1):
    QKV, its bias and the sinks by rows (heads), linear_proj by columns, the
    vocabulary padded to 128 x tp; experts n/ep per rank, renumbered."""
    out, per = {}, n_experts // ep
    for k, w in glob.items():
        if ".local_experts." in k:
            if ckref.ep_local_name(k, e, per):
                out[ckref.ep_local_name(k, e, per)] = w
        elif k in ckref.VOCAB_KEYS:
            out[k] = np.split(ckref.pad_vocab(w, 128 * tp), tp, 0)[t]
        elif k.endswith(("linear_qkv.weight", "linear_qkv.bias", "softmax_offset")):
            out[k] = np.split(w, tp, 0)[t]
        elif k.endswith("linear_proj.weight"):
            out[k] = np.split(w, tp, 1)[t]
        else:
            out[k] = w
    return out


def hf_bf16(hf, cfg):
    """numpy's dequantised HF GPT-OSS: what megatron-to-gpt-oss-hf must write."""
    out = {}
    for k, (dt, a) in hf.items():
        if k.endswith("_scales"):
            continue
        if k.endswith("_blocks"):
            deq = bf16_bits(mxfp4_ref(a, hf[k[:-len("_blocks")] + "_scales"][1]))
            out[k[:-len("_blocks")]] = ("BF16", deq.transpose(0, 2, 1))
        else:
            out[k] = (dt, a)
    return out


def test_missing_experts(d, meg, cfg):
    """A Megatron checkpoint that lost experts is refused by the inverse, not
    turned into an HF checkpoint without them (transformers would only warn
    and initialise them at random): the mapping's "each" counts layers and
    experts against config.json."""
    ne, nl = cfg["num_local_experts"], cfg["num_hidden_layers"]
    last = f"local_experts.{ne - 1}."
    ckref.assert_refused_without(CKPTFS, d, meg, INV, [
        ("layer 1 without experts", lambda k: ".layers.1.mlp.experts." in k,
         "no key for {L} = 1, {E} = 0"),
        (f"expert {ne - 1} of layer 0 missing", lambda k: ".layers.0.mlp.experts." in k and last in k,
         f"no key for {{L}} = 0, {{E}} = {ne - 1}"),
        (f"layer {nl - 1}'s o_proj bias missing",
         lambda k: k == f"decoder.layers.{nl - 1}.self_attention.linear_proj.bias",
         f"no key for {{L}} = {nl - 1} (each {{L}} below num_hidden_layers = {nl})")])
    # a config that counts one layer fewer than the checkpoint holds
    p = ckref.run(CKPTFS, "inspect", meg, "--mapping", INV, "--set", f"num_hidden_layers={nl - 1}",
                  check=False)
    why = f"{{L}} = {nl - 1} is not below num_hidden_layers = {nl - 1}"
    assert p.returncode == 4 and why in p.stderr, p.stderr
    print("a Megatron checkpoint missing a layer's experts, one expert, or one layer's tensor, and a "
          "config counting fewer layers: each refused in one line, nothing converted")


def test_layouts(d):
    src = os.path.join(d, "gpt-oss")
    ckref.run(MKCKPT, "--model", "gpt-oss", src)
    cfg = json.load(open(os.path.join(src, "config.json")))
    assert cfg["quantization_config"]["quant_method"] == "mxfp4"
    hf = ckref.arrays(src)
    assert hf["model.layers.0.mlp.experts.gate_up_proj_blocks"][0] == "U8"
    ref = reference(hf, cfg)
    meg = os.path.join(d, "meg")
    ckref.convert(CKPTFS, src, meg, [MAP])
    ckref.assert_same(ckref.arrays(meg), ref, "mxfp4")
    glob = {k: a for k, (_, a) in ref.items()}
    for t in range(2):
        for e in range(2):
            out = os.path.join(d, f"r-{t}-{e}")
            ckref.convert(CKPTFS, src, out, [MAP], "--mesh", "tp=2,ep=2", "--rank", str(2 * t + e))
            got, want = ckref.arrays(out), rank_of(glob, 2, t, 2, e, cfg["num_local_experts"])
            assert set(got) == set(want), (t, e, sorted(set(got) ^ set(want))[:6])
            for k, a in want.items():
                assert got[k][1].tobytes() == np.ascontiguousarray(a).tobytes(), (t, e, k)
    # TEGroupedMLP's names (--set moe_grouped_gemm=true): the same tensors as
    # experts.linear_fc1.weight{e} / bias{e}, numbered from 0 on each ep rank
    gg = ["--set", "moe_grouped_gemm=true"]
    grouped = os.path.join(d, "meg-grouped")
    ckref.run(CKPTFS, "convert", src, grouped, "--quiet", "--mapping", MAP, *gg)
    ckref.assert_same(ckref.arrays(grouped), {ckref.grouped_name(k): v for k, v in ref.items()}, "grouped")
    out = os.path.join(d, "r-grouped")
    ckref.convert(CKPTFS, src, out, [MAP], "--mesh", "tp=2,ep=2", "--rank", "1", *gg)
    got = ckref.arrays(out)
    want = {ckref.grouped_name(k): a for k, a in rank_of(glob, 2, 0, 2, 1, cfg["num_local_experts"]).items()}
    assert set(got) == set(want) and any(k.endswith("linear_fc1.bias1") for k in got), \
        sorted(set(got) ^ set(want))[:6]
    for k, a in want.items():
        assert got[k][1].tobytes() == np.ascontiguousarray(a).tobytes(), ("grouped", k)
    print(f"gpt-oss MXFP4: {len(ref)} Megatron tensors equal the reference (experts dequantised, "
          "gate/up de-interleaved); tp=2 x ep=2 ranks equal numpy's shards; the same under TEGroupedMLP's "
          "names, whole and on ep rank 1")
    # back to HF: the dequantised form; and that form -> Megatron = the same bytes
    back = os.path.join(d, "back")
    ckref.convert(CKPTFS, src, back, [MAP, INV])
    want = hf_bf16(hf, cfg)
    ckref.assert_same(ckref.arrays(back), want, "HF dequantised")
    json.dump({k: v for k, v in cfg.items() if k != "quantization_config"},
              open(os.path.join(back, "config.json"), "w"))
    meg2 = os.path.join(d, "meg2")
    ckref.convert(CKPTFS, back, meg2, [MAP])
    ckref.assert_same(ckref.arrays(meg2), ref, "BF16 HF form")
    # the inverse reads TEGroupedMLP's names without being told (no --set)
    back_g = os.path.join(d, "back-grouped")
    ckref.convert(CKPTFS, grouped, back_g, [INV])
    ckref.assert_same(ckref.arrays(back_g), want, "HF from TEGroupedMLP's names")
    print("MXFP4 -> Megatron -> HF = numpy's dequantised HF layout (from SequentialMLP's names, and from "
          "TEGroupedMLP's without --set); that BF16 checkpoint -> Megatron gives the same bytes")
    test_missing_experts(d, meg, cfg)
    bf = os.path.join(d, "gpt-oss-bf16")
    ckref.run(MKCKPT, "--model", "gpt-oss", "--no-mxfp4", bf)
    bhf, bcfg = ckref.arrays(bf), json.load(open(os.path.join(bf, "config.json")))
    assert "quantization_config" not in bcfg and bhf["model.layers.1.mlp.experts.down_proj"][0] == "BF16"
    out = os.path.join(d, "meg-bf16")
    ckref.convert(CKPTFS, bf, out, [MAP])
    ckref.assert_same(ckref.arrays(out), reference(bhf, bcfg), "BF16 experts")
    for extra in ([], ["--set", "moe_grouped_gemm=true"]):
        p = ckref.run(CKPTFS, "check-mapping", MAP, "--inverse", INV, "--source", bf, *extra)
        assert "byte for byte" in p.stdout, p.stdout
    print("BF16 experts: Megatron tensors equal the reference; HF -> Megatron -> HF every byte back "
          "(SequentialMLP's names and TEGroupedMLP's)")
    return src, hf, cfg


def expert_mlp(x, w1, b1, w2, b2, megatron, gate_first=True):
    """GPT-OSS's expert (transformers' GptOssExperts): gate/up clamped at 7,
    glu = gate * sigmoid(1.702 gate), out = ((up + 1) * glu) W2 + b2. HF's
    gate_up columns interleave gate and up; Megatron's fc1 rows are [gate; up]."""
    h = x @ w1.T + b1
    if megatron:
        gate, up = np.split(h, 2, -1) if gate_first else np.split(h, 2, -1)[::-1]
    else:
        gate, up = h[..., 0::2], h[..., 1::2]
    gate = np.minimum(gate, 7.0)
    up = np.clip(up, -7.0, 7.0)
    glu = gate / (1.0 + np.exp(-1.702 * gate))
    return ((up + 1.0) * glu) @ w2.T + b2


def test_mlp(d, src, hf, cfg):
    rng = np.random.default_rng(5)
    x = rng.standard_normal((6, cfg["hidden_size"]))
    f = lambda bits: ckref.as_f32("BF16", bits).astype(np.float64)  # noqa: E731
    want = hf_bf16(hf, cfg)
    L, e = 1, 3
    p = f"model.layers.{L}.mlp.experts."
    ref = expert_mlp(x, f(want[p + "gate_up_proj"][1][e]).T, f(want[p + "gate_up_proj_bias"][1][e]),
                     f(want[p + "down_proj"][1][e]).T, f(want[p + "down_proj_bias"][1][e]), False)

    def from_dir(read):
        k = f"decoder.layers.{L}.mlp.experts.local_experts.{e}."
        return [f(read(k + n)) for n in ("linear_fc1.weight", "linear_fc1.bias", "linear_fc2.weight",
                                          "linear_fc2.bias")]
    got = ckref.arrays(os.path.join(d, "meg"))  # shapes, and the values without a mount
    if have_fuse():
        with Mount(src, [MAP]) as m:
            w = from_dir(lambda k: np.fromfile(m.path("tensors", k), np.uint16).reshape(got[k][1].shape))
    else:
        w = from_dir(lambda k: got[k][1])
    out = expert_mlp(x, *w, True)
    rel = np.abs(out - ref).max() / np.abs(ref).max()
    assert rel < 1e-12, rel
    bad = expert_mlp(x, *w, True, gate_first=False)
    assert np.abs(bad - ref).max() / np.abs(ref).max() > 1e-2
    print(f"GPT-OSS expert MLP: Megatron [gate; up] from the {'mount' if have_fuse() else 'conversion'} "
          f"= HF's interleaved ({rel:.1e}); fc1 read as [up; gate] differs")


def test_sparse(d):
    big = os.path.join(d, "gpt-oss-120b")
    ckref.run(MKCKPT, "--model", "gpt-oss", "--preset", "120b", "--sparse", "--shards", "15", big)
    cfg = json.load(open(os.path.join(big, "config.json")))
    H, I, V = cfg["hidden_size"], cfg["intermediate_size"], cfg["vocab_size"]
    src = json.loads(ckref.run(CKPTFS, "inspect", big, "--json").stdout)
    assert len(src["tensors"]) == 36 * 19 + 3, len(src["tensors"])
    rows = -(-V // 1024) * 1024  # padded to a multiple of 128 x 8
    per = rows // 8
    for r in (0, 63):
        args = ["--mapping", MAP, "--mesh", "ep=8,tp=8", "--rank", str(r)]
        io = json.loads(ckref.run(CKPTFS, "inspect", big, *args, "--io-plan").stdout)
        view = json.loads(ckref.run(CKPTFS, "inspect", big, *args, "--json").stdout)
        t = r % 8
        pad_rows = min(per, max(0, (t + 1) * per - V))
        # an expert weight of n BF16 elements comes from n / 2 block bytes
        # and n / 32 scale bytes
        ew = [x for x in view["tensors"] if ".local_experts." in x["name"] and x["name"].endswith("weight")]
        assert len(ew) == 36 * 16 * 2, len(ew)
        n = sum(int(np.prod(x["shape"])) for x in ew)
        assert n == 36 * 16 * 3 * H * I
        want = view["total_bytes"] - 2 * 2 * pad_rows * H - 2 * n + n // 2 + n // 32
        assert io["source_bytes_requested"] == want, (r, io, want)
        print(f"sparse GPT-OSS 120B, rank {r} of ep=8 x tp=8: requests exactly its "
              f"{want / 2**30:.2f} GiB of local source bytes (MXFP4 blocks and scales of its 16 experts "
              f"per layer) for a {view['total_bytes'] / 2**30:.2f} GiB BF16 view")


def main():
    with tempfile.TemporaryDirectory() as d:
        test_codes(d)
        src, hf, cfg = test_layouts(d)
        test_mlp(d, src, hf, cfg)
        test_sparse(d)


if __name__ == "__main__":
    main()
