"""The GGUF view's llama-quantize mixes (-o gguf=Q4_0, Q4_1, Q5_0, Q5_1,
Q2_K, Q3_K_S, Q3_K_M, Q3_K_L, Q4_K_M, Q4_K_S, Q5_K_M, Q5_K_S, Q6_K, IQ4_NL,
IQ4_XS; with llama-quantize's --pure, --output-tensor-type and
--token-embedding-type: --gguf-pure, --gguf-output-type, --gguf-embd-type) against
llama.cpp's own quantizer: llama_model_quantize, from the
prebuilt libllama node-llama-cpp ships (what the llama-quantize tool runs),
quantizes the view's unquantized file; ckptfs's mix must give every tensor
the type llama.cpp chose and the bytes it wrote, and inspect --format must
list those types and sizes without reading tensor data. The cases reach each rule
of llama.cpp's choice: the mixes' extra bits for attn_v, ffn_down and
attn_output (first and last eighth of the layers, every third between; the
first layers for _S; Q2_K's attn_v by the grouped heads), Q6_K for the
output and for a tied embedding, a 70B's attn_v (80 layers: a GQA Llama
with any expert count but 8, a Qwen2; not a Qwen2-VL), an 8-expert model's
attention, Phi-3's fused attn_qkv counted as attn_v, rows that are not whole
super-blocks (the Q4_0, Q5_0, Q5_1, IQ4_NL and Q8_0 fallbacks) or not whole
32-blocks (F16); a BF16 source (quantized from its 2-byte elements) and
weights that corner the quantizers (zeros, subnormals, the largest floats,
sums that overflow, random bit patterns; not infinities or NaN, which
llama.cpp's quantizer refuses to quantize; for the legacy mixes, whose F16
scale or minimum is a block's largest magnitude over 8 or its minimum
itself (a weighted fit's least-squares minimum lies below the block's),
nothing past 2^14, where those can overflow and llama.cpp refuses the
file). With --mount: the mounted
file is convert's, byte for byte, also read in pieces cut inside blocks,
and the real llama.cpp runs it: its logits equal those of the file
llama.cpp's quantizer made."""
import ctypes
import glob
import json
import os
import struct
import subprocess
import sys
import tempfile

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import ckref  # noqa: E402
import gguf_source as gs  # noqa: E402  (parse_gguf, QUANT, llama_cpp)

CKPTFS, MKCKPT = os.environ["CKPTFS"], os.environ["MKCKPT"]
LEGACY = {"Q4_0": 2, "Q4_1": 3, "Q5_0": 8, "Q5_1": 9}
FTYPE = {**LEGACY, "Q2_K": 10, "Q3_K_S": 11, "Q3_K_M": 12, "Q3_K_L": 13, "Q4_K_S": 14, "Q4_K_M": 15,
         "Q5_K_S": 16, "Q5_K_M": 17, "Q6_K": 18, "IQ4_NL": 25, "IQ4_XS": 30, "MXFP4_MOE": 38}  # llama_ftype
SIZES = {0: (1, 4), 1: (1, 2), 30: (1, 2), **{t: (qk, qb) for t, qk, qb in gs.QUANT.values()}}
NAMES = {t: n for n, (t, _, _) in gs.QUANT.items()} | {0: "F32", 1: "F16", 30: "BF16"}


def libllama():
    found = glob.glob(os.path.join(gs.TESTS, "..", "build-node", "node_modules", "@node-llama-cpp",
                                   "linux-x64", "bins", "linux-x64", "libllama*.so"))
    assert found, "libllama from node-llama-cpp is missing (tools/install-deps.sh installs it)"
    base = os.path.dirname(found[0])
    for dep in ("libggml-base.so", "libggml.*so"):
        ctypes.CDLL(glob.glob(os.path.join(base, dep))[0], mode=ctypes.RTLD_GLOBAL)
    lib = ctypes.CDLL(found[0], mode=ctypes.RTLD_GLOBAL)
    lib.llama_backend_init()
    return lib


class Params(ctypes.Structure):
    """llama_model_quantize_params, opaque but for its first two fields
    (int32 nthread, llama_ftype ftype): returned in memory, as any struct
    over 16 bytes is, so 512 bytes leave room for this version's fields."""
    _fields_ = [("raw", ctypes.c_ubyte * 512)]


class ImatrixEntry(ctypes.Structure):  # struct llama_model_imatrix_data
    _fields_ = [("name", ctypes.c_char_p), ("data", ctypes.POINTER(ctypes.c_float)), ("size", ctypes.c_size_t)]


TYPE_OF = {n: t for t, n in NAMES.items()}


class TensorOverride(ctypes.Structure):  # struct llama_model_tensor_override
    _fields_ = [("pattern", ctypes.c_char_p), ("type", ctypes.c_int)]


class KvValue(ctypes.Union):  # its union: 8-aligned, so after the key at 136
    _fields_ = [("i64", ctypes.c_int64), ("f64", ctypes.c_double), ("b", ctypes.c_bool),
                ("s", ctypes.c_char * 128)]


class KvOverride(ctypes.Structure):  # struct llama_model_kv_override: tag, key[128], the union
    _fields_ = [("tag", ctypes.c_int), ("key", ctypes.c_char * 128), ("val", KvValue)]


def kv_overrides(kv):
    """--override-kv KEY=TYPE:VALUE as llama-quantize parses them
    (string_parse_kv_override: INT 0 atol, FLOAT 1 atof, BOOL 2, STR 3), in a
    array ended by an empty key."""
    arr = (KvOverride * (len(kv) + 1))()
    for i, spec in enumerate(kv):
        key, rest = spec.split("=", 1)
        tag, v = rest.split(":", 1)
        arr[i].key = key.encode()
        if tag == "int":
            arr[i].tag, arr[i].val.i64 = 0, int(v)
        elif tag == "float":
            arr[i].tag, arr[i].val.f64 = 1, float(v)
        elif tag == "bool":
            arr[i].tag, arr[i].val.b = 2, v == "true"
        else:
            arr[i].tag, arr[i].val.s = 3, v.encode()
    return arr


