"""Concurrency on a real mount: 16 threads read random ranges of random files
(tensors and model.safetensors) and must get exactly the expected bytes, with
each dependency group evaluated once; and while slow evaluations hold more
readers than FUSE has worker threads, ls, stat, getxattr and stats.json
still answer. A watchdog fails the test instead of hanging. Also runs in the
ThreadSanitizer build."""
import os
import random
import signal
import subprocess
import sys
import tempfile
import threading

sys.path.insert(0, os.path.dirname(__file__))
import ckref  # noqa: E402
from mountlib import CKPTFS, Mount, evaluated_groups, is_mounted, skip_unless_fuse  # noqa: E402

skip_unless_fuse()
signal.alarm(600)  # watchdog: a deadlock fails the test
MKCKPT = os.environ["MKCKPT"]
MAP = os.path.join(os.path.dirname(__file__), "..", "..", "mappings", "llama-hf-to-megatron.json")
SEED = int(os.environ.get("CKPTFS_STRESS_SEED", "20261122"))

with tempfile.TemporaryDirectory() as d:
    src, out = os.path.join(d, "llama"), os.path.join(d, "meg")
    ckref.run(MKCKPT, "--model", "llama", "--layers", "4", "--dtype", "BF16", "--shards", "3", src)
    ckref.run(CKPTFS, "convert", src, out, "--mapping", MAP, "--quiet")
    want = {k: v[2].tobytes() for k, v in ckref.read_checkpoint_dir(out).items()}
    with open(os.path.join(out, "model.safetensors"), "rb") as f:
        flat_want = f.read()

    with Mount(src, [MAP], "threads=2") as m:
        files = [("tensors/" + k, v) for k, v in want.items()] + [("model.safetensors", flat_want)]
        errors, reads = [], [0] * 16
        log = []  # recent operations, printed on mismatch

        def reader(i):
            rng = random.Random(SEED + i)
            for _ in range(300):
                name, data = rng.choice(files)
                off = rng.randrange(len(data))
                n = rng.randrange(1, min(len(data) - off, 300000) + 1)
                fd = os.open(m.path(name), os.O_RDONLY)
                try:
                    got = os.pread(fd, n, off)
                finally:
                    os.close(fd)
                log.append((i, name, off, n))
                if got != data[off:off + n]:
                    errors.append(f"thread {i}: {name} [{off}, {off + n}) differs; recent: {log[-8:]}")
                    return
                reads[i] += 1

        th = [threading.Thread(target=reader, args=(i,)) for i in range(16)]
        for t in th:
            t.start()
        for t in th:
            t.join()
        assert not errors, errors[0]
        s = m.stats()
        assert s["groups_evaluated"] == evaluated_groups(m.plan()), s  # each group once
        assert s["regions_evaluated"] == 0 and s["read_errors"] == 0, s
        print(f"{sum(reads)} random reads by 16 threads (seed {SEED}): all bytes equal; "
              f"{s['groups_evaluated']} groups evaluated once each")

    # slow evaluations: 8 readers wait on a 1.5 s evaluation each (one evaluator,
    # so they take 12 s in all), with only 2 FUSE worker threads; through the
    # cache (no_stream), whose waiters leave the FUSE threads free (a streamed
    # read evaluates on its FUSE thread)
    with Mount(src, [MAP], "threads=1,fuse_threads=2,eval_delay_ms=1500,no_stream") as m:
        names = sorted(want)[:8]
        done = []

        def slow(name):
            with open(m.path("tensors", name), "rb") as f:
                assert f.read() == want[name]
            done.append(name)

        th = [threading.Thread(target=slow, args=(n,)) for n in names]
        for t in th:
            t.start()
        for _ in range(20):  # metadata keeps answering while the reads wait
            assert len(os.listdir(m.path("tensors"))) == len(want)
            for n in names:
                os.stat(m.path("tensors", n))
                os.getxattr(m.path("tensors", n), "user.ckptfs.shape")
            m.stats()
        pending = len(names) - len(done)
        assert pending > 0, "the metadata calls only finished after the reads"
        assert m.stats()["evaluations_in_flight"] >= 1
        for t in th:
            t.join()
        assert len(done) == len(names)
        print(f"metadata answered while {pending} of 8 slow reads were still waiting")

    # SIGTERM while files are open (a stats.json snapshot and a tensor): the
    # daemon unmounts, exits 0 and frees what the missing RELEASEs would have
    # freed (the sanitizer builds report a leak otherwise)
    m = Mount(src, [MAP])
    name = sorted(want)[0]
    held = [open(m.path(".ckptfs", "stats.json"), "rb"), open(m.path("tensors", name), "rb")]
    assert held[1].read() == want[name]
    m.proc.send_signal(signal.SIGTERM)
    m.proc.wait(timeout=60)
    for f in held:
        try:
            f.close()
        except OSError:
            pass  # the connection is gone: ENOTCONN is the expected answer
    assert not is_mounted(m.dir), "still mounted after SIGTERM"
    m.close()  # checks exit status 0 and no sanitizer report
    print("SIGTERM with open files: unmounted, exit 0, nothing leaked")
