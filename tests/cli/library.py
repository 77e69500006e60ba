"""libckptfs as users get it (issue #22): `meson install --destdir` puts the
shared library (soname libckptfs.so.1, only ckptfs_* exported, no FUSE), the
static archive, ckptfs.h and ckptfs.pc in place; the example tools/ckread.c
compiled with `pkg-config --cflags --libs ckptfs` against that tree (and
once with `--static`) reads
- a per-rank Megatron view (tp=2, rank 1): every tensor equals a numpy
  reference built from the HF source by Megatron's layout rules (ckref),
- the identity view's model.safetensors and pytorch_model.bin as files:
  parsed by ckref's own reader and by torch.load, equal to the source;
and a bad option is one line and exit status 2."""
import os
import shutil
import struct
import subprocess
import sys
import tempfile

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import ckref  # noqa: E402

CKPTFS, MKCKPT = os.environ["CKPTFS"], os.environ["MKCKPT"]
ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")


def sh(*args, env=None):
    p = subprocess.run(list(args), capture_output=True, text=True, env=env)
    assert p.returncode == 0, f"{args}: {p.stdout}{p.stderr}"
    return p.stdout


def installed(d):
    build = os.path.dirname(os.path.dirname(CKPTFS))
    dest = os.path.join(d, "dest")
    sh("meson", "install", "-C", build, "--destdir", dest, "--no-rebuild", "--quiet")
    files = {os.path.relpath(os.path.join(r, f), dest) for r, _, fs in os.walk(dest) for f in fs}
    pc = next(f for f in files if f.endswith("pkgconfig/ckptfs.pc"))
    libdir = os.path.join(dest, os.path.dirname(os.path.dirname(pc)))
    for want in ("libckptfs.so", "libckptfs.so.1", "libckptfs.so.1.0.0", "libckptfs.a"):
        assert os.path.lexists(os.path.join(libdir, want)), f"{want} not installed in {libdir}"
    assert any(f.endswith("include/ckptfs.h") for f in files), files
    assert any(f.endswith("man5/ckptfs-mapping.5") for f in files), "ckptfs-mapping(5) not installed"
    so = os.path.join(libdir, "libckptfs.so.1.0.0")
    dyn = sh("readelf", "-d", so)
    assert "Library soname: [libckptfs.so.1]" in dyn, dyn
    assert "fuse" not in dyn, "libckptfs needs libfuse: " + dyn
    syms = sh("nm", "-D", "--defined-only", so).split("\n")
    exported = [s.split()[-1] for s in syms if s.strip() and s.split()[1] in "TDBR"]
    assert exported and all(s.startswith("ckptfs_") for s in exported), exported
    assert not any("fuse_" in s for s in sh("nm", "-D", "--undefined-only", so).split()), \
        "libckptfs calls into libfuse"
    print(f"meson install: libckptfs.so.1 ({len(exported)} ckptfs_* symbols, no FUSE), "
          "libckptfs.a, ckptfs.h, ckptfs.pc, ckptfs-mapping(5)")
    return os.path.join(dest, pc.split("/lib/")[0]), libdir


def sanitizers(so):
    """A sanitizer build's library needs its runtime first: the client is
    built with the same -fsanitize."""
    needed = sh("readelf", "-d", so)
    return [flag for lib, flag in (("libasan", "-fsanitize=address"), ("libubsan", "-fsanitize=undefined"),
                                   ("libtsan", "-fsanitize=thread")) if lib in needed]


