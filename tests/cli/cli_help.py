"""The CLI's option tables (issue #16): every verb's options are one table,
`ckptfs VERB --help` lists every option, the parser accepts every option the
help lists (a flag alone, a valued option with a value) and refuses one it
does not, and the README's CLI block names every option the help lists, so
help, parsing and documentation cannot drift apart. The same for mount's -o
options: each one `mount --help` lists is parsed, named in the README's
mount options, and the serving ones in libckptfs's header (its open
options)."""
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
    opts, section = [], None
    for line in p.stdout.splitlines():
        if not line.startswith(" "):
            section = line
        if section not in ("options:", "view options:"):
            continue
        m = re.match(r"^    (--?[a-z0-9-]+)(?: (\S+))?", line)
        if m:
            opts.append((m.group(1), m.group(2)))
    return p.stdout, opts


def readme_cli():
    text = open(README).read()
    start = text.index("## CLI")
    block = text[start:text.index("```", text.index("```", start) + 3)]
    return block


VERBS = (  # verb, operands, the view options it takes, options at least
    ("convert", ["/nonexistent-src", "/nonexistent-out"], "all", 12),
    ("inspect", ["/nonexistent-src"], "all", 8),
    ("mount", ["/nonexistent-src", "/nonexistent-mnt"], "all", 3),
    ("diff", ["/nonexistent-a", "/nonexistent-b"], "maps", 6),
    ("check-mapping", ["/nonexistent-map"], None, 4),
    ("mappings", [], None, 2),
)
VALUE = {"-o": "nonempty"}  # -o takes an option list


def check_verb(block, verb, operands, view, least):
    out, opts = help_options(verb)
    assert len(opts) >= least, (verb, opts)
    names = [n for n, _ in opts]
    assert len(names) == len(set(names)), names
    # the view options: all, --mapping and --set, or none
    assert ("--mapping" in names) == (view is not None) and ("--mesh" in names) == (view == "all"), (verb, names)
    for name, arg in opts:
        # documented in the README's CLI block
        assert re.search(re.escape(name) + r"(?![a-z-])", block), f"README's CLI block lacks {verb} {name}"
        # accepted by the parser: whatever fails next, it is not the option itself
        p = run(verb, *operands, name, *([VALUE.get(name, "1")] if arg else []))
        assert "unknown option" not in p.stderr and "needs a value" not in p.stderr, (verb, name, p.stderr)
        if arg:  # and a valued option without its value is refused by name
            p = run(verb, *operands, name)
            assert p.returncode == 2 and f"{name} needs a value" in p.stderr, (name, p.stderr)
    if view != "all":  # a view option the verb does not take is refused
        p = run(verb, *operands, "--mesh", "tp=2")
        assert p.returncode == 2 and "unknown option --mesh" in p.stderr, (verb, p.stderr)
    p = run(verb, *operands, "--no-such-option")
    assert p.returncode == 2 and "unknown option --no-such-option" in p.stderr, p.stderr
    assert p.stderr.count("\n") == 1, p.stderr
    p = run(verb, *operands, "extra-1", "extra-2", "extra-3")
    assert p.returncode == 2 and p.stderr.count("\n") == 1, (verb, p.stderr)
    print(f"{verb}: {len(opts)} options in --help, all parsed, all in the README; "
          f"unknown and valueless options refused in one line")
    return out


def check_mount_o(out):
    """mount's -o options: the serving ones (also libckptfs's) and the mount's own."""
    readme = open(README).read()
    mount_text = readme[readme.index("Options (`ckptfs mount --help`"):]
    header = open(os.path.join(os.path.dirname(README), "src", "lib", "ckptfs.h")).read()
    section, o_opts = None, []
    for line in out.splitlines():
        if not line.startswith(" "):
            section = line.split(" ")[0]
        m = re.match(r"^    -o ([a-z_0-9]+)(\[?=)?", line)
        if m:
            o_opts.append((section, m.group(1), m.group(2)))
    serving = [n for s, n, _ in o_opts if s == "serving"]
    own = [n for s, n, _ in o_opts if s == "mount"]
    assert len(serving) >= 20 and len(own) == 5, o_opts
    assert len(set(serving + own)) == len(serving + own), o_opts
    for section, name, eq in o_opts:
        assert re.search("`" + name + r"[`=\[]", mount_text), f"README's mount options lack {name}"
        if section == "serving":
            assert re.search(r"[ *]" + name + r"[ =\[\n]", header.split("int ckptfs_open(")[0]), \
                f"ckptfs.h's open options lack {name}"
        opt = name + ("=1" if eq == "=" else "")
        p = run("mount", "/nonexistent-src", "/nonexistent-mnt", "-o", opt)
        assert p.returncode != 0 and "unknown option" not in p.stderr, (opt, p.stderr)
        if eq is None:  # a flag refuses a value
            p = run("mount", "/nonexistent-src", "/nonexistent-mnt", "-o", name + "=1")
            assert p.returncode == 2 and "a flag takes no value" in p.stderr, (name, p.stderr)
        p = run("mount", "/nonexistent-src", "/nonexistent-mnt", "-o", name + "x")
        assert p.returncode == 2 and f"unknown option -o {name}x" in p.stderr, (name, p.stderr)
    print(f"mount -o: {len(serving)} serving options (all in ckptfs.h) and {len(own)} of the "
          f"mount's own, all parsed, all in the README")


def main():
    block = readme_cli()
    for verb, operands, view, least in VERBS:
        out = check_verb(block, verb, operands, view, least)
        if verb == "mount":
            check_mount_o(out)
    # `ckptfs help` shows every verb's synopsis from the same tables
    p = run("help")
    for verb, operands, _, _ in VERBS:
        assert "\n  " + " ".join([verb] + [o.split("-")[1].upper() for o in operands]) in p.stdout or \
            f"\n  {verb} " in p.stdout, (verb, p.stdout)


if __name__ == "__main__":
    main()
