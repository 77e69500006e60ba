"""Optimizer state follows its parameters (issue #20).

A tiny Llama is trained for three steps with Debian torch's real Adam; its
state is flattened to parameter names the way
torch.distributed.checkpoint.state_dict's flatten_optimizer_state_dict does
(state.{fqn}.exp_avg, .exp_avg_sq, .step; param_groups.{fqn}.lr, ...) and
saved beside the parameters (safetensors, and a torch.save file whose
hyper-parameters are not tensors). Then:
- the Llama HF -> Megatron mapping, whole and tp=2 per rank through a
  mount, gives every exp_avg / exp_avg_sq the layout ckref computes for the
  weights (grouped QKV, [gate; up], row/column splits) from the state arrays,
  under Megatron's names (optimizer.state.exp_avg.<key>); steps are renamed
  and replicated;
- `convert` writes the state beside the weights, and the inverse mapping
  gives every source byte back under the flattened names;
- a Megatron torch_dist checkpoint with per-parameter state (BF16 weights,
  F32 fp32_param master weights, exp_avg, exp_avg_sq; layer-stacked keys,
  tp-chunked) written by the test's own DCP writer converts to the flattened
  HF form and back to the same tensors;
- inconsistent state and Megatron's legacy bucket file are refused with one
  line, exit 4."""
import json
import os
import sys
import tempfile

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import ckref  # noqa: E402
import dcpgen  # noqa: E402
from mountlib import Mount, have_fuse  # noqa: E402

CKPTFS, MKCKPT = os.environ["CKPTFS"], os.environ["MKCKPT"]
MAPS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "mappings")
FWD, INV = os.path.join(MAPS, "llama-hf-to-megatron.json"), os.path.join(MAPS, "megatron-to-llama-hf.json")
STATES = ("exp_avg", "exp_avg_sq")


def adam(params, steps=3):
    """Three steps of torch.optim.Adam on the parameters (deterministic
    gradients). Returns the parameters after them and the state flattened
    as flatten_optimizer_state_dict names it: state.{fqn}.{k} and
    param_groups.{fqn}.{k}."""
    fqns = list(params)
    ps = [torch.nn.Parameter(torch.from_numpy(params[k].copy())) for k in fqns]
    opt = torch.optim.Adam(ps, lr=1e-2, betas=(0.9, 0.99))
    g = torch.Generator().manual_seed(0)
    for _ in range(steps):
        for p in ps:
            p.grad = torch.randn(p.shape, generator=g)
        opt.step()
    sd = opt.state_dict()  # state by parameter index, groups list the indices
    flat, groups = {}, {}
    for i, st in sd["state"].items():
        for k, v in st.items():
            flat[f"state.{fqns[i]}.{k}"] = v.detach().clone()
    for gr in sd["param_groups"]:
        for i in gr["params"]:
            groups.update({f"param_groups.{fqns[i]}.{k}": v for k, v in gr.items() if k != "params"})
    return {k: p.detach().clone() for k, p in zip(fqns, ps)}, flat, groups


def f32(t):
    return ("F32", t.shape, t.numpy().astype("<f4"))


def as_bytes(d):
    return {k: np.ascontiguousarray(v[2]).tobytes() for k, v in d.items()}


def raw(t):
    t = t.contiguous()
    return t.view(torch.int16).numpy().tobytes() if t.dtype == torch.bfloat16 else t.numpy().tobytes()


def converted(src, out, maps, *extra):
    ckref.convert(CKPTFS, src, out, maps, *extra)
    return as_bytes(ckref.read_checkpoint_dir(out))


