"""Data safety and hostile inputs through the real CLI (issue #15):
- convert never writes over its source (same dir, inside it, through a
  symlink, `.`/`..` spellings, an OUTDIR holding the source file); the source
  is checksummed before and after;
- convert into a directory holding a checkpoint is refused without
  --overwrite; with it the old checkpoint's files (a stale index, shards)
  are gone, other files stay, and the new checkpoint reads back right;
- config.json is copied and served byte for byte (10000.0, 20-digit ints);
- the CLI's own rules: one line, exit 2 for usage errors; --rank without
  --mesh; --dtype bf16/bfloat16; --expect with a plain key list; a missing
  mapping is an invalid mapping (4);
- FIFOs named config.json, *.index.json, .metadata, metadata.json or given as
  --mapping are refused at once (the old code blocked forever in open);
- a key with a newline and ESC reaches messages and tables escaped, and
  --json exactly;
- a pickle naming os.system (as a global and as a call) is listed by inspect
  as left out and never run; a pickle of dicts shared 60 levels deep is
  refused instead of walking 2^60 paths;
- 300 shards open under a soft descriptor limit of 64, and under a hard one
  the error names the same shard every time."""
import hashlib
import io
import json
import os
import pickle
import resource
import shutil
import struct
import subprocess
import sys
import tempfile
import zipfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import ckref  # noqa: E402

CKPTFS, MKCKPT = os.environ["CKPTFS"], os.environ["MKCKPT"]
MAPS = os.path.join(os.environ.get("TESTS_DIR", os.path.dirname(__file__) + "/.."), "..", "mappings")
MAP = os.path.join(MAPS, "llama-hf-to-megatron.json")


def run(*args, timeout=60):
    return subprocess.run([CKPTFS, *args], capture_output=True, text=True, timeout=timeout)


def one_line_error(p, code, want):
    assert p.returncode == code, (p.returncode, p.stdout, p.stderr)
    lines = p.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("ckptfs: "), p.stderr
    assert want in lines[0], (want, p.stderr)
    assert "\x1b" not in p.stderr


def tree_digest(d):
    h = hashlib.sha256()
    for root, dirs, files in sorted(os.walk(d)):
        dirs.sort()
        for f in sorted(files):
            p = os.path.join(root, f)
            h.update(os.path.relpath(p, d).encode())
            with open(p, "rb") as fh:
                h.update(fh.read())
    return h.hexdigest()


def convert_aliases(d):
    src = os.path.join(d, "llama")
    ckref.run(MKCKPT, "--model", "llama", "--shards", "2", src)
    before = tree_digest(src)
    os.symlink(src, os.path.join(d, "link"))
    single = os.path.join(src, sorted(f for f in os.listdir(src) if f.endswith(".safetensors"))[0])
    cases = [(src, src), (src, src + "/."), (src, os.path.join(d, "link")),
             (src, os.path.join(src, "sub", "out")), (src, os.path.join(src, "..", "llama")),
             (os.path.join(d, "link"), src), (src, d)]
    cases.append((single, src))  # OUTDIR holds the source file
    for s, out in cases:
        for extra in ([], ["--overwrite"]):
            maps = [] if s == single else ["--mapping", MAP]
            p = run("convert", s, out, *maps, "--quiet", *extra)
            one_line_error(p, 2, "source")
            assert tree_digest(src) == before, (s, out, "the source changed")
    assert not os.path.exists(os.path.join(src, "sub"))
    print(f"convert refuses {len(cases) * 2} OUTDIRs that alias the source; the source is unchanged")
    return src


