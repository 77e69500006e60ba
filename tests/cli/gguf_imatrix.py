"""The GGUF view quantized with an importance matrix (convert/inspect
--gguf-imatrix FILE, mount -o gguf_imatrix=FILE; llama-quantize --imatrix)
against llama.cpp's own quantizer given the same matrix:
llama_model_quantize from node-llama-cpp's prebuilt libllama, whose
params take the matrix as a C array of {name, values, count}. The files
are written here from the formats' descriptions (llama-imatrix's legacy
.dat: entries of name, calls, values summed over the calls; its GGUF:
NAME.in_sum2 and NAME.counts per matrix), and llama.cpp is handed the
values as its llama-quantize tool derives them (the sums over the calls,
a never-counted matrix 1). Every tensor of every mix of a Llama with weights
that corner the quantizers, of a 4-expert Mixtral
(stacked experts, one matrix per expert) and of a Llama whose rows fall
back to Q4_0/Q5_0/Q5_1 (weighted by the whole row's mean square) must
have llama.cpp's type and bytes, and so must the legacy mixes' (Q4_0,
Q4_1, Q5_0, Q5_1, weighted by the row too; with a matrix Q4_0 and Q5_0
put the first eighth's ffn_down in Q4_1 and Q5_1); a tensor the matrix does not name is
quantized without, and token_embd's entry of the wrong size is ignored,
as llama-quantize does. Hostile matrices are refused with one line
naming the file and what is wrong. With --mount: the mounted file is
convert's, byte for byte, also read in pieces cut inside blocks and
rows."""
import ctypes
import json
import os
import struct
import subprocess
import sys
import tempfile

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gguf_kquant as kq  # noqa: E402
import gguf_source as gs  # noqa: E402

CKPTFS = os.environ["CKPTFS"]


