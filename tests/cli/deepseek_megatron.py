"""DeepSeek-V3 <-> Megatron-core (issue #18): deepseek-v3-hf-to-megatron and its
inverse on `mkckpt --model deepseek-v3` (multi-latent attention, a dense first
layer, routed + shared experts with the router's e_score_correction_bias, the
multi-token-prediction layer after the last).

- every Megatron tensor equals a numpy reference written from Megatron-Bridge's
  DeepSeek layout (MLA renames, fc1 = [gate; up] for the dense MLP, every
  expert and the shared experts, pre_mlp_layernorm on MoE layers, the router,
  the vocabulary padded), the MTP layer dropped; FP8 weights stay F8_E4M3 and
  their scales follow them (fc1's scales = [gate scales; up scales]);
- tp=2 x ep=2 ranks equal numpy's Megatron shards (experts split over ep and
  renumbered, MLA heads over tp), and every FP8 rank's (weight, scale) pair
  dequantises to its slice of the dequantised global weight: the scales are
  split with their weights;
- fc1 scales over gate rows that are not whole blocks are refused;
- tp=4 with FP8 kept is refused (rows would cut 16-blocks), while the same
  view with fp8-block-dequant.json chained first works and equals numpy's
  dequantised shards (block-scaled values reshaped and split);
- HF -> Megatron -> HF gives every byte back (check-mapping), FP8 included;
- a plain torch forward pass of the HF model (MLA, sigmoid routing with the
  correction bias, shared experts) and one written from Megatron's layer
  semantics over the tensors read from a mount give the same logits; negative
  controls: linear_kv_up_proj read as [all k; all v] instead of per head, and
  fc1 read as [up; gate], both differ;
- the sparse 671B preset (91,991 keys, 163 files): ranks of an ep=8 x tp=8
  mesh request exactly their local bytes (inspect --io-plan), plus the gaps
  the engine reads on purpose between column slices less than 4 KiB apart."""
import json
import os
import sys
import tempfile

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import ckref  # noqa: E402
import fp8_dequant as f8  # noqa: E402  (E4M3 decoded from its bit fields)
from mountlib import Mount, have_fuse  # noqa: E402

CKPTFS, MKCKPT = os.environ["CKPTFS"], os.environ["MKCKPT"]
MAP, INV = "deepseek-v3-hf-to-megatron", "megatron-to-deepseek-v3-hf"
DEQ = os.path.join(os.environ["TESTS_DIR"], "..", "mappings", "fp8-block-dequant.json")
TOKS = [1, 5, 9, 200, 31, 77, 128, 3]
ATTN = {  # HF name in self_attn -> Megatron name in self_attention
    "q_a_proj": "linear_q_down_proj", "q_b_proj": "linear_q_up_proj",
    "kv_a_proj_with_mqa": "linear_kv_down_proj", "kv_b_proj": "linear_kv_up_proj",
    "o_proj": "linear_proj"}
SUFFIXES = (".weight", ".weight_scale_inv")
COLUMN_SPLIT = tuple(n + s for n in ("linear_proj", "linear_fc2") for s in SUFFIXES)


