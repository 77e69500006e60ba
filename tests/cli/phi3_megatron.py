"""Phi-3 <-> Megatron-core (issue #18). Hugging Face's Phi-3 stores its own
fused projections: qkv_proj is [all q rows; all k rows; all v rows] (HF's
Phi3Attention slices q = [:nh*hd], k = [nh*hd : nh*hd + nkv*hd], v = the
rest) and gate_up_proj is [gate; up] (Phi3MLP: gate, up = chunk(2)).
Megatron wants linear_qkv grouped per KV group. Checked:
- every tensor of `phi3-hf-to-megatron` equals ckref's Megatron layout of
  the q, k, v, gate, up numpy slices of HF's fused tensors (GQA 8/2 and 4/2);
- a Megatron-layout forward pass over the converted tensors gives the HF
  model's logits (the HF Phi-3 forward in plain torch: the slices above fed
  to the Llama forward), and reading linear_qkv ungrouped does not;
- tp=2 ranks equal Megatron's shards of the reference; the inverse
  `megatron-to-phi3-hf` restores every byte (check-mapping);
- every tp=8 rank of the sparse Phi-3-mini preset requests exactly its local
  bytes (inspect --io-plan)."""
import json
import os
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import ckref  # noqa: E402
import gguf_source as gs  # noqa: E402
import megatron_forward as mf  # noqa: E402

CKPTFS, MKCKPT = os.environ["CKPTFS"], os.environ["MKCKPT"]


with tempfile.TemporaryDirectory() as d:
    for heads in ("8", "4"):
        src = os.path.join(d, "phi3-" + heads)
        ckref.run(MKCKPT, "--model", "phi3", "--heads", heads, "--kv-heads", "2", src)
        cfg = json.load(open(os.path.join(src, "config.json")))
        assert cfg["architectures"] == ["Phi3ForCausalLM"]
        hf = ckref.read_checkpoint_dir(src)
        llama = gs.phi3_unfuse(hf, cfg)
        ref = ckref.llama_to_megatron_ref(llama, cfg)
        meg = os.path.join(d, "meg-" + heads)
        ckref.convert(CKPTFS, src, meg, ["phi3-hf-to-megatron"])
        got = ckref.read_checkpoint_dir(meg)
        assert set(got) == set(ref), set(got) ^ set(ref)
        for k, (_, a) in ref.items():
            assert got[k][2].tobytes() == a.tobytes(), k
        for r in range(2):
            out = os.path.join(d, f"tp2-{heads}-{r}")
            ckref.convert(CKPTFS, src, out, ["phi3-hf-to-megatron"], "--mesh", "tp=2", "--rank", str(r))
            shard = ckref.megatron_rank({k: a for k, (_, a) in ref.items()}, 2, r)
            rank = ckref.read_checkpoint_dir(out)
            assert set(rank) == set(shard) and all(rank[k][2].tobytes() == a.tobytes() for k, a in shard.items()), r
        import torch
        scale = lambda a: torch.tensor(a.astype("float32")) * (0.25 if a.ndim == 2 else 1.0)  # noqa: E731
        want = gs.llama_forward({k: scale(a) for k, (_, a) in llama.items()}, cfg, mf.TOKS)
        mg = {k: scale(v[2]) for k, v in got.items()}
        rel = gs.rel(mf.megatron_forward(mg, cfg, mf.TOKS), want)
        bad = gs.rel(mf.megatron_forward(mg, cfg, mf.TOKS, grouped=False), want)
        assert rel < 1e-5 and bad > 1e-2, (heads, rel, bad)
        p = ckref.run(CKPTFS, "check-mapping", "phi3-hf-to-megatron", "--inverse", "megatron-to-phi3-hf",
                      "--source", src)
        assert "byte for byte" in p.stdout, p.stdout
        print(f"phi3 {heads}/2 heads: {len(ref)} Megatron tensors equal the reference, tp=2 shards too; "
              f"Megatron-layout logits = HF logits ({rel:.1e}; ungrouped: off by {bad:.1e}); inverse exact")

    sparse = os.path.join(d, "mini")
    ckref.run(MKCKPT, "--model", "phi3", "--preset", "mini", "--dtype", "BF16", "--sparse", sparse)
    for r in (0, 7):
        args = ["--mapping", "phi3-hf-to-megatron", "--mesh", "tp=8", "--rank", str(r)]
        io = json.loads(ckref.run(CKPTFS, "inspect", sparse, *args, "--io-plan").stdout)
        view = json.loads(ckref.run(CKPTFS, "inspect", sparse, *args, "--json").stdout)
        local = view["total_bytes"]
        # the vocabulary (32064) is padded to 32768 = a multiple of 128 x 8:
        # rows past 32064 of the last rank are zeros, read from nowhere
        V, H, per = 32064, 3072, 32768 // 8
        pad_rows = min(per, max(0, (r + 1) * per - V))
        n_vocab = sum(t["name"] in ckref.VOCAB_KEYS for t in view["tensors"])
        assert n_vocab == 2 and all(t["global_shape"][0] == 32768 for t in view["tensors"]
                                    if t["name"] in ckref.VOCAB_KEYS)
        want = local - n_vocab * pad_rows * H * 2
        assert io["view_bytes"] == local and io["source_bytes_requested"] == want, (r, io, local, want)
    print("tp=8 ranks of the sparse Phi-3-mini preset request exactly their local bytes (padding: none)")