def convert(src, out, fmt, imatrix, *extra):
    p = subprocess.run([CKPTFS, "convert", src, out, "--quiet", "--format", fmt, "--gguf-vocab", "none",
                        "--gguf-imatrix", imatrix, *extra], capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    return os.path.join(out, "model.gguf")


def write_legacy(path, entries, ncall, trailer=True):
    """llama-imatrix's .dat: the sums over ncall calls (the values times
    ncall; ncall 0: the values), and the chunk count and dataset name at
    the end."""
    sums = {k: v.astype(np.float32) * np.float32(max(ncall, 1)) for k, v in entries.items()}
    out = bytearray(struct.pack("<i", len(entries)))
    for name, v in sums.items():
        e = name.encode()
        out += struct.pack("<i", len(e)) + e + struct.pack("<ii", ncall, v.size) + v.tobytes()
    if trailer:
        out += struct.pack("<ii", 12, 9) + b"wiki.test"
    open(path, "wb").write(bytes(out))
    # what llama-quantize's loader makes of it: each sum divided by ncall
    return {k: v / np.float32(ncall) if ncall > 0 else v for k, v in sums.items()}


def write_gguf_imatrix(path, entries, counts, meta=True):
    """llama-imatrix's GGUF: NAME.in_sum2 [matrices][columns] and
    NAME.counts [matrices]; the values are sum / count, 1 where a count is
    0."""
    tensors, want = {}, {}
    for name, v in entries.items():
        c = np.asarray(counts[name], np.float32)
        sums = (v.reshape(len(c), -1).astype(np.float32) * np.maximum(c, 1)[:, None]).astype(np.float32)
        tensors[name + ".in_sum2"] = (0, [len(c), sums.shape[1]], sums.tobytes())
        tensors[name + ".counts"] = (0, [len(c), 1], c.tobytes())
        want[name] = np.where(c[:, None] > 0, sums / np.where(c > 0, c, 1)[:, None], np.float32(1)).reshape(-1)
    m = {"general.type": (8, "imatrix")}
    if meta:
        m.update({"imatrix.datasets": (9, (8, ["calibration.txt"])), "imatrix.chunk_count": (4, 40),
                  "imatrix.chunk_size": (4, 512)})
    gs.write_gguf(path, m, tensors)
    return {k: v.astype(np.float32) for k, v in want.items()}


def matrices(f32_gguf):
    """The view's matrices: name -> GGUF dims (columns first)."""
    _, t = kq.tensors(f32_gguf)
    return {n: dims for n, (_, dims, _) in t.items() if len(dims) >= 2}


def some_imatrix(rng, mats, skip=()):
    """Per matrix, one value per column (per expert of a stacked one):
    mostly small, some zero, some large, and dead columns (never
    activated: zero) for a whole 32-block, and on every other matrix for
    a whole 256-block; token_embd's of the wrong size."""
    out = {}
    for i, (n, dims) in enumerate(mats.items()):
        if n in skip:
            continue
        size = dims[0] * (dims[2] if len(dims) > 2 else 1)
        v = (rng.random(size) ** 4 * 50).astype(np.float32)
        v[rng.random(size) < 0.05] = 0
        v[rng.random(size) < 0.02] *= 1e4
        v[32:64] = 0
        if i % 2 and size >= 512:
            v[256:512] = 0
        out[n] = v
    if "token_embd.weight" in out:
        out["token_embd.weight"] = out["token_embd.weight"][:5]
    return out


WEIGHTED = {2, 3, 6, 7, 10, 11, 12, 13, 14, 20, 23}  # Q4_0, Q4_1, Q5_0, Q5_1, Q2_K ... Q6_K, IQ4_NL, IQ4_XS


def same_as_llama(lib, d, tag, src, plain, mixes, imx_file, imx_values):
    """Each mix of src with the imatrix, as ckptfs serves it and as
    llama.cpp quantizes plain (the F32 view) given the same values; per
    mix, how many tensors the weights reached. A mix "Q8_0 tt=P=T" adds
    --tensor-type P=T (--gguf-tensor-type)."""
    seen = {}
    for spec in mixes:
        mix, *opts = spec.split()
        tt = [tuple(o[3:].rsplit("=", 1)) for o in opts]
        extra = [a for p, t in tt for a in ("--gguf-tensor-type", f"{p}={t}")]
        ours = convert(src, os.path.join(d, f"{tag}-{mix}{'-tt' if tt else ''}-imx"), "gguf:" + mix, imx_file,
                       *extra)
        ref = os.path.join(d, f"{tag}-{mix}-llama-imx.gguf")
        kq.llama_quantize(lib, plain, ref, mix, imatrix=imx_values, tt=tt)
        rmeta, rt = kq.tensors(ref)
        ometa, ot = kq.tensors(ours)
        assert set(rt) == set(ot), (tag, mix, set(rt) ^ set(ot))
        wrong_type = {n: (kq.NAMES[rt[n][0]], kq.NAMES[ot[n][0]]) for n in rt if rt[n][0] != ot[n][0]}
        assert not wrong_type, (tag, mix, "llama.cpp's type, ckptfs's", wrong_type)
        wrong = [n for n in rt if rt[n][1:] != ot[n][1:]]
        assert not wrong, (tag, mix, f"{len(wrong)} tensors differ from llama.cpp's, first", wrong[:3])
        assert ometa["quantize.imatrix.file"] == imx_file[:127], ometa.get("quantize.imatrix.file")
        assert ometa["quantize.imatrix.entries_count"] == len(imx_values)
        os.remove(ref)
        weighted = {n for n in rt if rt[n][0] in WEIGHTED and n in imx_values and n != "token_embd.weight"}
        # inspect says which, without reading tensor data
        p = subprocess.run([CKPTFS, "inspect", src, "--format", "gguf:" + mix, "--gguf-vocab", "none", "--json",
                            "--gguf-imatrix", imx_file, *extra], capture_output=True, text=True)
        assert p.returncode == 0, p.stderr
        assert {t["name"] for t in json.loads(p.stdout)["tensors"] if t["imatrix"]} == weighted, (tag, mix)
        seen[spec] = len(weighted)
    return seen


def weighs(a, b, tag):
    """The imatrix changed the bytes (else the test would not tell)."""
    _, ta = kq.tensors(a)
    _, tb = kq.tensors(b)
    assert any(ta[n][2] != tb[n][2] for n in ta), f"{tag}: the imatrix changed nothing"


REFUSED = []


def refused(args, says):
    REFUSED.append(says)
    p = subprocess.run([CKPTFS, *args], capture_output=True, text=True)
    lines = p.stderr.strip().splitlines()
    assert p.returncode != 0 and says in p.stderr and len(lines) == 1, (args, p.returncode, p.stderr)


def hostile(d, src, mats, rng):
    """Matrices llama-quantize would choke on or misapply, refused."""
    good = some_imatrix(rng, mats)
    base = ["convert", src, os.path.join(d, "hostile-out"), "--format", "gguf:Q4_K_M", "--gguf-vocab", "none",
            "--gguf-imatrix"]
    def case(name, data, says):
        path = os.path.join(d, "bad-" + name)
        open(path, "wb").write(data)
        refused(base + [path], says)
    one = next(k for k in good if k != "token_embd.weight")
    v = good[one]
    e = one.encode()
    entry = struct.pack("<i", len(e)) + e + struct.pack("<ii", 1, v.size) + v.tobytes()
    case("empty", b"", "the file ends inside the entry count")
    case("zero-entries", struct.pack("<i", 0), "0 entries")
    case("negative-entries", struct.pack("<i", -5), "-5 entries")
    case("huge-count", struct.pack("<i", 2**31 - 1), "entries (1 to")
    case("neg-name", struct.pack("<ii", 1, -3), "a name of -3 bytes")
    case("long-name", struct.pack("<ii", 1, 65) + b"x" * 65, "a name of 65 bytes")
    case("name-past-end", struct.pack("<ii", 1, 40) + b"blk", "a name of 40 bytes")
    case("nul-name", struct.pack("<ii", 1, 4) + b"a\0bc" + struct.pack("<ii", 1, 1) + b"\0\0\0\0", "no NUL")
    case("neg-ncall", struct.pack("<i", 1) + entry[:4 + len(e)] + struct.pack("<ii", -1, v.size), "-1 calls")
    case("zero-values", struct.pack("<i", 1) + entry[:4 + len(e)] + struct.pack("<ii", 1, 0), "0 values")
    case("values-past-end", struct.pack("<i", 1) + entry[:-4], "within the file")
    case("truncated-entries", struct.pack("<i", 2) + entry, "the file ends inside a name length")
    nan = v.copy()
    nan[3] = np.nan
    case("nan", struct.pack("<i", 1) + entry[:-v.nbytes] + nan.tobytes(), "value 3 is not finite")
    case("duplicate", struct.pack("<i", 2) + entry + entry, f"\"{one}\" appears twice")
    case("trailing", struct.pack("<i", 1) + entry + b"\1\2\3", "the file ends inside")
    case("bad-trailer", struct.pack("<i", 1) + entry + struct.pack("<ii", 5, 100) + b"ab",
         "a dataset name of 100 bytes")
    wrong = dict(good)
    wrong[one] = v[:-1]
    p = os.path.join(d, "wrong-size.dat")
    write_legacy(p, wrong, 1)
    refused(base + [p], f"\"{one}\" has {v.size - 1} values, the tensor takes {v.size}")
    other = {"blk.0.some_other_model.weight": v}
    write_legacy(p, other, 1)
    refused(base + [p], "name none of the view's matrices")
    g = os.path.join(d, "nometa.gguf")
    write_gguf_imatrix(g, {one: v}, {one: [3]}, meta=False)
    refused(base + [g], "not an importance matrix")
    gs.write_gguf(g, {"imatrix.datasets": (9, (8, ["x"])), "imatrix.chunk_count": (4, 1),
                      "imatrix.chunk_size": (4, 512)}, {one + ".in_sum2": (0, [1, v.size], v.tobytes())})
    refused(base + [g], f"{one}.in_sum2 has no {one}.counts")
    gs.write_gguf(g, {"imatrix.datasets": (9, (8, ["x"])), "imatrix.chunk_count": (4, 1),
                      "imatrix.chunk_size": (4, 512)},
                  {one + ".in_sum2": (0, [1, v.size], v.tobytes()), one + ".counts": (0, [2, 1], b"\0" * 8)})
    refused(base + [g], "counts F32, one per matrix")
    gs.write_gguf(g, {"imatrix.datasets": (9, (8, ["x"])), "imatrix.chunk_count": (4, 1),
                      "imatrix.chunk_size": (4, 512)},
                  {one + ".in_sum2": (0, [0, v.size], b""), one + ".counts": (0, [0, 1], b"")})
    refused(base + [g], "in_sum2 must be F32 [matrices, columns]")  # no matrices (a fuzzer's find)
    gs.write_gguf(g, {"imatrix.datasets": (9, (8, ["x"])), "imatrix.chunk_count": (4, 1),
                      "imatrix.chunk_size": (4, 512)}, {one + ".counts": (0, [1, 1], b"\0" * 4)})
    refused(base + [g], f"{one}.counts has no {one}.in_sum2")
    os.mkdir(os.path.join(d, "a-directory"))
    refused(base + [os.path.join(d, "a-directory")], "not a regular file")
    fifo = os.path.join(d, "a-fifo")
    os.mkfifo(fifo)
    refused(base + [fifo], "not a regular file")
    refused(base + [os.path.join(d, "missing.dat")], "cannot open the importance matrix")
    refused(["convert", src, os.path.join(d, "hostile-out"), "--format", "gguf:BF16", "--gguf-vocab", "none",
             "--gguf-imatrix", p], "BF16 takes no weights")
    refused(["convert", src, os.path.join(d, "hostile-out"), "--gguf-imatrix", p], "go with --format gguf")
    assert not os.path.exists(os.path.join(d, "hostile-out")), "a refused convert left output"
    return len(REFUSED)


def mounted(d, src, imx_file, mix):
    """The mounted file is convert's, also read in pieces cut inside
    blocks and rows."""
    from mountlib import Mount, skip_unless_fuse
    skip_unless_fuse()
    whole = open(convert(src, os.path.join(d, "conv-imx-" + mix), "gguf:" + mix, imx_file), "rb").read()
    with Mount(src, opts=f"gguf={mix},gguf_vocab=none,gguf_imatrix={imx_file}") as m:
        path = m.path("model.gguf")
        assert open(path, "rb").read() == whole, "the mounted model.gguf is not convert's"
        rng = np.random.default_rng(7)
        fd = os.open(path, os.O_RDONLY)
        try:
            for n in (1, 7, 143, 145, 211, 4097, 70001):
                off = int(rng.integers(0, len(whole) - n))
                assert os.pread(fd, n, off) == whole[off:off + n], (off, n)
        finally:
            os.close(fd)
    print(f"mount -o gguf={mix},gguf_imatrix: {len(whole)} bytes, convert's, also in 7 cut reads")


def main():
    lib = kq.libllama()
    rng = np.random.default_rng(29)
    d = tempfile.mkdtemp(prefix="ckptfs-imatrix-")
    base = ["--heads", "4", "--kv-heads", "2", "--vocab", "256"]
    try:
        dense = kq.gen(d, "dense", *base, "--layers", "8", "--hidden", "256", "--intermediate", "512")
        kq.hostile_weights(dense, rng, False)
        plain = kq.convert(dense, os.path.join(d, "dense-F32"), "gguf:F32")
        mats = matrices(plain)
        if "--mount" in sys.argv:
            imx = some_imatrix(rng, mats)
            f = os.path.join(d, "dense.dat")
            write_legacy(f, imx, 5)
            mounted(d, dense, f, "Q4_K_M")
            # Q4_0 given a matrix: blk.0.ffn_down Q4_1, weighed by its rows' mean squares
            mounted(d, dense, f, "Q4_0")
            # rows of 160: Q5_1 blocks weighed by their whole row's mean square
            rows = kq.gen(d, "rows160", *base[2:], "--layers", "2", "--hidden", "160", "--intermediate", "96",
                          "--heads", "5", "--kv-heads", "1")
            f = os.path.join(d, "rows.dat")
            write_legacy(f, some_imatrix(rng, matrices(kq.convert(rows, os.path.join(d, "r-F32"), "gguf:F32"))), 2)
            mounted(d, rows, f, "Q5_K_M")
            # IQ4_NL quantizes a row's blocks eight side by side: runs of five
            # here, cut where a read starts or ends inside a row
            mounted(d, rows, f, "IQ4_NL")
            return
        imx = some_imatrix(rng, mats, skip=("blk.1.attn_k.weight",))
        legacy = os.path.join(d, "dense.dat")
        vals = write_legacy(legacy, imx, 5)
        # (not the legacy mixes: llama.cpp refuses its own Q4_0 ... Q5_1 of
        # these blocks, whose F16 scales and minima overflow; the next source's
        # values stay under 2^14)
        k_mixes = [m for m in kq.FTYPE if m not in kq.LEGACY]
        seen = same_as_llama(lib, d, "dense", dense, plain, k_mixes, legacy, vals)
        print("8-layer Llama, hostile blocks, a legacy imatrix: every K-quant and IQ4 mix as llama.cpp's "
              "quantizer makes them given it; weighted tensors: " + "; ".join(f"{m} {c}" for m, c in seen.items()))
        old = kq.gen(d, "legacy", *base, "--layers", "8", "--hidden", "256", "--intermediate", "512")
        kq.hostile_weights(old, np.random.default_rng(31), False, legacy=True)  # (rng's draws left as they were)
        old_plain = kq.convert(old, os.path.join(d, "legacy-F32"), "gguf:F32")
        seen = same_as_llama(lib, d, "legacy", old, old_plain, list(kq.LEGACY), legacy, vals)
        _, q4 = kq.tensors(os.path.join(d, "legacy-Q4_0-imx", "model.gguf"))
        _, q5 = kq.tensors(os.path.join(d, "legacy-Q5_0-imx", "model.gguf"))
        assert q4["blk.0.ffn_down.weight"][0] == 3 and q5["blk.0.ffn_down.weight"][0] == 7, "no Q4_1/Q5_1 ffn_down"
        print(f"the legacy mixes given it (blk.0.ffn_down Q4_1 in Q4_0, Q5_1 in Q5_0): weighted tensors {seen}")
        weighs(os.path.join(d, "dense-Q4_K_M-imx", "model.gguf"), kq.convert(dense, os.path.join(d, "d-q4km"),
                                                                            "gguf:Q4_K_M"), "dense")
        g = os.path.join(d, "dense.imatrix.gguf")
        counts = {n: [int(rng.integers(1, 500))] for n in imx}
        vals = write_gguf_imatrix(g, imx, counts)
        seen = same_as_llama(lib, d, "dense-gguf", dense, plain, ["Q4_K_M", "Q2_K"], g, vals)
        print(f"the same, the GGUF imatrix format: {seen}")
        # --gguf-tensor-type's tensors are weighted too, in a Q8_0 file
        # (whose own blocks take no weights) as in a mix
        seen = same_as_llama(lib, d, "dense-tt", dense, plain, [r"Q8_0 tt=ffn_down=q4_k tt=blk\.[0-3]\.attn_v=iq4_xs",
                                                              "Q4_K_M tt=ffn_(up|gate)=q3_k"], g, vals)
        assert seen[r"Q8_0 tt=ffn_down=q4_k tt=blk\.[0-3]\.attn_v=iq4_xs"] == 12, seen
        print(f"given --gguf-tensor-type, Q8_0 and Q4_K_M: {seen}")

        moe = kq.gen(d, "moe", *base, "--model", "mixtral", "--experts", "4", "--layers", "4", "--hidden", "256",
                     "--intermediate", "256")
        moe_plain = kq.convert(moe, os.path.join(d, "moe-F32"), "gguf:F32")
        mats = matrices(moe_plain)
        imx = some_imatrix(rng, mats)
        counts = {n: [int(c) for c in rng.integers(1, 90, (mats[n][2] if len(mats[n]) > 2 else 1))] for n in imx}
        stacked = next(n for n in imx if len(mats[n]) > 2)
        counts[stacked][1] = 0  # an expert no calibration token reached: weights 1
        g = os.path.join(d, "moe.imatrix.gguf")
        vals = write_gguf_imatrix(g, imx, counts)
        seen = same_as_llama(lib, d, "moe", moe, moe_plain, ["Q4_K_M", "Q3_K_M", "Q6_K"], g, vals)
        print(f"4-expert Mixtral, per-expert weights (one expert never counted): {seen}")

        rows = kq.gen(d, "rows160", *base[2:], "--layers", "4", "--hidden", "160", "--intermediate", "96",
                      "--heads", "5", "--kv-heads", "1")
        rows_plain = kq.convert(rows, os.path.join(d, "rows160-F32"), "gguf:F32")
        mats = matrices(rows_plain)
        imx = some_imatrix(rng, mats)
        f = os.path.join(d, "rows.dat")
        vals = write_legacy(f, imx, 1, trailer=False)
        seen = same_as_llama(lib, d, "rows160", rows, rows_plain,
                             ["Q4_K_M", "Q5_K_M", "Q2_K", "Q6_K", "IQ4_XS", "Q4_0", "Q4_1"], f, vals)
        assert seen["IQ4_XS"] > 0, seen  # IQ4_NL's runs of five blocks a row, weighted
        print(f"160-wide rows (Q4_0, Q4_1, Q5_0, Q5_1 weighted by the row's mean square; IQ4_NL in runs of 5 "
              f"blocks): {seen}")

        n = hostile(d, dense, matrices(plain), rng)
        print(f"{n} hostile importance matrices refused, one line each, nothing written")
    finally:
        subprocess.run(["rm", "-rf", d])


if __name__ == "__main__":
    main()