def build_client(d, prefix, libdir, static):
    # the installed prefix, moved under DESTDIR (its .pc file says /usr/local)
    pc = ["pkg-config", "--define-variable=prefix=" + prefix]
    env = dict(os.environ, PKG_CONFIG_PATH=os.path.join(libdir, "pkgconfig"))
    cflags = sh(*pc, "--cflags", "ckptfs", env=env).split()
    libs = sh(*pc, *(["--static"] if static else []), "--libs", "ckptfs", env=env).split()
    assert any(x == "-L" + libdir or x == "-L" + os.path.realpath(libdir) for x in libs), libs
    if static:  # the archive itself, then what pkg-config says it needs
        libs = [os.path.join(libdir, "libckptfs.a")] + [x for x in libs if x != "-lckptfs"]
    exe = os.path.join(d, "ckread-static" if static else "ckread")
    sh("cc", "-std=c11", "-Wall", "-Wextra", "-Werror", "-D_GNU_SOURCE",
       *sanitizers(os.path.join(libdir, "libckptfs.so.1")), *cflags,
       os.path.join(ROOT, "tools", "ckread.c"), "-o", exe, *libs, "-pthread")
    needed = sh("readelf", "-d", exe)
    assert ("libckptfs.so.1" in needed) != static, needed
    return exe