def reference(hf, cfg, vocab_multiple=128, mtp=True):
    """Megatron's tensors from HF's (name -> (dtype, array)), written from the
    layout description; the MTP layer (model.layers.{num_hidden_layers}) as
    Megatron-Bridge's mtp.layers.0 unless mtp=False."""
    out = {}
    emb, head = hf["model.embed_tokens.weight"], hf["lm_head.weight"]
    out["embedding.word_embeddings.weight"] = (emb[0], ckref.pad_vocab(emb[1], vocab_multiple))
    out["output_layer.weight"] = (head[0], ckref.pad_vocab(head[1], vocab_multiple))
    out["decoder.final_layernorm.weight"] = hf["model.norm.weight"]

    def layer(p, d, dense):
        out[d + "input_layernorm.weight"] = hf[p + "input_layernorm.weight"]
        for h, m in ATTN.items():
            for s in SUFFIXES:
                if p + f"self_attn.{h}{s}" in hf:
                    out[d + f"self_attention.{m}{s}"] = hf[p + f"self_attn.{h}{s}"]
        out[d + "self_attention.linear_q_up_proj.layer_norm_weight"] = hf[p + "self_attn.q_a_layernorm.weight"]
        out[d + "self_attention.linear_kv_up_proj.layer_norm_weight"] = hf[p + "self_attn.kv_a_layernorm.weight"]

        def mlp(hp, mp):
            for s in SUFFIXES:
                if hp + "gate_proj" + s in hf:
                    g, u = hf[hp + "gate_proj" + s], hf[hp + "up_proj" + s]
                    out[mp + "linear_fc1" + s] = (g[0], np.concatenate([g[1], u[1]], 0))
                    out[mp + "linear_fc2" + s] = hf[hp + "down_proj" + s]
        if dense:
            out[d + "mlp.linear_fc1.layer_norm_weight"] = hf[p + "post_attention_layernorm.weight"]
            mlp(p + "mlp.", d + "mlp.")
        else:
            out[d + "pre_mlp_layernorm.weight"] = hf[p + "post_attention_layernorm.weight"]
            out[d + "mlp.router.weight"] = hf[p + "mlp.gate.weight"]
            out[d + "mlp.router.expert_bias"] = hf[p + "mlp.gate.e_score_correction_bias"]
            for e in range(cfg["n_routed_experts"]):
                mlp(p + f"mlp.experts.{e}.", d + f"mlp.experts.local_experts.{e}.")
            mlp(p + "mlp.shared_experts.", d + "mlp.shared_experts.")
    n = cfg["num_hidden_layers"]
    for L in range(n):
        layer(f"model.layers.{L}.", f"decoder.layers.{L}.", L < cfg["first_k_dense_replace"])
    for M in range(cfg["num_nextn_predict_layers"] if mtp else 0):
        # Megatron's MTP block: its own norms, eh_proj and final norm around
        # a MoE layer; the embedding and head are the main model's
        p, d = f"model.layers.{n + M}.", f"mtp.layers.{M}."
        for h, m in (("enorm", "enorm"), ("hnorm", "hnorm"), ("eh_proj", "eh_proj"),
                     ("shared_head.norm", "final_layernorm")):
            out[d + m + ".weight"] = hf[p + h + ".weight"]
        layer(p, d + "transformer_layer.", False)
    return out


def rank_of(glob, tp, t, ep, e, n_experts, vocab_multiple=128):
    """Megatron's tensors on tp rank t, ep rank e (expert tensor parallelism 1):
    MLA's up projections and the MTP eh_proj (column-parallel) split by rows,
    linear_proj and fc2 by columns,
    fc1 per [gate; up] block, experts n/ep per rank renumbered from 0; a
    scale tensor is split exactly as its weight."""
    out, per = {}, n_experts // ep
    for k, w in glob.items():
        if ".local_experts." in k:
            if ckref.ep_local_name(k, e, per):
                out[ckref.ep_local_name(k, e, per)] = w
            continue
        base = k[:-len("_scale_inv")] if k.endswith("_scale_inv") else k
        if k in ckref.VOCAB_KEYS:
            out[k] = np.split(ckref.pad_vocab(w, vocab_multiple * tp), tp, 0)[t]
        elif base.endswith(("linear_q_up_proj.weight", "linear_kv_up_proj.weight", "eh_proj.weight")):
            out[k] = np.split(w, tp, 0)[t]
        elif base.endswith("linear_fc1.weight"):
            gate, up = np.split(w, 2, 0)
            out[k] = np.concatenate([np.split(gate, tp, 0)[t], np.split(up, tp, 0)[t]], 0)
        elif base.endswith(("linear_proj.weight", "linear_fc2.weight")):
            out[k] = np.split(w, tp, 1)[t]
        else:
            out[k] = w
    return out


def glob_of(ref):
    return {k: a for k, (_, a) in ref.items()}


def dequant(w, s, block):
    full = np.repeat(np.repeat(s, block, 0), block, 1)[:w.shape[0], :w.shape[1]]
    return f8.e4m3_to_f32(w) * full


