#!/bin/bash
# CPU vs CUDA, side by side in one run (needs an NVIDIA GPU; FUSE for part 3):
#   tools/bench_gpu.sh [BUILD_DIR] [PRESET]
# 1. kernel throughput as a ratio of a device-to-device copy (tools/gpubench);
# 2. convert through Llama HF -> Megatron + cast to F32, and through the FP8
#    block dequantisation, with --device cpu and --device cuda: wall time, and
#    the outputs compared byte for byte;
# 3. the same views mounted, every tensors/ file read once on a fresh mount.
set -euo pipefail
B=${1:-build}
P=${2:-1b}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
C=$B/src/ckptfs
M=$B/tools/mkckpt
W=$(mktemp -d /tmp/bench-gpu.XXXXXX)
trap 'for m in $W/mnt-*; do fusermount3 -u "$m" 2>/dev/null || umount "$m" 2>/dev/null || true; done; rm -rf "$W"' EXIT
echo "== 1. kernels"
"$B/tools/gpubench" 20
echo "== inputs: llama $P BF16, and llama $P FP8 (128x128 block scales)"
"$M" --preset "$P" --dtype BF16 "$W/bf16" >/dev/null
"$M" --preset "$P" --dtype BF16 --fp8-block 128 "$W/fp8" >/dev/null
echo '{"ckptfs_mapping": 1, "rules": [{"from": "{k:path}", "to": "{k}", "expr": "x.to(F32)"}]}' >"$W/f32.json"
MEG=(--mapping "$ROOT/mappings/llama-hf-to-megatron.json" --mapping "$W/f32.json")
DEQ=(--mapping "$ROOT/mappings/fp8-block-dequant.json")
# the source of a view: FP8 for the dequantisation, BF16 otherwise
src_of() { if [ "$1" = DEQ ]; then echo "$W/fp8"; else echo "$W/bf16"; fi; }
secs() {
	local t0=$EPOCHREALTIME
	"$@" >/dev/null 2>&1 || echo "FAILED: $*" >&2
	python3 -c "print(round($EPOCHREALTIME - $t0, 2))"
}
echo "== 2. convert (seconds; outputs compared byte for byte)"
for view in MEG DEQ; do
	declare -n args=$view
	src=$(src_of $view)
	for dev in cpu cuda; do
		rm -rf "$W/out-$dev"
		t=$(secs "$C" convert "$src" "$W/out-$dev" "${args[@]}" --device $dev --quiet)
		echo "$view --device $dev: ${t}s"
	done
	cmp "$W/out-cpu/model.safetensors" "$W/out-cuda/model.safetensors" && echo "$view: identical bytes"
	rm -rf "$W/out-cpu" "$W/out-cuda"
done
echo "== 3. mount, first read of every tensors/ file (GB/s of output)"
for view in MEG DEQ; do
	declare -n args=$view
	src=$(src_of $view)
	for dev in cpu cuda; do
		for rep in 1 2 3; do
			mnt=$W/mnt-$dev-$rep
			mkdir -p "$mnt"
			"$C" mount "$src" "$mnt" "${args[@]}" --device $dev
			python3 - "$mnt" "$view" "$dev" <<'PY'
import os, sys, time
mnt, view, dev = sys.argv[1:]
buf = bytearray(1 << 20)
t0 = time.time(); n = 0
for f in sorted(os.listdir(mnt + "/tensors")):
    with open(mnt + "/tensors/" + f, "rb", buffering=0) as fh:
        while (k := fh.readinto(buf)):
            n += k
dt = time.time() - t0
st = open(mnt + "/.ckptfs/stats.json").read() if os.path.exists(mnt + "/.ckptfs/stats.json") else ""
print(f"{view} --device {dev}: {n/dt/1e9:.2f} GB/s ({n/1e9:.2f} GB in {dt:.2f} s)", st.strip()[-120:])
PY
			fusermount3 -u "$mnt" || umount "$mnt"
		done
	done
done
