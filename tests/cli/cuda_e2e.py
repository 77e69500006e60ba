#!/usr/bin/python3
"""The CUDA backend end to end: every conversion below is written with
--device cpu and --device cuda and the files compared byte for byte: casts
(F32, F16, FP8, saturating), fused QKV and fc1 (strided rows), Conv1D
transposes (tiled kernel), stacked experts, FP8 block dequantisation and
quantisation. --gpu-min 0 sends every read with work to the GPU, and a small
--gpu-mem forces split windows and outputs. A mount with --device cuda is
compared with the CPU convert. Exits 77 (skipped, with the reason) where no
GPU is usable."""
import filecmp
import json
import os
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import ckref  # noqa: E402
import mountlib  # noqa: E402

CKPTFS, MKCKPT = os.environ["CKPTFS"], os.environ["MKCKPT"]
MAPS = os.path.join(os.environ["TESTS_DIR"], "..", "mappings")


def m(name):
    return os.path.join(MAPS, name + ".json")


with tempfile.TemporaryDirectory() as tmp:
    probe = os.path.join(tmp, "probe")
    ckref.run(MKCKPT, probe)
    p = ckref.run(CKPTFS, "convert", probe, os.path.join(tmp, "p"), "--quiet", "--dtype", "F16",
                  "--device", "cuda", check=False)
    if p.returncode != 0:
        print("SKIP cuda_e2e:", p.stderr.strip())
        sys.exit(77)
    srcs = ckref.make_sources(MKCKPT, tmp)
    srcs["fp8"] = os.path.join(tmp, "fp8")
    ckref.run(MKCKPT, "--fp8-block", "16", "--dtype", "BF16", "--preset", "small", srcs["fp8"])
    srcs["big"] = os.path.join(tmp, "big")
    ckref.run(MKCKPT, "--preset", "small", "--dtype", "BF16", srcs["big"])
    sat = os.path.join(tmp, "sat.json")
    json.dump({"ckptfs_mapping": 1, "rules": [{"from": "{k:path}", "to": "{k}",
                                               "expr": "x.to(F8_E5M2, 1).to(F32)"}]},
              open(sat, "w"))
    cases = [
        ("llama", [m("llama-hf-to-megatron")], ["--dtype", "F32"]),
        ("big", [m("llama-hf-to-megatron")], ["--dtype", "F32"]),
        ("big", [m("llama-hf-to-megatron")], ["--dtype", "F8_E4M3"]),
        ("gpt2", [m("gpt2-conv1d-to-linear")], ["--dtype", "BF16"]),
        ("gpt2", [m("gpt2-conv1d-to-linear")], []),
        ("mixtral", [m("mixtral-hf-to-fused-experts")], ["--dtype", "F16"]),
        ("llama", [sat], []),
        ("fp8", [m("fp8-block-dequant")], []),
        ("fp8", [m("fp8-block-dequant")], ["--dtype", "F32"]),
    ]
    for i, (name, maps, extra) in enumerate(cases):
        outs = []
        for dev in (["--device", "cpu"], ["--device", "cuda", "--gpu-min", "0"],
                    ["--device", "cuda", "--gpu-min", "0", "--gpu-mem", "8MiB", "--threads", "2"]):
            out = os.path.join(tmp, f"out{i}-{len(outs)}")
            ckref.convert(CKPTFS, srcs[name], out, maps, *extra, *dev)
            outs.append(out)
        for o in outs[1:]:
            for f in sorted(os.listdir(outs[0])):
                assert filecmp.cmp(os.path.join(outs[0], f), os.path.join(o, f), shallow=False), \
                    f"{name} {maps} {extra}: {f} differs between cpu and {o}"
        print(f"{name} {[os.path.basename(x) for x in maps]} {extra}: cpu == cuda")
    if mountlib.have_fuse():
        ref = os.path.join(tmp, "ref")
        ckref.convert(CKPTFS, srcs["fp8"], ref, [m("fp8-block-dequant")])
        want = ckref.read_checkpoint_dir(ref)
        with mountlib.Mount(srcs["fp8"], [m("fp8-block-dequant")], opts="gpu_min=0",
                            extra=["--device", "cuda"], expect_errors=True) as mnt:
            for k, (dt, shape, arr) in want.items():
                with open(mnt.path("tensors", k), "rb") as f:
                    assert f.read() == arr.tobytes(), f"mounted {k} differs"
            st = mnt.stats()
            assert st["gpu_reads"] > 0 and st["device"] != "cpu", st
        print(f"mount --device cuda: {len(want)} tensors equal, {st['gpu_reads']} GPU reads")
        # the policy: renames (copies) never go to the GPU, even with gpu_min=0;
        # transposes do
        for maps, gpu in (([m("identity")], False), ([m("gpt2-conv1d-to-linear")], True)):
            src = srcs["llama" if not gpu else "gpt2"]
            with mountlib.Mount(src, maps, opts="gpu_min=0,no_direct", extra=["--device", "cuda"],
                                expect_errors=True) as mnt:
                for f in os.listdir(mnt.path("tensors")):
                    with open(mnt.path("tensors", f), "rb") as fh:
                        fh.read()
                st = mnt.stats()
                assert (st["gpu_reads"] > 0) == gpu, (maps, st)
        print("identity view: 0 GPU reads; Conv1D transposes: on the GPU")
