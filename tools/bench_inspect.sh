#!/usr/bin/env bash
# Times `ckptfs inspect` (headers only) and `inspect --mapping` (headers +
# planning) on sparse real-size presets: no tensor data exists on disk, so
# this is the cost a user sees before anything is read. Median of 7 runs.
#   bash tools/bench_inspect.sh [--delay-us N]
# With --delay-us, `inspect --mapping` is also timed through a fresh mount of
# tools/passthrough that waits N us before every lookup, open and read (a
# network filesystem's round trips; the mount itself is not timed).
set -euo pipefail
delay=
if [ "${1:-}" = --delay-us ]; then
	delay=$2
fi
cd "$(dirname "$0")/.."
[ -f build/build.ninja ] || meson setup build >/dev/null
meson compile -C build >/dev/null
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
median_ms() { # command...
	local times=() s e
	for _ in 1 2 3 4 5 6 7; do
		s=$(date +%s%N)
		"$@" >/dev/null
		e=$(date +%s%N)
		times+=($(((e - s) / 1000)))
	done
	printf '%s\n' "${times[@]}" | sort -n | sed -n 4p | awk '{printf "%.1f", $1 / 1000}'
}
# median_ms over a slow filesystem: dir, then inspect's other arguments
slow_median_ms() {
	local d=$1 times=() s e m
	shift
	for _ in 1 2 3 4 5 6 7; do
		m=$(mktemp -d "$work/slow.XXXXXX")
		build/tools/passthrough "$d" "$m" --delay-us "$delay"
		s=$(date +%s%N)
		build/src/ckptfs inspect "$m" "$@" >/dev/null
		e=$(date +%s%N)
		fusermount3 -u "$m"
		rmdir "$m"
		times+=($(((e - s) / 1000)))
	done
	printf '%s\n' "${times[@]}" | sort -n | sed -n 4p | awk '{printf "%.1f", $1 / 1000}'
}
printf '%-20s %8s %6s %10s %12s %22s%s\n' preset tensors files "GiB" "inspect ms" \
	"inspect --mapping ms" "${delay:+   same, ${delay} us round trips}"
# model preset shards mapping [mkckpt options]: the DeepSeek row keeps its
# real FP8 + BF16 layout (91,991 keys, the planning goal of issue #18)
for spec in "llama 8b 4 llama-hf-to-megatron --dtype BF16" \
	"llama 70b 30 llama-hf-to-megatron --dtype BF16" \
	"mixtral 8x7b 19 mixtral-hf-to-fused-experts --dtype BF16" \
	"qwen3-moe 235b-a22b 118 llama-hf-to-megatron --dtype BF16" \
	"deepseek-v3 671b 163 deepseek-v3-hf-to-megatron"; do
	set -- $spec
	d="$work/$1-$2"
	build/tools/mkckpt --model "$1" --preset "$2" --shards "$3" --sparse "${@:5}" "$d"
	build/src/ckptfs inspect --json "$d" >"$work/out.json"
	n=$(grep -c '"name"' "$work/out.json")
	gib=$(awk '/total_bytes/ {gsub(/[^0-9]/, "", $NF); printf "%.1f", $NF / 2^30}' \
		<(tr ',' '\n' <"$work/out.json" | grep total_bytes))
	a=$(median_ms build/src/ckptfs inspect "$d")
	b=$(median_ms build/src/ckptfs inspect "$d" --mapping "mappings/$4.json")
	c=${delay:+$(slow_median_ms "$d" --mapping "mappings/$4.json")}
	printf '%-20s %8s %6s %10s %12s %22s%s\n' "$1 $2" "$n" "$3" "$gib" "$a" "$b" "${c:+ $(printf '%29s' "$c")}"
	rm -rf "$d"
done
