"""Real files from real frameworks (../shared/fixtures/real, never copied
into the repository): every torch.save file (zip format from several torch
versions, and the legacy non-zip format) and every safetensors file goes
through `inspect`, `convert` and (with FUSE) `mount`, and every tensor is
compared with an independent reading: Debian's torch.load for torch files,
ckref's own safetensors parser for safetensors. Keys, dtypes and shapes must
agree, and so must every byte; values that are not tensors must be listed
as left out. The legacy tar format must be refused with a message naming
it. A fixture that ckptfs cannot read fails the suite."""
import collections
import glob
import json
import os
import shutil
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import ckref  # noqa: E402

CKPTFS = os.environ["CKPTFS"]
TESTS = os.environ.get("TESTS_DIR", os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
REAL = os.path.join(TESTS, "..", "..", "shared", "fixtures", "real")
MOUNT = "--mount" in sys.argv

import torch  # noqa: E402

DTYPES = {torch.float32: "F32", torch.float16: "F16", torch.bfloat16: "BF16", torch.float64: "F64",
          torch.int64: "I64", torch.int32: "I32", torch.int16: "I16", torch.int8: "I8",
          torch.uint8: "U8", torch.bool: "BOOL", torch.complex64: "C64"}


def raw(t):
    t = t.detach().contiguous()
    if t.dtype == torch.bfloat16:
        t = t.view(torch.int16)
    return t.numpy().tobytes()


def flatten(obj, prefix, tensors, left):
    """The torch.load result as ckptfs names it: nested dicts joined with
    dots, Parameters as tensors, anything else left out."""
    for k, v in obj.items():
        if not isinstance(k, str):
            left.add(prefix)
            continue
        key = f"{prefix}.{k}" if prefix else k
        if isinstance(v, torch.Tensor):
            tensors[key] = v
        elif isinstance(v, dict):
            flatten(v, key, tensors, left)
        else:
            left.add(key)


def run(*args):
    return subprocess.run([CKPTFS, *args], capture_output=True, text=True, timeout=120)


def expected(path):
    if path.endswith(".safetensors"):
        st = ckref.read_safetensors(path)
        return {k: (dt, list(shape), arr.tobytes()) for k, (dt, shape, arr) in st.items()}, set()
    obj = torch.load(path, map_location="cpu")
    tensors, left = {}, set()
    if isinstance(obj, torch.Tensor):
        return None, None  # a bare tensor, not a state dict: refused (checked below)
    flatten(obj, "", tensors, left)
    return {k: (DTYPES[t.dtype], list(t.shape), raw(t)) for k, t in tensors.items()}, left


def check_file(path, work):
    want, left = expected(path)
    p = run("inspect", path, "--json")
    if want is None:
        assert p.returncode == 3 and "not hold a dict of tensors" in p.stderr, (path, p.stderr)
        return "bare tensor refused"
    assert p.returncode == 0, (path, p.stderr)
    js = json.loads(p.stdout)
    got = {t["name"]: (t["dtype"], t["shape"]) for t in js["tensors"]}
    assert got == {k: v[:2] for k, v in want.items()}, (path, got, want.keys())
    assert {e["key"] for e in js["left_out"]} == left, (path, js["left_out"], left)
    out = os.path.join(work, "out-" + os.path.basename(path))
    c = run("convert", path, out, "--quiet")
    assert c.returncode == 0, (path, c.stderr)
    conv = ckref.read_checkpoint_dir(out) if want else {}
    for k, (dt, shape, data) in want.items():
        assert conv[k][0] == dt and list(conv[k][1]) == shape, (path, k)
        assert conv[k][2].tobytes() == data, f"{path}: {k}: bytes differ after convert"
    if MOUNT and want:
        from mountlib import Mount
        # the daemon says which tensors pytorch_model.bin leaves out (no torch 1.13 storage)
        notes = any(v[0] in ("U16", "U32", "U64", "F8_E4M3", "F8_E5M2") for v in want.values())
        with Mount(path, expect_errors=notes) as m:
            files = {t["name"]: t["file"] for t in m.plan()["targets"]}
            for k, (dt, shape, data) in want.items():
                with open(m.path(files[k]), "rb") as f:
                    assert f.read() == data, f"{path}: {k}: bytes differ through the mount"
    return f"{len(want)} tensors, {len(left)} left out"


def main():
    if MOUNT:
        from mountlib import skip_unless_fuse
        skip_unless_fuse()
    assert os.path.isdir(REAL), f"{REAL}: the real-file fixtures (../shared) are missing"
    files = sorted(glob.glob(os.path.join(REAL, "torch_zip", "*", "*")) +
                   glob.glob(os.path.join(REAL, "safetensors", "*", "*.safetensors")))
    work = tempfile.mkdtemp(prefix="ckptfs-real-")
    kinds = collections.Counter()
    try:
        for path in files:
            rel = os.path.relpath(path, REAL)
            if path.endswith(".tar"):
                p = run("inspect", path)
                assert p.returncode == 3 and "legacy torch.save tar format" in p.stderr, (rel, p.stderr)
                kinds["tar (refused, named)"] += 1
                continue
            with open(path, "rb") as f:
                head = f.read(4)
            kind = ("safetensors" if path.endswith(".safetensors") else
                    "torch zip" if head == b"PK\x03\x04" else "torch legacy")
            what = check_file(path, work)
            kinds[kind] += 1
            print(f"{rel}: {what}")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    summary = ", ".join(f"{n} {k}" for k, n in sorted(kinds.items()))
    print(f"real files{' (inspect, convert, mount)' if MOUNT else ' (inspect, convert)'}: {summary}")
    assert kinds["torch legacy"] >= 4 and kinds["torch zip"] >= 36 and kinds["safetensors"] >= 14, kinds


if __name__ == "__main__":
    main()
