"""The mount's own rules (issue #15): a regular file, a live mount point or a
non-empty directory (without -o nonempty) is refused with one line, exit 2,
nothing mounted; so is an unknown -o option (FUSE options libfuse's
low-level session refuses included), a max_read out of range or a cache of
fewer than 4 chunks. -o max_read reaches the kernel (a 1 MiB read comes as
that many requests); -o auto_unmount mounts in the background and returns
(its helper does not keep the parent waiting), and the mount goes when the
daemon is killed. A mount whose INIT the kernel was refused is reported as
failed, not as mounted. A mounted config.json is the source's bytes. Every extended
attribute a tensor lists can be read, even for a group whose source names
pass the 64 KiB xattr limit."""
import json
import os
import shutil
import signal
import struct
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import ckref  # noqa: E402
from mountlib import CKPTFS, Mount, is_mounted, skip_unless_fuse  # noqa: E402

MKCKPT = os.environ["MKCKPT"]


def refused(src, mnt, want, *extra):
    p = subprocess.run([CKPTFS, "mount", src, mnt, *extra], capture_output=True, text=True,
                       timeout=60)
    lines = p.stderr.splitlines()
    assert p.returncode == 2, (p.returncode, p.stderr)
    assert len(lines) == 1 and want in lines[0], (want, p.stderr)
    assert not is_mounted(mnt) or want == "already a mount point", f"{mnt} was mounted"


def requests_for_one_read(m, name, n):
    """stats.json's count of direct reads for one n-byte read of a renamed
    tensor, readahead off: the kernel's requests for it."""
    before = m.stats()["direct_reads"]
    fd = os.open(m.path("tensors", name), os.O_RDONLY)
    os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_RANDOM)
    got = os.pread(fd, n, 0)
    os.close(fd)
    return got, m.stats()["direct_reads"] - before


def max_read(d):
    """-o max_read=65536: a 1 MiB read of a tensor arrives as 16 requests
    (1 without), with the source's bytes. Without FUSE_INIT's answer
    repeating it, libfuse refused the INIT after "mounted": nothing served."""
    src = os.path.join(d, "one")
    os.mkdir(src)
    raw = bytes(range(256)) * 4096  # 1 MiB
    ckref.write_safetensors(os.path.join(src, "model.safetensors"), {"w": ("U8", (len(raw),), raw)})
    for opts, want in ((None, 1), ("max_read=65536", 16)):
        with Mount(src, opts=opts) as m:
            got, n = requests_for_one_read(m, "w", len(raw))
            assert got == raw, f"-o {opts}: bytes"
            assert n == want, f"-o {opts}: {n} requests for 1 MiB, not {want}"
    print("-o max_read=65536: a 1 MiB read in 16 requests (1 without), the source's bytes")


def daemon_of(mnt):
    """The pid of the daemon serving mnt (its command line names it)."""
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                argv = f.read().split(b"\0")
        except OSError:
            continue
        if len(argv) > 4 and argv[1] == b"mount" and argv[3] == mnt.encode():
            return int(pid)
    raise AssertionError(f"no daemon serving {mnt}")


def auto_unmount(src, mnt):
    """In the background with -o auto_unmount: the command returns once the
    mount is live (libfuse's fusermount3 helper, which lives as long as the
    mount, once held the readiness pipe open and the command waited for
    good), and killing the daemon takes the mount away."""
    p = subprocess.run([CKPTFS, "mount", src, mnt, "-o", "auto_unmount"], capture_output=True,
                       text=True, timeout=60)
    assert p.returncode == 0 and is_mounted(mnt), p.stderr
    try:
        assert "config.json" in os.listdir(mnt)
        os.kill(daemon_of(mnt), signal.SIGKILL)
        for _ in range(200):
            if not is_mounted(mnt):
                break
            time.sleep(0.05)
        assert not is_mounted(mnt), "the mount outlived its killed daemon with -o auto_unmount"
    finally:
        if is_mounted(mnt):
            subprocess.run(["fusermount3", "-uz", mnt], check=False)
    print("-o auto_unmount: the command returns once mounted; a killed daemon's mount goes")


def daemons_of(mnt):
    try:
        return [daemon_of(mnt)]
    except AssertionError:
        return []


def listed(mnt):
    """mnt in the mount table, without touching it: is_mounted's realpath
    stats it, and a mount whose INIT is not answered holds that for good."""
    with open("/proc/self/mountinfo") as f:
        return any(line.split()[4] == mnt for line in f)


