#!/usr/bin/python3
"""Block-scaled FP8 (DeepSeek-V3 style) through mappings/fp8-block-dequant.json
and fp8-block-quant.json, against numpy: E4M3 codes decoded from their bit
fields here, times the scale of their block in float32, rounded to BF16 by
the round-to-nearest-even bit trick.

    fp8_dequant.py convert   convert, per-rank slices, round trip, errors
    fp8_dequant.py mount     the same view mounted (root and /dev/fuse)"""
import json
import os
import sys
import tempfile

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import ckref  # noqa: E402

CKPTFS, MKCKPT = os.environ["CKPTFS"], os.environ["MKCKPT"]
MAPS = os.path.join(os.environ["TESTS_DIR"], "..", "mappings")
DEQ = os.path.join(MAPS, "fp8-block-dequant.json")
QUANT = os.path.join(MAPS, "fp8-block-quant.json")


def e4m3_to_f32(codes):
    c = codes.astype(np.int64)
    sign = np.where(c & 0x80, -1.0, 1.0)
    e, m = (c >> 3) & 15, c & 7
    v = np.where(e == 0, m / 8.0 * 2.0 ** -6, (1 + m / 8.0) * 2.0 ** (e - 7.0))
    v = np.where((e == 15) & (m == 7), np.nan, v)
    return (sign * v).astype(np.float32)


def f32_to_bf16(f):
    u = f.astype(np.float32).view(np.uint32).astype(np.uint64)
    r = (u + ((u >> 16) & 1) + 0x7FFF) >> 16
    return np.where(np.isnan(f), 0x7FC0, r).astype(np.uint16)


def expected(src, block):
    """name -> (dtype, raw array) of the dequantised view."""
    out = {}
    for k, (dt, shape, arr) in src.items():
        if k.endswith("_scale_inv"):
            continue
        if k + "_scale_inv" in src:
            s = src[k + "_scale_inv"][2]
            full = np.repeat(np.repeat(s, block, 0), block, 1)[:shape[0], :shape[1]]
            out[k] = ("BF16", f32_to_bf16(e4m3_to_f32(arr) * full))
        else:
            out[k] = (dt, arr)
    return out


def check_view(got, want, what):
    assert sorted(got) == sorted(want), f"{what}: keys differ: {sorted(set(got) ^ set(want))}"
    for k, (dt, arr) in want.items():
        gdt, _, garr = got[k]
        assert gdt == dt, f"{what}: {k} is {gdt}, expected {dt}"
        assert np.array_equal(garr.view(np.uint8), np.ascontiguousarray(arr).view(np.uint8)), \
            f"{what}: {k} differs in {int((garr != arr).sum())} elements"


def make(d, block, *extra):
    ckref.run(MKCKPT, "--fp8-block", str(block), *extra, d)
    return ckref.read_checkpoint_dir(d)


def test_convert(tmp):
    for block, extra in [(16, ()), (24, ("--dtype", "BF16")), (5, ("--model", "mixtral"))]:
        src_dir = os.path.join(tmp, f"fp8-{block}")
        src = make(src_dir, block, *extra)
        n8 = sum(1 for v in src.values() if v[0] == "F8_E4M3")
        assert n8 >= 8, f"the checkpoint has only {n8} FP8 weights"
        out = os.path.join(tmp, f"deq-{block}")
        ckref.convert(CKPTFS, src_dir, out, [DEQ])
        check_view(ckref.read_checkpoint_dir(out), expected(src, block), f"dequant block {block}")
        # quant with the same scales gives back the stored E4M3 codes
        both = {k: (v[0], v[1], v[2].tobytes()) for k, v in ckref.read_checkpoint_dir(out).items()}
        for k, v in src.items():
            if k.endswith("_scale_inv"):
                both[k] = (v[0], v[1], v[2].tobytes())
        rt_dir = os.path.join(tmp, f"rt-{block}")
        os.makedirs(rt_dir)
        ckref.write_safetensors(os.path.join(rt_dir, "model.safetensors"), both)
        os.link(os.path.join(src_dir, "config.json"), os.path.join(rt_dir, "config.json"))
        back = os.path.join(tmp, f"back-{block}")
        ckref.convert(CKPTFS, rt_dir, back, [QUANT])
        got = ckref.read_checkpoint_dir(back)
        check_view(got, {k: (v[0], v[2]) for k, v in src.items()}, f"quant round trip {block}")
        print(f"block {block}: {n8} FP8 weights dequantised and quantised back exactly")


