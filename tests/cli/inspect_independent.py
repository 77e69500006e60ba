"""`ckptfs inspect --json` of checkpoints written by an independent writer
(tests/cli/ckref.py, straight from the format description) lists exactly
their tensors, and every reported offset points at that tensor's bytes."""
import json
import os
import random
import sys
import tempfile

sys.path.insert(0, os.path.dirname(__file__))
import ckref  # noqa: E402

CKPTFS = os.environ["CKPTFS"]
rng = random.Random(1234)


def make_tensors(prefix, count):
    t = {}
    for i in range(count):
        dt = rng.choice(list(ckref.DTYPES))
        nd = rng.choice([0, 1, 2, 3])
        shape = [rng.choice([0, 1, 2, 3, 5, 7]) for _ in range(nd)]
        n = 1
        for s in shape:
            n *= s
        size = n * ckref.DTYPES[dt][1]
        name = (f"{prefix}.layers.{i}.w" if i % 3 else f"{prefix}.ünï \"κ\" {i}" if i % 2
                else f"{prefix}.ctl\x1b[0m\t{i}\x7f")
        t[name] = (dt, shape, bytes(rng.randrange(256) for _ in range(size)))
    return t


def check(source, files):
    """files: dict file name -> tensors dict."""
    out = ckref.run(CKPTFS, "inspect", "--json", source).stdout
    got = json.loads(out)
    want = {}
    for fname, tensors in files.items():
        for name, (dt, shape, raw) in tensors.items():
            want[name] = {"name": name, "dtype": dt, "shape": shape, "bytes": len(raw),
                          "file": fname}
    got_t = {t["name"]: t for t in got["tensors"]}
    assert len(got_t) == len(got["tensors"]), "duplicate names in output"
    assert set(got_t) == set(want), f"names differ: {set(got_t) ^ set(want)}"
    for name, w in want.items():
        g = dict(got_t[name])
        off = g.pop("offset")
        assert g == w, f"{name}: got {g}, want {w}"
        path = source if os.path.isfile(source) else os.path.join(source, w["file"])
        with open(path, "rb") as f:
            f.seek(off)
            assert f.read(w["bytes"]) == files[w["file"]][name][2], f"{name}: bytes at offset"
    assert got["total_bytes"] == sum(w["bytes"] for w in want.values())
    assert got["n_tensors"] == len(want)
    check_table(source, want)
    return len(want)


def esc(s):
    """A name as the table writes it: control bytes as \\xNN, the rest as UTF-8."""
    return b"".join(b"\\x%02x" % c if c < 0x20 or c == 0x7f else bytes([c]) for c in s.encode())


def check_table(source, want):
    """The plain table: one row per tensor, columns padded in bytes to the
    widest entry (name and shape), dtype to 11, bytes right-aligned in 14."""
    out = ckref.run(CKPTFS, "inspect", source).stdout.encode()
    shape = {n: ("[" + ", ".join(str(x) for x in w["shape"]) + "]").encode() for n, w in want.items()}
    wn = max([4] + [len(esc(n)) for n in want])
    ws = max([5] + [len(s) for s in shape.values()])
    row = lambda n, dt, sh, b, f: (n.ljust(wn) + b"  " + dt.ljust(11) + b"  " + sh.ljust(ws) + b"  "
                                   + b.rjust(14) + b"  " + f)
    lines = out.split(b"\n")
    assert lines[0] == row(b"NAME", b"DTYPE", b"SHAPE", b"BYTES", b"FILE"), lines[0]
    expect = sorted(row(esc(n), w["dtype"].encode(), shape[n], str(w["bytes"]).encode(), esc(w["file"]))
                    for n, w in want.items())
    assert sorted(lines[1:1 + len(want)]) == expect, (lines[1:4], expect[:3])
    assert lines[1 + len(want)].startswith(b"%d tensors, %d bytes" % (len(want), sum(w["bytes"] for w in want.values())))


with tempfile.TemporaryDirectory() as d:
    single = make_tensors("model", 40)
    path = os.path.join(d, "model.safetensors")
    ckref.write_safetensors(path, single, {"format": "pt"})
    n = check(path, {"model.safetensors": single})

    sharded = os.path.join(d, "sharded")
    os.mkdir(sharded)
    files, wm = {}, {}
    for k in range(3):
        fname = f"model-{k + 1:05d}-of-00003.safetensors"
        files[fname] = make_tensors(f"s{k}", 25)
        ckref.write_safetensors(os.path.join(sharded, fname), files[fname])
        wm.update({name: fname for name in files[fname]})
    index = {"metadata": {"total_size": 0}, "weight_map": wm}
    with open(os.path.join(sharded, "model.safetensors.index.json"), "w") as f:
        f.write(json.dumps(index, indent=2, sort_keys=True) + "\n")
    n += check(sharded, files)
    os.remove(os.path.join(sharded, "model.safetensors.index.json"))  # no index: same view
    n += check(sharded, files)
print(f"inspect matched {n} tensors written by the independent writer")
