"""Trusting a mapping (issue #21):
- `ckptfs diff` finds one flipped element in a 1 GiB sparse-backed tensor
  and names it (key, flat position computed here); tolerances (--atol, --ulp)
  accept exactly the changes they should; keys, dtypes and shapes that
  differ are reported; --json agrees;
- `ckptfs check-mapping` proves every shipped mapping with an inverse on its
  generated model (and a Megatron source back through HF), and catches a
  deliberately broken inverse at the first element that differs, whose two
  values are checked against the source file read here;
- the ambiguity lint warns on a constructed rule and stays quiet on the
  shipped mappings (their ambiguous rules say how they are checked);
- `inspect --explain KEY[INDEX]` names the source element of fused QKV rows,
  checked against the grouped-query layout computed here."""
import json
import os
import shutil
import struct
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import ckref  # noqa: E402

CKPTFS, MKCKPT = os.environ["CKPTFS"], os.environ["MKCKPT"]
MAPS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "mappings")


def mp(name):
    return os.path.join(MAPS, name)


def run(*args, timeout=600):
    return subprocess.run([CKPTFS, *args], capture_output=True, text=True, timeout=timeout)


def sparse_pair(d):
    """A: 1 GiB of zeros in a sparse file (+ a small tensor); B: the same
    with one element set. Returns (A, B, flat index, rows, cols)."""
    rows, cols = 16384, 16384  # F32: 1 GiB
    a, b = os.path.join(d, "A"), os.path.join(d, "B")
    os.mkdir(a)
    os.mkdir(b)
    header = {"big.weight": {"dtype": "F32", "shape": [rows, cols], "data_offsets": [0, rows * cols * 4]},
              "small.bias": {"dtype": "F32", "shape": [4], "data_offsets": [rows * cols * 4, rows * cols * 4 + 16]}}
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    data0 = 8 + len(text)
    for path in (a, b):
        f = os.path.join(path, "model.safetensors")
        with open(f, "wb") as fh:
            fh.write(struct.pack("<Q", len(text)) + text)
            fh.truncate(data0 + rows * cols * 4 + 16)
    flat = 12345 * cols + 678
    with open(os.path.join(b, "model.safetensors"), "r+b") as fh:
        fh.seek(data0 + 4 * flat)
        fh.write(struct.pack("<f", 1.5))
    return a, b, flat, rows, cols, data0


def diff_tests(d):
    a, b, flat, rows, cols, data0 = sparse_pair(d)
    p = run("diff", a, b)
    assert p.returncode == 5, (p.returncode, p.stdout, p.stderr)
    r, c = divmod(flat, cols)
    want = f"values differ: big.weight: 1 of {rows * cols} elements (max abs 1.5, max ulp "
    assert want in p.stdout and f"first at [{r}, {c}]: A 0, B 1.5" in p.stdout, p.stdout
    assert "diff: 2 tensors compared" in p.stdout and "1 differ in values" in p.stdout, p.stdout
    js = json.loads(run("diff", a, b, "--json").stdout)
    assert js["equal"] is False and js["values_differ"] == 1
    (only,) = js["differences"]
    assert only["key"] == "big.weight" and only["first"] == [r, c] and only["differing"] == 1, only
    # tolerances: 1.5 apart passes --atol 1.5, not --atol 1.4
    assert run("diff", a, b, "--atol", "1.5").returncode == 0
    assert run("diff", a, b, "--atol", "1.4").returncode == 5
    # one unit in the last place: --ulp 1 accepts it, the default (exact) does not
    with open(os.path.join(a, "model.safetensors"), "r+b") as fh:
        fh.seek(data0 + 4 * flat)
        fh.write(struct.pack("<I", struct.unpack("<I", struct.pack("<f", 1.5))[0] + 1))
    p = run("diff", a, b)
    assert p.returncode == 5 and "max ulp 1)" in p.stdout, p.stdout
    assert run("diff", a, b, "--ulp", "1").returncode == 0
    assert run("diff", a, b, "--rtol", "1e-6").returncode == 0
    # keys, dtypes and shapes
    c1, c2 = os.path.join(d, "c1"), os.path.join(d, "c2")
    os.mkdir(c1)
    os.mkdir(c2)
    one = struct.pack("<4f", 1, 2, 3, 4)
    ckref.write_safetensors(os.path.join(c1, "model.safetensors"),
                            {"a": ("F32", (4,), one), "b": ("F32", (4,), one), "c": ("F32", (4,), one),
                             "gone": ("F32", (1,), one[:4])})
    ckref.write_safetensors(os.path.join(c2, "model.safetensors"),
                            {"a": ("F32", (4,), one), "b": ("F32", (2, 2), one),
                             "c": ("F16", (4,), struct.pack("<4e", 1, 2, 3, 4)), "new": ("F32", (1,), one[:4])})
    p = run("diff", c1, c2)
    assert p.returncode == 5, p.stdout
    for line in ("only in A: gone (F32 [1])", "only in B: new (F32 [1])",
                 "shape differs: b: A [4], B [2, 2]", "dtype differs: c: A F32, B F16"):
        assert line in p.stdout, (line, p.stdout)
    assert "values differ: c" not in p.stdout, "F16 1..4 equal F32 1..4 in value"
    print("diff: one flipped element of a 1 GiB tensor found and named; tolerances; keys, dtypes, shapes")