def convert_overwrite(d, src):
    out = os.path.join(d, "out")
    ckref.convert(CKPTFS, src, out, [MAP], "--max-shard-size", "20000")
    shards = sorted(f for f in os.listdir(out) if f.endswith(".safetensors"))
    assert len(shards) > 1 and os.path.exists(os.path.join(out, "model.safetensors.index.json"))
    with open(os.path.join(out, "tokenizer.json"), "w") as f:
        f.write("{}")
    os.mkdir(os.path.join(out, "extras"))
    with open(os.path.join(out, "extras", "notes.txt"), "w") as f:
        f.write("keep me")
    before = tree_digest(out)
    p = run("convert", src, out, "--quiet")  # a single-file identity convert
    one_line_error(p, 2, "already holds a checkpoint")
    assert tree_digest(out) == before, "a refused convert changed OUTDIR"
    ckref.run(CKPTFS, "convert", src, out, "--quiet", "--overwrite")
    files = sorted(os.listdir(out))
    assert files == ["config.json", "extras", "model.safetensors", "tokenizer.json"], files
    assert open(os.path.join(out, "extras", "notes.txt")).read() == "keep me"
    got, want = ckref.read_checkpoint_dir(out), ckref.read_checkpoint_dir(src)
    assert sorted(got) == sorted(want)
    for k in want:
        assert got[k][0] == want[k][0] and (got[k][2] == want[k][2]).all(), k
    assert not [f for f in os.listdir(d) if "ckptfs-stage" in f], os.listdir(d)
    # into a directory with no checkpoint: the new files are moved in
    into = os.path.join(d, "into")
    os.mkdir(into)
    with open(os.path.join(into, "README.md"), "w") as f:
        f.write("hello")
    ckref.convert(CKPTFS, src, into, [MAP])
    assert sorted(os.listdir(into)) == ["README.md", "config.json", "model.safetensors"], os.listdir(into)
    # a group-sharded run by hand next to a stale single-file checkpoint
    grouped = os.path.join(d, "grouped")
    ckref.convert(CKPTFS, src, grouped, [MAP])
    p = run("convert", src, grouped, "--mapping", MAP, "--shard-groups", "--world-size", "2",
            "--rank", "0", "--quiet")
    one_line_error(p, 2, "would not replace")
    print("convert: an old checkpoint is refused, --overwrite replaces it whole (other files stay)")


def config_verbatim(d, src):
    cfg = os.path.join(src, "config.json")
    text = json.load(open(cfg))
    raw = json.dumps(text, indent=1)[:-1] + (',\n "rope_theta": 10000.0, "rope_scaling": '
                                            '{"factor": 2.0}, "big": 12345678901234567890123,'
                                            ' "tiny": 1e-06\n}\n')
    with open(cfg, "w") as f:
        f.write(raw)
    out = os.path.join(d, "cfg-out")
    ckref.convert(CKPTFS, src, out, [MAP])
    assert open(os.path.join(out, "config.json")).read() == raw, "config.json not copied verbatim"
    print("config.json: copied byte for byte (10000.0, 2.0, 23-digit integers)")


def cli_rules(d, src):
    out = os.path.join(d, "rules")
    one_line_error(run("convert", src, out, "--rank", "1"), 2, "--rank needs --mesh")
    one_line_error(run("inspect", src, "--rank", "0"), 2, "--rank needs --mesh")
    one_line_error(run("inspect", src, "--mapping"), 2, "--mapping needs a value")
    one_line_error(run("convert", src, out, "--dtype"), 2, "--dtype needs a value")
    one_line_error(run("convert", src, out, "--dtype", "fp7"), 2, "--dtype fp7")
    one_line_error(run("inspect", src, "--mapping", os.path.join(d, "missing.json")), 4, "missing.json")
    one_line_error(run("inspect", src, "--mesh", "tp=2", "--rank", "0", "--world-size", "2"), 2,
                   "--world-size goes with --shard-groups")
    for name in ("bf16", "BF16", "bfloat16", "torch.bfloat16"):
        o = os.path.join(d, "dt-" + name)
        ckref.run(CKPTFS, "convert", src, o, "--quiet", "--dtype", name)
        assert {v[0] for v in ckref.read_checkpoint_dir(o).values()} == {"BF16"}, name
    keys = json.loads(run("inspect", src, "--json").stdout)["tensors"]
    names = [t["name"] for t in keys]
    plain = os.path.join(d, "keys.json")
    with open(plain, "w") as f:
        json.dump(names, f)
    p = run("inspect", src, "--expect", plain)
    assert p.returncode == 0 and f"all {len(names)} keys match" in p.stdout, p.stdout + p.stderr
    with open(plain, "w") as f:
        json.dump(names[1:] + ["not.a.key"], f)
    p = run("inspect", src, "--expect", plain)
    assert p.returncode == 5 and "not.a.key" in p.stdout and names[0] in p.stdout, p.stdout
    # every verb answers --help with its own entry of `ckptfs help`, exit 0
    full = run("help").stdout
    readme = open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "README.md")).read()
    for verb in ("inspect", "convert", "mount", "diff", "check-mapping", "mappings"):
        h = run(verb, "--help")
        assert h.returncode == 0 and h.stdout.strip(), (verb, h.stderr)
        if verb != "mount":
            # the synopsis is `ckptfs help`'s entry; table verbs add their options
            assert h.stdout.split("\n", 1)[1].split("options:\n")[0] in full, verb
        assert f"ckptfs {verb}" in readme, f"the README's CLI does not show {verb}"
    print("CLI rules: one line and exit 2 for usage errors, 4 for a missing mapping; dtype names; plain --expect lists; --help per verb")