def refused_init(src, mnt):
    """libfuse calls the init operation first and may refuse the kernel's
    INIT after it (its checks of the answer: capabilities, max_read); the
    kernel then fails every request. A shim (LD_PRELOAD) sends that refusal.
    Both in the background and with -f the command fails in one line, exit
    1, nothing mounted and no daemon left: it used to say "mounted" and exit
    0, over a mount whose every access failed (ECONNREFUSED)."""
    shim = os.environ["REFUSE_INIT_SO"]
    assert os.path.isfile(shim), f"{shim}: not built"  # ld.so would ignore it
    env = dict(os.environ, LD_PRELOAD=shim)
    if "ASAN_OPTIONS" in env:  # the shim is loaded ahead of ASan's runtime
        env["ASAN_OPTIONS"] += ":verify_asan_link_order=0"
    for how in ((), ("-f",)):
        p = subprocess.run([CKPTFS, "mount", src, mnt, *how], capture_output=True, text=True,
                           timeout=60, env=env)
        try:
            lines = p.stderr.splitlines()
            assert p.returncode == 1, (how, p.returncode, p.stderr)
            assert len(lines) == 1 and "refused the mount's answer to its INIT" in lines[0] \
                and "Connection refused" in lines[0], (how, p.stderr)
            for _ in range(100):  # the background daemon unmounts as it goes
                if not listed(mnt) and not daemons_of(mnt):
                    break
                time.sleep(0.05)
            assert not listed(mnt), (how, "mounted")
            assert not daemons_of(mnt), (how, "a daemon is left")
        finally:
            if listed(mnt):
                subprocess.run(["fusermount3", "-uz", mnt], check=False)
    # an INIT never answered: no "mounted" (it used to come at once); a
    # SIGTERM ends the wait, exit 1, nothing mounted. The readiness check's
    # stat then fails with ENOTCONN on this kernel, with ECONNREFUSED on
    # others (it used to be taken for the kernel refusing the INIT, a CI
    # failure), or starts after the unmount and finds the directory beneath
    # (it used to say "mounted"): the shim plays the last two.
    env["REFUSE_INIT_DROP"] = "1"
    for stat_as in ("", "refused", "late"):
        unanswered_init(src, mnt, dict(env, REFUSE_INIT_STAT=stat_as))
    # in the background: a SIGTERM to the waiting command reaches the daemon
    # too (the command used to die alone, and its daemon mounted later)
    p = subprocess.Popen([CKPTFS, "mount", src, mnt], stderr=subprocess.PIPE, text=True, env=env,
                         preexec_fn=lambda: signal.signal(signal.SIGTERM, signal.SIG_DFL))
    try:
        for _ in range(3000):  # the daemon has mounted (the INIT waits for good)
            if listed(mnt) or p.poll() is not None:
                break
            time.sleep(0.01)
        assert p.poll() is None and listed(mnt), p.poll()
        p.send_signal(signal.SIGTERM)
        err = p.communicate(timeout=60)[1]
        lines = err.splitlines()
        assert p.returncode == 128 + signal.SIGTERM, (p.returncode, err)
        assert len(lines) == 1 and "interrupted by SIGTERM: not mounted" in lines[0], err
        assert not listed(mnt) and not daemons_of(mnt), "the daemon outlived the command"
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
        for pid in daemons_of(mnt):
            os.kill(pid, signal.SIGKILL)
        if listed(mnt):
            subprocess.run(["fusermount3", "-uz", mnt], check=False)
    print("a refused INIT: the command fails in one line, exit 1, nothing mounted (background and "
          "-f); an INIT never answered: no \"mounted\", and SIGTERM ends it with exit 1 (-f) or "
          "128 + 15, the daemon stopped with it (background)")


def unanswered_init(src, mnt, env):
    """-f with the INIT never answered, then a SIGTERM: one line, exit 1."""
    how = env["REFUSE_INIT_STAT"] or "as the kernel does"
    p = subprocess.Popen([CKPTFS, "mount", src, mnt, "-f"], stderr=subprocess.PIPE, text=True,
                         env=env)
    try:
        for _ in range(3000):  # mounted (its signal handlers are in place by then)
            if listed(mnt) or p.poll() is not None:
                break
            time.sleep(0.01)
        time.sleep(0.5)  # time to say "mounted", were it to
        assert p.poll() is None and listed(mnt), \
            f"{how}: exit {p.returncode} with the INIT unanswered: {p.stderr.read()}"
        os.kill(p.pid, signal.SIGTERM)
        err = p.communicate(timeout=60)[1]
        lines = err.splitlines()
        assert p.returncode == 1, (how, p.returncode, err)
        assert len(lines) == 1 and "ended before it answered its first request" in lines[0], (how, err)
        assert not listed(mnt), (how, "mounted")
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
        if listed(mnt):
            subprocess.run(["fusermount3", "-uz", mnt], check=False)


