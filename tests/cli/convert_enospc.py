"""convert on a full disk: a tmpfs of 8 MiB, outputs of about 20 MB.

Into a new directory, into a directory of the user's (DCP), over a smaller
checkpoint with --overwrite (model.gguf): each fails in one line, exit 1,
naming the file as the user will look for it (OUTDIR/name, not the hidden
staging directory, which is gone by then) and the system's reason; every
partial byte is given back (the file system's free blocks are what they
were), and what was there is byte for byte the same. Needs root for the
tmpfs: exits 77 (skipped, said) without it."""
import os
import shutil
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import ckref  # noqa: E402
from safety import tree_digest  # noqa: E402

CKPTFS, MKCKPT = os.environ["CKPTFS"], os.environ["MKCKPT"]


def free_blocks(path):
    st = os.statvfs(path)
    return st.f_bfree


def full(fs, src, out, want_file, *extra):
    before_free = free_blocks(fs)
    before = tree_digest(fs)
    p = subprocess.run([CKPTFS, "convert", src, out, "--quiet", *extra], capture_output=True,
                       text=True, timeout=300)
    lines = p.stderr.splitlines()
    assert p.returncode == 1, (extra, p.returncode, p.stderr)
    assert len(lines) == 1 and "No space left on device" in lines[0], (extra, p.stderr)
    assert lines[0].startswith(f"ckptfs: {os.path.join(out, want_file)}: "), (extra, lines[0])
    assert ".ckptfs-" not in lines[0], ("a staging path named", lines[0])
    assert tree_digest(fs) == before, (extra, "the file system's files changed")
    assert free_blocks(fs) == before_free, (extra, "partial output left", free_blocks(fs),
                                            before_free)
    assert not [f for f in os.listdir(fs) if f.startswith(".")], os.listdir(fs)


def main():
    if os.geteuid() != 0:
        print("SKIP: needs root to mount a small tmpfs")
        sys.exit(77)
    d = tempfile.mkdtemp(prefix="ckptfs-enospc-")
    fs = os.path.join(d, "fs")
    os.mkdir(fs)
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=8m", "tmpfs", fs]).returncode != 0:
        shutil.rmtree(d)
        print("SKIP: cannot mount a tmpfs here")
        sys.exit(77)
    try:
        src = os.path.join(d, "src")
        ckref.run(MKCKPT, "--model", "llama", "--hidden", "512", "--intermediate", "1408",
                  "--heads", "8", "--kv-heads", "2", "--layers", "4", "--vocab", "8000",
                  "--dtype", "BF16", src)
        full(fs, src, os.path.join(fs, "new"), "model.safetensors")
        mine = os.path.join(fs, "mine")
        os.mkdir(mine)
        with open(os.path.join(mine, "README"), "w") as f:
            f.write("keep\n")
        full(fs, src, mine, "__0_0.distcp", "--format", "dcp")
        tiny = os.path.join(d, "tiny")
        ckref.run(MKCKPT, "--model", "llama", tiny)
        old = os.path.join(fs, "old")
        p = subprocess.run([CKPTFS, "convert", tiny, old, "--quiet", "--format", "gguf",
                            "--gguf-vocab", "none"], capture_output=True, text=True)
        assert p.returncode == 0, p.stderr
        full(fs, src, old, "model.gguf", "--format", "gguf", "--gguf-vocab", "none",
             "--overwrite")
        print("a full disk: one line naming OUTDIR's file, exit 1, every partial byte given back, "
              "the user's files and the old checkpoint unchanged (new, into a directory, "
              "--overwrite)")
    finally:
        subprocess.run(["umount", fs], check=False)
        shutil.rmtree(d, ignore_errors=True)


if __name__ == "__main__":
    main()
