#!/usr/bin/env bash
# The main job on a small built-in example: generate a tiny Llama checkpoint,
# inspect it, look at it through the HF -> Megatron mapping, convert it there
# and back (checking the round trip is byte-identical), then mount the
# Megatron view, list it, read a tensor with numpy, torch.load the virtual
# pytorch_model.bin and unmount. Installs what
# it needs on a fresh Debian 12 (run as root: mounting needs /dev/fuse).
set -euo pipefail
cd "$(dirname "$0")/.."
bash tools/install-deps.sh
[ -f build/build.ninja ] || meson setup build >/dev/null
meson compile -C build >/dev/null
work=$(mktemp -d)
trap 'fusermount3 -u "$work/mnt" 2>/dev/null || true; rm -rf "$work"' EXIT
ck=build/src/ckptfs
set -x
build/tools/mkckpt --model llama --preset tiny --dtype BF16 --shards 2 "$work/llama"
$ck inspect "$work/llama"
$ck inspect "$work/llama" --mapping mappings/llama-hf-to-megatron.json --groups
$ck convert "$work/llama" "$work/megatron" --mapping mappings/llama-hf-to-megatron.json
$ck convert "$work/megatron" "$work/llama-again" --mapping mappings/megatron-to-llama-hf.json \
	--max-shard-size 100KB
{ set +x; } 2>/dev/null
for k in $($ck inspect --json "$work/llama" | grep -o '"name": "[^"]*"' | cut -d'"' -f4); do
	/usr/bin/python3 - "$work" "$k" <<'PY'
import json, struct, sys, os
work, key = sys.argv[1], sys.argv[2]
def tensor(d):
    for f in sorted(os.listdir(d)):
        if f.endswith(".safetensors"):
            b = open(os.path.join(d, f), "rb").read()
            n = struct.unpack("<Q", b[:8])[0]
            h = json.loads(b[8:8 + n])
            if key in h:
                s, e = h[key]["data_offsets"]
                return b[8 + n + s:8 + n + e]
assert tensor(os.path.join(work, "llama")) == tensor(os.path.join(work, "llama-again")), key
PY
done
echo "demo: HF -> Megatron -> HF round trip is byte-identical for every tensor"

# the same view as a filesystem: mount, list, read one tensor with numpy, load
# the whole view with torch.load, unmount
mnt="$work/mnt"
mkdir "$mnt"
set -x
$ck mount "$work/llama" "$mnt" --mapping mappings/llama-hf-to-megatron.json
ls -l "$mnt" "$mnt/tensors" | head -12
/usr/bin/python3 -c "
import json, numpy as np, os
p = '$mnt/tensors/decoder.layers.0.self_attention.linear_qkv.weight'
shape = json.loads(os.getxattr(p, 'user.ckptfs.shape'))
bf16 = np.fromfile(p, dtype=np.uint16).reshape(shape)
print(os.getxattr(p, 'user.ckptfs.dtype').decode(), shape,
      (bf16.astype(np.uint32) << 16).view(np.float32)[0, :4])"
/usr/bin/python3 -c "
import torch  # a legacy loader: the flat pytorch_model.bin, assembled on the fly
sd = torch.load('$mnt/pytorch_model.bin', weights_only=True)
print(len(sd), 'tensors;', next(iter(sd)), sd['decoder.final_layernorm.weight'].dtype)"
cat "$mnt/.ckptfs/stats.json"
fusermount3 -u "$mnt"
{ set +x; } 2>/dev/null