def test_layouts(d):
    for tag, extra, block in (("f32", [], 0), ("fp8", ["--fp8-block", "16", "--dtype", "BF16"], 16)):
        src = os.path.join(d, "ds-" + tag)
        ckref.run(MKCKPT, "--model", "deepseek-v3", *extra, src)
        cfg = json.load(open(os.path.join(src, "config.json")))
        hf = ckref.arrays(src)
        n = cfg["num_hidden_layers"]
        assert any(k.startswith(f"model.layers.{n}.eh_proj") for k in hf), "no MTP layer"
        # the test input as DeepSeek stores it: the MTP layer's embedding and
        # head are copies of the main ones (which Megatron's MTP uses)
        for cp, main in (("embed_tokens", "model.embed_tokens"), ("shared_head.head", "lm_head")):
            assert np.array_equal(hf[f"model.layers.{n}.{cp}.weight"][1], hf[main + ".weight"][1])
        assert hf["model.layers.1.mlp.gate.e_score_correction_bias"][0] == "F32"
        ref = reference(hf, cfg)
        meg = os.path.join(d, "meg-" + tag)
        ckref.convert(CKPTFS, src, meg, [MAP])
        ckref.assert_same(ckref.arrays(meg), ref, tag)
        if block:
            assert ref["decoder.layers.1.mlp.shared_experts.linear_fc1.weight"][0] == "F8_E4M3"
        glob = glob_of(ref)
        for t in range(2):
            for e in range(2):
                out = os.path.join(d, f"r-{tag}-{t}-{e}")
                ckref.convert(CKPTFS, src, out, [MAP], "--mesh", "tp=2,ep=2", "--rank", str(2 * t + e))
                got = ckref.arrays(out)
                want = rank_of(glob, 2, t, 2, e, cfg["n_routed_experts"])
                assert set(got) == set(want), (tag, t, e, sorted(set(got) ^ set(want))[:6])
                for k, a in want.items():
                    assert got[k][1].tobytes() == np.ascontiguousarray(a).tobytes(), (tag, t, e, k)
                if block:  # each rank's scales dequantise its own rows
                    deq = {k: dequant(glob[k], glob[k + "_scale_inv"], block) for k in glob
                           if k + "_scale_inv" in glob}
                    mine = rank_of(deq, 2, t, 2, e, cfg["n_routed_experts"])
                    pairs = [k for k in got if k + "_scale_inv" in got]
                    assert len(pairs) >= 20, pairs
                    for k in pairs:
                        x = dequant(got[k][1], got[k + "_scale_inv"][1], block)
                        assert np.array_equal(x, mine[k]), (t, e, k)
        assert sum(k.startswith("mtp.layers.0.") for k in ref) > 20
        # --set moe_grouped_gemm=true: TEGroupedMLP's names, whole and on an ep rank
        # (numbered from 0 there); the inverse reads them back byte for byte
        gg = ["--set", "moe_grouped_gemm=true"]
        grouped = os.path.join(d, "meg-grouped-" + tag)
        ckref.run(CKPTFS, "convert", src, grouped, "--quiet", "--mapping", MAP, *gg)
        want_g = {ckref.grouped_name(k): v for k, v in ref.items()}
        assert any(k.endswith("experts.linear_fc1.weight3") for k in want_g)
        ckref.assert_same(ckref.arrays(grouped), want_g, tag + " grouped")
        out = os.path.join(d, f"r-grouped-{tag}")
        ckref.convert(CKPTFS, src, out, [MAP], "--mesh", "tp=2,ep=2", "--rank", "3", *gg)
        got = ckref.arrays(out)
        want = {ckref.grouped_name(k): a for k, a in rank_of(glob_of(ref), 2, 1, 2, 1, cfg["n_routed_experts"]).items()}
        assert set(got) == set(want), sorted(set(got) ^ set(want))[:6]
        for k, a in want.items():
            assert got[k][1].tobytes() == np.ascontiguousarray(a).tobytes(), (tag, "grouped", k)
        p = ckref.run(CKPTFS, "check-mapping", MAP, "--inverse", INV, "--source", src, *gg)
        assert "byte for byte" in p.stdout, p.stdout
        # --set mtp_model_layer=true: newer Megatron-core's name for the MTP
        # layer's inner transformer layer (the mapping's rename pass), whole
        # and on an ep rank (its experts renumbered there); the inverse reads
        # that naming back byte for byte
        nm = ["--set", "mtp_model_layer=true"]
        newer = os.path.join(d, "meg-newer-" + tag)
        ckref.run(CKPTFS, "convert", src, newer, "--quiet", "--mapping", MAP, *nm)
        want_n = {k.replace(".transformer_layer.", ".mtp_model_layer."): v for k, v in ref.items()}
        assert sum(".mtp_model_layer." in k for k in want_n) > 20
        ckref.assert_same(ckref.arrays(newer), want_n, tag + " mtp_model_layer")
        out = os.path.join(d, f"r-newer-{tag}")
        ckref.convert(CKPTFS, src, out, [MAP], "--mesh", "tp=2,ep=2", "--rank", "3", *nm)
        got = ckref.arrays(out)
        want = {k.replace(".transformer_layer.", ".mtp_model_layer."): a
                for k, a in rank_of(glob_of(ref), 2, 1, 2, 1, cfg["n_routed_experts"]).items()}
        assert any(".mtp_model_layer.mlp.experts.local_experts.0." in k for k in want)
        assert set(got) == set(want), sorted(set(got) ^ set(want))[:6]
        for k, a in want.items():
            assert got[k][1].tobytes() == np.ascontiguousarray(a).tobytes(), (tag, "mtp_model_layer", k)
        p = ckref.run(CKPTFS, "check-mapping", MAP, "--inverse", INV, "--source", src, *nm)
        assert "byte for byte" in p.stdout, p.stdout
        # --set mtp_num_layers=0: a Megatron model built without MTP
        nomtp = os.path.join(d, "meg-nomtp-" + tag)
        ckref.run(CKPTFS, "convert", src, nomtp, "--quiet", "--mapping", MAP, "--set", "mtp_num_layers=0")
        ckref.assert_same(ckref.arrays(nomtp), reference(hf, cfg, mtp=False), tag + " without MTP")
        print(f"deepseek-v3 {tag}: {len(ref)} Megatron tensors equal the reference (MTP layer as mtp.layers.0, "
              f"or dropped with --set mtp_num_layers=0; TEGroupedMLP's weight{{e}} names with "
              f"--set moe_grouped_gemm=true, whole, on ep rank 1 and back; newer Megatron's "
              f"mtp_model_layer with --set mtp_model_layer=true, the same three ways); "
              f"tp=2 x ep=2 ranks equal numpy's shards" + (", each rank's FP8 scales dequantise its rows"
                                                         if block else ""))
    # FP8 kept at tp=4: 96 q_up rows / 4 = 24 cut a 16-block: refused, naming the rule
    src = os.path.join(d, "ds-fp8")
    p = ckref.run(CKPTFS, "inspect", src, "--mapping", MAP, "--mesh", "tp=4", "--rank", "1", check=False)
    assert p.returncode != 0 and "partition rule 2" in p.stderr and "whole blocks" in p.stderr \
        and p.stderr.count("\n") == 1, p.stderr
    # dequantised first, tp=4 works: numpy's dequantised shards, as BF16
    hf = ckref.arrays(src)
    cfg = json.load(open(os.path.join(src, "config.json")))
    deq_hf = {}
    for k, (dt, a) in hf.items():
        if k.endswith("_scale_inv"):
            continue
        deq_hf[k] = ("BF16", f8.f32_to_bf16(dequant(a, hf[k + "_scale_inv"][1], 16))) \
            if k + "_scale_inv" in hf else (dt, a)
    glob = {k: a for k, (_, a) in reference(deq_hf, cfg).items()}
    for r in (0, 3):
        out = os.path.join(d, f"deq-tp4-{r}")
        ckref.run(CKPTFS, "convert", src, out, "--quiet", "--mapping", DEQ, "--mapping", MAP,
                  "--mesh", "tp=4", "--rank", str(r))
        got, want = ckref.arrays(out), rank_of(glob, 4, r, 1, 0, cfg["n_routed_experts"])
        assert set(got) == set(want), sorted(set(got) ^ set(want))[:6]
        for k, a in want.items():
            assert got[k][1].tobytes() == np.ascontiguousarray(a).tobytes(), (r, k)
    print("FP8 kept at tp=4 refused (blocks would be cut); dequantised first, tp=4 ranks equal numpy's")
    # pp=3 x ep=2 x tp=2: the first stage (the dense layer 0 and the
    # embedding) holds no expert, yet ep splits the model: the view is served;
    # the last stage holds layer 2 and the MTP block with 2 of its 4 experts
    args = ["--mapping", MAP, "--mesh", "pp=3,ep=2,tp=2", "--json"]
    first = json.loads(ckref.run(CKPTFS, "inspect", src, *args, "--rank", "0").stdout)["tensors"]
    last = json.loads(ckref.run(CKPTFS, "inspect", src, *args, "--rank", "11").stdout)["tensors"]
    assert not any("experts." in t["name"] for t in first) and \
        any(t["name"] == "embedding.word_embeddings.weight" for t in first), [t["name"] for t in first]
    mtp_experts = {t["name"].split(".local_experts.")[1].split(".")[0] for t in last
                   if t["name"].startswith("mtp.") and ".local_experts." in t["name"]}
    assert mtp_experts == {"0", "1"} and any(t["name"].startswith("decoder.layers.0.") for t in last), \
        sorted(t["name"] for t in last)[:8]
    print("pp=3 x ep=2: a first stage of dense layers (no experts) is served; the last holds the MTP block")
    # 64-blocks over 32 gate rows of an expert (the MTP layer's come first):
    # fc1's concatenated scales would be misaligned
    src = os.path.join(d, "ds-fp8-64")
    ckref.run(MKCKPT, "--model", "deepseek-v3", "--fp8-block", "64", src)
    p = ckref.run(CKPTFS, "inspect", src, "--mapping", MAP, check=False)
    assert p.returncode == 4 and "gate_rows_are_whole_blocks" in p.stderr and "32 / 64 does not divide" in p.stderr \
        and p.stderr.count("\n") == 1, p.stderr
    p = ckref.run(CKPTFS, "inspect", src, "--mapping", DEQ, "--mapping", MAP)  # dequantised: fine
    print("fc1 scales of gate rows that are not whole blocks refused, naming the rule")
    for mtp, extra in ((1, []), (0, []), (2, ["--fp8-block", "16", "--dtype", "BF16"])):
        src = os.path.join(d, f"ds-rt{mtp}" + "".join(extra))
        ckref.run(MKCKPT, "--model", "deepseek-v3", "--mtp-layers", str(mtp), *extra, src)
        p = ckref.run(CKPTFS, "check-mapping", MAP, "--inverse", INV, "--source", src)
        assert "byte for byte" in p.stdout, p.stdout
    print("HF -> Megatron -> HF: every byte back (F32 with 0 or 1 MTP layers, FP8 with its scales and "
          "2 MTP layers; the MTP copies of the embedding and head recreated from the main ones)")
    # a Megatron checkpoint that lost a dense layer's MLP, an expert or a
    # MoE layer's shared experts is refused by the inverse ("each" with the
    # dense / MoE split of first_k_dense_replace), not converted without them
    src = os.path.join(d, "ds-rt0")
    cfg = json.load(open(os.path.join(src, "config.json")))
    meg = os.path.join(d, "ds-missing")
    ckref.convert(CKPTFS, src, meg, [MAP])
    k, ne = cfg["first_k_dense_replace"], cfg["n_routed_experts"]
    ckref.assert_refused_without(CKPTFS, d, meg, INV, [
        ("dense fc2", lambda n: n == f"decoder.layers.{k - 1}.mlp.linear_fc2.weight",
         f"no key for {{L}} = {k - 1} (each {{L}} below num_hidden_layers"),
        ("last expert", lambda n: f"layers.{k}.mlp.experts.local_experts.{ne - 1}." in n,
         f"no key for {{L}} = {k}, {{E}} = {ne - 1}"),
        ("shared experts", lambda n: f"layers.{k}.mlp.shared_experts." in n,
         f"no key for {{L}} = {k} (each")])
    print("a Megatron checkpoint without a dense layer's fc2, a MoE layer's last expert or its shared "
          "experts: refused by the inverse in one line")