def log_file(d, src, mnt):
    """-o log=FILE is appended to, so it may not be anything the mount
    reads: a source file, a file in the source directory (created or not),
    a mapping, a file beside a single-file source; nor a FIFO (the daemon
    would wait on it for good). Each is refused in one line, nothing
    mounted, nothing created or changed (a link is judged by where it
    leads, and one to nothing is refused). A good log gets the daemon's lines,
    and the background command's pipes see their end (a script's
    $(ckptfs mount ...) returns): the daemon kept the caller's stderr."""
    shard = sorted(f for f in os.listdir(src) if f.endswith(".safetensors"))[0]
    before = {f: open(os.path.join(src, f), "rb").read() for f in os.listdir(src)}
    refused(src, mnt, "lies in the directory of the checkpoint", "-o", f"log={src}/{shard}")
    refused(src, mnt, "lies in the directory of the checkpoint", "-o", f"log={src}/../llama/new.log")
    logs = os.path.join(d, "logs")
    os.mkdir(logs)
    fifo = os.path.join(logs, "fifo")
    os.mkfifo(fifo)
    refused(src, mnt, "not a regular file", "-o", f"log={fifo}")
    mp = os.path.join(logs, "map.json")
    shutil.copyfile(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "mappings",
                                 "llama-hf-to-megatron.json"), mp)
    refused(src, mnt, "a mapping", "--mapping", mp, "-o", f"log={mp}")
    link = os.path.join(logs, "link.log")  # where a link leads is where the lines go
    os.symlink(os.path.join(src, "config.json"), link)
    refused(src, mnt, "lies in the directory of the checkpoint", "-o", f"log={link}")
    os.remove(link)
    os.symlink(os.path.join(src, "made.log"), link)
    refused(src, mnt, "a symbolic link to nothing", "-o", f"log={link}")
    os.remove(link)
    one = os.path.join(d, "one", "model.safetensors")  # max_read's single-file source
    refused(one, mnt, "lies beside the checkpoint", "-o", f"log={os.path.dirname(one)}/x.log")
    assert {f: open(os.path.join(src, f), "rb").read() for f in os.listdir(src)} == before
    assert sorted(os.listdir(os.path.dirname(one))) == ["model.safetensors"]
    log = os.path.join(logs, "ckptfs.log")
    p = subprocess.run([CKPTFS, "mount", src, mnt, "-o", f"log={log}"], capture_output=True,
                       text=True, timeout=60)
    assert p.returncode == 0 and is_mounted(mnt), p.stderr
    try:
        assert "config.json" in os.listdir(mnt)
    finally:
        subprocess.run(["fusermount3", "-u", mnt], check=True)
    assert f"ckptfs: mounted {src} on {mnt}" in open(log).read(), open(log).read()
    print("-o log: a source file, the source directory, a FIFO, a mapping and beside a single file "
          "refused; a good log gets the daemon's lines and the command returns")