def llama_quantize(lib, src, dst, mix, threads=2, imatrix=None, pure=False, output=None, embd=None, leave=False,
                   tt=(), kv=()):
    """llama-quantize src into dst as mix (threads 0: one per core); with
    imatrix (name -> float32 values) as llama-quantize --imatrix hands it
    over: the params' imatrix pointer (after four int32 and six bools, at
    offset 24) at a NULL-terminated array of {name, values, count}; pure,
    output and embd as --pure (the fourth bool, at 19),
    --output-tensor-type and --token-embedding-type (the third and fourth
    int32, ggml types) set them; leave as --leave-output-tensor (the second
    bool, quantize_output_tensor, at 17, cleared); tt, (pattern, type)
    pairs, as --tensor-type hands them over: the params' tt_overrides (at
    40) at a NULL-terminated array of {pattern, ggml type}, each pattern
    lowercased as llama-quantize's argument parser lowercases it; kv,
    KEY=TYPE:VALUE strings, as --override-kv hands them over: the params'
    kv_overrides (at 32) at kv_overrides(kv)."""
    lib.llama_model_quantize_default_params.restype = Params
    raw = bytearray(bytes(lib.llama_model_quantize_default_params().raw))
    struct.pack_into("<ii", raw, 0, threads, {**FTYPE, "Q8_0": 7}[mix])
    if output:
        struct.pack_into("<i", raw, 8, TYPE_OF[output])
    if embd:
        struct.pack_into("<i", raw, 12, TYPE_OF[embd])
    raw[19] = 1 if pure else raw[19]
    raw[17] = 0 if leave else raw[17]
    rules = (TensorOverride * (len(tt) + 1))(*[TensorOverride(p.lower().encode(), TYPE_OF[t.upper()]) for p, t in tt])
    if tt:
        struct.pack_into("<Q", raw, 40, ctypes.addressof(rules))
    kvs = kv_overrides(kv)
    if kv:
        struct.pack_into("<Q", raw, 32, ctypes.addressof(kvs))
    arrs = {k.encode(): np.ascontiguousarray(v, np.float32) for k, v in (imatrix or {}).items()}
    entries = (ImatrixEntry * (len(arrs) + 1))()
    for i, (k, v) in enumerate(arrs.items()):
        entries[i] = ImatrixEntry(k, v.ctypes.data_as(ctypes.POINTER(ctypes.c_float)), v.size)
    if imatrix is not None:
        struct.pack_into("<Q", raw, 24, ctypes.addressof(entries))
    p = Params.from_buffer_copy(bytes(raw))
    err = os.dup(2)  # llama.cpp logs every tensor to stderr
    null = os.open(os.devnull, os.O_WRONLY)
    os.dup2(null, 2)
    try:
        rc = lib.llama_model_quantize(src.encode(), dst.encode(), ctypes.byref(p))
    finally:
        os.dup2(err, 2)
        os.close(err)
        os.close(null)
    assert rc == 0, f"llama_model_quantize({src}, {mix}) failed"


def tensors(path):
    """name -> (ggml type, dims, the tensor's bytes), and the metadata."""
    _, meta, infos, data, b = gs.parse_gguf(path)
    out = {}
    for name, dims, t, off in infos:
        qk, qb = SIZES[t]
        n = int(np.prod(dims)) // qk * qb
        out[name] = (t, dims, b[data + off:data + off + n])
    return meta, out


