"""An interrupted convert leaves nothing behind, and a killed one is found.

- SIGTERM, SIGINT and SIGHUP while convert writes (into a new directory,
  over a checkpoint with --overwrite, into a directory of the user's): the
  command exits 128 + the signal with one line, and leaves exactly what was
  there before: no staging directory (it was as large as the output,
  hidden beside or inside OUTDIR), no temp file, the old checkpoint and the
  user's files byte for byte. It used to die at once and leave the staging
  directory.
- A signal the caller ignores stays ignored (nohup's SIGHUP): the convert
  completes.
- After a SIGKILL (the OOM killer), the next convert into the same place
  warns about the staging directory it left, names the dead process, and
  leaves it alone. A staging directory of --overwrite's swap that holds an
  entry of OUTDIR (a subdirectory moved there) says so: it must not simply
  be removed.
- check-mapping --model writes a tiny checkpoint to a temporary directory:
  a signal while it is there removes it and exits 128 + the signal (it
  used to die and leave the directory in $TMPDIR)."""
import glob
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import ckref  # noqa: E402
from safety import tree_digest  # noqa: E402

CKPTFS, MKCKPT = os.environ["CKPTFS"], os.environ["MKCKPT"]
MAP = "llama-hf-to-megatron"
MAPS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "mappings")


def leftovers(parent, out):
    """Staging directories and temp files of any convert, beside or in out."""
    found = glob.glob(os.path.join(parent, ".*.ckptfs-stage-*"))
    if os.path.isdir(out):
        found += glob.glob(os.path.join(out, ".ckptfs-*"))
    return found


def writing(parent, out):
    """Whether a convert has written data into a temp file of its staging
    directory yet (so it is past planning, with its signal watcher on)."""
    for f in glob.glob(os.path.join(parent, ".*.ckptfs-stage-*", ".ckptfs-tmp-*")) + \
            glob.glob(os.path.join(out, ".ckptfs-stage-*", ".ckptfs-tmp-*")):
        try:
            if os.stat(f).st_blocks > 0:
                return True
        except FileNotFoundError:
            pass
    return False


def default_signals():
    """The convert's signals as a terminal gives them: a test run under
    nohup (or by a runner that ignores SIGHUP) must not pass that on."""
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, signal.SIG_DFL)


def convert(src, out, *extra, preexec=default_signals):
    return subprocess.Popen([CKPTFS, "convert", src, out, "--mapping", MAP, "--dtype", "F32",
                             "--threads", "1", "--quiet", *extra],
                            stderr=subprocess.PIPE, text=True, preexec_fn=preexec)


def signal_while_writing(src, out, sig, *extra):
    """Starts a convert and sends it sig once it writes (the first block of
    some 600 MB): its (returncode, stderr)."""
    parent = os.path.dirname(out)
    p = convert(src, out, *extra)
    while p.poll() is None and not writing(parent, out):
        time.sleep(0.002)
    if p.poll() is not None:
        raise AssertionError(f"convert ended (exit {p.returncode}) before it wrote: "
                             f"{p.communicate()[1]}")
    p.send_signal(sig)
    err = p.communicate(timeout=120)[1]
    return p.returncode, err


