"""Prints each Check runner's summary line from meson's test logs and one
closing line 'N passed, N failed, N skipped' over every build given."""
import json
import os
import sys

passed = failed = skipped = 0
for build in sys.argv[1:]:
    path = os.path.join(build, "meson-logs", "testlog.json")
    with open(path) as f:
        for line in f:
            t = json.loads(line)
            res = t["result"]
            for out in (t.get("stdout") or "").splitlines():
                if "Checks:" in out:
                    print(f"{build}: {t['name']}: {out.strip()}")
            if res == "OK":
                passed += 1
            elif res == "SKIP":
                skipped += 1
                print(f"{build}: {t['name']}: SKIPPED")
            else:
                failed += 1
                print(f"{build}: {t['name']}: {res}")
print(f"{passed} passed, {failed} failed, {skipped} skipped")
sys.exit(1 if failed or not passed else 0)
