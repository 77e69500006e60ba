#!/usr/bin/env bash
# Fuzz the parsers of untrusted input with libFuzzer (clang, ASan + UBSan):
#   bash tools/fuzz.sh [SECONDS_PER_TARGET] [TARGET...]
# Targets: safetensors (header parser), index (model.safetensors.index.json),
# mapping (mapping parser, patterns, expressions and the planner against a
# fixed catalog), torchbin (torch.save zips: directory, pickle, tensor
# references) and pickle (the restricted pickle reader). Each starts from tests/corpus/<target> and writes new
# inputs to build-fuzz/corpus-<target>; crashes land in build-fuzz/ as
# crash-*: add them to tests/corpus/<target> (the replay tests run them).
set -euo pipefail
cd "$(dirname "$0")/.."
secs=${1:-60}
shift || true
targets=("${@:-safetensors index mapping torchbin pickle}")
read -r -a targets <<<"${targets[*]}"
command -v clang >/dev/null || { apt-get update -qq && apt-get install -y -qq clang libclang-rt-14-dev >/dev/null; }
out=build-fuzz
mkdir -p "$out"
[ -f build/ckptfs_config.h ] || meson setup build >/dev/null
core=(src/util/*.c src/ckpt/*.c src/map/*.c src/plan/*.c)
for t in "${targets[@]}"; do
	bin="$out/fuzz_$t"
	clang -g -O1 -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=all -D_GNU_SOURCE \
		-Isrc -Ibuild -I/usr/include/cjson "tests/fuzz/fuzz_$t.c" "${core[@]}" -lcjson -o "$bin"
	mkdir -p "$out/corpus-$t"
	echo "== fuzzing $t for ${secs}s"
	(cd "$out" && "./fuzz_$t" -max_total_time="$secs" -max_len=4096 -rss_limit_mb=2048 \
		-print_final_stats=1 "corpus-$t" "../tests/corpus/$t" 2>&1 | tail -12)
done
