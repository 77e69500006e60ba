#!/usr/bin/env bash
# Fuzz the parsers of untrusted input with libFuzzer (clang, ASan + UBSan):
#   bash tools/fuzz.sh [SECONDS_PER_TARGET] [TARGET...]
# Targets: safetensors (header parser), index (model.safetensors.index.json),
# mapping (mapping parser, patterns, expressions and the planner against a
# fixed catalog), expr (the expression parser and evaluator alone), pattern
# (key patterns: a match must substitute back to the key), torchbin
# (torch.save zips: directory, pickle, tensor references), pickle (the
# restricted pickle reader), dcp (a DCP .metadata through the catalog),
# gguf (GGUF headers), tokenizer (tokenizer.model and tokenizer.json for
# the GGUF view), imatrix (importance matrices, legacy and GGUF) and
# ecma_re (llama-quantize's --tensor-type regexes: a pattern must answer as
# itself in a group) and gguf_kv (--gguf-override-kv over a metadata buffer
# of any bytes: an override that applies must read back).
# Each starts from tests/corpus/<target> and writes new inputs to
# build-fuzz/corpus-<target>. A crash, a slow input (more than 10 s) and an
# out-of-memory (2 GiB) are all findings: they land in build-fuzz/ as
# crash-*, timeout-* or oom-*, the target is reported, and the script exits
# 1 after the remaining targets ran. Add findings to tests/corpus/<target>
# once fixed (the replay tests run them).
set -euo pipefail
cd "$(dirname "$0")/.."
secs=${1:-60}
shift || true
targets=("${@:-safetensors index mapping expr pattern torchbin pickle dcp gguf tokenizer imatrix ecma_re gguf_kv}")
read -r -a targets <<<"${targets[*]}"
command -v clang >/dev/null || { apt-get update -qq && apt-get install -y -qq clang libclang-rt-14-dev >/dev/null; }
out=build-fuzz
mkdir -p "$out"
[ -f build/ckptfs_config.h ] || meson setup build >/dev/null
core=(src/util/*.c src/ckpt/*.c src/layout/*.c src/map/*.c src/plan/*.c src/view/gguf_kv.c)
failed=()
for t in "${targets[@]}"; do
	bin="$out/fuzz_$t"
	clang -g -O1 -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=all -D_GNU_SOURCE \
		-Isrc -Ibuild -I/usr/include/cjson "tests/fuzz/fuzz_$t.c" "${core[@]}" -lcjson -o "$bin"
	mkdir -p "$out/corpus-$t"
	echo "== fuzzing $t for ${secs}s"
	rc=0
	(cd "$out" && "./fuzz_$t" -max_total_time="$secs" -max_len=65536 -timeout=10 \
		-rss_limit_mb=2048 -malloc_limit_mb=2048 -print_final_stats=1 \
		"corpus-$t" "../tests/corpus/$t" >"fuzz-$t.log" 2>&1) || rc=$?
	tail -12 "$out/fuzz-$t.log"
	if [ "$rc" -ne 0 ]; then
		echo "== FINDING in $t (exit $rc): see $out/fuzz-$t.log and $out/{crash,timeout,oom}-*"
		failed+=("$t")
	fi
done
if [ ${#failed[@]} -ne 0 ]; then
	echo "fuzz: findings in ${failed[*]}"
	exit 1
fi
echo "fuzz: no findings in ${targets[*]}"
