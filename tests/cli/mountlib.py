"""Real mounts for the tests: the daemon runs in the foreground (-f) so its
sanitizer reports reach us; readiness is the daemon's "mounted" line, read
blocking (no sleep-polling), and the rest of its log by a thread while it
serves (a full pipe would stop the daemon); teardown always unmounts, then checks that the
daemon exited cleanly and printed no error or sanitizer report (its own
"ckptfs:" lines, and libfuse's "fuse:" ones).

A mount still open after HANG_S seconds is taken as hung: the test's and
the daemon's stacks are printed and the daemon is killed, so the reader
blocked on it fails now, with the stacks, instead of at the suite's
timeout with nothing to go on."""
import errno
import faulthandler
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading

CKPTFS = os.environ["CKPTFS"]
BAD = ("ERROR: AddressSanitizer", "ERROR: LeakSanitizer", "runtime error:", "ThreadSanitizer")
# the longest a test keeps one mount is under a minute, sanitizers included
HANG_S = float(os.environ.get("CKPTFS_TEST_HANG_S", "300"))


def dump_hang(proc, mountpoint):
    """Called when a mount has been open HANG_S seconds: print where the
    test and the daemon are, then kill the daemon (the kernel then fails
    the requests it was waiting on)."""
    if proc.poll() is not None:
        return
    print(f"\nmountlib: the mount on {mountpoint} has been open {HANG_S:.0f} s: taken as hung; "
          f"the test's threads, then the daemon's (pid {proc.pid}):", file=sys.stderr, flush=True)
    faulthandler.dump_traceback(file=sys.stderr, all_threads=True)
    if shutil.which("gdb"):
        subprocess.run(["gdb", "-p", str(proc.pid), "-batch", "-ex", "thread apply all bt"],
                       stdout=sys.stderr, stderr=subprocess.DEVNULL, timeout=120, check=False)
    else:
        for t in sorted(os.listdir(f"/proc/{proc.pid}/task")):
            with open(f"/proc/{proc.pid}/task/{t}/wchan") as f:
                print(f"  thread {t}: waiting in {f.read() or '-'}", file=sys.stderr)
    sys.stderr.flush()
    proc.kill()
    subprocess.run(["fusermount3", "-uz", mountpoint], check=False)


def have_fuse():
    return os.path.exists("/dev/fuse") and os.geteuid() == 0


def skip_unless_fuse():
    if not have_fuse():
        print("SKIP: needs root and /dev/fuse")
        sys.exit(77)  # meson's skip status


def is_mounted(path):
    path = os.path.realpath(path)
    with open("/proc/self/mountinfo") as f:
        return any(line.split()[4] == path for line in f)


class Mount:
    def __init__(self, source, maps=(), opts=None, expect_errors=False, extra=()):
        self.dir = tempfile.mkdtemp(prefix="ckptfs-mnt-")
        args = [CKPTFS, "mount", source, self.dir, "-f", *extra]
        for m in maps:
            args += ["--mapping", m]
        if opts:
            args += ["-o", opts]
        self.expect_errors = expect_errors
        self.proc = subprocess.Popen(args, stderr=subprocess.PIPE, text=True)
        self.lines = []
        self.watchdog = threading.Timer(HANG_S, dump_hang, (self.proc, self.dir))
        self.watchdog.daemon = True
        self.watchdog.start()
        while True:  # blocks until the daemon says mounted, or exits
            line = self.proc.stderr.readline()
            if not line:
                self.watchdog.cancel()
                self.proc.wait(timeout=30)
                raise AssertionError(f"daemon exited ({self.proc.returncode}): {''.join(self.lines)}")
            self.lines.append(line)
            if "ckptfs: mounted" in line:
                break
        self.drain = threading.Thread(target=self._drain, daemon=True)
        self.drain.start()

    def _drain(self):
        """Reads the daemon's log while it serves: a pipe left full would
        stop the daemon at its next log line, and every reader with it."""
        for line in self.proc.stderr:
            self.lines.append(line)

    def path(self, *p):
        return os.path.join(self.dir, *p)

    def stats(self):
        with open(self.path(".ckptfs", "stats.json")) as f:
            return json.load(f)

    def plan(self, sub=""):
        """.ckptfs/plan.json, or a --ranks mount's sub/.ckptfs/plan.json"""
        with open(self.path(*([sub] if sub else []), ".ckptfs", "plan.json")) as f:
            return json.load(f)

    def close(self):
        self.watchdog.cancel()
        if self.proc.poll() is None:
            subprocess.run(["fusermount3", "-u", self.dir], check=False)
            try:
                self.proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                subprocess.run(["fusermount3", "-uz", self.dir], check=False)
                raise AssertionError("daemon did not exit after unmount")
        self.drain.join(timeout=60)  # the daemon has exited: its log ends
        self.proc.stderr.close()
        log = "".join(self.lines)
        os.rmdir(self.dir)
        assert not any(b in log for b in BAD), f"sanitizer report from the daemon:\n{log}"
        assert self.proc.returncode == 0, f"daemon exit {self.proc.returncode}:\n{log}"
        if not self.expect_errors:
            bad = [l for l in log.splitlines()
                   if (l.startswith("ckptfs:") and "mounted" not in l) or l.startswith("fuse:")]
            assert not bad, f"daemon reported errors: {bad}"
        return log

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        try:
            self.close()
        except Exception:
            if exc[0] is None:
                raise


def evaluated_groups(plan):
    """Groups that a full read evaluates through the cache: those with a
    target that is neither direct (renames are read straight from their
    source file) nor streamed (evaluated into each read's reply)."""
    return len({t["group"] for t in plan["targets"] if not t["direct"] and not t["streamed"]})


def read_random(path, off=0, n=None):
    """Read without kernel readahead widening the request."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_RANDOM)
        size = os.fstat(fd).st_size
        n = size - off if n is None else n
        out = b""
        while len(out) < n:
            chunk = os.pread(fd, n - len(out), off + len(out))
            if not chunk:
                break
            out += chunk
        return out
    finally:
        os.close(fd)