def interrupted(d, src):
    want = {signal.SIGTERM: "SIGTERM", signal.SIGINT: "SIGINT", signal.SIGHUP: "SIGHUP"}
    # a new OUTDIR: nothing at all afterwards
    new = os.path.join(d, "new")
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        rc, err = signal_while_writing(src, new, sig)
        lines = err.splitlines()
        assert rc == 128 + sig, (sig, rc, err)
        assert len(lines) == 1 and f"interrupted by {want[sig]}" in lines[0], err
        assert not os.path.exists(new), f"{want[sig]}: {new} exists"
        assert not leftovers(d, new), (want[sig], leftovers(d, new))
    # --overwrite of a checkpoint: the old one and the user's files stay
    old = os.path.join(d, "old")
    p = subprocess.run([CKPTFS, "convert", src, old, "--quiet"], capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    os.mkdir(os.path.join(old, "logs"))
    with open(os.path.join(old, "logs", "run.txt"), "w") as f:
        f.write("the user's\n")
    with open(os.path.join(old, "notes.md"), "w") as f:
        f.write("mine\n")
    before = tree_digest(old)
    rc, err = signal_while_writing(src, old, signal.SIGTERM, "--overwrite")
    assert rc == 128 + signal.SIGTERM and "interrupted by SIGTERM" in err, (rc, err)
    assert tree_digest(old) == before, "--overwrite interrupted: the old directory changed"
    assert not leftovers(d, old), leftovers(d, old)
    # into a directory of the user's without a checkpoint (staged inside it)
    mine = os.path.join(d, "mine")
    os.mkdir(mine)
    with open(os.path.join(mine, "README"), "w") as f:
        f.write("keep\n")
    before = tree_digest(mine)
    rc, err = signal_while_writing(src, mine, signal.SIGINT)
    assert rc == 128 + signal.SIGINT and "interrupted by SIGINT" in err, (rc, err)
    assert tree_digest(mine) == before and sorted(os.listdir(mine)) == ["README"], os.listdir(mine)
    print("SIGTERM, SIGINT, SIGHUP while writing: exit 128 + N, one line, nothing left "
          "(new, --overwrite, into a directory)")


def ignored(d, src):
    """nohup's SIGHUP: the caller ignores it, so the convert goes on."""
    out = os.path.join(d, "nohup")
    p = convert(src, out, preexec=lambda: (default_signals(),
                                           signal.signal(signal.SIGHUP, signal.SIG_IGN)))
    while p.poll() is None and not writing(d, out):
        time.sleep(0.002)
    if p.poll() is None:
        p.send_signal(signal.SIGHUP)
    err = p.communicate(timeout=300)[1]
    assert p.returncode == 0 and "wrote" in err, (p.returncode, err)
    assert "model.safetensors" in os.listdir(out) and not leftovers(d, out)
    shutil.rmtree(out)
    print("an ignored SIGHUP (nohup) does not stop convert")


def killed(d, src):
    out = os.path.join(d, "killed")
    p = convert(src, out)
    while p.poll() is None and not writing(d, out):
        time.sleep(0.002)
    assert p.poll() is None, p.communicate()[1]
    p.kill()
    p.communicate()
    stage = glob.glob(os.path.join(d, ".killed.ckptfs-stage-*"))
    assert len(stage) == 1, stage
    assert stage[0].endswith(f"-{p.pid}"), (stage, p.pid)
    # look-alikes that no convert made: not pids (too large for pid_t, 0,
    # not digits), a FIFO, a live process's; none is counted
    for name in ("99999999999", "4294967295", "0", "12ab"):
        os.mkdir(os.path.join(d, f".killed.ckptfs-stage-{name}"))
    dead = subprocess.Popen(["true"])
    dead.wait()
    os.mkfifo(os.path.join(d, f".killed.ckptfs-stage-{dead.pid}"))
    os.mkdir(os.path.join(d, f".killed.ckptfs-stage-{os.getpid()}"))
    q = subprocess.run([CKPTFS, "convert", src, out, "--mapping", MAP, "--quiet"],
                       capture_output=True, text=True, timeout=300)
    warn = [line for line in q.stderr.splitlines() if line.startswith("ckptfs: warning:")]
    assert q.returncode == 0, q.stderr
    assert len(warn) == 1 and stage[0] in warn[0] and f"process {p.pid} is gone" in warn[0] \
        and "remove it" in warn[0] and "more)" not in warn[0], q.stderr
    for f in glob.glob(os.path.join(d, ".killed.ckptfs-stage-*")):
        if f != stage[0]:
            os.remove(f) if not os.path.isdir(f) else os.rmdir(f)
    assert os.path.isdir(stage[0]), "the stale staging directory was removed"
    shutil.rmtree(stage[0])
    # --overwrite's swap cut short: the staging directory holds OUTDIR's logs/
    dead = subprocess.Popen(["true"])
    dead.wait()
    swap = os.path.join(d, f".killed.ckptfs-stage-{dead.pid}")
    os.makedirs(os.path.join(swap, "logs"))
    ckref.write_safetensors(os.path.join(swap, "model.safetensors"), {"w": ("U8", (4,), b"abcd")})
    q = subprocess.run([CKPTFS, "convert", src, out, "--mapping", MAP, "--quiet", "--overwrite"],
                       capture_output=True, text=True, timeout=300)
    warn = [line for line in q.stderr.splitlines() if line.startswith("ckptfs: warning:")]
    assert q.returncode == 0, q.stderr
    assert len(warn) == 1 and swap in warn[0] and "holds 1 entry of" in warn[0] \
        and "move it back" in warn[0] and "remove it to free" not in warn[0], q.stderr
    assert os.path.isdir(os.path.join(swap, "logs"))
    print("after a SIGKILL the next convert names the staging directory left and its dead "
          "process, and keeps it (one holding an entry of OUTDIR says so)")


def stopped(pid):
    """Whether the process is stopped (state T in /proc/PID/stat)."""
    with open(f"/proc/{pid}/stat") as f:
        return f.read().rsplit(")", 1)[1].split()[0] == "T"


def check_mapping_interrupted(d):
    """A shim stops check-mapping right after it made its temporary
    directory (the run lasts milliseconds: no window to hit otherwise); the
    signal is sent while it is stopped, then it continues."""
    shim = os.environ["STOP_AT_MKDTEMP_SO"]
    assert os.path.isfile(shim), f"{shim}: not built"  # ld.so would ignore it
    tmp = os.path.join(d, "tmp")
    os.mkdir(tmp)
    env = dict(os.environ, LD_PRELOAD=shim, TMPDIR=tmp)
    if "ASAN_OPTIONS" in env:  # the shim is loaded ahead of ASan's runtime
        env["ASAN_OPTIONS"] += ":verify_asan_link_order=0"
    args = [CKPTFS, "check-mapping", os.path.join(MAPS, MAP + ".json"), "--inverse",
            os.path.join(MAPS, "megatron-to-llama-hf.json"), "--model", "llama"]
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        p = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                             env=env, preexec_fn=default_signals)
        deadline = time.monotonic() + 60
        while p.poll() is None and not stopped(p.pid) and time.monotonic() < deadline:
            time.sleep(0.002)
        assert p.poll() is None and stopped(p.pid), (sig, p.returncode)
        made = os.listdir(tmp)
        assert len(made) == 1 and made[0].startswith("ckptfs-check-"), made
        p.send_signal(sig)
        p.send_signal(signal.SIGCONT)
        out, err = p.communicate(timeout=60)
        lines = err.splitlines()
        assert p.returncode == 128 + sig, (sig, p.returncode, err)
        assert len(lines) == 1 and f"interrupted by {sig.name}" in lines[0] \
            and "check-mapping" in lines[0], (sig, err)
        assert out == "", (sig, out)  # no verdict from a run told to stop
        assert os.listdir(tmp) == [], (sig, os.listdir(tmp))
    # the shim does not change an uninterrupted run's answer
    p = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         env=env, preexec_fn=default_signals)
    while p.poll() is None and not stopped(p.pid):
        time.sleep(0.002)
    p.send_signal(signal.SIGCONT)
    out, err = p.communicate(timeout=60)
    assert p.returncode == 0 and "reproduces all" in out and err == "", (p.returncode, out, err)
    assert os.listdir(tmp) == []
    print("check-mapping --model: SIGTERM, SIGINT, SIGHUP with its temporary checkpoint on "
          "disk: exit 128 + N, one line, no verdict, the directory removed")


def main():
    d = tempfile.mkdtemp(prefix="ckptfs-interrupt-")
    try:
        src = os.path.join(d, "src")
        ckref.run(MKCKPT, "--model", "llama", "--hidden", "1024", "--intermediate", "2816",
                  "--heads", "16", "--kv-heads", "4", "--layers", "8", "--vocab", "32000",
                  "--dtype", "BF16", "--shards", "2", src)
        interrupted(d, src)
        ignored(d, src)
        killed(d, src)
        check_mapping_interrupted(d)
    finally:
        shutil.rmtree(d, ignore_errors=True)


if __name__ == "__main__":
    main()