def main():
    for tool in ("cc", "pkg-config", "readelf", "nm"):
        if not shutil.which(tool):
            print(f"SKIP: {tool} is not installed")
            sys.exit(77)
    d = tempfile.mkdtemp(prefix="ckptfs-lib-")
    try:
        prefix, libdir = installed(d)
        shared = build_client(d, prefix, libdir, static=False)
        static = build_client(d, prefix, libdir, static=True)
        env = dict(os.environ, LD_LIBRARY_PATH=libdir)
        print("tools/ckread.c built with pkg-config against the installed tree, shared and static")

        src = os.path.join(d, "llama")
        ckref.run(MKCKPT, "--model", "llama", "--heads", "8", "--kv-heads", "2", "--dtype", "BF16",
                  "--shards", "2", src)
        source = {k: (v[0], v[2]) for k, v in ckref.read_checkpoint_dir(src).items()}
        cfg = __import__("json").load(open(os.path.join(src, "config.json")))
        glob = ckref.llama_to_megatron_ref(source, cfg)
        want = ckref.megatron_rank({k: v[1] for k, v in glob.items()}, 2, 1)
        for exe in (shared, static):
            out = os.path.join(d, "dump-" + os.path.basename(exe))
            os.mkdir(out)
            sh(exe, src, "-o", "mapping=llama-hf-to-megatron", "-o", "mesh=tp=2", "-o", "rank=1",
               "-o", "cache_size=1MiB", "-o", "chunk=64KiB", "--dump", out, env=env)
            got = {}
            for line in open(os.path.join(out, "index.tsv")):
                i, name, dtype, shape = line.rstrip("\n").split("\t")
                shape = [int(x) for x in shape.strip("[]").split(",") if x]
                raw = np.fromfile(os.path.join(out, i + ".bin"), dtype=ckref.DTYPES[dtype][0])
                got[name] = (dtype, raw.reshape(shape))
            assert set(got) == set(want), sorted(set(got) ^ set(want))
            for k, w in want.items():
                assert got[k][0] == glob[k][0], (k, got[k][0])
                assert got[k][1].shape == w.shape and np.array_equal(got[k][1], w), \
                    f"{os.path.basename(exe)}: {k} differs from Megatron's rank-1 slice"
        print(f"Megatron tp=2 rank 1 through the library: {len(want)} tensors equal the reference "
              "(shared and static builds)")

        flat = os.path.join(d, "model.safetensors")
        sh(shared, src, "--file", "model.safetensors", flat, env=env)
        got = ckref.read_safetensors(flat)
        assert set(got) == set(source)
        for k, (dt, arr) in source.items():
            assert got[k][0] == dt and np.array_equal(got[k][2], arr), k
        # -o odirect: the same bytes, the renamed tensors read through O_DIRECT
        # twins (unaligned offsets: the bounce path of ck_io_pread_direct)
        flat_od = os.path.join(d, "model-odirect.safetensors")
        sh(shared, src, "-o", "odirect", "--file", "model.safetensors", flat_od, env=env)
        with open(flat, "rb") as a, open(flat_od, "rb") as b:
            assert a.read() == b.read(), "model.safetensors through -o odirect differs"
        import torch
        pt = os.path.join(d, "pytorch_model.bin")
        sh(static, src, "--file", "pytorch_model.bin", pt, env=env)
        sd = torch.load(pt, weights_only=True)
        assert set(sd) == set(source)
        for k, (dt, arr) in source.items():
            assert sd[k].dtype == torch.bfloat16
            assert np.array_equal(sd[k].view(torch.int16).numpy().view(np.uint16), arr), k
        print(f"model.safetensors (ckref's reader; also with -o odirect) and pytorch_model.bin "
              f"(torch.load) through the library: {len(source)} tensors equal the source")

        # -o gguf: the library serves model.gguf, the bytes convert --format gguf writes
        # (Q4_K_M on rows of whole 256-element super-blocks: K-quant blocks)
        tok = os.path.join(d, "llama-tok")
        ckref.run(MKCKPT, "--model", "llama", "--vocab", "300", tok)
        kq = os.path.join(d, "llama-kq")
        ckref.run(MKCKPT, "--model", "llama", "--vocab", "300", "--hidden", "256", "--intermediate", "512", kq)
        # (and with an importance matrix: a legacy .dat weighing two tensors)
        imx = os.path.join(d, "two.dat")
        with open(imx, "wb") as f:
            f.write(struct.pack("<i", 2))
            for name, n in (("blk.0.attn_q.weight", 256), ("blk.0.ffn_down.weight", 512)):
                f.write(struct.pack("<i", len(name)) + name.encode() + struct.pack("<ii", 1, n))
                f.write(struct.pack(f"<{n}f", *[(i % 7) * 0.5 for i in range(n)]))
        for src, ty, extra in ((tok, "Q8_0", ()), (kq, "Q4_K_M", ()), (kq, "Q4_K_M", ("gguf_imatrix=" + imx,))):
            conv = os.path.join(d, f"gguf-{ty}-{len(extra)}")
            ckref.run(CKPTFS, "convert", src, conv, "--format", "gguf:" + ty, "--quiet",
                      *(("--gguf-imatrix", imx) if extra else ()))
            got = os.path.join(d, f"lib-{ty}-{len(extra)}.gguf")
            sh(shared, src, "-o", "gguf=" + ty, *(a for e in extra for a in ("-o", e)), "--file", "model.gguf", got,
               env=env)
            assert open(got, "rb").read() == open(os.path.join(conv, "model.gguf"), "rb").read(), ty
            print(f"-o gguf={ty}{',' if extra else ''}{','.join(extra)}: the library's model.gguf is convert "
                  f"--format gguf:{ty}'s file, byte for byte")
        plain, weighted = (open(os.path.join(d, f"gguf-Q4_K_M-{k}", "model.gguf"), "rb").read() for k in (0, 1))
        assert plain != weighted, "the importance matrix changed nothing"
        dconv = os.path.join(d, "dcp-out")
        ckref.run(CKPTFS, "convert", tok, dconv, "--format", "dcp", "--quiet")
        for f in (".metadata", "__0_0.distcp"):
            got = os.path.join(d, "lib" + f)
            sh(static, tok, "-o", "dcp", "--file", "dcp/" + f, got, env=env)
            assert open(got, "rb").read() == open(os.path.join(dconv, f), "rb").read(), f
        print("-o dcp: the library's dcp/.metadata and dcp/__0_0.distcp are convert --format dcp's files")

        p = subprocess.run([shared, src, "-o", "cache_size=lots"], capture_output=True, text=True, env=env)
        lines = p.stderr.strip().split("\n")
        assert p.returncode == 2 and len(lines) == 1 and "cache_size=lots" in lines[0], p.stderr
        p = subprocess.run([shared, src, "-o", "mapping=nope"], capture_output=True, text=True, env=env)
        assert p.returncode == 4 and "nope" in p.stderr, p.stderr
        print("bad options: one line naming them, exit status 2 (usage) and 4 (mapping)")
    finally:
        shutil.rmtree(d, ignore_errors=True)


if __name__ == "__main__":
    main()