def forward(w, cfg, toks, names, kv_per_head=True, gate_first=True, mtp=None):
    """DeepSeek-V3 in plain torch over tensors named by `names` (HF's or
    Megatron's): MLA (q through its latent and norm, one shared rotary key,
    per-head [k_nope; v] from kv_b), a dense first layer, sigmoid routing where
    the correction bias picks the experts and the raw scores weigh them
    (renormalised, times routed_scaling_factor), shared experts. With `mtp`
    (names of one multi-token-prediction module) also its logits, as
    DeepSeek-V3's paper and Megatron's MTP compute them: position i combines
    the main model's last hidden state h_i with the embedding of token i + 1,
    eh_proj([enorm(emb); hnorm(h)]), through one more MoE layer, a final norm
    and the shared head."""
    import torch
    H, nh = cfg["hidden_size"], cfg["num_attention_heads"]
    nope, rope, vd, kvl = (cfg["qk_nope_head_dim"], cfg["qk_rope_head_dim"], cfg["v_head_dim"],
                           cfg["kv_lora_rank"])
    eps = cfg["rms_norm_eps"]

    def rms(x, g):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * g
    inv = 1.0 / (cfg["rope_theta"] ** (torch.arange(0, rope, 2).double() / rope))

    def rot(x):
        T = x.shape[-2]
        ang = torch.arange(T).double()[:, None] * inv[None]
        cos, sin = torch.cat([ang, ang], -1).cos().float(), torch.cat([ang, ang], -1).sin().float()
        return x * cos + torch.cat([-x[..., rope // 2:], x[..., :rope // 2]], -1) * sin

    def mlp(x, fc1, fc2):
        gate, up = fc1(x).chunk(2, -1)
        if not gate_first:
            gate, up = up, gate
        return (torch.nn.functional.silu(gate) * up) @ fc2.T

    def layer(x, n, dense):
        T = x.shape[0]
        mask = torch.full((T, T), float("-inf")).triu(1)
        h = rms(x, w[n["in_ln"]])
        q = (rms(h @ w[n["q_a"]].T, w[n["q_a_ln"]]) @ w[n["q_b"]].T).view(T, nh, nope + rope).transpose(0, 1)
        ckv = h @ w[n["kv_a"]].T
        c, k_pe = ckv[:, :kvl], ckv[:, kvl:]
        kv = rms(c, w[n["kv_a_ln"]]) @ w[n["kv_b"]].T
        kv = kv.view(T, nh, nope + vd) if kv_per_head else \
            torch.cat([kv[:, :nh * nope].view(T, nh, nope), kv[:, nh * nope:].view(T, nh, vd)], -1)
        kv = kv.transpose(0, 1)
        k = torch.cat([kv[..., :nope], rot(k_pe)[None].expand(nh, T, rope)], -1)
        q = torch.cat([q[..., :nope], rot(q[..., nope:])], -1)
        a = torch.softmax(q @ k.transpose(1, 2) * (nope + rope) ** -0.5 + mask, -1) @ kv[..., nope:]
        x = x + a.transpose(0, 1).reshape(T, nh * vd) @ w[n["o"]].T
        h = rms(x, w[n["post_ln"]])
        fc = names["fc"]
        if dense:
            return x + mlp(h, *fc(w, n["dense"]))
        s = torch.sigmoid(h @ w[n["router"]].T)
        top = torch.topk(s + w[n["bias"]], cfg["num_experts_per_tok"], -1).indices
        wt = torch.gather(s, -1, top)
        wt = wt / wt.sum(-1, keepdim=True) * cfg["routed_scaling_factor"]
        y = mlp(h, *fc(w, n["shared"]))
        for t in range(T):
            for j in range(top.shape[1]):
                y[t] = y[t] + wt[t, j] * mlp(h[t:t + 1], *fc(w, n["expert"].format(E=int(top[t, j]))))[0]
        return x + y
    x = w[names["embed"]][toks]
    for L in range(cfg["num_hidden_layers"]):
        n = {k: v.format(L=L) for k, v in names.items() if isinstance(v, str)}
        x = layer(x, n, L < cfg["first_k_dense_replace"])
    V = cfg["vocab_size"]
    logits = (rms(x, w[names["norm"]]) @ w[names["head"]].T)[:, :V]
    if not mtp:
        return logits
    e = rms(w[mtp["embed"]][toks[1:]], w[mtp["enorm"]])
    hm = torch.cat([e, rms(x[:-1], w[mtp["hnorm"]])], -1) @ w[mtp["eh_proj"]].T
    hm = layer(hm, {k: v.format(L=mtp["L"]) for k, v in mtp["layer"].items() if isinstance(v, str)}, False)
    return logits, (rms(hm, w[mtp["norm"]]) @ w[mtp["head"]].T)[:, :V]


def hf_fc(w, p):
    return (lambda x: torch_cat(x @ w[p + "gate_proj.weight"].T, x @ w[p + "up_proj.weight"].T)), \
        w[p + "down_proj.weight"]


def meg_fc(w, p):
    return (lambda x: x @ w[p + "linear_fc1.weight"].T), w[p + "linear_fc2.weight"]


def torch_cat(a, b):
    import torch
    return torch.cat([a, b], -1)


HF_NAMES = {
    "embed": "model.embed_tokens.weight", "norm": "model.norm.weight", "head": "lm_head.weight",
    "in_ln": "model.layers.{L}.input_layernorm.weight", "post_ln": "model.layers.{L}.post_attention_layernorm.weight",
    "q_a": "model.layers.{L}.self_attn.q_a_proj.weight", "q_a_ln": "model.layers.{L}.self_attn.q_a_layernorm.weight",
    "q_b": "model.layers.{L}.self_attn.q_b_proj.weight",
    "kv_a": "model.layers.{L}.self_attn.kv_a_proj_with_mqa.weight",
    "kv_a_ln": "model.layers.{L}.self_attn.kv_a_layernorm.weight",
    "kv_b": "model.layers.{L}.self_attn.kv_b_proj.weight", "o": "model.layers.{L}.self_attn.o_proj.weight",
    "dense": "model.layers.{L}.mlp.", "shared": "model.layers.{L}.mlp.shared_experts.",
    "expert": "model.layers.{L}.mlp.experts.{{E}}.", "router": "model.layers.{L}.mlp.gate.weight",
    "bias": "model.layers.{L}.mlp.gate.e_score_correction_bias", "fc": hf_fc}
MEG_NAMES = {
    "embed": "embedding.word_embeddings.weight", "norm": "decoder.final_layernorm.weight",
    "head": "output_layer.weight", "in_ln": "decoder.layers.{L}.input_layernorm.weight",
    "q_a": "decoder.layers.{L}.self_attention.linear_q_down_proj.weight",
    "q_a_ln": "decoder.layers.{L}.self_attention.linear_q_up_proj.layer_norm_weight",
    "q_b": "decoder.layers.{L}.self_attention.linear_q_up_proj.weight",
    "kv_a": "decoder.layers.{L}.self_attention.linear_kv_down_proj.weight",
    "kv_a_ln": "decoder.layers.{L}.self_attention.linear_kv_up_proj.layer_norm_weight",
    "kv_b": "decoder.layers.{L}.self_attention.linear_kv_up_proj.weight",
    "o": "decoder.layers.{L}.self_attention.linear_proj.weight",
    "dense": "decoder.layers.{L}.mlp.", "shared": "decoder.layers.{L}.mlp.shared_experts.",
    "expert": "decoder.layers.{L}.mlp.experts.local_experts.{{E}}.",
    "router": "decoder.layers.{L}.mlp.router.weight", "bias": "decoder.layers.{L}.mlp.router.expert_bias",
    "fc": meg_fc}


def test_forward(d):
    import torch
    src = os.path.join(d, "ds-f32")
    cfg = json.load(open(os.path.join(src, "config.json")))

    def tw(arrs):
        return {k: torch.tensor(ckref.as_f32(dt, a)) * (0.25 if a.ndim == 2 and "router" not in k
                                                         and "gate.weight" not in k else 1.0)
                for k, (dt, a) in arrs.items()}
    n_main = cfg["num_hidden_layers"]
    # HF's MTP module: model.layers.{n} with its own copies of the embedding
    # and head; Megatron's: mtp.layers.0 around a transformer_layer, with the
    # main embedding and output layer
    hf_mtp = {"L": n_main, "layer": HF_NAMES, "embed": f"model.layers.{n_main}.embed_tokens.weight",
              "head": f"model.layers.{n_main}.shared_head.head.weight",
              "enorm": f"model.layers.{n_main}.enorm.weight", "hnorm": f"model.layers.{n_main}.hnorm.weight",
              "eh_proj": f"model.layers.{n_main}.eh_proj.weight",
              "norm": f"model.layers.{n_main}.shared_head.norm.weight"}
    want, want_mtp = forward(tw(ckref.arrays(src)), cfg, TOKS, HF_NAMES, mtp=hf_mtp)
    if have_fuse():
        with Mount(src, [MAP]) as m:
            meg = {k: (v[0], v[2]) for k, v in ckref.read_safetensors(m.path("model.safetensors")).items()}
    else:
        meg = ckref.arrays(os.path.join(d, "meg-f32"))
    mw = tw(meg)
    # post-attention norms are read by name per layer kind
    names = dict(MEG_NAMES)
    for L in range(n_main):  # Megatron: the dense layer's norm is fused into fc1
        key = (f"decoder.layers.{L}.mlp.linear_fc1.layer_norm_weight" if L < cfg["first_k_dense_replace"]
               else f"decoder.layers.{L}.pre_mlp_layernorm.weight")
        mw[f"decoder.layers.{L}.post_ln"] = mw[key]
    names["post_ln"] = "decoder.layers.{L}.post_ln"
    mtp_layer = {k: v.replace("decoder.layers.{L}.", "mtp.layers.{L}.transformer_layer.")
                 if isinstance(v, str) else v for k, v in MEG_NAMES.items()}
    mtp_layer["post_ln"] = "mtp.layers.{L}.transformer_layer.pre_mlp_layernorm.weight"
    meg_mtp = {"L": 0, "layer": mtp_layer, "embed": MEG_NAMES["embed"], "head": MEG_NAMES["head"],
               "enorm": "mtp.layers.0.enorm.weight", "hnorm": "mtp.layers.0.hnorm.weight",
               "eh_proj": "mtp.layers.0.eh_proj.weight", "norm": "mtp.layers.0.final_layernorm.weight"}
    got, got_mtp = forward(mw, cfg, TOKS, names, mtp=meg_mtp)
    rel = float((got - want).abs().max() / want.abs().max())
    assert rel < 1e-5 and got.argmax(-1).tolist() == want.argmax(-1).tolist(), rel
    rel_mtp = float((got_mtp - want_mtp).abs().max() / want_mtp.abs().max())
    assert rel_mtp < 1e-5 and got_mtp.argmax(-1).tolist() == want_mtp.argmax(-1).tolist(), rel_mtp
    for kw in ({"kv_per_head": False}, {"gate_first": False}):
        bad = float((forward(mw, cfg, TOKS, names, **kw) - want).abs().max() / want.abs().max())
        assert bad > 1e-2, (kw, bad)
    # the MTP logits see its own tensors: its norms read the other way round differ
    swapped = dict(meg_mtp, enorm=meg_mtp["hnorm"], hnorm=meg_mtp["enorm"])
    bad = float((forward(mw, cfg, TOKS, names, mtp=swapped)[1] - want_mtp).abs().max() / want_mtp.abs().max())
    assert bad > 1e-2, bad
    print(f"deepseek-v3 forward: Megatron-layout logits from the {'mount' if have_fuse() else 'conversion'} "
          f"= HF logits ({rel:.1e}), and the MTP module's ({rel_mtp:.1e}); kv_b read unpaired, fc1 read "
          f"[up; gate] and the MTP norms swapped all differ")


def test_sparse(d):
    big = os.path.join(d, "ds-671b")
    ckref.run(MKCKPT, "--model", "deepseek-v3", "--preset", "671b", "--sparse", "--shards", "163", big)
    p = json.loads(ckref.run(CKPTFS, "inspect", big, "--json").stdout)
    # per MoE layer: 5 FP8 attention weights + scales, 2 latent norms, 2 norms,
    # router weight + bias, 256 experts and the shared one x 3 weights + scales;
    # dense layers: 3 MLP weights + scales; the MTP layer adds 6 of its own
    moe = 5 * 2 + 2 + 2 + 2 + 257 * 3 * 2
    keys = 58 * moe + 3 * (5 * 2 + 2 + 2 + 3 * 2) + (moe + 6) + 3
    assert len(p["tensors"]) == keys == 91991, (len(p["tensors"]), keys)
    V, H, rows = 129280, 7168, 130048  # padded to a multiple of 128 x 8
    per = rows // 8
    for r in (0, 63):
        args = ["--mapping", MAP, "--mesh", "ep=8,tp=8", "--rank", str(r)]
        io = json.loads(ckref.run(CKPTFS, "inspect", big, *args, "--io-plan").stdout)
        view = json.loads(ckref.run(CKPTFS, "inspect", big, *args, "--json").stdout)
        t = r % 8
        pad_rows = min(per, max(0, (t + 1) * per - V))
        n_vocab = sum(x["name"] in ckref.VOCAB_KEYS for x in view["tensors"])
        experts = {x["name"] for x in view["tensors"] if ".local_experts." in x["name"]}
        # 58 MoE layers and the MTP layer's, 32 experts per ep rank, fc1 and fc2 with scales
        assert n_vocab == 2 and len(experts) == (58 + 1) * 32 * 4, (n_vocab, len(experts))
        # column slices whose rows lie closer than 4 KiB apart are read as one
        # span, gaps included (the engine's CK_COALESCE_GAP): the shared
        # experts' fc2 (256 of 2048 FP8 columns) and the column-split scales
        gaps = 0
        for x in view["tensors"]:
            if ".local_experts." in x["name"] or not x["name"].endswith(COLUMN_SPLIT):
                continue
            (R, c), C = x["shape"], x["global_shape"][1]
            es = {"F8_E4M3": 1, "BF16": 2, "F32": 4}[x["dtype"]]
            if (C - c) * es < 4096:
                gaps += (R - 1) * C * es + c * es - R * c * es
        want = view["total_bytes"] - n_vocab * pad_rows * H * 2 + gaps
        assert io["view_bytes"] == view["total_bytes"] and io["source_bytes_requested"] == want, (r, io, want)
        print(f"sparse DeepSeek-V3 671B (91,991 keys), rank {r} of ep=8 x tp=8: requests its "
              f"{view['total_bytes'] / 2**30:.1f} GiB of local bytes (FP8 weights with their scales, 32 experts "
              f"per layer) + {gaps / 2**20:.0f} MiB of sub-4-KiB gaps")


def main():
    with tempfile.TemporaryDirectory() as d:
        test_layouts(d)
        test_forward(d)
        test_sparse(d)


if __name__ == "__main__":
    main()