def check_mapping_tests(d):
    pairs = [("llama-hf-to-megatron.json", "megatron-to-llama-hf.json", "llama"),
             ("gpt2-conv1d-to-linear.json", "gpt2-linear-to-conv1d.json", "gpt2"),
             ("mixtral-hf-to-fused-experts.json", "mixtral-fused-experts-to-hf.json", "mixtral"),
             ("identity.json", "identity.json", "llama")]
    for m, inv, model in pairs:
        p = run("check-mapping", mp(m), "--inverse", mp(inv), "--model", model)
        assert p.returncode == 0 and "byte for byte" in p.stdout, (m, p.stdout, p.stderr)
    # the other direction, from a Megatron checkpoint (GQA: 8 heads, 2 groups)
    hf, meg = os.path.join(d, "hf"), os.path.join(d, "meg")
    ckref.run(MKCKPT, "--model", "llama", "--heads", "8", "--kv-heads", "2", "--dtype", "BF16", hf)
    ckref.convert(CKPTFS, hf, meg, [mp("llama-hf-to-megatron.json")])
    p = run("check-mapping", mp("megatron-to-llama-hf.json"), "--inverse", mp("llama-hf-to-megatron.json"),
            "--source", meg)
    assert p.returncode == 0, p.stdout + p.stderr
    # a broken inverse: k and v swapped
    broken = json.load(open(mp("megatron-to-llama-hf.json")))
    for rule in broken["rules"]:
        if isinstance(rule.get("expr"), dict) and "k" in rule["expr"]:
            rule["expr"]["k"], rule["expr"]["v"] = rule["expr"]["v"], rule["expr"]["k"]
    bad = os.path.join(d, "broken.json")
    json.dump(broken, open(bad, "w"))
    p = run("check-mapping", mp("llama-hf-to-megatron.json"), "--inverse", bad, "--source", hf)
    assert p.returncode == 5 and "does NOT reproduce" in p.stdout, p.stdout + p.stderr
    src = ckref.read_checkpoint_dir(hf)
    lines = [ln for ln in p.stdout.splitlines() if ln.startswith("values differ: ")]
    assert len(lines) == 4, lines  # k and v of both layers
    for ln in lines:
        key = ln.split(": ")[1]
        layer = key.split(".")[2]
        other = key.replace(".k_proj.", ".v_proj.") if ".k_proj." in key else key.replace(".v_proj.", ".k_proj.")
        idx = [int(x) for x in ln.split("first at [")[1].split("]")[0].split(", ")]
        va, vb = (float(x) for x in (ln.split(": A ")[1].split(", B ")[0], ln.split(", B ")[1]))
        want_a = ckref.as_f32("BF16", src[key][2])[tuple(idx)]
        want_b = ckref.as_f32("BF16", src[other][2])[tuple(idx)]
        assert (va, vb) == (want_a, want_b), (ln, want_a, want_b, layer)
        # and it is the first element where k and v differ
        ka, kb = ckref.as_f32("BF16", src[key][2]).ravel(), ckref.as_f32("BF16", src[other][2]).ravel()
        first = next(i for i in range(ka.size) if ka[i] != kb[i])
        assert first == idx[0] * src[key][1][1] + idx[1], (ln, first)
    print("check-mapping: 5 shipped inverse pairs proven byte for byte; a swapped k/v inverse caught at its first element")


