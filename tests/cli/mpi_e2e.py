"""Launches by mpirun (OpenMPI, installed by the test script):
- a group-sharded convert (`--shard-groups`, -np 3) writes one file per rank
  whose union is byte-identical to a single-process convert, and rank 0's
  index names, for every key, the file that holds it; the same without MPI,
  rank by rank (--world-size/--rank);
- a distributed mesh convert (dp=2,tp=2, -np 4): main replicas write their
  shards (equal to `convert --rank`), dp replicas write nothing;
- `mpirun -np 4 ckptfs mount` returns with all four mounts live, each
  serving its rank's tensors, the daemons outliving mpirun; when one rank
  cannot mount, the others unmount and nothing stays mounted;
- `--ranks local`: one daemon per node serves the node's ranks."""
import json
import os
import shutil
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(__file__))
import ckref  # noqa: E402
from mountlib import have_fuse, is_mounted  # noqa: E402

CKPTFS, MKCKPT = os.environ["CKPTFS"], os.environ["MKCKPT"]
MAP = os.path.join(os.path.dirname(__file__), "..", "..", "mappings", "llama-hf-to-megatron.json")
MPIRUN = shutil.which("mpirun")
if not MPIRUN or "mpi: yes" not in ckref.run(CKPTFS, "version").stdout:
    print("SKIP: needs mpirun and ckptfs built with MPI (tools/test.sh installs OpenMPI)")
    sys.exit(77)
ENV = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
           OMPI_MCA_btl_vader_single_copy_mechanism="none", OMPI_MCA_rmaps_base_oversubscribe="1")
# In the sanitizer build, OpenMPI's own progress threads leave allocations
# behind in plugins it unloads at MPI_Finalize (no suppression can name
# them): leak checking is off for processes mpirun starts; every ckptfs code
# path they run is leak-checked by the other tests.
ENV["ASAN_OPTIONS"] = (ENV.get("ASAN_OPTIONS", "") + ":detect_leaks=0").lstrip(":")


def mpirun(n, *args, check=True):
    p = subprocess.run([MPIRUN, "-np", str(n), CKPTFS, *args], capture_output=True, text=True,
                       env=ENV, timeout=120)
    if check and p.returncode != 0:
        raise AssertionError(f"mpirun {args} exited {p.returncode}: {p.stdout}{p.stderr}")
    return p


def raw(d):
    return {k: v[2].tobytes() for k, v in ckref.read_checkpoint_dir(d).items()}