def convert(src, out, fmt, *extra):
    p = subprocess.run([CKPTFS, "convert", src, out, "--quiet", "--format", fmt, "--gguf-vocab", "none", *extra],
                       capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    return os.path.join(out, "model.gguf")


def same_as_llama(lib, d, tag, src, mixes, unquantized="F32"):
    """Each mix of src as ckptfs serves it and as llama.cpp quantizes the
    unquantized view: the types chosen, per type how many; every tensor's
    bytes equal. A mix "Q4_K_M pure output=Q8_0 embd=F16" is Q4_K_M with
    llama-quantize's --pure, --output-tensor-type Q8_0 and
    --token-embedding-type F16 (ckptfs's --gguf-pure, --gguf-output-type,
    --gguf-embd-type); "leave" is --leave-output-tensor, "tt=PATTERN=TYPE"
    --tensor-type PATTERN=TYPE (--gguf-leave-output, --gguf-tensor-type)."""
    plain = convert(src, os.path.join(d, f"{tag}-{unquantized}"), "gguf:" + unquantized)
    seen = {}
    for n_spec, spec in enumerate(mixes):
        mix, *opts = spec.split()
        kw = {"pure": "pure" in opts, "leave": "leave" in opts,
              "tt": [tuple(o[3:].rsplit("=", 1)) for o in opts if o.startswith("tt=")],
              "kv": [o[3:] for o in opts if o.startswith("kv=")],
              **{k: v for k, v in (o.split("=") for o in opts if "=" in o and not o.startswith(("tt=", "kv=")))}}
        extra = (["--gguf-pure"] if kw["pure"] else []) + (["--gguf-leave-output"] if kw["leave"] else []) + \
            [a for k in ("output", "embd") if kw.get(k) for a in (f"--gguf-{k}-type", kw[k])] + \
            [a for p, t in kw["tt"] for a in ("--gguf-tensor-type", f"{p}={t}")] + \
            [a for o in kw["kv"] for a in ("--gguf-override-kv", o)]
        ours = convert(src, os.path.join(d, f"{tag}-{n_spec}-{mix}"), "gguf:" + mix, *extra)
        ref = os.path.join(d, f"{tag}-{mix}-llama.gguf")
        llama_quantize(lib, plain, ref, mix, **kw)
        rmeta, rt = tensors(ref)
        ometa, ot = tensors(ours)
        assert set(rt) == set(ot), (tag, spec, set(rt) ^ set(ot))
        wrong_type = {n: (NAMES[rt[n][0]], NAMES[ot[n][0]]) for n in rt if rt[n][0] != ot[n][0]}
        assert not wrong_type, (tag, spec, "llama.cpp's type, ckptfs's", wrong_type)
        wrong = [n for n in rt if rt[n][1:] != ot[n][1:]]
        assert not wrong, (tag, spec, f"{len(wrong)} tensors differ from llama.cpp's, first", wrong[:3])
        for k in ("general.file_type", "general.quantization_version"):
            assert ometa[k] == rmeta[k], (tag, spec, k, ometa[k], rmeta[k])
        if kw["kv"]:  # each override: the same value and GGUF type in both files
            rtypes, otypes = dict(kv_types(ref)), dict(kv_types(ours))
            for o in kw["kv"]:
                k = o.split("=", 1)[0]
                assert (ometa[k], otypes[k]) == (rmeta[k], rtypes[k]), (tag, spec, k, ometa[k], rmeta[k])
        # inspect says the same without reading tensor data
        p = subprocess.run([CKPTFS, "inspect", src, "--format", "gguf:" + mix, "--gguf-vocab", "none", "--json",
                            *extra], capture_output=True, text=True)
        assert p.returncode == 0, p.stderr
        js = json.loads(p.stdout)
        assert js["type"] == mix and js["bytes"] == os.path.getsize(ours), (js["type"], js["bytes"])
        assert {t["name"]: (t["type"], t["bytes"]) for t in js["tensors"]} == \
            {n: (NAMES[t], len(b)) for n, (t, _, b) in rt.items()}, (tag, spec)
        count = {}
        for t, _, _ in rt.values():
            count[NAMES[t]] = count.get(NAMES[t], 0) + 1
        seen[spec] = count
    return seen


def hostile_weights(src, rng, extreme, legacy=False):
    """Rewrite src's F32 matrices with values that corner the quantizers: a
    trained model's scale mostly, then per 32-element block one of zeros,
    subnormals, scales from 2^-140 up, a lone outlier, values whose squares
    underflow, random bit patterns, all of one sign but a zero of each
    sign (the block's minimum or maximum: Q4_1 and Q5_1 keep the first),
    values on a grid (ties). extreme: also the largest floats, infinities and sums that
    overflow, whose F16 scales overflow (llama.cpp's quantizer refuses to
    write those; ggml's row quantizer, the reference then, does not);
    else every value stays under 2^19 (Q2_K's F16 min, |min| / 15, stays
    finite), or with legacy under 2^14 (Q4_0's d = max / -8 and Q4_1's
    min, stored as they are, stay finite; a weighted fit's min, under the
    block's, too)."""
    cap = 2 ** 14 if legacy else 2 ** 19
    w = {k: v[2].astype(np.float32) for k, v in ckref.read_checkpoint_dir(src).items()}
    top = 121 if extreme else 16
    for k, a in w.items():
        if a.ndim < 2:
            continue
        f = (rng.standard_normal(a.size) * 0.05).astype(np.float32)
        blocks = f.reshape(-1, 32)
        for i in range(len(blocks)):
            kind, b = i % 11, blocks[i]
            with np.errstate(all="ignore"):
                if kind == 1:
                    b[:] = 0.0 if i % 2 else -0.0
                elif kind == 2:
                    b[:] = (rng.integers(-8, 8, 32) * np.float32(1e-45)).astype(np.float32)
                elif kind == 3:
                    b *= np.float32(2.0) ** rng.integers(-140, top)
                elif kind == 4:
                    b[rng.integers(0, 32)] = (np.float32(3.4028235e38) if extreme else cap / 5) * rng.choice([-1, 1])
                elif kind == 5:
                    b[:] = rng.choice([-1, 1], 32) * (np.float32(1e38) if extreme else np.float32(1e-23))
                elif kind == 6:
                    bits = rng.integers(0, 2 ** 32, 32, dtype=np.uint64).astype(np.uint32).view(np.float32)
                    keep = ~np.isnan(bits) if extreme else np.abs(bits) < cap
                    b[:] = np.where(keep, bits, np.float32(0.5))
                elif kind == 7:
                    b[rng.integers(0, 32)] = np.inf if extreme else 40.0
                elif kind == 8:  # all of one sign but two zeros, one of each sign: an end
                    b[:] = (np.abs(b) + 0.01) * (1 if i % 4 < 2 else -1)  # the first ggml meets
                    b[3], b[17] = (0.0, -0.0) if i % 2 else (-0.0, 0.0)
                elif kind == 9:
                    b[:] = np.round(b * 64) / 64
        w[k] = f.reshape(a.shape)
    ckref.write_safetensors(os.path.join(src, "model.safetensors"),
                            {k: ("F32", v.shape, v.tobytes()) for k, v in w.items()})
    for f in os.listdir(src):  # one file now: the generator's shards and index go
        if f.startswith("model-") or f.endswith(".index.json"):
            os.remove(os.path.join(src, f))


def same_as_ggml(d, tag, src, mixes):
    """Each quantized tensor of each mix against ggml's own row quantizer
    (ggml_quantize_chunk) of the unquantized view's values, type for type
    ("MIX pure": with --gguf-pure, every matrix the mix's type)."""
    _, plain = tensors(convert(src, os.path.join(d, f"{tag}-F32"), "gguf:F32"))
    n = 0
    for spec in mixes:
        mix, *opts = spec.split()
        _, ours = tensors(convert(src, os.path.join(d, f"{tag}-{mix}-{len(opts)}"), "gguf:" + mix,
                                  *(["--gguf-pure"] if "pure" in opts else [])))
        for name, (t, dims, raw) in ours.items():
            if t in (0, 1):
                continue
            x = np.frombuffer(plain[name][2], "<f4").reshape(-1, dims[0])
            with np.errstate(all="ignore"):
                want = gs.ggml_quantize(t, x)
            assert raw == want, (tag, mix, name, NAMES[t])
            n += 1
    return n


def overrides_refused(d, src):
    """The overrides refused with one line naming what is wrong, nothing
    written: a float file type, a type llama.cpp has but ckptfs does not
    write, no type at all, rows that the type's blocks do not tile, and the
    options without --format gguf."""
    out = os.path.join(d, "refused-out")
    cases = [(["gguf:F16", "--gguf-pure"], "go with a quantized type, Q8_0 or a mix, not F16"),
             (["gguf:Q4_K_M", "--gguf-output-type", "TQ1_0"], 'the output tensor type "TQ1_0": one of'),
             (["gguf:Q4_K_M", "--gguf-embd-type", "Q9_9"], 'the token embedding type "Q9_9": one of'),
             (["gguf:Q4_K_M", "--gguf-output-type", ""], "the output tensor type"),
             (["gguf:Q4_K_M", "--gguf-embd-type", "IQ4_XS", "--gguf-output-type", "Q6_K"], None)]
    for args, says in cases:
        p = subprocess.run([CKPTFS, "convert", src, out, "--quiet", "--format", *args, "--gguf-vocab", "none"],
                           capture_output=True, text=True)
        if says is None:  # hidden 256: every row takes 256-blocks
            assert p.returncode == 0, p.stderr
            subprocess.run(["rm", "-rf", out])
            continue
        assert p.returncode != 0 and says in p.stderr and len(p.stderr.strip().splitlines()) == 1, (args, p.stderr)
        assert not os.path.exists(out), args
    narrow = gen(d, "narrow", "--heads", "5", "--kv-heads", "1", "--vocab", "256", "--layers", "1", "--hidden", "160",
                 "--intermediate", "96")
    p = subprocess.run([CKPTFS, "convert", narrow, out, "--quiet", "--format", "gguf:Q4_K_M", "--gguf-vocab", "none",
                        "--gguf-output-type", "Q6_K"], capture_output=True, text=True)
    assert p.returncode != 0 and '"output.weight": its rows of 160 are not whole Q6_K blocks of 256' in p.stderr, \
        p.stderr
    p = subprocess.run([CKPTFS, "convert", src, out, "--quiet", "--gguf-pure"], capture_output=True, text=True)
    assert p.returncode != 0 and "go with --format gguf" in p.stderr, p.stderr
    for opt in (["--gguf-pure"], ["--gguf-output-type", "Q8_0"], ["--gguf-imatrix", "x.dat"]):  # (inspect
        p = subprocess.run([CKPTFS, "inspect", src, *opt], capture_output=True, text=True)  # ignored them)
        assert p.returncode != 0 and "go with --format gguf" in p.stderr and not p.stdout, (opt, p.stderr)
    assert not os.path.exists(out)
    print("refused, one line each, nothing written: overrides of a float file, unknown or unwritable types, "
          "rows of 160 as Q6_K, the options without --format gguf")


def tensor_types_refused(d, src):
    """--gguf-tensor-type and its file refused with one line naming the
    option or the file, the entry and what is wrong; nothing written."""
    out = os.path.join(d, "tt-refused-out")
    bad = os.path.join(d, "tt-bad.txt")
    with open(bad, "w") as f:
        f.write("ffn_down=q6_k\n  attn_v=Q8_0\tattn_(q=q4_k\n")
    cases = [(["x"], '--gguf-tensor-type "x": not PATTERN=TYPE'),
             (["=q4_k"], '--gguf-tensor-type "=q4_k": not PATTERN=TYPE'),
             (["ffn="], '--gguf-tensor-type "ffn=": not PATTERN=TYPE'),
             (["ffn=Q9_K"], 'the type "Q9_K": one of F32'),
             (["ffn=IQ2_XXS"], 'the type "IQ2_XXS": one of F32'),
             (["attn_(q=q4_k"], '"attn_(q=q4_k": the pattern: at 7: a ( without its )'),
             (["blk\\.\\D=q4_k"], "lowercases a pattern, so \\D would mean \\d"),
             (["(a)\\1=q4_k"], "back-references"),
             (["a{1001}=q4_k"], "a count over 1000")]
    big, nul, many = (os.path.join(d, f"tt-{k}.txt") for k in ("big", "nul", "many"))
    with open(big, "w") as f:
        f.write(("ffn_down=q6_k " * 80000)[:(1 << 20) + 1])
    with open(nul, "wb") as f:
        f.write(b"attn_v=q8_0 ffn\0down=q6_k\n")
    with open(many, "w") as f:
        f.write("\n".join(f"blk\\.{k}\\.=q4_k" for k in range(4097)))
    runs = [(["--format", "gguf:Q4_K_M", "--gguf-tensor-type", a[0]], says) for a, says in cases]
    runs += [(["--format", "gguf:Q4_K_M", "--gguf-tensor-type-file", big], "more than the limit of 1048576"),
             (["--format", "gguf:Q4_K_M", "--gguf-tensor-type-file", nul], "a NUL byte in an entry"),
             (["--format", "gguf:Q4_K_M", "--gguf-tensor-type-file", many], "more than 4096 tensor type patterns")]
    runs += [(["--format", "gguf:Q4_K_M", "--gguf-tensor-type-file", bad], f'{bad} "attn_(q=q4_k": the pattern'),
             (["--format", "gguf:Q4_K_M", "--gguf-tensor-type-file", "/dev/null"], "/dev/null: not a regular file"),
             (["--format", "gguf:Q4_K_M", "--gguf-tensor-type-file", d], "not a regular file"),
             (["--format", "gguf:Q4_K_M", "--gguf-tensor-type-file", os.path.join(d, "absent")], "cannot open"),
             (["--format", "gguf:F16", "--gguf-tensor-type", "ffn=q4_k"], "go with a quantized type"),
             (["--format", "gguf:BF16", "--gguf-leave-output"], "go with a quantized type"),
             (["--format", "gguf:Q4_K_M", *[a for k in range(65) for a in ("--gguf-tensor-type", f"x{k}=q4_k")]],
              "more than 64 tensor type options"),
             (["--gguf-tensor-type", "ffn=q4_k"], "go with --format gguf"),
             (["--gguf-leave-output"], "go with --format gguf")]
    for args, says in runs:
        p = subprocess.run([CKPTFS, "convert", src, out, "--quiet", "--gguf-vocab", "none", *args],
                           capture_output=True, text=True)
        assert p.returncode != 0 and says in p.stderr and len(p.stderr.strip().splitlines()) == 1, \
            (args[:4], p.stderr)
        assert not os.path.exists(out), args[:4]
    print(f"--gguf-tensor-type and its file: {len(runs)} wrong uses refused, one line each, nothing written")


def override_kv_refused(d, src):
    """--gguf-override-kv refused with one line naming the option and what
    is wrong, nothing written: what llama-quantize would take and write as
    something else (a negative int as its absolute value, atol's and atof's
    leftovers, a string past 127 bytes), a key written as another type than
    llama.cpp reads it (a u32 as a string, an array as a scalar), the keys
    the view writes itself, a key given twice, and hyper-parameters that no
    longer describe the tensors (blocks, width, head counts)."""
    out = os.path.join(d, "kv-refused-out")
    cfg = json.load(open(os.path.join(src, "config.json")))
    L, H = cfg["num_hidden_layers"], cfg["hidden_size"]
    cases = [("a=int:-5", '"a=int:-5": int: a whole number from 0 to 4294967295', 2),
             ("a=int:4294967296", "int: a whole number", 2), ("a=int:12abc", "int: a whole number", 2),
             ("a=float:1e39", "float: a number that is finite in F32", 2),
             ("a=float:0.5x", "float: a number", 2), ("a=bool:yes", "bool: true or false", 2),
             ("a=str:" + "x" * 128, "str: 127 bytes at most", 2), ("a=blob:1", "TYPE is int, float, bool or str", 2),
             ("=int:1", "KEY=TYPE:VALUE, a key of 1 to 127 bytes", 2), ("k" * 128 + "=int:1", "a key of 1 to 127", 2),
             ("llama.context_length=str:4k", "llama.context_length: the file holds it as u32", 2),
             ("llama.rope.freq_base=int:10000", "llama.rope.freq_base: the file holds it as f32", 2),
             ("tokenizer.ggml.tokens=str:a", "tokenizer.ggml.tokens: the file holds it as an array", 2),
             ("general.alignment=int:64", "general.alignment: the view writes this key itself", 2),
             ("general.architecture=str:qwen2", "general.architecture: the view writes", 2),
             ("split.count=int:2", "split.count: the view writes", 2),
             (f"llama.block_count=int:{L + 1}", f"block_count {L + 1}, but there is no blk.{L}.*", 2),
             (f"llama.embedding_length=int:{2 * H}", f"embedding_length {2 * H}", 2),
             ("llama.attention.head_count_kv=int:4", "attention.head_count_kv 4", 2)]
    runs = [(["--format", "gguf:Q4_K_M", "--gguf-override-kv", a], says, code) for a, says, code in cases]
    runs += [(["--format", "gguf:Q8_0", "--gguf-override-kv", "a=int:1", "--gguf-override-kv", "a=int:2"],
              "--gguf-override-kv a: given twice", 2),
             (["--format", "gguf", *[x for k in range(65) for x in ("--gguf-override-kv", f"k{k}=int:1")]],
              "--gguf-override-kv: at most 64", 2),
             (["--gguf-override-kv", "a=int:1"], "go with --format gguf", 2)]
    for args, says, code in runs:
        p = subprocess.run([CKPTFS, "convert", src, out, "--quiet", "--gguf-vocab", "none", *args],
                           capture_output=True, text=True)
        assert p.returncode == code and says in p.stderr and len(p.stderr.strip().splitlines()) == 1, \
            (args[:4], p.returncode, p.stderr)
        assert not os.path.exists(out), args[:4]
    print(f"--gguf-override-kv: {len(runs)} wrong uses refused, one line each, nothing written")


def tensor_type_file(d, src):
    """Patterns from a file, split by spaces, tabs and new lines, equal the
    same patterns as options, in the order given across both: the first
    that matches decides."""
    f = os.path.join(d, "tt.txt")
    with open(f, "w") as fh:
        fh.write("  blk\\.[0-2]\\.ffn_down=q8_0\t\tattn_v=Q5_0\n\nffn_(up|gate)=IQ4_XS \n")
    opts = ["--gguf-tensor-type", "blk\\.1\\.=q6_k"]  # before the file: blk.1's come from it
    a = open(convert(src, os.path.join(d, "tt-file"), "gguf:Q4_K_S", *opts, "--gguf-tensor-type-file", f),
             "rb").read()
    b = open(convert(src, os.path.join(d, "tt-opts"), "gguf:Q4_K_S", *opts, "--gguf-tensor-type",
                     "blk\\.[0-2]\\.ffn_down=q8_0", "--gguf-tensor-type", "attn_v=Q5_0", "--gguf-tensor-type",
                     "ffn_(up|gate)=IQ4_XS"), "rb").read()
    assert a == b
    _, t = tensors(os.path.join(d, "tt-file", "model.gguf"))
    got = {n: NAMES[t[n][0]] for n in ("blk.0.ffn_down.weight", "blk.1.ffn_down.weight", "blk.1.attn_v.weight",
                                       "blk.3.attn_v.weight", "blk.2.ffn_up.weight")}
    assert got == {"blk.0.ffn_down.weight": "Q8_0", "blk.1.ffn_down.weight": "Q6_K",
                   "blk.1.attn_v.weight": "Q6_K", "blk.3.attn_v.weight": "Q5_0", "blk.2.ffn_up.weight": "IQ4_XS"}, got
    print("--gguf-tensor-type-file: the options' bytes, the first match across options and file deciding")
    return f


def kv_types(path):
    """The metadata's keys and GGUF value types, in file order."""
    types = {}
    gs.parse_gguf(path, types)
    return list(types.items())


def expected_split(single, max_bytes=None, max_tensors=None):
    """gguf-split's files of the single file's tensors, by its rule: a new
    file when the next tensor (padded to 32 bytes) would take the file's
    tensor bytes past max_bytes (here a tensor over it alone, where
    gguf-split stops), or every max_tensors tensors."""
    _, _, infos, _, _ = gs.parse_gguf(single)
    files, cur = [[]], 0
    for i, (name, dims, t, _) in enumerate(infos):
        qk, qb = SIZES[t]
        n = -(-(int(np.prod(dims)) // qk * qb) // 32) * 32
        if (max_tensors and i and i % max_tensors == 0) or (max_bytes and files[-1] and cur + n > max_bytes):
            files.append([])
            cur = 0
        files[-1].append(name)
        cur += n
    return files


def split_files(lib, d, src):
    """--gguf-split-max-size and --gguf-split-max-tensors: gguf-split's
    pieces (model-0000k-of-0000N.gguf), each tensor as in model.gguf, all
    the metadata in the first and split.no (u16), split.count (u16),
    split.tensors.count (i32) in each; llama.cpp loads the first and finds
    the rest, its logits those of model.gguf; the options refused where
    wrong."""
    single = convert(src, os.path.join(d, "split-one"), "gguf:Q4_K_M")
    smeta, st = tensors(single)
    modules = os.path.join(gs.TESTS, "..", "build-node", "node_modules")
    toks = [1, 5, 9, 200, 31, 77, 128, 3]
    want = gs.llama_cpp(modules, single, toks)
    total = sum(len(b) for _, _, b in st.values())
    padded = [-(-len(b) // 32) * 32 for _, _, b in st.values()]
    edge = sum(padded[:5])  # a file that the first five tensors fill exactly: they stay together
    for opt, val in (("--gguf-split-max-size", f"{total // 3 // 1000}K"), ("--gguf-split-max-tensors", "12"),
                     ("--gguf-split-max-size", "1K"), ("--gguf-split-max-size", str(edge))):
        out = os.path.join(d, f"split-{opt[-4:]}-{val}")
        p = subprocess.run([CKPTFS, "convert", src, out, "--quiet", "--format", "gguf:Q4_K_M", "--gguf-vocab", "none",
                            opt, val], capture_output=True, text=True)
        assert p.returncode == 0, p.stderr
        lim = {"max_tensors": int(val)} if opt.endswith("tensors") else \
            {"max_bytes": int(val[:-1]) * 1000 if val.endswith("K") else int(val)}
        plan = expected_split(single, **lim)
        assert val != str(edge) or len(plan[0]) == 5, plan[0]
        n = len(plan)
        assert sorted(os.listdir(out)) == [f"model-{k:05d}-of-{n:05d}.gguf" for k in range(1, n + 1)], os.listdir(out)
        assert n >= 3, n
        for k, names in enumerate(plan):
            path = os.path.join(out, f"model-{k + 1:05d}-of-{n:05d}.gguf")
            meta, t = tensors(path)
            assert list(t) == names and all(t[x] == st[x] for x in names), (path, list(t)[:3], names[:3])
            split_keys = {"split.no": k, "split.count": n, "split.tensors.count": len(st)}
            assert meta == ({**smeta, **split_keys} if k == 0 else split_keys), (path, set(meta) ^ set(smeta))
            assert kv_types(path)[-3:] == [("split.no", 2), ("split.count", 2), ("split.tensors.count", 5)]
        got = gs.llama_cpp(modules, os.path.join(out, f"model-00001-of-{n:05d}.gguf"), toks)
        assert got.equal(want), "llama.cpp's logits on the split files differ from model.gguf's"
        print(f"{opt} {val}: {n} files as gguf-split cuts them, model.gguf's tensors and metadata; llama.cpp "
              "loads them, model.gguf's logits")
    out = os.path.join(d, "split-refused")
    for args, says in ((["--gguf-split-max-size", "1M", "--gguf-split-max-tensors", "4"], "not both"),
                       (["--gguf-split-max-size", "0"], "a size above 0"),
                       (["--gguf-split-max-tensors", "0"], "a count of tensors from 1 on"),
                       (["--gguf-split-max-tensors", "1e3"], "a count of tensors"),
                       (["--gguf-split-max-tensors", "3000000000"], "a count of tensors")):
        p = subprocess.run([CKPTFS, "convert", src, out, "--quiet", "--format", "gguf:Q4_K_M", "--gguf-vocab", "none",
                            *args], capture_output=True, text=True)
        assert p.returncode != 0 and says in p.stderr and len(p.stderr.strip().splitlines()) == 1, (args, p.stderr)
        assert not os.path.exists(out)
    p = subprocess.run([CKPTFS, "convert", src, out, "--quiet", "--gguf-split-max-size", "1M"], capture_output=True,
                       text=True)
    assert p.returncode != 0 and "go with --format gguf" in p.stderr, p.stderr
    print("the split options refused, one line each, nothing written: both, zero, not a count, without --format gguf")


def gen(d, tag, *args):
    src = os.path.join(d, "src-" + tag)
    ckref.run(MKCKPT, *args, src)
    return src


def mounted(lib, d, src, rng, mix):
    """The mix through a mount: convert's bytes, also in reads cut inside
    blocks; llama.cpp runs it as it runs its own quantizer's file."""
    from mountlib import Mount
    ours = os.path.join(d, "run-" + mix)
    whole = open(convert(src, ours, "gguf:" + mix), "rb").read()
    ref = os.path.join(d, f"run-llama-{mix}.gguf")
    plain = os.path.join(d, "run-F32", "model.gguf")
    if not os.path.exists(plain):
        convert(src, os.path.join(d, "run-F32"), "gguf:F32")
    llama_quantize(lib, plain, ref, mix)
    with Mount(src, opts=f"gguf={mix},gguf_vocab=none,direct_io,no_prefetch,chunk=4096") as m:
        fd = os.open(m.path("model.gguf"), os.O_RDONLY)
        cuts = [(int(rng.integers(0, len(whole))), int(n)) for n in (1, 7, 143, 145, 211, 4097, 70001)
                for _ in range(10)]
        for off, n in cuts:
            assert os.pread(fd, n, off) == whole[off:off + n], (off, n)
        os.close(fd)
    with Mount(src, opts=f"gguf={mix},gguf_vocab=none") as m:
        assert open(m.path("model.gguf"), "rb").read() == whole
        modules = os.path.join(gs.TESTS, "..", "build-node", "node_modules")
        toks = [1, 5, 9, 200, 31, 77, 128, 3]
        got = gs.llama_cpp(modules, m.path("model.gguf"), toks)
    want = gs.llama_cpp(modules, ref, toks)
    f32 = gs.llama_cpp(modules, os.path.join(d, "run-F32", "model.gguf"), toks)
    # the model the file holds: its blocks decoded (a GGUF source) and run by
    # a torch Llama; llama.cpp differs by its 8-bit activations only
    held, _, _ = gs.torch_logits(os.path.join(ours, "model.gguf"), os.path.join(d, "run-held-" + mix), toks)
    r_held, r_f32 = gs.rel(want, held), gs.rel(want, f32)
    assert got.equal(want), "llama.cpp's logits on the mounted mix differ from its own quantizer's file"
    assert r_held < 0.05 and r_held < 0.25 * r_f32, f"llama.cpp {r_held:.1e} from the weights the file holds, {r_f32:.1e} from F32"
    print(f"mounted {mix}: convert's bytes, {len(cuts)} reads cut inside blocks; llama.cpp's logits equal "
          f"those of its own quantizer's file, {r_held:.1e} from a torch Llama over the weights the file "
          f"holds ({r_f32:.1e} from the F32 model's)")


def main():
    lib = libllama()
    rng = np.random.default_rng(23)
    d = tempfile.mkdtemp(prefix="ckptfs-kquant-")
    base = ["--heads", "4", "--kv-heads", "2", "--vocab", "256"]  # llama unless a case says
    try:
        if "--mount" in sys.argv:  # the mount suite's run; the cli suite's does the rest
            from mountlib import skip_unless_fuse
            skip_unless_fuse()
            run = gen(d, "run", *base, "--layers", "4", "--hidden", "256", "--intermediate", "512")
            w = {k: (rng.standard_normal(v[1]) * (0.05 if len(v[1]) == 2 else 0.1) + (len(v[1]) == 1))
                 .astype(np.float32) for k, v in ckref.read_checkpoint_dir(run).items()}  # a trained scale
            ckref.write_safetensors(os.path.join(run, "model.safetensors"),
                                    {k: ("F32", v.shape, v.tobytes()) for k, v in w.items()})
            for mix in ("Q4_K_M", "IQ4_XS"):
                mounted(lib, d, run, rng, mix)
            # llama-quantize's overrides as mount options: convert's bytes
            from mountlib import Mount
            want = open(convert(run, os.path.join(d, "run-ov"), "gguf:Q5_K_M", "--gguf-pure", "--gguf-output-type",
                                "Q8_0", "--gguf-embd-type", "Q4_1"), "rb").read()
            with Mount(run, opts="gguf=Q5_K_M,gguf_vocab=none,gguf_pure,gguf_output_type=Q8_0,gguf_embd_type=Q4_1") as m:
                assert open(m.path("model.gguf"), "rb").read() == want
            print("mount -o gguf=Q5_K_M,gguf_pure,gguf_output_type=Q8_0,gguf_embd_type=Q4_1: convert's bytes")
            # --gguf-leave-output, --gguf-tensor-type and its file as mount options
            f = os.path.join(d, "run-tt.txt")
            with open(f, "w") as fh:
                fh.write("blk\\.[0-1]\\.ffn_(up|down)=q8_0\nattn_v=q5_k\n")
            want = open(convert(run, os.path.join(d, "run-tt"), "gguf:Q4_K_M", "--gguf-leave-output",
                                "--gguf-tensor-type", "attn_q=iq4_nl", "--gguf-tensor-type-file", f), "rb").read()
            _, t = tensors(os.path.join(d, "run-tt", "model.gguf"))
            assert [NAMES[t[n][0]] for n in ("output.weight", "blk.0.attn_q.weight", "blk.1.ffn_up.weight",
                                             "blk.2.attn_v.weight")] == ["F32", "IQ4_NL", "Q8_0", "Q5_K"]
            with Mount(run, opts="gguf=Q4_K_M,gguf_vocab=none,gguf_leave_output,gguf_tensor_type=attn_q=iq4_nl,"
                                 f"gguf_tensor_type_file={f}") as m:
                assert open(m.path("model.gguf"), "rb").read() == want
            print("mount -o gguf=Q4_K_M,gguf_leave_output,gguf_tensor_type=...,gguf_tensor_type_file=...: "
                  "convert's bytes")
            want = open(convert(run, os.path.join(d, "run-kv"), "gguf:Q4_K_M", "--gguf-override-kv",
                                "general.name=str:mounted, with a comma", "--gguf-override-kv",
                                "llama.context_length=int:512", "--gguf-tensor-type", "attn_(q|k){1,2}=q8_0"),
                        "rb").read()
            with Mount(run, opts="gguf=Q4_K_M,gguf_vocab=none,gguf_override_kv=general.name=str:mounted\\, with a "
                                 "comma,gguf_override_kv=llama.context_length=int:512,"
                                 "gguf_tensor_type=attn_(q|k){1\\,2}=q8_0") as m:
                got = open(m.path("model.gguf"), "rb").read()
            assert got == want and b"mounted, with a comma" in got
            print("mount -o gguf_override_kv=...,gguf_tensor_type=... (commas escaped): convert's bytes")
            # gguf-split's pieces through a mount: convert's files, no model.gguf beside them,
            # llama.cpp loads them from the mount
            out = os.path.join(d, "run-split")
            p = subprocess.run([CKPTFS, "convert", run, out, "--quiet", "--format", "gguf:Q4_K_M", "--gguf-vocab",
                                "none", "--gguf-split-max-tensors", "10"], capture_output=True, text=True)
            assert p.returncode == 0, p.stderr
            files = sorted(os.listdir(out))
            modules = os.path.join(gs.TESTS, "..", "build-node", "node_modules")
            toks = [1, 5, 9, 200, 31, 77, 128, 3]
            want = gs.llama_cpp(modules, os.path.join(out, files[0]), toks)
            with Mount(run, opts="gguf=Q4_K_M,gguf_vocab=none,gguf_split_max_tensors=10") as m:
                assert sorted(f for f in os.listdir(m.path("")) if f.endswith(".gguf")) == files, os.listdir(m.path(""))
                for f in files:
                    assert open(m.path(f), "rb").read() == open(os.path.join(out, f), "rb").read(), f
                got = gs.llama_cpp(modules, m.path(files[0]), toks)
            assert got.equal(want)
            print(f"mount -o gguf=Q4_K_M,gguf_split_max_tensors=10: convert's {len(files)} files, no model.gguf; "
                  "llama.cpp's logits from the mount equal those from convert's files")
            return
        dense = gen(d, "dense", *base, "--layers", "8", "--hidden", "256", "--intermediate", "512")
        hostile_weights(dense, rng, False)
        seen = same_as_llama(lib, d, "dense", dense, [m for m in FTYPE if m not in LEGACY])
        print("8-layer Llama, hostile blocks, every K-quant and IQ4 mix as llama.cpp's quantizer makes it: " +
              "; ".join(f"{m} {c}" for m, c in seen.items()))
        assert seen["Q4_K_M"] == {"Q4_K": 49, "Q6_K": 9, "F32": 17}, seen["Q4_K_M"]  # 4 attn_v, 4 ffn_down, output
        old = gen(d, "legacy", *base, "--layers", "8", "--hidden", "256", "--intermediate", "512")
        hostile_weights(old, rng, False, legacy=True)
        seen = same_as_llama(lib, d, "legacy", old, list(LEGACY))
        print("8-layer Llama, hostile blocks under 2^14, the legacy mixes as llama.cpp's quantizer makes "
              "them: " + "; ".join(f"{m} {c}" for m, c in seen.items()))
        assert seen["Q4_1"] == {"Q4_1": 57, "Q6_K": 1, "F32": 17}, seen["Q4_1"]  # the output Q6_K
        # (an F16 override here: llama.cpp refuses F16 infinities, the other source's past 2^16)
        seen = same_as_llama(lib, d, "legacy-ov", old, ["Q5_0 pure output=Q4_K embd=F16", "Q4_0 pure",
                                                        r"Q4_0 leave tt=^blk\.\d+\.attn_(q|k)\.weight$=q5_1 "
                                                        r"tt=ffn_down=F16"])
        assert seen["Q4_0 pure"] == {"Q4_0": 58, "F32": 17}, seen  # the output Q4_0 too, as before session 48
        print(f"the same overrides of legacy mixes: {seen}")
        wild = gen(d, "wild", *base, "--layers", "4", "--hidden", "256", "--intermediate", "512")
        hostile_weights(wild, rng, True)
        # (MXFP4 pure on these blocks: ggml's exponent for a block under
        # 2^-125 wraps, to 255 for one in [2^-126, 2^-125), which
        # llama-quantize's validation refuses; ggml's row quantizer is the
        # reference)
        n = same_as_ggml(d, "wild", wild, list(FTYPE) + ["MXFP4_MOE pure"])
        print(f"infinities, the largest floats, overflowing sums: {n} quantized tensors as ggml's own "
              "quantizer makes them")
        seen = same_as_llama(lib, d, "dense-ov", dense, ["Q4_K_M output=Q8_0 embd=Q8_0", "Q4_K_M pure",
                                                         "Q3_K_M output=BF16 embd=Q6_K"])
        assert seen["Q4_K_M pure"] == {"Q4_K": 58, "F32": 17}, seen
        print(f"llama-quantize's --output-tensor-type, --token-embedding-type and --pure: {seen}")
        overrides_refused(d, dense)
        # llama-quantize's --tensor-type and --leave-output-tensor: the
        # first pattern that matches decides, after the output's and the
        # embedding's own options, before the mix's rules (whose running
        # counts of attn_v and ffn_down pass the patterns' tensors by),
        # under --pure too; a type whose blocks do not tile the rows falls
        # back (rows160 below)
        seen = same_as_llama(lib, d, "dense-tt", dense, [
            r"Q4_K_M tt=BLK\.[0-3]\.FFN_DOWN=q8_0 tt=attn_v=BF16",
            r"Q3_K_M tt=ffn_(up|gate)=q5_k tt=\.(1|6)\.attn_v=IQ4_XS tt=attn=q2_k",
            r"Q4_K_M pure tt=ffn_down=q6_k tt=^blk\.\d+\.attn_k\.weight$=f32",
            r"Q5_K_M leave output=Q8_0 tt=output=q4_0 tt=token_embd=q5_k",  # (legacy types: 2^14)
            r"Q8_0 tt=ffn_down=q4_k tt=\battn_q\b=iq4_nl",
            r"Q4_K_M output=Q5_K tt=output\.weight=q2_k tt=blk\.[02468]\.=q3_k"])
        first = seen[r"Q4_K_M tt=BLK\.[0-3]\.FFN_DOWN=q8_0 tt=attn_v=BF16"]
        assert first["Q8_0"] == 4 and first["BF16"] == 8, first
        print(f"llama-quantize's --tensor-type and --leave-output-tensor: {seen}")
        tensor_types_refused(d, dense)
        override_kv_refused(d, dense)
        tensor_type_file(d, dense)
        split_files(lib, d, gen(d, "split", *base, "--layers", "4", "--hidden", "256", "--intermediate", "512"))
        half = gen(d, "bf16", *base, "--layers", "8", "--hidden", "256", "--intermediate", "512", "--dtype", "BF16")
        seen = same_as_llama(lib, d, "bf16", half, ["Q4_K_M", "Q6_K"], unquantized="BF16")
        print(f"a BF16 source, quantized from its elements: {seen}")
        cases = [("70b", ["--layers", "80", "--hidden", "256", "--intermediate", "256"],
                  ["Q4_K_M", "Q3_K_M", "Q2_K"], "Q5_K"),
                 ("70b-4experts", ["--model", "mixtral", "--experts", "4", "--layers", "80", "--hidden", "256",
                                   "--intermediate", "256"], ["Q3_K_M"], "Q5_K"),
                 ("qwen2vl-80", ["--model", "qwen2", "--layers", "80", "--hidden", "256", "--intermediate", "256"],
                  ["Q3_K_M"], "Q4_K"),
                 ("gqa4", ["--layers", "16", "--hidden", "256", "--intermediate", "256", "--heads", "8",
                           "--kv-heads", "2"], ["Q2_K", "Q3_K_M", "IQ4_XS", "IQ4_NL"], "Q4_K"),
                 ("experts", ["--model", "mixtral", "--experts", "8", "--layers", "4", "--hidden", "256",
                              "--intermediate", "256"], ["Q4_K_M", "Q5_K_M", "Q2_K", "Q3_K_M", "IQ4_XS", "Q4_0"],
                  "Q8_0"),
                 ("qwen2moe", ["--model", "qwen2-moe", "--experts", "4", "--layers", "4", "--hidden", "256",
                               "--intermediate", "512", "--moe-intermediate", "256"],
                  ["Q4_K_M", "Q3_K_M", "Q2_K", "IQ4_XS"], "Q6_K"),
                 ("gpt-oss", ["--model", "gpt-oss", "--experts", "4", "--layers", "4", "--hidden", "256",
                              "--intermediate", "256"], ["Q4_K_M", "Q3_K_M", "Q2_K", "IQ4_XS", "Q4_0", "MXFP4_MOE",
                                                        "MXFP4_MOE pure", "MXFP4_MOE output=Q4_K embd=Q5_0"],
                  "MXFP4"),
                 ("cohere", ["--layers", "4", "--hidden", "256", "--intermediate", "512"],
                  ["Q4_K_M", "Q3_K_M", "Q2_K"], "Q6_K"),
                 ("olmo2", ["--model", "olmo2", "--layers", "4", "--hidden", "256", "--intermediate", "512"],
                  ["Q4_K_M", "Q3_K_M", "Q2_K"], "Q6_K"),
                 ("phi3", ["--model", "phi3", "--layers", "4", "--hidden", "256", "--intermediate", "512"],
                  ["Q4_K_M", "Q4_K_S", "Q3_K_M"], "Q5_K"),
                 ("tied", ["--model", "qwen2", "--tie", "--layers", "4", "--hidden", "256",
                           "--intermediate", "512"], ["Q4_K_M", "Q5_1", "Q4_K_M output=Q8_0",
                                                      "Q4_K_M pure output=Q8_0", "Q4_K_M tt=token_embd=q5_0",
                                                      "Q5_K_S output=Q8_0 tt=attn_v=q8_0",
                                                      "Q4_K_M tt=ffn_(up|gate)=mxfp4",
                                                      "Q4_K_M kv=general.name=str:tiny-qwen kv=qwen2.context_length=int:4096 "
                                                      "kv=my.f=float:0.25 kv=tokenizer.ggml.add_bos_token=bool:false "
                                                      "kv=my.n=int:7 kv=qwen2.rope.freq_base=float:25000",
                                                      "Q8_0 kv=my.s=str:x"], "Q6_K"),
                 ("rows160", ["--layers", "4", "--hidden", "160", "--intermediate", "96", "--heads", "5",
                              "--kv-heads", "1"], ["Q4_K_M", "Q5_K_M", "Q6_K", "Q2_K", "Q3_K_M", "IQ4_XS", "IQ4_NL",
                                                  "Q4_1", "Q5_0", "Q4_K_M tt=ffn_down=q6_k tt=attn_output=iq4_xs "
                                                  "tt=attn=q4_k tt=ffn_up=bf16 tt=ffn_gate=f32"],
                  "Q4_0"),
                 ("rows80", ["--layers", "4", "--hidden", "80", "--intermediate", "272", "--heads", "5",
                             "--kv-heads", "5"], ["Q4_K_M"], "F16")]
        for tag, args, mixes, must in cases:
            src = gen(d, tag, *base, *args)
            if tag == "qwen2vl-80":  # Qwen2.5-VL's language model: llama.cpp's qwen2vl
                cfg = json.load(open(os.path.join(src, "config.json")))
                json.dump(dict(cfg, architectures=["Qwen2_5_VLForConditionalGeneration"], model_type="qwen2_5_vl",
                               rope_scaling={"type": "mrope", "mrope_section": [16, 8, 8]}),
                          open(os.path.join(src, "config.json"), "w"))
            if tag == "cohere":  # Command R: a Llama without post-attention norms, tied, LayerNorm
                cfg = json.load(open(os.path.join(src, "config.json")))
                cfg.update(architectures=["CohereForCausalLM"], model_type="cohere", layer_norm_eps=1e-5,
                           logit_scale=0.0625, tie_word_embeddings=True)
                json.dump(cfg, open(os.path.join(src, "config.json"), "w"))
                st = ckref.read_checkpoint_dir(src)
                for f in os.listdir(src):
                    if f.endswith((".safetensors", ".index.json")):
                        os.remove(os.path.join(src, f))
                ckref.write_safetensors(os.path.join(src, "model.safetensors"),
                                        {k: (dt, shape, a.tobytes()) for k, (dt, shape, a) in st.items()
                                         if "post_attention_layernorm" not in k and k != "lm_head.weight"})
            seen = same_as_llama(lib, d, tag, src, mixes)
            if tag.startswith(("70b", "qwen2vl")):  # attn_v is Q5_K in every layer only under the 70B rule
                assert (seen["Q3_K_M"].get("Q5_K", 0) >= 80) == (tag != "qwen2vl-80"), (tag, seen)
            assert any(must in c for c in seen.values()), (tag, must, seen)  # the rule the case is for
            print(f"{tag}: {seen}")
    finally:
        subprocess.run(["rm", "-rf", d])


if __name__ == "__main__":
    main()