def main():
    skip_unless_fuse()
    d = tempfile.mkdtemp(prefix="ckptfs-sanity-")
    try:
        src = os.path.join(d, "llama")
        ckref.run(MKCKPT, "--model", "llama", src)
        cfg = os.path.join(src, "config.json")
        raw = open(cfg).read().rstrip().rstrip("}") + ', "rope_theta": 10000.0, "big": 98765432109876543210}\n'
        with open(cfg, "w") as f:
            f.write(raw)
        regular = os.path.join(d, "file")
        open(regular, "w").close()
        refused(src, regular, "is not a directory")
        full = os.path.join(d, "full")
        os.mkdir(full)
        open(os.path.join(full, "x"), "w").close()
        refused(src, full, "is not empty")
        refused(src, os.path.join(d, "nowhere"), "mount point")
        empty = os.path.join(d, "empty")
        os.mkdir(empty)
        refused(src, empty, "unknown option -o bogus", "-o", "bogus")
        refused(src, empty, "unknown option -o allow_others", "-o", "allow_others")
        refused(src, empty, "less than 4 chunks", "-o", "cache_size=1MiB")
        refused(src, empty, "bad option -o chunk=1", "-o", "chunk=1")
        refused(src, empty, "-o needs a value", "-o")
        for o in ("max_background=20", "max_threads=4", "clone_fd", "relatime", "async_read"):
            refused(src, empty, f"unknown option -o {o}", "-o", o)
        refused(src, empty, "bad option -o max_read=100", "-o", "max_read=100")
        refused(src, empty, "bad option -o max_read=2097152", "-o", "max_read=2097152")
        for o in ("fsname=", "subtype="):  # the kernel refuses them: two lines, "cannot mount"
            refused(src, empty, f"bad option -o {o} (a value after '='", "-o", o)
        with Mount(src) as m:
            refused(src, m.dir, "already a mount point")
            assert open(m.path("config.json")).read() == raw, "config.json is not the source's bytes"
        # -o nonempty mounts over the file, which is back after the unmount
        # -o nonempty is the explicit opt-in: mounted over the file, which is back after
        p = subprocess.run([CKPTFS, "mount", src, full, "-o", "nonempty"], capture_output=True,
                           text=True, timeout=60)
        assert p.returncode == 0 and is_mounted(full), p.stderr
        assert "config.json" in os.listdir(full)
        subprocess.run(["fusermount3", "-u", full], check=True)
        assert os.listdir(full) == ["x"]
        print("mount refuses a file, a live mount point, a non-empty dir, unknown options; "
              "config.json verbatim")
        max_read(d)
        auto_unmount(src, empty)
        refused_init(src, empty)
        log_file(d, src, empty)

        # a group whose source names pass 64 KiB: user.ckptfs.sources stays readable
        big = os.path.join(d, "big")
        os.mkdir(big)
        names = [f"layer.{i}." + "k" * 2000 for i in range(40)]
        ckref.write_safetensors(os.path.join(big, "model.safetensors"),
                                {n: ("F32", (1,), struct.pack("<f", i)) for i, n in enumerate(names)})
        mp = os.path.join(d, "stack.json")
        with open(mp, "w") as f:
            json.dump({"rules": [{"from": "layer.{i}.{rest}", "to": "all", "reduce": "i",
                                  "expr": "stack(x, 0)"}]}, f)
        with Mount(big, maps=[mp]) as m:
            t = m.path("tensors", "all")
            listed = os.listxattr(t)
            assert "user.ckptfs.sources" in listed, listed
            for a in listed:
                v = os.getxattr(t, a)
                assert len(v) <= 65536, (a, len(v))
            v = json.loads(os.getxattr(t, "user.ckptfs.sources"))
            assert v["n_sources"] == 40 and v["truncated"] is True, v
            assert 0 < len(v["first"]) < 40 and all(n in names for n in v["first"]), len(v["first"])
        print("xattrs: every listed attribute reads back (sources of 80 KB named as a count and a prefix)")

        # user.ckptfs.pieces: the fused QKV's boxes, checked against the grouped layout
        cfg = json.load(open(cfg))
        H, nh = cfg["hidden_size"], cfg["num_attention_heads"]
        ng = cfg.get("num_key_value_heads", nh)
        hd, hpg = H // nh, nh // ng
        maps = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "mappings")
        with Mount(src, maps=[os.path.join(maps, "llama-hf-to-megatron.json")]) as m:
            t = m.path("tensors", "decoder.layers.0.self_attention.linear_qkv.weight")
            pieces = json.loads(os.getxattr(t, "user.ckptfs.pieces"))
            want = []
            for g in range(ng):
                base = g * (hpg + 2) * hd
                want.append(([[base, base + hpg * hd], [0, H]], "q_proj", [g * hpg * hd, 0]))
                want.append(([[base + hpg * hd, base + (hpg + 1) * hd], [0, H]], "k_proj", [g * hd, 0]))
                want.append(([[base + (hpg + 1) * hd, base + (hpg + 2) * hd], [0, H]], "v_proj", [g * hd, 0]))
            got = sorted((p["box"], p["source"].split(".")[-2], p["start"]) for p in pieces)
            assert got == sorted(want), (got, want)
            assert all(p["strides"] == [H, 1] and p["casts"] == [] for p in pieces), pieces
        print("xattr user.ckptfs.pieces: the fused QKV's boxes match the grouped-query layout")
    finally:
        shutil.rmtree(d, ignore_errors=True)


if __name__ == "__main__":
    main()