with tempfile.TemporaryDirectory() as d:
    src = os.path.join(d, "llama")
    ckref.run(MKCKPT, "--hidden", "128", "--heads", "16", "--kv-heads", "8", "--intermediate", "192",
              "--vocab", "256", "--layers", "4", "--dtype", "BF16", "--shards", "2", src)
    single = os.path.join(d, "single")
    ckref.convert(CKPTFS, src, single, [MAP])
    want = raw(single)

    def check_grouped(out, world):
        files = sorted(f for f in os.listdir(out) if f.endswith(".safetensors"))
        assert files == [f"model-{r + 1:05d}-of-{world:05d}.safetensors" for r in range(world)], files
        idx = json.load(open(os.path.join(out, "model.safetensors.index.json")))
        assert sorted(idx["weight_map"]) == sorted(want)
        for f in files:
            for k in ckref.read_safetensors(os.path.join(out, f)):
                assert idx["weight_map"][k] == f, (k, f)
        assert raw(out) == want, "group-sharded output differs from a single convert"
        assert os.path.exists(os.path.join(out, "config.json"))
        assert not [f for f in os.listdir(out) if f.startswith(".ckptfs-tmp")]

    out = os.path.join(d, "grouped")
    mpirun(3, "convert", src, out, "--mapping", MAP, "--shard-groups", "--quiet")
    check_grouped(out, 3)
    out2 = os.path.join(d, "grouped-by-hand")  # no launcher: one process per rank
    for r in range(3):
        ckref.convert(CKPTFS, src, out2, [MAP], "--shard-groups", "--world-size", "3", "--rank", str(r))
    check_grouped(out2, 3)
    # a stale single-file checkpoint in OUTDIR: refused, then replaced with --overwrite
    # (every rank writes, rank 0 removes the old files only after all succeeded)
    over = os.path.join(d, "grouped-over")
    ckref.convert(CKPTFS, src, over, [MAP])
    p = mpirun(3, "convert", src, over, "--mapping", MAP, "--shard-groups", "--quiet", check=False)
    assert p.returncode != 0 and "would not replace" in p.stderr, p.stderr
    assert sorted(os.listdir(over)) == ["config.json", "model.safetensors"], os.listdir(over)
    mpirun(3, "convert", src, over, "--mapping", MAP, "--shard-groups", "--quiet", "--overwrite")
    check_grouped(over, 3)
    assert not os.path.exists(os.path.join(over, "model.safetensors"))
    p = ckref.run(CKPTFS, "convert", src, over, "--mapping", MAP, "--shard-groups", "--world-size",
                  "3", "--rank", "0", "--overwrite", check=False)
    assert p.returncode == 2 and "needs mpirun" in p.stderr, p.stderr
    # every rank's share, by bytes: no rank holds more than the largest group
    # above an even split
    sizes = [os.path.getsize(os.path.join(out, f)) for f in os.listdir(out) if f.startswith("model-")]
    plan = json.loads(ckref.run(CKPTFS, "inspect", src, "--mapping", MAP, "--json", "--groups").stdout)
    biggest = max(g["out_bytes"] for g in plan["groups"])
    assert max(sizes) - min(sizes) <= biggest + 4096, (sizes, biggest)
    p = ckref.run(CKPTFS, "convert", src, os.path.join(d, "never"), "--mapping", MAP, "--shard-groups",
                  check=False)
    assert p.returncode == 2 and "--shard-groups needs the world size and rank" in p.stderr, p.stderr
    print("group-sharded convert (mpirun -np 3, and rank by rank) equals a single convert")
    dcp = os.path.join(d, "grouped-dcp")  # the same as one DCP directory: rank 0 writes .metadata
    mpirun(3, "convert", src, dcp, "--mapping", MAP, "--shard-groups", "--format", "dcp", "--quiet")
    assert sorted(os.listdir(dcp)) == [".metadata"] + [f"__{r}_0.distcp" for r in range(3)], os.listdir(dcp)
    back = os.path.join(d, "grouped-dcp-back")
    ckref.convert(CKPTFS, dcp, back, [])
    assert raw(back) == want, "the group-sharded DCP directory differs from a single convert"
    print("group-sharded convert --format dcp (mpirun -np 3): one DCP directory, read back = a single convert")

    # distributed mesh convert: dp replicas (dp coordinate 1) write nothing
    mesh_out = os.path.join(d, "mesh", "rank{rank}")
    mpirun(4, "convert", src, mesh_out, "--mapping", MAP, "--mesh", "dp=2,tp=2", "--quiet")
    for r in range(4):
        got = os.path.join(d, "mesh", f"rank{r}")
        if r >= 2:
            assert not os.path.exists(got), f"dp replica rank {r} wrote {got}"
            continue
        ref = os.path.join(d, "ref", f"rank{r}")
        ckref.convert(CKPTFS, src, ref, [MAP], "--mesh", "tp=2", "--rank", str(r))
        assert raw(got) == raw(ref), r
    print("distributed mesh convert: main replicas wrote their shards, dp replicas nothing")

    if have_fuse():
        mnt = os.path.join(d, "mnt")
        for r in range(4):
            os.makedirs(os.path.join(mnt, f"rank{r}"))
        try:
            mpirun(4, "mount", src, os.path.join(mnt, "rank{rank}"), "--mapping", MAP, "--mesh", "pp=2,tp=2")
            # mpirun has returned: every mount is live, served by daemons that outlived it
            for r in range(4):
                m = os.path.join(mnt, f"rank{r}")
                assert is_mounted(m), f"rank {r} is not mounted after mpirun returned"
                ref = os.path.join(d, "ppref", f"rank{r}")
                ckref.convert(CKPTFS, src, ref, [MAP], "--mesh", "pp=2,tp=2", "--rank", str(r))
                want_r = raw(ref)
                got = {k: open(os.path.join(m, "tensors", k), "rb").read()
                       for k in os.listdir(os.path.join(m, "tensors"))}
                assert got == want_r, r
        finally:
            for r in range(4):
                subprocess.run(["fusermount3", "-u", os.path.join(mnt, f"rank{r}")], check=False,
                               capture_output=True)
        # one rank cannot mount: the others unmount, nothing stays mounted
        os.rmdir(os.path.join(mnt, "rank2"))
        p = mpirun(4, "mount", src, os.path.join(mnt, "rank{rank}"), "--mapping", MAP, "--mesh",
                   "pp=2,tp=2", check=False)
        assert p.returncode != 0 and "rank2: mount point" in p.stderr, p.stderr
        for r in (0, 1, 3):
            assert not is_mounted(os.path.join(mnt, f"rank{r}")), f"rank {r} left mounted"
        print("mpirun -np 4 mount: all mounts live on return; a failed rank unmounts the others")
        # --ranks local: local rank 0 mounts one daemon for the node's four ranks
        node = os.path.join(d, "node")
        os.makedirs(node)
        try:
            mpirun(4, "mount", src, node, "--mapping", MAP, "--mesh", "tp=4", "--ranks", "local")
            assert is_mounted(node) and sorted(os.listdir(node)) == [f"rank{r}" for r in range(4)]
            with open("/proc/self/mountinfo") as f:
                assert sum(line.split()[4].startswith(d) for line in f) == 1  # one daemon
            for r in range(4):
                ref = os.path.join(d, "tp4ref", f"rank{r}")
                ckref.convert(CKPTFS, src, ref, [MAP], "--mesh", "tp=4", "--rank", str(r))
                got = {k: open(os.path.join(node, f"rank{r}", "tensors", k), "rb").read()
                       for k in os.listdir(os.path.join(node, f"rank{r}", "tensors"))}
                assert got == raw(ref), r
        finally:
            subprocess.run(["fusermount3", "-u", node], check=False, capture_output=True)
        print("mpirun -np 4 mount --ranks local: one daemon serves the node's four ranks")
    else:
        print("mount part not run: needs root and /dev/fuse")
