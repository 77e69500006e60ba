"""Keys that are not safe file names, odd tensors and very many keys, through
a real mount: every key gets the documented escaped name (recomputed here
independently), no name can point outside tensors/, every file serves its
bytes, and plan.json maps each key to its file."""
import json
import os
import sys
import tempfile

import numpy as np

sys.path.insert(0, os.path.dirname(__file__))
import ckref  # noqa: E402
from mountlib import Mount, skip_unless_fuse  # noqa: E402

skip_unless_fuse()
try:
    import torch
except ImportError:
    torch = None


def fnv1a64(s):
    h = 0xcbf29ce484222325
    for c in s.encode():
        h = ((h ^ c) * 0x100000001b3) & 0xFFFFFFFFFFFFFFFF
    return h


def escaped(key, most=255):
    """README: '%', '/', control characters as %XX; '.', '..', '' special;
    over 255 bytes: the first 237 bytes (UTF-8 / escape safe) + '%~' + hash.
    npy/ names (most=251, before ".npy"): over 251 bytes, the first 233."""
    if key in (".", ".."):
        return "%2E" * len(key)
    if key == "":
        return "%00"
    out = bytearray()
    for b in key.encode():
        out += b"%%%02X" % b if b in (0x25, 0x2F) or b < 0x20 or b == 0x7F else bytes([b])
    if len(out) <= most:
        return out.decode()
    keep = most - 18
    while keep > 0 and (out[keep] & 0xC0) == 0x80:
        keep -= 1
    for back in (1, 2):
        if keep >= back and out[keep - back] == 0x25:
            keep -= back
    return out[:keep].decode() + "%~" + f"{fnv1a64(key):016x}"


def check_torch(path, want):
    """torch.load of the mount's pytorch_model.bin gives every key's bytes."""
    if torch is None:
        print("SKIP part: python3-torch is not installed (pytorch_model.bin not loaded)")
        return
    sd = torch.load(path)
    assert sorted(sd) == sorted(want), "keys"
    for k, b in want.items():
        assert sd[k].numpy().tobytes() == b, k


rng = np.random.default_rng(7)
keys = ["a/b", "../../etc/passwd", ".", "..", "", "tab\there", "nl\nx", "del\x7f", "50%", "%2F",
        "κλειδί/ü", "k" * 300, "é" * 200, "/absolute", "model.layers.0.weight",
        # at and past the cuts of tensors/ (255) and npy/ (251), and cuts that
        # would fall inside a UTF-8 sequence or a %XX escape
        "w" * 251, "w" * 252, "w" * 255, "w" * 256, "é" * 126 + "x", "a" * 231 + "%" * 10,
        "a" * 236 + "%" * 10, "b" * 232 + "é" * 20, "%" * 85,
        # bytes on either side of what needs escaping, in keys long enough to
        # be checked 8 bytes at a time
        "sp ace~tilde.dot0!x&y", "ééééé\x7fé", "\x80-free ÿÿÿÿÿÿÿÿ"]
# an escaped byte at every place of two 8-byte words
keys += ["x" * i + c + "y" * (15 - i) for c in "/%\x7f\x1f\x01" for i in range(16)]
tensors = {}
for i, k in enumerate(keys):
    shape = [[2, 3], [], [0, 5], [4]][i % 4]
    a = rng.integers(0, 255, size=shape, dtype=np.uint8) if shape != [0, 5] else np.zeros((0, 5), np.uint8)
    tensors[k] = ("U8", shape, a.tobytes())
with tempfile.TemporaryDirectory() as d:
    path = os.path.join(d, "hostile.safetensors")
    ckref.write_safetensors(path, tensors)
    with Mount(path) as m:
        names = os.listdir(m.path("tensors"))
        assert sorted(names) == sorted(escaped(k) for k in keys), (sorted(names), sorted(escaped(k) for k in keys))
        tdir = os.path.realpath(m.path("tensors"))
        for k in keys:
            f = m.path("tensors", escaped(k))
            assert "/" not in escaped(k) and escaped(k) not in (".", "..") and len(escaped(k).encode()) <= 255
            assert os.path.dirname(os.path.realpath(f)) == tdir
            with open(f, "rb") as fh:
                assert fh.read() == tensors[k][2], k
        plan = m.plan()
        assert {t["name"]: t["file"] for t in plan["targets"]} == {k: "tensors/" + escaped(k) for k in keys}
        # npy/: every key's name, cut at 251 bytes before ".npy"; scalars,
        # 1-d, 2-d and zero-size tensors load with numpy
        npy = sorted(os.listdir(m.path("npy")))
        assert npy == sorted(escaped(k, 251) + ".npy" for k in keys), npy
        for k in keys:
            a = np.load(m.path("npy", escaped(k, 251) + ".npy"))
            assert a.shape == tuple(tensors[k][1]) and a.tobytes() == tensors[k][2], k
        # model.safetensors holds every key as it is, JSON-escaped
        flat = ckref.read_safetensors(m.path("model.safetensors"))
        assert sorted(flat) == sorted(keys)
        for k in keys:
            assert flat[k][0] == "U8" and flat[k][1] == tuple(tensors[k][1]), k
            assert flat[k][2].tobytes() == tensors[k][2], k
        check_torch(m.path("pytorch_model.bin"), {k: t[2] for k, t in tensors.items()})
    print(f"{len(keys)} hostile keys: escaped as documented, contained, served")

    # 100,000 keys and a 1 MB key name
    many = {f"experts.{i}.w": ("U8", [1], bytes([i % 251])) for i in range(100000)}
    many["x" * (1 << 20)] = ("U8", [2], b"ab")
    path = os.path.join(d, "many.safetensors")
    ckref.write_safetensors(path, many)
    with Mount(path) as m:
        names = os.listdir(m.path("tensors"))
        assert len(names) == len(many)
        for i in (0, 77777, 99999):
            with open(m.path("tensors", f"experts.{i}.w"), "rb") as fh:
                assert fh.read() == bytes([i % 251])
        with open(m.path("tensors", escaped("x" * (1 << 20))), "rb") as fh:
            assert fh.read() == b"ab"
        s = m.stats()  # four reads, each straight from the file (identity: direct)
        assert s["groups_evaluated"] == 0 and s["direct_reads"] == 4, s
        flat = ckref.read_safetensors(m.path("model.safetensors"))
        assert len(flat) == len(many)
        assert all(flat[k][2].tobytes() == v[2] for k, v in many.items())
        check_torch(m.path("pytorch_model.bin"), {k: v[2] for k, v in many.items()})
    print("100,000 keys and a 1 MB key name mounted and served")
