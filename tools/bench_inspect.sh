#!/usr/bin/env bash
# Times `ckptfs inspect` on sparse real-size presets (headers only, no data on
# disk): the planning cost a user sees before anything is read.
set -euo pipefail
cd "$(dirname "$0")/.."
[ -f build/build.ninja ] || meson setup build >/dev/null
meson compile -C build >/dev/null
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
printf '%-22s %8s %10s %12s %10s\n' preset tensors files "declared GiB" "median ms"
for spec in "llama 8b 4" "llama 70b 30" "mixtral 8x7b 19"; do
	set -- $spec
	d="$work/$1-$2"
	build/tools/mkckpt --model "$1" --preset "$2" --dtype BF16 --shards "$3" --sparse "$d"
	build/src/ckptfs inspect --json "$d" >"$work/out.json"
	n=$(grep -c '"name"' "$work/out.json")
	gib=$(/usr/bin/python3 -c "import json;print(round(json.load(open('$work/out.json'))['total_bytes']/2**30,1))")
	times=()
	for _ in 1 2 3 4 5 6 7; do
		s=$(date +%s%N)
		build/src/ckptfs inspect "$d" >/dev/null
		e=$(date +%s%N)
		times+=($(((e - s) / 1000)))
	done
	med=$(printf '%s\n' "${times[@]}" | sort -n | sed -n 4p)
	printf '%-22s %8s %10s %12s %10.1f\n' "$1 $2" "$n" "$3" "$gib" "$(awk "BEGIN{print $med/1000}")"
done
