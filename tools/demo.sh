#!/usr/bin/env bash
# The main job on a small built-in example: generate a tiny Llama-like
# checkpoint and inspect it. Installs what it needs on a fresh Debian 12.
set -euo pipefail
cd "$(dirname "$0")/.."
bash tools/install-deps.sh
[ -f build/build.ninja ] || meson setup build >/dev/null
meson compile -C build >/dev/null
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
set -x
build/tools/mkckpt --model llama --preset tiny --dtype BF16 --shards 2 "$work/llama"
build/src/ckptfs inspect "$work/llama"
build/src/ckptfs inspect "$work/llama" --json >"$work/inspect.json"
head -c 400 "$work/inspect.json"; echo