with tempfile.TemporaryDirectory() as d:
    gen = os.path.join(d, "gen")
    ckref.run(MKCKPT, "--model", "llama", gen)  # F32, GQA 4/2, untied
    cfg = json.load(open(os.path.join(gen, "config.json")))
    start = {k: a.copy() for k, (_, _, a) in ckref.read_checkpoint_dir(gen).items()}
    params, flat, groups = adam(start)
    assert all(k.rsplit(".", 1)[1] in ("exp_avg", "exp_avg_sq", "step") for k in flat)
    assert flat["state.model.norm.weight.step"].dim() == 0  # torch >= 1.12: a scalar tensor

    src = os.path.join(d, "hf")
    os.makedirs(src)
    os.link(os.path.join(gen, "config.json"), os.path.join(src, "config.json"))
    ckref.write_safetensors(os.path.join(src, "model.safetensors"),
                            {k: (t[0], t[1], t[2].tobytes()) for k, t in
                             ((k, f32(v)) for k, v in params.items())})
    ckref.write_safetensors(os.path.join(src, "optimizer.safetensors"),
                            {k: (t[0], t[1], t[2].tobytes()) for k, t in
                             ((k, f32(v)) for k, v in flat.items())})
    src_bytes = as_bytes(ckref.read_checkpoint_dir(src))

    # the reference: Megatron's layout applied to each state as to the weights
    ref = {"": ckref.llama_to_megatron_ref({k: ("F32", v.numpy()) for k, v in params.items()}, cfg)}
    for s in STATES:
        ref[s] = ckref.llama_to_megatron_ref(
            {k: ("F32", flat[f"state.{k}.{s}"].numpy()) for k in params}, cfg)
    meg_names = sorted(ref[""])
    expect = {k: np.ascontiguousarray(v[1]).tobytes() for k, v in ref[""].items()}
    for s in STATES:
        expect.update({f"optimizer.state.{s}.{k}": np.ascontiguousarray(v[1]).tobytes()
                       for k, v in ref[s].items()})
    step = np.float32(3).tobytes()
    expect.update({f"optimizer.state.step.{k}": step for k in meg_names})

    view = json.loads(ckref.run(CKPTFS, "inspect", src, "--mapping", FWD, "--json").stdout)
    assert view["optimizer_state"] == {"naming": "optimizer.state.{state}.{param}",
                                       "states": ["exp_avg", "exp_avg_sq", "step"],
                                       "n_tensors": 3 * len(meg_names), "hyper_parameters": []}, \
        view["optimizer_state"]
    by = {t["name"]: t for t in view["tensors"]}
    assert set(by) == set(expect), set(by) ^ set(expect)
    t = by["optimizer.state.exp_avg.decoder.layers.1.self_attention.linear_qkv.weight"]
    assert (t["param"], t["state"]) == ("decoder.layers.1.self_attention.linear_qkv.weight", "exp_avg")
    for which, n in (("params", len(meg_names)), ("optimizer", 3 * len(meg_names))):
        v = json.loads(ckref.run(CKPTFS, "inspect", src, "--mapping", FWD, "--state", which, "--json").stdout)
        assert v["n_tensors"] == n and all(("state" in t) == (which == "optimizer") for t in v["tensors"]), which
    print(f"inspect: {len(meg_names)} Megatron parameters, each with exp_avg, exp_avg_sq and step under "
          "optimizer.state.{state}.{param}; --state params|optimizer keeps each part")

    # convert writes the state beside the weights; the inverse restores every byte
    meg = os.path.join(d, "megatron")
    got = converted(src, meg, [FWD])
    assert got == expect, sorted(k for k in expect if got.get(k) != expect[k])[:5]
    back = converted(meg, os.path.join(d, "back"), [INV])
    assert back == src_bytes, sorted(set(back) ^ set(src_bytes))[:5] or \
        sorted(k for k in back if back[k] != src_bytes[k])[:5]
    print(f"convert: {len(got)} tensors equal the reference (state laid out as its weight); "
          f"megatron-to-llama-hf gives back all {len(back)} source tensors byte for byte")

    # pipeline stage 1 of 2 holds layer 1, renumbered 0, with its state
    pp = converted(src, os.path.join(d, "pp1"), [FWD], "--mesh", "pp=2", "--rank", "1")
    for pre in ("", *(f"optimizer.state.{s}." for s in (*STATES, "step"))):
        k = pre + "decoder.layers.{}.self_attention.linear_qkv.weight"
        assert pp[k.format(0)] == expect[k.format(1)], k
    assert not any(".layers.1." in k for k in pp)
    print("pp=2: the second stage's layer and its state renumbered together")

    # a torch.save checkpoint whose hyper-parameters are not tensors
    pt = os.path.join(d, "pt")
    os.makedirs(pt)
    os.link(os.path.join(gen, "config.json"), os.path.join(pt, "config.json"))
    torch.save({**params, **flat, **groups}, os.path.join(pt, "pytorch_model.bin"))
    v = json.loads(ckref.run(CKPTFS, "inspect", pt, "--mapping", FWD, "--json").stdout)
    assert v["optimizer_state"]["n_tensors"] == 3 * len(meg_names)
    assert {e["key"] for e in v["left_out"]} >= {f"param_groups.model.norm.weight.{k}" for k in ("lr", "eps")}
    hp = {(h["from"], h["to"]) for h in v["optimizer_state"]["hyper_parameters"]}
    for hf_k, meg_k in (("model.layers.0.self_attn.q_proj.weight", "decoder.layers.0.self_attention.linear_qkv.weight"),
                        ("model.norm.weight", "decoder.final_layernorm.weight")):
        for name in ("lr", "betas", "eps"):
            assert (f"param_groups.{hf_k}.{name}", f"param_groups.{meg_k}.{name}") in hp, (hf_k, name)
    assert len(hp) == len(meg_names) * sum(1 for k in groups if k.startswith("param_groups.model.norm.weight."))
    assert converted(pt, os.path.join(d, "pt-meg"), [FWD]) == expect
    print("torch.save source: the same targets; its hyper-parameters (Python values) listed, renamed "
          "with their targets")

    if have_fuse():
        with Mount(src, [FWD]) as m:
            for k, b in expect.items():
                assert open(m.path("tensors", k), "rb").read() == b, k
        for r in range(2):
            with Mount(src, [FWD], extra=["--mesh", "tp=2", "--rank", str(r)]) as m:
                for s, prefix in (("", ""), *((s, f"optimizer.state.{s}.") for s in STATES)):
                    shard = ckref.megatron_rank({k: v[1] for k, v in ref[s].items()}, 2, r)
                    for k, a in shard.items():
                        got_b = open(m.path("tensors", prefix + k), "rb").read()
                        assert got_b == np.ascontiguousarray(a).tobytes(), (r, prefix + k)
                for k in meg_names:  # scalars are replicated, not split
                    assert open(m.path("tensors", f"optimizer.state.step.{k}"), "rb").read() == step
        print("mounts: whole and tp=2 per rank, every state tensor equals Megatron's shard of the reference")
    else:
        print("mounts: skipped (no FUSE); the convert checks above ran")

    # Megatron torch_dist with per-parameter state: BF16 weights, F32 master
    # weights and moments; layer-stacked keys, every matrix in two chunks
    def stacked(meg_dict):
        out, layers = {}, {}
        for k, a in meg_dict.items():
            parts = k.split(".")
            if k.startswith("decoder.layers."):
                layers.setdefault(".".join(parts[:2] + parts[3:]), {})[int(parts[2])] = a
            else:
                out[k] = torch.from_numpy(np.ascontiguousarray(a))
        for k, by_l in layers.items():
            out[k] = torch.stack([torch.from_numpy(np.ascontiguousarray(by_l[i])) for i in sorted(by_l)])
        return out

    dist = {k: t.to(torch.bfloat16) for k, t in stacked({k: v[1] for k, v in ref[""].items()}).items()}
    dist.update({f"optimizer.state.fp32_param.{k}": t for k, t in
                 stacked({k: v[1] for k, v in ref[""].items()}).items()})
    for s in STATES:
        dist.update({f"optimizer.state.{s}.{k}": t for k, t in stacked({k: v[1] for k, v in ref[s].items()}).items()})
    chunks = {}
    for k, t in dist.items():
        dim = t.dim() - 2
        if t.dim() >= 2 and t.shape[dim] % 2 == 0:
            h = t.shape[dim] // 2
            o1 = [0] * t.dim()
            o1[dim] = h
            chunks[k] = [((0,) * t.dim(), t.narrow(dim, 0, h).clone()), (tuple(o1), t.narrow(dim, h, h).clone())]
        else:
            chunks[k] = [((0,) * t.dim(), t.clone())]
    td = os.path.join(d, "torch_dist")
    dcpgen.write_dcp(td, chunks, megatron=True)
    os.link(os.path.join(gen, "config.json"), os.path.join(td, "config.json"))
    hf_back = converted(td, os.path.join(d, "td-hf"), [os.path.join(MAPS, "megatron-torch-dist-to-llama-hf.json")])
    want = {k: v.to(torch.bfloat16).view(torch.int16).numpy().tobytes() for k, v in params.items()}
    for s in (*STATES, "fp32_param"):
        want.update({f"state.{k}.{s}": (flat[f"state.{k}.{s}"] if s != "fp32_param" else v).numpy().tobytes()
                     for k, v in params.items()})
    assert hf_back == want, sorted(set(hf_back) ^ set(want))[:5] or sorted(k for k in want if hf_back[k] != want[k])[:5]
    out = os.path.join(d, "td-again")
    ckref.run(CKPTFS, "convert", os.path.join(d, "td-hf"), out, "--quiet", "--format", "torch_dist",
              "--mapping", os.path.join(MAPS, "llama-hf-to-megatron-torch-dist.json"))
    again = dcpgen.read_back(out)
    assert set(again) == set(dist), sorted(set(again) ^ set(dist))[:5]
    for k, t in dist.items():
        assert again[k].dtype == t.dtype and raw(again[k]) == raw(t), k
    print(f"torch_dist with optimizer state ({len(dist)} keys, chunked): to the flattened HF form "
          "(weights, fp32_param, exp_avg, exp_avg_sq per HF name) and back, tensor for tensor")

    # refusals: one line, exit 4
    def refused(source, msg, *extra):
        p = ckref.run(CKPTFS, "inspect", source, "--mapping", FWD, *extra, check=False)
        assert p.returncode == 4 and msg in p.stderr and p.stderr.count("\n") == 1, (msg, p.stderr)

    bad = os.path.join(d, "bad")
    os.makedirs(bad)
    os.link(os.path.join(gen, "config.json"), os.path.join(bad, "config.json"))
    os.link(os.path.join(src, "model.safetensors"), os.path.join(bad, "model.safetensors"))
    ckref.write_safetensors(os.path.join(bad, "optimizer.safetensors"),
                            {k: (t[0], t[1], t[2].tobytes()) for k, t in
                             ((k, f32(v)) for k, v in flat.items()
                              if k != "state.model.layers.1.self_attn.k_proj.weight.exp_avg")})
    refused(bad, 'target "decoder.layers.1.self_attention.linear_qkv.weight" is built from '
            '"model.layers.1.self_attn.q_proj.weight" (exp_avg, exp_avg_sq, step) and '
            '"model.layers.1.self_attn.k_proj.weight" (exp_avg_sq, step)')
    legacy = os.path.join(d, "distrib_optim.pt")
    z = torch.zeros(64)
    torch.save({"per_bucket_numel": [[64]], "per_bucket_numel_unpadded": [[64]],
                0: {(torch.bfloat16, torch.float32): {0: {"param": z, "exp_avg": z, "exp_avg_sq": z}}}}, legacy)
    refused(legacy, "Megatron's legacy distributed-optimizer file")
    p = ckref.run(CKPTFS, "inspect", src, "--state", "weights", check=False)
    assert p.returncode == 2 and 'params, optimizer or all, not "weights"' in p.stderr, p.stderr
    print("refused: sources of one target with different state, Megatron's legacy bucket file")
