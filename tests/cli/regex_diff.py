"""ckptfs's ECMAScript regex engine (src/util/ecma_re.c: llama-quantize's
--tensor-type patterns, ckptfs's --gguf-tensor-type) against JavaScript's
RegExp (node: the grammar's own engine) on random patterns and subjects;
the constructs it refuses, refused with the offset; and patterns that make
a backtracking engine exponential, answered (an NFA's linear search)."""
import json
import os
import random
import subprocess
import sys
import tempfile

PROBE = os.environ["RE_PROBE"]


def ask(cases):
    """The engine's answers: 1, 0, or "E message"."""
    text = "".join(f"{p}\t{s}\n" for p, s in cases)
    out = subprocess.run([PROBE], input=text.encode(), capture_output=True, check=True).stdout.decode()
    return [int(line) if line in ("0", "1") else line for line in out.splitlines()]


def node(cases):
    """RegExp(p).test(s) for each case, in node: 1, 0, or "E" (a
    SyntaxError)."""
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
        json.dump(cases, f)
    try:
        js = ("const c = JSON.parse(require('fs').readFileSync(process.argv[1], 'utf8'));"
              "const t = (p, s) => { try { return new RegExp(p).test(s) ? 1 : 0 } catch (e) { return 'E' } };"
              "console.log(JSON.stringify(c.map(([p, s]) => t(p, s))));")
        out = subprocess.run(["node", "-e", js, f.name], capture_output=True, text=True, check=True).stdout
    finally:
        os.unlink(f.name)
    return json.loads(out)


LIT = "ab_0.-"


def atom(r, depth):
    k = r.randrange(12 if depth < 3 else 9)
    if k <= 2:
        c = r.choice(LIT)
        return "\\" + c if c in ".-" and r.random() < 0.7 else c
    if k == 3:
        return "."
    if k == 4:
        return r.choice(["\\d", "\\w", "\\s", "\\D", "\\W", "\\S", "\\x61", "\\u0062", "\\t", "\\_", "\\-"])
    if k <= 6:  # a class
        parts = []
        for _ in range(r.randrange(0, 4)):
            parts.append(r.choice(["a", "b", "_", "0", "a-c", "0-9", "\\d", "\\w", "\\s", "\\W", ".", "\\]",
                                   "\\-", "\\b", "x-z", "-"]))
        return "[" + ("^" if r.random() < 0.3 else "") + "".join(parts) + "]"
    if k <= 8:
        return r.choice(["^", "$", "\\b", "\\B"])
    return "(" + ("?:" if r.random() < 0.5 else "") + alt(r, depth + 1) + ")"


def quant(r):
    q = r.choice(["*", "+", "?", "{0}", "{1}", "{2}", "{0,}", "{2,}", "{1,3}", "{0,2}", "{3,3}"])
    return q + ("?" if r.random() < 0.2 else "")


def alt(r, depth=0):
    cats = []
    for _ in range(1 if r.random() < 0.6 else r.randrange(2, 4)):
        terms = []
        for _ in range(r.randrange(0, 5)):
            a = atom(r, depth)
            assertion = a in ("^", "$", "\\b", "\\B")
            terms.append(a + (quant(r) if not assertion and r.random() < 0.35 else ""))
        cats.append("".join(terms))
    return "|".join(cats)