def lint_tests(d):
    quiet = [("llama", ["--heads", "8", "--kv-heads", "2"], ["llama-hf-to-megatron.json"]),
             ("gpt2", [], ["gpt2-conv1d-to-linear.json"]),
             ("mixtral", [], ["mixtral-hf-to-fused-experts.json"]),
             ("mixtral", [], ["mixtral-expert-parallel.json"]),
             ("llama", [], ["strip-wrapper-prefixes.json"]),
             ("llama", [], ["identity.json"])]
    for i, (model, extra, maps) in enumerate(quiet):
        src = os.path.join(d, f"lint{i}")
        ckref.run(MKCKPT, "--model", model, *extra, src)
        args = ["inspect", src]
        for m in maps:
            args += ["--mapping", mp(m)]
        p = run(*args)
        assert p.returncode == 0 and "warning" not in p.stderr, (maps, p.stderr)
        if maps[0].startswith("llama-hf"):  # and its inverse over the converted view
            out = os.path.join(d, f"lint{i}-meg")
            ckref.convert(CKPTFS, src, out, [mp(maps[0])])
            p = run("inspect", out, "--mapping", mp("megatron-to-llama-hf.json"))
            assert p.returncode == 0 and "warning" not in p.stderr, p.stderr
        if model == "gpt2":
            out = os.path.join(d, f"lint{i}-lin")
            ckref.convert(CKPTFS, src, out, [mp(maps[0])])
            p = run("inspect", out, "--mapping", mp("gpt2-linear-to-conv1d.json"))
            assert p.returncode == 0 and "warning" not in p.stderr, p.stderr
    src = os.path.join(d, "lint0")
    amb = os.path.join(d, "ambiguous.json")
    json.dump({"unused": "keep", "rules": [
        {"from": "model.layers.{L}.self_attn.o_proj.weight", "to": "o.{L}", "expr": "x.t()"},
        {"from": {"g": "model.layers.{L}.mlp.gate_proj.weight", "u": "model.layers.{L}.mlp.up_proj.weight"},
         "to": "fc1.{L}", "expr": "cat([u, g], 0)"},
        {"from": "model.layers.{L}.self_attn.q_proj.weight", "to": "q.{L}", "expr": "x.view(8, 8, 64)"},
        {"from": "model.layers.{L}.mlp.down_proj.weight", "to": "d.{L}", "expr": "x.chunk(64, 1)[0]"}]},
        open(amb, "w"))
    p = run("inspect", src, "--mapping", amb)
    assert p.returncode == 0, p.stderr
    warns = [ln for ln in p.stderr.splitlines() if ln.startswith("ckptfs: warning: ")]
    assert len(warns) == 4, p.stderr  # one per rule, not per layer
    for n, what in [(1, "transposes dims of equal size 64"), (2, "concatenates parts of equal size"),
                    (3, "reshapes into two dims of equal size 8"), (4, "chunk into 64, which is also the size of dim 0")]:
        assert any(f"rule {n} (" in w and what in w for w in warns), (n, what, warns)
    js = json.loads(run("inspect", src, "--mapping", amb, "--json").stdout)
    assert len(js["warnings"]) == 4
    print("lint: four ambiguous rules warned once each; the shipped mappings are quiet")