def test_slices(tmp):
    """Per-rank row and column slices of dequantised weights: the scale of
    every element follows it through narrow and transpose."""
    src_dir = os.path.join(tmp, "fp8-slices")
    src = make(src_dir, 24)
    want = expected(src, 24)
    m = os.path.join(tmp, "slices.json")
    json.dump({"ckptfs_mapping": 1, "unused": "drop", "rules": [
        {"from": {"s": "{p:path}.weight_scale_inv", "w": "{p:path}.weight"},
         "to": {"r": "{p}.rows", "c": "{p}.cols_t"},
         "expr": {"r": "dequant(w, s, 24).to(BF16)", "c": "dequant(w, s, [24, 24]).to(BF16).t()"}}],
        "partition": [{"match": "{p:path}.rows", "spec": ["tp", None]},
                      {"match": "{p:path}.cols_t", "spec": ["tp", None]}]}, open(m, "w"))
    for rank in range(2):
        out = os.path.join(tmp, f"slice-{rank}")
        ckref.convert(CKPTFS, src_dir, out, [m], "--mesh", "tp=2", "--rank", str(rank))
        got = ckref.read_checkpoint_dir(out)
        for k, (dt, full) in want.items():
            if dt != "BF16" or k + "_scale_inv" not in src:
                continue
            p = k[:-len(".weight")]
            r, c = np.array_split(full, 2, 0)[rank], np.array_split(full.T, 2, 0)[rank]
            assert np.array_equal(got[p + ".rows"][2], r), f"rank {rank}: {p}.rows"
            assert np.array_equal(got[p + ".cols_t"][2], c), f"rank {rank}: {p}.cols_t"
    print("tp=2 row and transposed-column slices match numpy")


def test_errors(tmp):
    src_dir = os.path.join(tmp, "fp8-err")
    make(src_dir, 16)
    cases = [
        ('dequant(w, s, 8).to(BF16)', "dequant: the scale has 4 blocks in dim"),
        ('dequant(w, s, [16, 16, 16])', "dequant: 3 block sizes for 2 dims"),
        ('dequant(w.to(F32), s, 16)', "the weight must be read as stored"),
        ('dequant(w, s.to(BF16), 16)', "the scale must be one stored tensor"),
        ('dequant(w, s, 16).view(-1)', "its blocks must stay whole"),
        ('dequant(w, w, 16)', "the scale is F8_E4M3"),
    ]
    for expr, msg in cases:
        m = os.path.join(tmp, "bad.json")
        json.dump({"ckptfs_mapping": 1, "unused": "keep", "rules": [
            {"from": {"s": "{p:path}.weight_scale_inv", "w": "{p:path}.weight"},
             "to": "{p}.weight", "expr": expr}]}, open(m, "w"))
        p = ckref.run(CKPTFS, "inspect", src_dir, "--mapping", m, check=False)
        lines = p.stderr.strip().splitlines()
        assert p.returncode == 4, f"{expr}: exit {p.returncode}: {p.stderr}"
        assert len(lines) == 1 and msg in lines[0] and "rule 1" in lines[0], \
            f"{expr}: expected one line with {msg!r} naming the rule, got {p.stderr!r}"
    print(f"{len(cases)} bad dequant rules refused with one line each")


def test_mount(tmp):
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import mountlib
    mountlib.skip_unless_fuse()
    src_dir = os.path.join(tmp, "fp8-mnt")
    want = expected(make(src_dir, 24, "--dtype", "BF16"), 24)
    with mountlib.Mount(src_dir, [DEQ]) as m:
        for k, (dt, arr) in want.items():
            with open(m.path("tensors", k), "rb") as f:
                got = f.read()
            assert got == np.ascontiguousarray(arr).tobytes(), f"mounted {k} differs"
        # a read from the middle of a dequantised tensor, across block rows
        k = next(k for k in want if k.endswith("mlp.down_proj.weight"))
        raw = np.ascontiguousarray(want[k][1]).tobytes()
        with open(m.path("tensors", k), "rb") as f:
            f.seek(1001)
            assert f.read(3000) == raw[1001:4001], "mid-tensor read differs"
        # model.safetensors of the view is what convert writes
        got = ckref.read_safetensors(m.path("model.safetensors"))
        check_view(got, want, "mounted model.safetensors")
    print(f"mount: {len(want)} tensors and model.safetensors match numpy")


if __name__ == "__main__":
    with tempfile.TemporaryDirectory() as tmp:
        if sys.argv[1:] == ["mount"]:
            test_mount(tmp)
        else:
            test_convert(tmp)
            test_slices(tmp)
            test_errors(tmp)