def differential():
    r = random.Random(1234)
    cases = []
    for _ in range(3000):
        p = alt(r)
        for _ in range(6):  # random bytes, or runs (counts), among them \r (no .)
            cases.append((p, "".join(r.choice("ab_0.- 1xZ\r") * (r.randrange(1, 5) if r.random() < 0.4 else 1)
                                     for _ in range(r.randrange(0, 10)))))
    # every count form against runs of every length around it
    for m in range(0, 4):
        for q in (f"{{{m}}}", f"{{{m},}}", *(f"{{{m},{n}}}" for n in range(m, 5))):
            for p in (f"^a{q}$", f"^(?:ab|c){q}$", f"^(a?){q}b$", f"x(?:a{q})+y"):
                cases += [(p, s) for k in range(0, 7) for s in ("a" * k, "ab" * k, "c" * k + "b", f"x{'a' * k}y")]
    # llama-quantize's patterns in the wild, on llama.cpp's tensor names
    names = [f"blk.{i}.{t}.weight" for i in (0, 1, 7, 12, 31, 47) for t in
             ("attn_q", "attn_k", "attn_v", "attn_output", "ffn_down", "ffn_up", "ffn_gate", "ffn_down_exps",
              "ffn_gate_inp", "attn_norm")] + ["token_embd.weight", "output.weight", "output_norm.weight"]
    for p in ("ffn_down", "attn_v=q8_0", r"blk\.[0-9]\.", r"blk\.(0|1|2)\.ffn_down", r"\.(1[0-9]|2[0-9])\.",
              r"ffn_(up|gate)_exps", r"^blk\.\d+\.attn_(q|k)\.weight$", r"(?:attn|ffn)_.*", r"^output\.weight$",
              r"blk\.([0-9]|1[0-5])\.ffn_down", r"\bffn_down\b", r"exps", r"blk\.\d{2}\.", r"token_embd|output\.",
              r"attn_[qkv]\.", r"[^_]down"):
        cases += [(p, n) for n in names]
    got, want = ask(cases), node(cases)
    # a range from or to \d, \s or \w: JavaScript's web-compatibility
    # grammar (Annex B) reads its - as itself; ckptfs refuses it, as
    # libstdc++'s std::regex does. Every other refusal must be RegExp's.
    class_end = [c for c, g, w in zip(cases, got, want) if isinstance(g, str) and w != "E" and "whose end" in g]
    wrong = [(c, g, w) for c, g, w in zip(cases, got, want)
             if (g if not isinstance(g, str) else "E") != w and c not in class_end]
    assert not wrong, f"{len(wrong)} of {len(cases)} answers differ from RegExp's, first: {wrong[:5]}"
    n_ok = sum(1 for g in got if not isinstance(g, str))
    assert n_ok > 0.8 * len(cases), n_ok
    print(f"{len(cases)} searches ({len(set(p for p, _ in cases))} patterns; {sum(g == 1 for g in got)} matches, "
          f"{sum(g == 0 for g in got)} not, {len(cases) - n_ok} refused as RegExp refuses them or ranges ending in a "
          f"class, {len(class_end)}): RegExp's answers")


def refusals():
    cases = [("(?=a)", "lookarounds"), ("(?!a)", "lookarounds"), ("(?<n>a)", "lookarounds and named"),
             ("(a)\\1", "back-references"), ("a{3", "a { that is not a count"), ("{2}", "a { that is not a count"),
             ("a{2,1}", "m under n"), ("[z-a]", "out of order"), ("[\\d-z]", "whose end is a class"),
             ("*a", "nothing to repeat"), ("a**", "a quantifier after a quantifier"), ("^*", "an assertion"),
             ("(a", "a ( without its )"), ("a)", "a ) without its ("), ("[ab", "a [ without its ]"),
             ("a\\", "a \\ at the end"), ("a{1001}", "a count over 1000"), ("\\xg1", "\\x takes two hex"),
             ("\\u00e9", "\\u past ASCII"), ("\\c1", "\\c takes a letter"), ("\\012", "octal"),
             ("(" * 65 + ")" * 65, "nested deeper than 64"), ("(a{1000}){1000}", "20000 instructions"),
             ("(?:(?:a{200}){200})", "20000 instructions")]
    got = ask([(p, "a") for p, _ in cases])
    for (p, says), g in zip(cases, got):
        assert isinstance(g, str) and says in g and g.startswith("E at "), (p[:40], g)
    # the limits themselves are taken
    ok = [("(" * 64 + "a" + ")" * 64, "a", 1), ("a{1000}", "a" * 1000, 1), ("a{1000}", "a" * 999, 0),
          ("^(?:a|b){2,}$", "ab" * 500, 1)]
    assert ask([(p, s) for p, s, _ in ok]) == [w for _, _, w in ok]
    print(f"{len(cases)} constructs refused, each naming its offset; the limits (64 groups deep, a count of "
          "1000) taken")


def pathological():
    """Patterns that take a backtracking engine exponential or quadratic
    time; the answer follows from the subject (no b, no y in it)."""
    n = 20000
    cases = [("(a*)*b", "a" * n, 0), ("(a|a)*b", "a" * n, 0), ("(a|aa)+$", "a" * n + "!", 0),
             ("(x+x+)+y", "x" * n, 0), ("(.*a){12}", "a" * 11 + "b" * n, 0), ("(.*a){12}", "a" * 12, 1),
             ("^(a?){25}a{25}$", "a" * 25, 1)]
    got = ask([(p, s) for p, s, _ in cases])
    assert got == [w for _, _, w in cases], got
    print(f"{len(cases)} patterns that make backtracking engines exponential, on subjects of up to {n} bytes: "
          "answered")


def main():
    differential()
    refusals()
    pathological()


if __name__ == "__main__":
    sys.exit(main())
