"""Cold reads past the page cache (issue #23): `mount -o odirect` and
`convert --odirect` read the source with O_DIRECT.

- The Megatron view read through `-o odirect` equals the numpy reference
  (ckref.llama_to_megatron_ref, written from Megatron's layout), and the
  source files' resident pages (util-linux `fincore`) do not grow while the
  whole view is read; the control, a buffered mount, brings the files in.
- A source on ramfs (no O_DIRECT; tmpfs has it since Linux 6.6) is read
  buffered, with a log line saying so.
- `convert --odirect` writes the same bytes as a plain convert without
  bringing the source into the page cache; from ramfs it says it fell back;
  out of descriptors for the O_DIRECT twins, it fails with one line."""
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import ckref  # noqa: E402
from mountlib import CKPTFS, Mount, skip_unless_fuse  # noqa: E402

MKCKPT = os.environ["MKCKPT"]
MAPS = os.path.join(os.environ["TESTS_DIR"], "..", "mappings")


def shards(src):
    return [os.path.join(src, f) for f in sorted(os.listdir(src)) if f.endswith(".safetensors")]


def evict(src):
    """Written back, then dropped from the page cache: a cold source."""
    for f in shards(src):
        fd = os.open(f, os.O_RDONLY)
        os.fsync(fd)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        os.close(fd)


def resident(src):
    """Bytes of the source files in the page cache."""
    out = subprocess.run(["fincore", "--bytes", "--noheadings", "--output", "RES", *shards(src)],
                         capture_output=True, text=True, check=True).stdout
    return sum(int(x) for x in out.split())


def fs_type(path):
    return subprocess.run(["stat", "-f", "-c", "%T", path], capture_output=True, text=True,
                          check=True).stdout.strip()


def view(m):
    return {k: (v[0], v[2]) for k, v in ckref.read_safetensors(m.path("model.safetensors")).items()}


def main():
    skip_unless_fuse()
    d = tempfile.mkdtemp(prefix="ckptfs-odirect-")
    ram = tempfile.mkdtemp(prefix="ckptfs-odirect-ramfs-")
    subprocess.run(["mount", "-t", "ramfs", "ramfs", ram], check=True)
    meg = os.path.join(MAPS, "llama-hf-to-megatron.json")
    try:
        assert fs_type(d) != "tmpfs", f"{d} is on tmpfs: set TMPDIR to a disk file system"
        assert fs_type(ram) == "ramfs", f"{ram} should be ramfs"
        src = os.path.join(d, "llama")
        ckref.run(MKCKPT, "--model", "llama", "--dtype", "BF16", "--shards", "2", "--layers", "3",
                  "--hidden", "512", "--intermediate", "1408", src)
        cfg = json.load(open(os.path.join(src, "config.json")))
        ref = ckref.llama_to_megatron_ref(ckref.arrays(src), cfg)
        total = sum(os.path.getsize(f) for f in shards(src))

        # the control: a buffered mount brings the source into the page cache
        evict(src)
        with_cache = Mount(src, [meg])
        try:
            before = resident(src)
            ckref.assert_same(view(with_cache), ref, "buffered mount")
            grown = resident(src) - before
        finally:
            with_cache.close()
        assert grown > total * 0.9, f"buffered reads brought in {grown} of {total} bytes"

        evict(src)
        m = Mount(src, [meg], "odirect")
        try:
            before = resident(src)  # the headers the catalog read at start
            ckref.assert_same(view(m), ref, "odirect mount")
            after = resident(src)
            s = m.stats()
            assert s["odirect_files"] == 2 and s["direct_reads"] > 0, s  # renames: from the O_DIRECT twins
            assert s["source_bytes_read"] >= total * 0.9, s
        finally:
            m.close()
        assert before < total / 10 and after == before, (before, after, total)

        # ramfs has no O_DIRECT: read buffered, and the log says so
        tsrc = os.path.join(ram, "llama")
        shutil.copytree(src, tsrc)
        m = Mount(tsrc, [meg], "odirect", expect_errors=True)  # the note is expected
        try:
            log = "".join(m.lines)
            assert "2 of 2 source files cannot be read with O_DIRECT" in log, log
            assert m.stats()["odirect_files"] == 0
            ckref.assert_same(view(m), ref, "odirect mount of a ramfs source")
        finally:
            m.close()

        # convert --odirect: the same files, the source left out of the page cache
        plain, cold = os.path.join(d, "plain"), os.path.join(d, "cold")
        evict(src)
        ckref.convert(CKPTFS, src, plain, [meg])
        warm = resident(src)  # the control: everything read went through the page cache
        evict(src)
        p = ckref.convert(CKPTFS, src, cold, [meg], "--odirect")
        cool = resident(src)  # the headers only
        assert warm > total * 0.9 and cool < total / 10, (warm, cool, total)
        assert "page cache" not in p.stderr, p.stderr
        for f in sorted(os.listdir(plain)):
            with open(os.path.join(plain, f), "rb") as a, open(os.path.join(cold, f), "rb") as b:
                assert a.read() == b.read(), f
        assert sorted(os.listdir(plain)) == sorted(os.listdir(cold))
        p = ckref.convert(CKPTFS, tsrc, os.path.join(d, "from-ramfs"), [meg], "--odirect")
        assert "--odirect: 2 source files are on a file system without O_DIRECT" in p.stderr, p.stderr
        ckref.assert_same(ckref.arrays(os.path.join(d, "from-ramfs")), ref, "convert --odirect from ramfs")
        # out of descriptors for the twins: one line, nothing written; the
        # same limit without --odirect converts (the control)
        many = os.path.join(d, "many")
        ckref.run(MKCKPT, "--model", "llama", "--layers", "8", "--shards", "30", many)

        def limited(*extra):
            return subprocess.run([CKPTFS, "convert", many, *extra, "--quiet"], capture_output=True, text=True,
                                  preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_NOFILE, (45, 45)))
        out = os.path.join(d, "many-out")
        p = limited(out, "--odirect")
        assert p.returncode != 0 and len(p.stderr.splitlines()) == 1, (p.returncode, p.stderr)
        assert "no descriptor left for its O_DIRECT twin" in p.stderr and "ulimit -n" in p.stderr, p.stderr
        assert not os.path.exists(out), os.listdir(d)
        p = limited(out)
        assert p.returncode == 0, p.stderr
        print("odirect: Megatron view, ramfs fallback and convert --odirect: ok")
    finally:
        shutil.rmtree(d)
        subprocess.run(["umount", ram], check=False)
        os.rmdir(ram)


if __name__ == "__main__":
    main()