def explain_tests(d):
    src = os.path.join(d, "lint0")  # llama tiny, 8 heads, 2 kv groups, hidden 64
    cfg = json.load(open(os.path.join(src, "config.json")))
    H, nh, ng = cfg["hidden_size"], cfg["num_attention_heads"], cfg["num_key_value_heads"]
    hd, hpg = H // nh, nh // ng
    key = "decoder.layers.1.self_attention.linear_qkv.weight"
    for row in range(0, (nh + 2 * ng) * hd, 5):
        g, r = divmod(row, (hpg + 2) * hd)  # Megatron: per group [q heads; k; v]
        if r < hpg * hd:
            want = f"model.layers.1.self_attn.q_proj.weight[{g * hpg * hd + r}, 7]"
        elif r < (hpg + 1) * hd:
            want = f"model.layers.1.self_attn.k_proj.weight[{g * hd + r - hpg * hd}, 7]"
        else:
            want = f"model.layers.1.self_attn.v_proj.weight[{g * hd + r - (hpg + 1) * hd}, 7]"
        p = run("inspect", src, "--mapping", mp("llama-hf-to-megatron.json"), "--explain", f"{key}[{row}, 7]")
        assert p.returncode == 0 and p.stdout.strip() == f"{key}[{row}, 7] = {want} (F32)", (row, p.stdout, want)
    p = run("inspect", src, "--mapping", mp("llama-hf-to-megatron.json"), "--explain", key)
    assert p.returncode == 0 and f"{ng * 3} pieces" in p.stdout, p.stdout
    p = run("inspect", src, "--explain", "no.such.key")
    assert p.returncode == 2 and "no tensor" in p.stderr
    print("explain: every 5th fused QKV row traced to its q/k/v source row (grouped-query layout)")


def mapping_names(d):
    """--mapping NAME finds shipped mappings; `ckptfs mappings` lists them all
    and, with --for, says which plan over a checkpoint."""
    src = os.path.join(d, "lint0")
    shipped = sorted(f[:-5] for f in os.listdir(MAPS) if f.endswith(".json"))
    js = json.loads(run("mappings", "--json").stdout)
    assert [m["name"] for m in js] == shipped, js
    for m in js:
        want = json.load(open(mp(m["name"] + ".json")))
        assert m["description"] == want["description"] and m["architectures"] == want["architectures"]
    by_path = run("inspect", src, "--mapping", mp("llama-hf-to-megatron.json"), "--json").stdout
    for name in ("llama-hf-to-megatron", "llama-hf-to-megatron.json"):
        assert run("inspect", src, "--mapping", name, "--json").stdout == by_path, name
    p = run("inspect", src, "--mapping", "no-such-mapping")
    assert p.returncode == 4 and "neither a file nor a shipped mapping" in p.stderr, p.stderr
    # a directory in CKPTFS_MAPPING_PATH comes first
    own = os.path.join(d, "own")
    os.mkdir(own)
    json.dump({"rules": [{"from": "{k:path}", "to": "mine.{k}"}]}, open(os.path.join(own, "identity.json"), "w"))
    p = subprocess.run([CKPTFS, "inspect", src, "--mapping", "identity", "--json"], capture_output=True,
                       text=True, env=dict(os.environ, CKPTFS_MAPPING_PATH=own))
    assert all(t["name"].startswith("mine.") for t in json.loads(p.stdout)["tensors"]), p.stdout[:300]
    rows = json.loads(run("mappings", "--for", src, "--json").stdout)
    applies = {m["name"] for m in rows if m["applies"]}
    assert applies == {"identity", "llama-hf-to-megatron", "strip-wrapper-prefixes", "hf-llama-to-gguf",
                       "llama-hf-to-megatron-torch-dist", "llama-hf-to-easydel"}, applies
    gpt2 = next(m for m in rows if m["name"] == "gpt2-conv1d-to-linear")
    assert gpt2["why"] == "reads GPT2LMHeadModel, the source is LlamaForCausalLM", gpt2
    print("mappings: listed with descriptions; found by name; --for names the six that apply to a Llama")


def main():
    d = tempfile.mkdtemp(prefix="ckptfs-verify-")
    try:
        diff_tests(d)
        check_mapping_tests(d)
        lint_tests(d)
        explain_tests(d)
        mapping_names(d)
    finally:
        shutil.rmtree(d, ignore_errors=True)


if __name__ == "__main__":
    main()
