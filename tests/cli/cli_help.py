"""The CLI's option tables (issue #16): for each verb whose options are one
table, `ckptfs VERB --help` lists every option, the parser accepts every
option the help lists (a flag alone, a valued option with a value) and
refuses one it does not, and the README's CLI block names every option the
help lists, so help, parsing and documentation cannot drift apart."""
import os
import re
import subprocess

CKPTFS = os.environ["CKPTFS"]
README = os.path.join(os.environ.get("TESTS_DIR", os.path.dirname(__file__) + "/.."), "..", "README.md")


def run(*args):
    return subprocess.run([CKPTFS, *args], capture_output=True, text=True, timeout=30)


def help_options(verb):
    """(name, arg or None) for each option line of `ckptfs VERB --help`."""
    p = run(verb, "--help")
    assert p.returncode == 0 and p.stdout.startswith("usage:\n"), p
    opts = []
    for line in p.stdout.splitlines():
        m = re.match(r"^    (--[a-z0-9-]+)(?: (\S+))?", line)
        if m:
            opts.append((m.group(1), m.group(2)))
    return p.stdout, opts


def readme_cli():
    text = open(README).read()
    start = text.index("## CLI")
    block = text[start:text.index("```", text.index("```", start) + 3)]
    return block


def main():
    block = readme_cli()
    for verb, operands in (("convert", ["/nonexistent-src", "/nonexistent-out"]),
                           ("inspect", ["/nonexistent-src"])):
        out, opts = help_options(verb)
        assert len(opts) >= 8, (verb, opts)
        names = [n for n, _ in opts]
        assert len(names) == len(set(names)), names
        assert "--mapping" in names and "--mesh" in names, names  # the view options too
        for name, arg in opts:
            # documented in the README's CLI block
            assert name in block, f"README's CLI block lacks {verb} {name}"
            # accepted by the parser: whatever fails next, it is not the option itself
            p = run(verb, *operands, name, *(["1"] if arg else []))
            assert "unknown option" not in p.stderr and "needs a value" not in p.stderr, (name, p.stderr)
            if arg:  # and a valued option without its value is refused by name
                p = run(verb, *operands, name)
                assert p.returncode == 2 and f"{name} needs a value" in p.stderr, (name, p.stderr)
        p = run(verb, *operands, "--no-such-option")
        assert p.returncode == 2 and "unknown option --no-such-option" in p.stderr, p.stderr
        assert p.stderr.count("\n") == 1, p.stderr
        p = run(verb)
        assert p.returncode == 2 and f"usage: ckptfs {verb}" in p.stderr, p.stderr
        print(f"{verb}: {len(opts)} options in --help, all parsed, all in the README; "
              f"unknown and valueless options refused in one line")
    # `ckptfs help` shows every verb's synopsis from the same tables
    p = run("help")
    assert p.returncode == 0 and "  convert SOURCE OUTDIR" in p.stdout and "  inspect SOURCE" in p.stdout, p.stdout


if __name__ == "__main__":
    main()
