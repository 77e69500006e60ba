"""Per-rank views: for tp = 2, 4, 8 and every rank, the local tensors of the
HF -> Megatron view (written by `convert --mesh --rank`) equal Megatron's
per-rank tensors computed independently with numpy (column-parallel chunks on
dim 0, gated fc1 split per block, row-parallel on dim 1, norms replicated);
placing every rank's fragments (from `inspect --json`) at their global offsets
restores each global tensor; dp replicas are identical with the right
replica_id; a per-rank mount serves the same bytes and xattrs; and bad meshes
are refused before anything happens."""
import json
import os
import shutil
import subprocess
import sys
import tempfile

import numpy as np

sys.path.insert(0, os.path.dirname(__file__))
import ckref  # noqa: E402
from mountlib import have_fuse, read_random  # noqa: E402

CKPTFS, MKCKPT = os.environ["CKPTFS"], os.environ["MKCKPT"]
MAP = os.path.join(os.path.dirname(__file__), "..", "..", "mappings", "llama-hf-to-megatron.json")


def arrays(d):
    return {k: v[2] for k, v in ckref.read_checkpoint_dir(d).items()}


with tempfile.TemporaryDirectory() as d:
    src = os.path.join(d, "llama")
    ckref.run(MKCKPT, "--hidden", "128", "--heads", "16", "--kv-heads", "8", "--intermediate", "192",
              "--vocab", "256", "--layers", "2", "--dtype", "BF16", "--shards", "2", src)
    full = os.path.join(d, "global")
    ckref.run(CKPTFS, "convert", src, full, "--mapping", MAP, "--quiet")
    glob = arrays(full)
    checked = 0
    for tp in (2, 4, 8):
        # Megatron pads the vocabulary to a multiple of 128 x tp: 256 rows
        # stay at tp=2, become 512 at tp=4 and 1024 at tp=8
        gtp = {k: ckref.pad_vocab(v, 128 * tp) if k in ckref.VOCAB_KEYS else v for k, v in glob.items()}
        assert gtp["embedding.word_embeddings.weight"].shape[0] == max(256, 128 * tp)
        rebuilt = {k: np.full(v.shape, 0xFFFF, dtype=v.dtype) for k, v in gtp.items()}
        covered = {k: np.zeros(v.shape, dtype=np.int32) for k, v in gtp.items()}
        for r in range(tp):
            out = os.path.join(d, f"tp{tp}", "rank{rank}")
            ckref.run(CKPTFS, "convert", src, out, "--mapping", MAP, "--mesh", f"tp={tp}",
                      "--rank", str(r), "--quiet")
            local = arrays(os.path.join(d, f"tp{tp}", f"rank{r}"))
            want = ckref.megatron_rank(glob, tp, r)
            assert set(local) == set(want)
            for k in want:
                assert np.array_equal(local[k], want[k]), f"tp={tp} rank {r}: {k} differs"
                checked += 1
            view = json.loads(ckref.run(CKPTFS, "inspect", src, "--mapping", MAP, "--mesh", f"tp={tp}",
                                        "--rank", str(r), "--json").stdout)
            for t in view["tensors"]:
                k = t["name"]
                assert t["global_shape"] == list(gtp[k].shape)
                for f in t["fragments"]:
                    sl = tuple(slice(o, o + n) for o, n in zip(f["local_offset"], f["shape"]))
                    sg = tuple(slice(o, o + n) for o, n in zip(f["global_offset"], f["shape"]))
                    rebuilt[k][sg] = local[k][sl]
                    covered[k][sg] += 1
                split = t["axis_fragmentations"] != [1] * len(t["shape"])
                # replicated tensors: one main replica (replica id 0) and tp-1 others
                assert t["replica_id"] == ([] if split else [r]), t
        for k in gtp:
            replicated = ckref.megatron_rank(glob, tp, 0)[k].shape == gtp[k].shape
            assert covered[k].min() >= 1 and (replicated or covered[k].max() == 1), k
            assert np.array_equal(rebuilt[k], gtp[k]), f"tp={tp}: {k} not restored"
    print(f"tp 2/4/8: {checked} local tensors equal numpy's Megatron shards; fragments restore every global tensor")

    # Qwen2 (Q/K/V biases split with their rows) and Qwen3 (norms replicated), tp=2
    for model in ("qwen2", "qwen3"):
        qsrc = os.path.join(d, model)
        ckref.run(MKCKPT, "--model", model, "--heads", "8", "--kv-heads", "4", qsrc)
        qsrc_arrays = {k: (v[0], v[2]) for k, v in ckref.read_checkpoint_dir(qsrc).items()}
        qcfg = json.load(open(os.path.join(qsrc, "config.json")))
        qglob = {k: v[1] for k, v in ckref.llama_to_megatron_ref(qsrc_arrays, qcfg).items()}
        for r in range(2):
            out = os.path.join(d, f"{model}-tp2", f"r{r}")
            ckref.convert(CKPTFS, qsrc, out, [MAP], "--mesh", "tp=2", "--rank", str(r))
            local, want = arrays(out), ckref.megatron_rank(qglob, 2, r)
            assert set(local) == set(want), sorted(set(local) ^ set(want))
            for k in want:
                assert np.array_equal(local[k], want[k]), f"{model} tp=2 rank {r}: {k} differs"
    print("Qwen2 and Qwen3 at tp=2: biases split with their rows, Q/K norms replicated, as numpy's shards")

    # dp replicates: dp=2,tp=2 ranks 1 and 3 (same tp coordinate) see one shard
    a = json.loads(ckref.run(CKPTFS, "inspect", src, "--mapping", MAP, "--mesh", "dp=2,tp=2", "--rank", "1", "--json").stdout)
    b = json.loads(ckref.run(CKPTFS, "inspect", src, "--mapping", MAP, "--mesh", "dp=2,tp=2", "--rank", "3", "--json").stdout)
    for x, y in zip(a["tensors"], b["tensors"]):
        assert x["shape"] == y["shape"] and x["fragments"] == y["fragments"]
        assert x["replica_id"][0] == 0 and y["replica_id"][0] == 1, (x, y)
    # {rank} and axis names in the output path, rank from the environment
    # (rank 3 is a dp replica of rank 1: only main replicas write)
    for r in ("1", "3"):
        subprocess.run([CKPTFS, "convert", src, os.path.join(d, "r{rank}-dp{dp}-tp{tp}"), "--mapping", MAP,
                        "--mesh", "dp=2,tp=2", "--quiet"], check=True, env=dict(os.environ, RANK=r))
    assert os.path.exists(os.path.join(d, "r1-dp0-tp1", "model.safetensors"))
    assert not os.path.exists(os.path.join(d, "r3-dp1-tp1"))

    # refused before anything happens
    for mesh, rank, msg in [("tp=16", "0", "tp must divide the number of KV groups"),
                            ("ep=2", "0", "axis ep is used by no partition or select rule"),
                            ("pp=3", "0", "2 values of {L} do not split evenly over pp=3"),
                            ("tp=4", "4", "rank 4 is outside the mesh"),
                            ("tp=3", "0", "tp must divide the number of KV groups"),
                            ("tp=2,tp=2", "0", "given twice"), ("tp", "0", "expected AXIS=SIZE"),
                            # 2^81 ranks: the product overflowed int64 (to a world of 0)
                            ("a=1048576,b=1048576,c=1048576,d=1048576,tp=2", "0",
                             "more than 16777216 ranks in all")]:
        p = ckref.run(CKPTFS, "inspect", src, "--mapping", MAP, "--mesh", mesh, "--rank", rank, check=False)
        assert p.returncode in (2, 4) and msg in p.stderr and p.stderr.count("\n") == 1, (mesh, p.stderr)
    p = ckref.run(CKPTFS, "inspect", src, "--mapping", MAP, "--mesh", "tp=2", check=False)
    assert p.returncode == 2 and "--mesh needs --rank" in p.stderr, p.stderr

    # a block-wise split ("blocks": 2 on dim 0, over tp=2) views the dim as
    # [blocks, rows]: one dim more. At 7 dims each rank holds row 0 or 1 of
    # each block; at 8 (the most a tensor has) it is refused in one line (it
    # wrote past a fixed array of 8)
    for nd in (7, 8):
        bw = os.path.join(d, f"blockwise{nd}")
        os.mkdir(bw)
        shape = (4,) + (1,) * (nd - 2) + (3,)
        w = np.arange(12, dtype=np.float32).reshape(shape)
        ckref.write_safetensors(os.path.join(bw, "model.safetensors"), {"w": ("F32", shape, w.tobytes())})
        bmap = os.path.join(d, f"blockwise{nd}.json")
        json.dump({"rules": [{"from": "w", "to": "w"}],
                   "partition": [{"match": "w", "spec": ["tp"] + [None] * (nd - 1),
                                  "blocks": [2] + [1] * (nd - 1)}]}, open(bmap, "w"))
        for r in range(2):
            out = os.path.join(d, f"blockwise{nd}-out{r}")
            p = ckref.run(CKPTFS, "convert", bw, out, "--mapping", bmap, "--mesh", "tp=2", "--rank", str(r),
                          "--quiet", check=False)
            if nd == 8:
                assert p.returncode == 4 and p.stderr.count("\n") == 1 and \
                    "a block-wise split of \"w\" needs a dim more than its 8" in p.stderr, p.stderr
                assert not os.path.exists(out)
            else:
                assert p.returncode == 0, p.stderr
                assert np.array_equal(arrays(out)["w"], w[[r, 2 + r]]), (r, arrays(out)["w"])
    print("block-wise split over tp=2 of a 7-dim tensor: each rank its row of each block; 8 dims refused")
    odd = os.path.join(d, "odd-vocab")
    ckref.run(MKCKPT, "--hidden", "128", "--heads", "16", "--kv-heads", "8", "--intermediate", "192",
              "--vocab", "255", "--layers", "1", odd)
    # without "pad" a vocabulary that does not split is refused
    m = json.load(open(MAP))
    for rule in m["partition"]:
        rule.pop("pad", None)
    nopad = os.path.join(d, "nopad.json")
    json.dump(m, open(nopad, "w"))
    p = ckref.run(CKPTFS, "convert", odd, os.path.join(d, "never"), "--mapping", nopad, "--mesh", "tp=2",
                  "--rank", "0", check=False)
    assert p.returncode == 4 and 'dim 0 of "embedding.word_embeddings.weight" (size 255) does not split' in p.stderr, p.stderr
    assert not os.path.exists(os.path.join(d, "never"))
    # the shipped mapping pads as Megatron does: zero rows up to a multiple of
    # make_vocab_size_divisible_by (128, or --set) x tp, whole views as tp=1
    odd_src = {k: v[2] for k, v in ckref.read_checkpoint_dir(odd).items()}
    hf = {"embedding.word_embeddings.weight": odd_src["model.embed_tokens.weight"],
          "output_layer.weight": odd_src["lm_head.weight"]}
    ckref.convert(CKPTFS, odd, os.path.join(d, "odd-global"), [MAP])
    oddg = arrays(os.path.join(d, "odd-global"))
    for k, w in hf.items():
        assert oddg[k].shape == (256, 128) and np.array_equal(oddg[k], ckref.pad_vocab(w, 128)), k
        assert not oddg[k][255:].any() and np.array_equal(oddg[k][:255], w), k
    for tp, setv, rows in ((2, None, 256), (4, None, 512), (2, 100, 400)):
        extra = ["--set", f"make_vocab_size_divisible_by={setv}"] if setv else []
        for r in range(tp):
            out = os.path.join(d, f"odd-pad-{tp}-{setv}", f"r{r}")
            ckref.convert(CKPTFS, odd, out, [MAP], "--mesh", f"tp={tp}", "--rank", str(r), *extra)
            local = arrays(out)
            for k, w in hf.items():
                want = np.split(ckref.pad_vocab(w, (setv or 128) * tp), tp, 0)[r]
                assert want.shape[0] == rows // tp and np.array_equal(local[k], want), (tp, setv, r, k)
            view = json.loads(ckref.run(CKPTFS, "inspect", odd, "--mapping", MAP, "--mesh", f"tp={tp}",
                                        "--rank", str(r), "--json", *extra).stdout)
            t = next(t for t in view["tensors"] if t["name"] == "output_layer.weight")
            assert t["global_shape"] == [rows, 128] and \
                t["fragments"][0]["global_offset"] == [rows // tp * r, 0], t
    # and the inverse takes the padding off: HF -> Megatron -> HF gives every byte back
    back = os.path.join(d, "odd-back")
    ckref.convert(CKPTFS, os.path.join(d, "odd-global"), back, ["megatron-to-llama-hf"])
    backa = arrays(back)
    assert set(backa) == set(odd_src) and all(np.array_equal(backa[k], odd_src[k]) for k in odd_src)
    # --set stands in for a missing config.json; no config.json is made up from it
    bare = os.path.join(d, "bare")
    os.makedirs(bare)
    shutil.copy(os.path.join(odd, "model.safetensors"), bare)
    sets = ["--set", "hidden_size=128", "--set", "num_attention_heads=16", "--set", "num_key_value_heads=8",
            "--set", "num_hidden_layers=1", "--set", "vocab_size=255"]
    p = ckref.run(CKPTFS, "inspect", bare, "--mapping", MAP, check=False)
    assert p.returncode == 4 and "hidden_size" in p.stderr, p.stderr
    ckref.convert(CKPTFS, bare, os.path.join(d, "bare-out"), [MAP], *sets)
    assert not os.path.exists(os.path.join(d, "bare-out", "config.json"))
    bare_out = arrays(os.path.join(d, "bare-out"))
    assert set(bare_out) == set(oddg) and all(np.array_equal(bare_out[k], oddg[k]) for k in oddg)
    if have_fuse():
        from mountlib import Mount
        with Mount(bare, [MAP], extra=sets) as m:
            assert not os.path.exists(m.path("config.json"))
            assert ckref.read_safetensors(m.path("model.safetensors"))["output_layer.weight"][2].shape == (256, 128)
    # "pad": true pads to a multiple of the axis size only
    m = json.load(open(MAP))
    for rule in m["partition"]:
        if "pad" in rule:
            rule["pad"] = True
    padmap = os.path.join(d, "pad.json")
    json.dump(m, open(padmap, "w"))
    view = json.loads(ckref.run(CKPTFS, "inspect", odd, "--mapping", padmap, "--mesh", "tp=2",
                                "--rank", "1", "--json").stdout)
    t = next(t for t in view["tensors"] if t["name"] == "output_layer.weight")
    assert t["global_shape"] == [256, 128] and t["shape"] == [128, 128], t
    # bad values: one line each, exit 2 (usage) or 4 (mapping)
    for setv, code, msg in (("x", 2, "expected NAME=INTEGER"), ("0", 4, "pad: the multiple must be"),
                            ("-3", 4, "pad: the multiple must be"), ("99999999999999999999", 2, "expected NAME=INTEGER")):
        p = ckref.run(CKPTFS, "inspect", odd, "--mapping", MAP, "--set", f"make_vocab_size_divisible_by={setv}",
                      check=False)
        assert p.returncode == code and msg in p.stderr and p.stderr.count("\n") == 1, (setv, p.stderr)
    many = [a for k in range(33) for a in ("--set", f"x{k}=1")]
    p = ckref.run(CKPTFS, "inspect", odd, "--mapping", MAP, *many, check=False)
    assert p.returncode == 2 and "at most 32 --set values" in p.stderr, p.stderr
    p = ckref.run(CKPTFS, "inspect", odd, "--mapping", MAP, "--set", "9bad=1", check=False)
    assert p.returncode == 2 and "expected NAME=INTEGER" in p.stderr, p.stderr
    print("vocabulary padding: 255 rows -> 256 whole and at tp=2, 512 at tp=4, 400 with --set 100 at tp=2; "
          "the inverse restores 255")


    # pipeline stages: pp=2,tp=2 on 4 layers; stage s holds layers 2s, 2s+1
    # numbered 0, 1 (as Megatron stores them), the embedding on the first
    # stage, the final norm and output layer on the last
    src4 = os.path.join(d, "llama4")
    ckref.run(MKCKPT, "--hidden", "128", "--heads", "16", "--kv-heads", "8", "--intermediate", "192",
              "--vocab", "256", "--layers", "4", "--dtype", "BF16", src4)
    full4 = os.path.join(d, "global4")
    ckref.convert(CKPTFS, src4, full4, [MAP])
    glob4 = arrays(full4)

    def stage_view(tpr, lo, hi, first, last):
        want = {}
        for k, w in ckref.megatron_rank(glob4, 2, tpr).items():
            parts = k.split(".")
            if k.startswith("decoder.layers."):
                L = int(parts[2])
                if lo <= L < hi:
                    want[".".join(parts[:2] + [str(L - lo)] + parts[3:])] = (w, k)
            elif k.startswith("embedding.") and first or not k.startswith("embedding.") and last:
                want[k] = (w, None)
        return want

    for r in range(4):
        pp, tpr = divmod(r, 2)
        out = os.path.join(d, "pp", f"r{r}")
        ckref.convert(CKPTFS, src4, out, [MAP], "--mesh", "pp=2,tp=2", "--rank", str(r))
        local = arrays(out)
        want = stage_view(tpr, 2 * pp, 2 * pp + 2, pp == 0, pp == 1)
        assert set(local) == set(want), (r, set(local) ^ set(want))
        for k, (w, g) in want.items():
            assert np.array_equal(local[k], w), (r, k)
        view = json.loads(ckref.run(CKPTFS, "inspect", src4, "--mapping", MAP, "--mesh", "pp=2,tp=2",
                                    "--rank", str(r), "--json").stdout)
        for t in view["tensors"]:
            g = want[t["name"]][1]
            assert t.get("global_name") == g, t  # the name before renumbering
            split = t["axis_fragmentations"] != [1] * len(t["shape"])
            assert t["replica_id"] == ([] if split else [tpr]), t  # never replicated over pp
    # uneven stages from explicit boundaries: stage 0 holds layer 0, stage 1 layers 1-3
    m = json.load(open(MAP))
    m["select"][0]["boundaries"] = [0, 1, 4]
    uneven = os.path.join(d, "uneven.json")
    json.dump(m, open(uneven, "w"))
    for pp in (0, 1):
        out = os.path.join(d, "uneven", f"pp{pp}")
        ckref.convert(CKPTFS, src4, out, [uneven], "--mesh", "pp=2", "--rank", str(pp))
        want = stage_view(0, [0, 1][pp], [1, 4][pp], pp == 0, pp == 1)
        want = {k: (glob4[g] if g else glob4[k]) for k, (w, g) in want.items()}  # tp=1: whole
        local = arrays(out)
        assert set(local) == set(want) and all(np.array_equal(local[k], want[k]) for k in want), pp
    m["select"][0]["boundaries"] = [0, 3]
    json.dump(m, open(uneven, "w"))
    p = ckref.run(CKPTFS, "inspect", src4, "--mapping", uneven, "--mesh", "pp=2", "--rank", "0", check=False)
    assert p.returncode == 4 and "boundaries need 3 values from 0 to 4" in p.stderr, p.stderr
    print("pp=2 (even and uneven): each stage holds its layers, renumbered, with embeddings/output on the ends")

    # expert parallelism: per-expert keys renumbered, and stacked experts split on dim 0
    mx = os.path.join(d, "mixtral")
    ckref.run(MKCKPT, "--model", "mixtral", mx)
    srcw = arrays(mx)
    EPMAP = os.path.join(os.path.dirname(MAP), "mixtral-expert-parallel.json")
    FUSED = os.path.join(os.path.dirname(MAP), "mixtral-hf-to-fused-experts.json")
    fused = os.path.join(d, "fused")
    ckref.convert(CKPTFS, mx, fused, [FUSED])
    fusedw = arrays(fused)
    for r in range(2):
        out = os.path.join(d, "ep", f"r{r}")
        ckref.convert(CKPTFS, mx, out, [EPMAP], "--mesh", "ep=2", "--rank", str(r))
        local = arrays(out)
        want = {}
        for k, w in srcw.items():
            parts = k.split(".")
            if ".experts." in k:
                E = int(parts[5])
                if 2 * r <= E < 2 * r + 2:
                    want[".".join(parts[:5] + [str(E - 2 * r)] + parts[6:])] = w
            else:
                want[k] = w
        assert set(local) == set(want) and all(np.array_equal(local[k], want[k]) for k in want), r
        out = os.path.join(d, "epf", f"r{r}")
        ckref.convert(CKPTFS, mx, out, [FUSED], "--mesh", "ep=2", "--rank", str(r))
        local = arrays(out)
        for k, w in fusedw.items():
            exp = np.split(w, 2, 0)[r] if ".experts." in k else w
            assert np.array_equal(local[k], exp), (r, k)
    p = ckref.run(CKPTFS, "inspect", mx, "--mapping", EPMAP, "--mesh", "ep=3", "--rank", "0", check=False)
    assert p.returncode == 4 and "4 values of {E} do not split evenly over ep=3" in p.stderr, p.stderr
    print("ep=2: per-expert keys renumbered per rank; stacked experts split on dim 0")

    # a rank requests only its bytes: every read of a tp=8 view of the sparse 8b
    # preset run through the engine without reading (inspect --io-plan)
    s8 = os.path.join(d, "sparse8b")
    ckref.run(MKCKPT, "--preset", "8b", "--dtype", "BF16", "--shards", "4", "--sparse", s8)
    for r in (0, 5):
        io = json.loads(ckref.run(CKPTFS, "inspect", s8, "--mapping", MAP, "--mesh", "tp=8",
                                  "--rank", str(r), "--io-plan").stdout)
        local = json.loads(ckref.run(CKPTFS, "inspect", s8, "--mapping", MAP, "--mesh", "tp=8",
                                     "--rank", str(r), "--json").stdout)["total_bytes"]
        assert io["view_bytes"] == local and io["source_bytes_requested"] == local, (r, io, local)
    print("tp=8 ranks of the sparse 8b preset request exactly their local bytes")

    # a per-rank mount: the rank's bytes and Megatron's ShardedTensor xattrs
    if have_fuse():
        want = {k: v.tobytes() for k, v in arrays(os.path.join(d, "tp4", "rank2")).items()}
        view = json.loads(ckref.run(CKPTFS, "inspect", src, "--mapping", MAP, "--mesh", "tp=4",
                                    "--rank", "2", "--json").stdout)
        mnt_tpl = os.path.join(d, "mnt-rank{rank}")
        os.mkdir(os.path.join(d, "mnt-rank2"))
        p = subprocess.run([CKPTFS, "mount", src, mnt_tpl, "--mapping", MAP, "--mesh", "tp=4",
                            "--rank", "2"], capture_output=True, text=True, timeout=60)
        mnt = os.path.join(d, "mnt-rank2")
        try:
            assert p.returncode == 0, p.stderr
            assert sorted(os.listdir(os.path.join(mnt, "tensors"))) == sorted(want)
            for t in view["tensors"]:
                f = os.path.join(mnt, "tensors", t["name"])
                assert read_random(f) == want[t["name"]], t["name"]
                for x in ("global_shape", "fragments", "axis_fragmentations", "replica_id"):
                    assert json.loads(os.getxattr(f, "user.ckptfs." + x)) == t[x], (t["name"], x)
            flat = ckref.read_safetensors(os.path.join(mnt, "model.safetensors"))
            assert {k: v[2].tobytes() for k, v in flat.items()} == want
        finally:
            subprocess.run(["fusermount3", "-u", mnt], check=False)
        print("per-rank mount (tp=4, rank 2 via {rank}): bytes and ShardedTensor xattrs match")

    # one daemon for four ranks (--ranks 0-3): rankR/ holds exactly what a
    # single-rank mount of R holds; replicated tensors are evaluated once for
    # all, and the daemon reads no more than four single-rank daemons would
    if have_fuse():
        from mountlib import Mount
        singles = []
        for r in range(4):
            with Mount(src, [MAP], "no_direct,no_stream", extra=["--mesh", "tp=4", "--rank", str(r)]) as m:
                for k in os.listdir(m.path("tensors")):
                    read_random(m.path("tensors", k))
                singles.append(m.stats()["source_bytes_read"])
        # no_direct, no_stream: every tensor through the shared cache (renames
        # would otherwise be read straight from the source, and casts and
        # fused blocks evaluated into each read's reply, per rank)
        with Mount(src, [MAP], "no_direct,no_stream", extra=["--mesh", "tp=4", "--ranks", "0-3"]) as m:
            assert sorted(os.listdir(m.dir)) == [f"rank{r}" for r in range(4)]
            union_bytes = 0
            seen = {}
            for r in range(4):
                want = {k: v.tobytes() for k, v in arrays(os.path.join(d, "tp4", f"rank{r}")).items()}
                view = json.loads(ckref.run(CKPTFS, "inspect", src, "--mapping", MAP, "--mesh", "tp=4",
                                            "--rank", str(r), "--json").stdout)
                assert sorted(os.listdir(m.path(f"rank{r}", "tensors"))) == sorted(want)
                for t in view["tensors"]:
                    f = m.path(f"rank{r}", "tensors", t["name"])
                    assert read_random(f) == want[t["name"]], (r, t["name"])
                    assert json.loads(os.getxattr(f, "user.ckptfs.replica_id")) == t["replica_id"]
                    key = (t["name"], want[t["name"]]) if t["replica_id"] else (t["name"], r)
                    # ranks 2 and 3 hold only vocabulary padding (256 rows
                    # padded to 512): the same zeros, one value for both
                    if t["name"] in ckref.VOCAB_KEYS and r >= 2:
                        assert not any(want[t["name"]]), t["name"]
                        key = (t["name"], "padding")
                    if key not in seen:  # replicated: one tensor for all ranks
                        seen[key] = 1
                        union_bytes += len(want[t["name"]])
                flat = ckref.read_safetensors(m.path(f"rank{r}", "model.safetensors"))
                assert {k: v[2].tobytes() for k, v in flat.items()} == want
                assert os.path.exists(m.path(f"rank{r}", f"model-rank-{r}-part-0.safetensors"))
            s = json.load(open(m.path("rank3", ".ckptfs", "stats.json")))  # the daemon's counters
            s0 = json.load(open(m.path("rank0", ".ckptfs", "stats.json")))
            # the same daemon's, but for the LOOKUP of rank0's stats.json itself
            assert s0.pop("lookup_requests") > s.pop("lookup_requests") and s == s0, (s, s0)
            assert s["cache_bytes"] == union_bytes, (s, union_bytes)  # replicated ones once
            assert s["source_bytes_read"] <= sum(singles), (s, singles)
        print(f"--ranks 0-3: one daemon serves every rank's tensors; {s['cache_bytes']} bytes "
              f"evaluated for {len(seen)} distinct tensors, read {s['source_bytes_read']} "
              f"vs {sum(singles)} by four daemons")
    p = ckref.run(CKPTFS, "inspect", src, "--mapping", MAP, "--mesh", "tp=4", "--ranks", "0-3", check=False)
    assert p.returncode == 2 and "--ranks is for mount" in p.stderr, p.stderr
    for bad, msg in [("3-1", "expected ascending ranks"), ("0-4", "rank 4 is outside the mesh"), ("1,1", "ascending")]:
        p = ckref.run(CKPTFS, "mount", src, d, "--mapping", MAP, "--mesh", "tp=4", "--ranks", bad, check=False)
        assert p.returncode == 2 and msg in p.stderr, (bad, p.stderr)
    # --ranks local from a launcher's environment: a node of 2^63-1 ranks
    # (rank + size overflowed int64: the loop ran no times)
    env = dict(os.environ, RANK="5", LOCAL_RANK="0", LOCAL_WORLD_SIZE=str(2**63 - 1))
    p = subprocess.run([CKPTFS, "mount", src, d, "--mapping", MAP, "--mesh", "dp=4,tp=2", "--ranks", "local"],
                       capture_output=True, text=True, env=env, timeout=60)
    assert p.returncode == 2 and p.stderr.count("\n") == 1 and \
        "rank 8 is outside the mesh (world size 8)" in p.stderr, (p.returncode, p.stderr)
