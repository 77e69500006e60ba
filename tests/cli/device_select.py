#!/usr/bin/python3
"""--device on convert and mount. Where no GPU is usable (CI), `--device cuda`
and `cuda:N` fail before writing or mounting anything, with one line that says
why; `auto` falls back to the CPU and says so; a bad value is a usage error.
Where a GPU is usable, cuda gives the CPU's bytes (tests/cli/cuda_e2e.py
checks that in depth)."""
import filecmp
import os
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import ckref  # noqa: E402
import mountlib  # noqa: E402

CKPTFS, MKCKPT = os.environ["CKPTFS"], os.environ["MKCKPT"]
MAPS = os.path.join(os.environ["TESTS_DIR"], "..", "mappings")
MEG = os.path.join(MAPS, "llama-hf-to-megatron.json")


def convert(src, out, *extra):
    return ckref.run(CKPTFS, "convert", src, out, "--quiet", "--mapping", MEG, "--dtype", "F32",
                     *extra, check=False)


with tempfile.TemporaryDirectory() as tmp:
    src = os.path.join(tmp, "src")
    ckref.run(MKCKPT, "--dtype", "BF16", src)
    ref = os.path.join(tmp, "cpu")
    assert convert(src, ref, "--device", "cpu").returncode == 0
    p = convert(src, os.path.join(tmp, "cuda"), "--device", "cuda")
    if p.returncode == 0:
        print("a GPU is usable here: cuda output compared with the CPU's")
        assert filecmp.cmp(os.path.join(ref, "model.safetensors"),
                           os.path.join(tmp, "cuda", "model.safetensors"), shallow=False)
    else:
        lines = p.stderr.strip().splitlines()
        assert p.returncode == 2 and len(lines) == 1 and lines[0].startswith("ckptfs: --device cuda:"), \
            f"exit {p.returncode}: {p.stderr!r}"
        assert not os.path.exists(os.path.join(tmp, "cuda")), "a failed --device cuda wrote output"
        print("no GPU:", lines[0])
        # auto falls back to the CPU, says so, and gives its bytes
        p = convert(src, os.path.join(tmp, "auto"), "--device", "auto")
        assert p.returncode == 0 and "transforms run on the CPU" in p.stderr, p.stderr
        assert filecmp.cmp(os.path.join(ref, "model.safetensors"),
                           os.path.join(tmp, "auto", "model.safetensors"), shallow=False)
        if mountlib.have_fuse():  # the daemon opens the GPU; its failure mounts nothing
            mnt = os.path.join(tmp, "mnt")
            os.mkdir(mnt)
            p = ckref.run(CKPTFS, "mount", src, mnt, "--device", "cuda:0", check=False)
            assert p.returncode != 0 and "--device cuda" in p.stderr, p.stderr
            assert not mountlib.is_mounted(mnt), "mounted despite the failed --device"
            print("mount --device cuda:0 refused, nothing mounted")
    for bad in ("gpu", "cuda:", "cuda:x", "cuda:99999"):
        p = convert(src, os.path.join(tmp, "bad"), "--device", bad)
        assert p.returncode == 2 and "--device" in p.stderr, f"{bad}: {p.stderr}"
        assert not os.path.exists(os.path.join(tmp, "bad"))
    print("bad --device values refused")
