"""ckptfs as a system filesystem (issue #22, the mount(8) part):
- `meson install --destdir` puts the binary, the mount.fuse.ckptfs and
  mount.ckptfs helpers (links to it) and the shipped mappings in place;
- the real mount(8): `mount -t fuse.ckptfs SRC MNT -o mapping=NAME,mesh=...,
  rank=R` and `umount MNT`, and an fstab line (mount -T FILE MNT) whose
  noauto / x-systemd.automount / _netdev options are left to mount(8);
- the view is the one `ckptfs mount` gives; a bad option is one line, exit 2,
  nothing mounted.
mount(8) looks for helpers in /sbin only: the test links
/sbin/mount.fuse.ckptfs to the build for its duration (root, /dev/fuse)."""
import json
import os
import shutil
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import ckref  # noqa: E402
from mountlib import CKPTFS, is_mounted, skip_unless_fuse  # noqa: E402

MKCKPT = os.environ["MKCKPT"]
HELPER = "/sbin/mount.fuse.ckptfs"


def names(mnt):
    return sorted(os.listdir(os.path.join(mnt, "tensors")))


def main():
    skip_unless_fuse()
    if not shutil.which("mount") or not os.access("/sbin", os.W_OK) or os.path.lexists(HELPER):
        print("SKIP: needs mount(8) and a writable /sbin without a mount.fuse.ckptfs")
        sys.exit(77)
    d = tempfile.mkdtemp(prefix="ckptfs-helper-")
    try:
        # the installed tree
        build = os.path.dirname(os.path.dirname(CKPTFS))
        dest = os.path.join(d, "dest")
        p = subprocess.run(["meson", "install", "-C", build, "--destdir", dest, "--no-rebuild", "--quiet"],
                           capture_output=True, text=True)
        assert p.returncode == 0, p.stdout + p.stderr
        files = {os.path.relpath(os.path.join(r, f), dest) for r, _, fs in os.walk(dest) for f in fs}
        prefix = next(f.split("/bin/ckptfs")[0] for f in files if f.endswith("/bin/ckptfs"))
        ship = sorted(f for f in os.listdir(os.path.join(os.path.dirname(__file__), "..", "..", "mappings"))
                      if f.endswith(".json"))
        assert sorted(os.path.basename(f) for f in files if "/share/ckptfs/mappings/" in f) == ship, files
        for h in ("mount.fuse.ckptfs", "mount.ckptfs"):
            link = os.path.join(dest, prefix, "sbin", h)
            assert os.readlink(link) == "/" + prefix + "/bin/ckptfs", (h, os.readlink(link))
        man = next(os.path.join(dest, f) for f in files if f.endswith("man1/ckptfs.1"))
        page = open(man).read()
        for verb in ("inspect", "convert", "mount", "diff", "check-mapping", "mappings", "cache_size="):
            assert verb in page, f"ckptfs(1) does not mention {verb}"
        # bash completion: verbs, and shipped mappings by name after --mapping
        comp = next(os.path.join(dest, f) for f in files if f.endswith("bash-completion/completions/ckptfs"))
        script = (f"source {comp}; COMP_WORDS=({CKPTFS} ch); COMP_CWORD=1; _ckptfs; echo ${{COMPREPLY[*]}}; "
                  f"COMP_WORDS=({CKPTFS} inspect x --mapping llama-h); COMP_CWORD=4; _ckptfs; "
                  "echo ${COMPREPLY[*]}")
        out = subprocess.run(["bash", "-c", script], capture_output=True, text=True).stdout.splitlines()
        assert out[0] == "check-mapping" and "llama-hf-to-megatron" in out[1].split(), out
        print(f"meson install: {len(files)} files (binary, {len(ship)} mappings, ckptfs(1), bash "
              "completion) and the two mount helpers")

        src = os.path.join(d, "llama")
        ckref.run(MKCKPT, "--model", "llama", "--heads", "8", "--kv-heads", "2", src)
        mnt = os.path.join(d, "mnt")
        os.mkdir(mnt)
        ref = os.path.join(d, "ref")
        ckref.convert(CKPTFS, src, ref, ["llama-hf-to-megatron"], "--mesh", "tp=2", "--rank", "1")
        want = sorted(ckref.read_checkpoint_dir(ref))
        os.symlink(CKPTFS, HELPER)
        try:
            p = subprocess.run(["mount", "-t", "fuse.ckptfs", src, mnt, "-o",
                                "mapping=llama-hf-to-megatron,mesh=tp=2,rank=1,cache_size=64MiB"],
                               capture_output=True, text=True, timeout=60)
            assert p.returncode == 0 and is_mounted(mnt), p.stderr
            assert names(mnt) == want, names(mnt)
            st = ckref.read_checkpoint_dir(ref)
            for k in want:
                assert open(os.path.join(mnt, "tensors", k), "rb").read() == st[k][2].tobytes(), k
            assert subprocess.run(["umount", mnt]).returncode == 0 and not is_mounted(mnt)
            print("mount -t fuse.ckptfs -o mapping=NAME,mesh=tp=2,rank=1: rank 1's view; umount")
            fstab = os.path.join(d, "fstab")
            with open(fstab, "w") as f:
                f.write(f"# a test fstab\n{src} {mnt} fuse.ckptfs "
                        "mapping=identity,noauto,x-systemd.automount,_netdev,nofail 0 0\n")
            p = subprocess.run(["mount", "-T", fstab, mnt], capture_output=True, text=True, timeout=60)
            assert p.returncode == 0 and is_mounted(mnt), p.stderr
            assert names(mnt) == sorted(ckref.read_checkpoint_dir(src))
            assert json.load(open(os.path.join(mnt, "config.json"))) == json.load(open(os.path.join(src, "config.json")))
            assert subprocess.run(["umount", mnt]).returncode == 0 and not is_mounted(mnt)
            print("an fstab line (noauto, x-systemd.automount, _netdev, nofail): mounted, umounted")
            p = subprocess.run([HELPER, src, mnt, "-o", "mapping=identity,bogus_option"],
                               capture_output=True, text=True, timeout=60)
            assert p.returncode == 2 and len(p.stderr.splitlines()) == 1 and "bogus_option" in p.stderr, p.stderr
            assert not is_mounted(mnt)
            print("a bad option: one line, exit 2, nothing mounted")
            # hostile option lists: 47 view options used to write past the
            # helper's fixed argument array (ASan: stack overflow), and a list
            # past 4 KiB was cut short, mid-option, without a word
            p = subprocess.run([HELPER, src, mnt, "-o", ",".join(["mapping=identity"] * 47)],
                               capture_output=True, text=True, timeout=60)
            assert p.returncode == 2 and len(p.stderr.splitlines()) == 1 \
                and "at most 16 --mapping" in p.stderr, (p.returncode, p.stderr)
            assert not is_mounted(mnt)
            many = ",".join(["cache_size=64MiB"] * 300)  # 5 KiB of valid options
            p = subprocess.run([HELPER, src, mnt, "-o", f"mapping=identity,{many},bogus_option"],
                               capture_output=True, text=True, timeout=60)
            assert p.returncode == 2 and len(p.stderr.splitlines()) == 1 \
                and "bogus_option" in p.stderr, (p.returncode, p.stderr)
            assert not is_mounted(mnt)
            p = subprocess.run([HELPER, src, mnt, "-o", f"mapping=identity,{many}"],
                               capture_output=True, text=True, timeout=60)
            assert p.returncode == 0 and is_mounted(mnt), p.stderr
            assert names(mnt) == sorted(ckref.read_checkpoint_dir(src))
            assert subprocess.run(["umount", mnt]).returncode == 0 and not is_mounted(mnt)
            print("47 view options: one line, exit 2; 5 KiB of options passed on whole (the "
                  "last one bad: named; all good: mounted)")
        finally:
            if is_mounted(mnt):
                subprocess.run(["umount", "-l", mnt])
            os.unlink(HELPER)
    finally:
        shutil.rmtree(d, ignore_errors=True)


if __name__ == "__main__":
    main()