def fifos(d, src):
    def expect_refused(args, what):
        try:
            p = run(*args, timeout=20)
        except subprocess.TimeoutExpired:
            raise AssertionError(f"{what}: blocked on a FIFO")
        assert p.returncode in (3, 4), (what, p.returncode, p.stderr)
        assert len(p.stderr.splitlines()) == 1 and "not a regular file" in p.stderr, (what, p.stderr)

    f = os.path.join(d, "fifo-cfg")
    shutil.copytree(src, f)
    os.remove(os.path.join(f, "config.json"))
    os.mkfifo(os.path.join(f, "config.json"))
    expect_refused(["inspect", f], "config.json")
    g = os.path.join(d, "fifo-idx")
    shutil.copytree(src, g)
    os.remove(os.path.join(g, "model.safetensors.index.json"))
    os.mkfifo(os.path.join(g, "model.safetensors.index.json"))
    expect_refused(["inspect", g], "index.json")
    h = os.path.join(d, "fifo-dcp")
    os.mkdir(h)
    os.mkfifo(os.path.join(h, ".metadata"))
    expect_refused(["inspect", h], ".metadata")
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import dcpgen
    import torch
    m = os.path.join(d, "fifo-meg")
    dcpgen.write_dcp(m, {"w": [((0,), torch.ones(4))]}, ranks=1, megatron=True)
    os.remove(os.path.join(m, "metadata.json"))
    os.mkfifo(os.path.join(m, "metadata.json"))
    expect_refused(["inspect", m], "metadata.json")
    mp = os.path.join(d, "map.fifo")
    os.mkfifo(mp)
    expect_refused(["inspect", src, "--mapping", mp], "--mapping")
    print("FIFOs as config.json, index, .metadata, metadata.json and --mapping: refused at once")
    # an error path that leaked (the sanitizer build fails on the leak report):
    # one key listed twice in storage_data
    dup = os.path.join(d, "dup-dcp")
    dcpgen.write_dcp(dup, {"wa": [((0,), torch.ones(4))], "wb": [((0,), torch.zeros(4))]}, ranks=1)
    meta = os.path.join(dup, ".metadata")
    raw = open(meta, "rb").read()
    assert raw.count(b"\x8c\x02wb") == 1  # the key's one string, memoized for its other uses
    with open(meta, "wb") as fh:
        fh.write(raw.replace(b"\x8c\x02wb", b"\x8c\x02wa"))
    one_line_error(run("inspect", dup), 3, "storage_data lists \"wa|0\" twice")
    print("a DCP key listed twice: one line, nothing leaked")


def injection(d):
    evil = "model.evil\nckptfs: forged line\x1b[2J\x1b[31m.weight"
    src = os.path.join(d, "evil")
    os.mkdir(src)
    ckref.write_safetensors(os.path.join(src, "model.safetensors"),
                            {evil: ("F32", (2,), struct.pack("<2f", 1, 2)),
                             "ok.weight": ("F32", (1,), struct.pack("<f", 3))})
    p = run("inspect", src)
    assert p.returncode == 0 and "\x1b" not in p.stdout and "forged line" in p.stdout
    assert not any(line.startswith("ckptfs: forged") for line in p.stdout.splitlines()), p.stdout
    assert "model.evil\\x0ackptfs: forged line\\x1b[2J" in p.stdout, p.stdout
    js = json.loads(run("inspect", src, "--json").stdout)
    assert evil in [t["name"] for t in js["tensors"]], "--json must keep the key exact"
    mp = os.path.join(d, "strict.json")
    with open(mp, "w") as f:
        json.dump({"rules": [{"from": "ok.{x}", "to": "b.{x}"}]}, f)  # the evil key is unused
    p = run("inspect", src, "--mapping", mp)
    one_line_error(p, 4, "forged line")
    print("control bytes in keys: escaped in messages and tables, exact in --json")


class _System:
    """An object whose pickle is a call of os.system: never to be run."""

    def __init__(self, cmd):
        self.cmd = cmd

    def __reduce__(self):
        return (os.system, (self.cmd,))


def pickles(d):
    import torch
    marker = os.path.join(d, "pwned")
    src = os.path.join(d, "callables.bin")
    torch.save({"w": torch.arange(4, dtype=torch.float32), "fn": os.system,
                "evil": _System(f"touch {marker}"), "epoch": 3, "nested": {"lr": 0.1}}, src)
    p = run("inspect", src)
    assert p.returncode == 0, p.stderr
    assert "4 non-tensor values left out (never executed):" in p.stdout, p.stdout
    assert "evil: call of posix.system" in p.stdout and "fn: global posix.system" in p.stdout, p.stdout
    js = json.loads(run("inspect", src, "--json").stdout)
    assert js["non_tensor_values"] == 4
    left = {e["key"]: e["what"] for e in js["left_out"]}
    assert left == {"fn": "global posix.system", "evil": "call of posix.system", "epoch": "int",
                    "nested.lr": "float"}, left
    assert [t["name"] for t in js["tensors"]] == ["w"]
    assert not os.path.exists(marker), "a pickled call was executed"
    # dicts shared through the memo, 60 levels: 2^60 paths for a naive walk
    def shared(i):  # d_i = {"a": d_(i-1) (made here), "b": d_(i-1) (the memo's)}, d_0 = {"x": 1}
        if i == 0:
            return b"}q\x00(X\x01\x00\x00\x00xK\x01u"
        return (b"}q" + bytes([i]) + b"(X\x01\x00\x00\x00a" + shared(i - 1) +
                b"X\x01\x00\x00\x00bh" + bytes([i - 1]) + b"u")
    b = b"\x80\x02" + shared(60) + b"."
    x = pickle.loads(bytes(b))  # a real pickle: 60 levels of one shared dict
    for _ in range(60):
        x = x["a"]
    assert x == {"x": 1}
    amp = os.path.join(d, "amplified.bin")
    with zipfile.ZipFile(amp, "w", zipfile.ZIP_STORED) as z:
        z.writestr("archive/data.pkl", bytes(b))
    try:
        p = run("inspect", amp, timeout=30)
    except subprocess.TimeoutExpired:
        raise AssertionError("a 60-level shared-dict pickle was walked exponentially")
    one_line_error(p, 3, "shared through the pickle's memo")
    print("pickles: os.system listed and never run; a shared-dict amplification refused")


def many_shards(d):
    """A descriptor per source file: 300 shards open with a soft limit of 64
    (raised to the hard one), and with a hard limit of 64 the error names the
    first shard in order that gets none, the same one every time (the headers
    are read on threads), and says what to raise."""
    src = os.path.join(d, "many")
    os.mkdir(src)
    for i in range(300):
        hdr = json.dumps({f"layers.{i}.w": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}}).encode()
        with open(os.path.join(src, f"s{i:03d}.safetensors"), "wb") as f:
            f.write(struct.pack("<Q", len(hdr)) + hdr + bytes(4))

    def limited(soft, hard):
        return subprocess.run([CKPTFS, "inspect", src], capture_output=True, text=True, timeout=60,
                              preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard)))
    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    p = limited(64, hard if hard != resource.RLIM_INFINITY else 4096)
    assert p.returncode == 0 and "300 tensors" in p.stdout and "from 300 files" in p.stdout, p.stderr
    first = None
    for _ in range(5):
        p = limited(64, 64)
        one_line_error(p, 1, "Too many open files")
        assert "raise ulimit -n" in p.stderr and "/s0" in p.stderr, p.stderr
        first = first or p.stderr
        assert p.stderr == first, (first, p.stderr)
    print("300 shards: open under a soft limit of 64; a hard limit of 64 names the same shard every time")


def main():
    d = tempfile.mkdtemp(prefix="ckptfs-safety-")
    try:
        src = convert_aliases(d)
        convert_overwrite(d, src)
        config_verbatim(d, src)
        cli_rules(d, src)
        fifos(d, src)
        injection(d)
        pickles(d)
        many_shards(d)
    finally:
        shutil.rmtree(d, ignore_errors=True)


if __name__ == "__main__":
    main()
