#!/usr/bin/env bash
# Every malformed-safetensors class through the real CLI: exit status 3, one
# line on stderr naming the file and the rule, nothing on stdout, no crash.
set -u
d=$(mktemp -d)
trap 'rm -rf "$d"' EXIT
"$MKMALFORMED" "$d" || { echo "mkmalformed failed"; exit 1; }
fail=0 n=0
check() { # expected-status expected-fragment args...
	local want_rc=$1 want=$2
	shift 2
	"$CKPTFS" "$@" >"$d/out" 2>"$d/err"
	local rc=$? lines
	lines=$(wc -l <"$d/err")
	if [ "$rc" -ne "$want_rc" ] || [ "$lines" -ne 1 ] || ! grep -qF -- "$want" "$d/err" ||
		[ -s "$d/out" ]; then
		echo "FAIL: ckptfs $* -> status $rc (want $want_rc), stderr:"
		cat "$d/err"
		fail=1
	fi
}
mkdir "$d/mnt"
for f in "$d"/*.safetensors; do
	n=$((n + 1))
	want=$(cat "${f%.safetensors}.expect")
	check 3 "$want" inspect "$f"
	check 3 "$f" inspect --json "$f"
	# refused before mounting: same line, nothing mounted
	check 3 "$want" mount "$f" "$d/mnt"
	if grep -q " $d/mnt " /proc/self/mountinfo; then
		echo "FAIL: $f got mounted"
		fusermount3 -u "$d/mnt"
		fail=1
	fi
done
# a malformed file inside an otherwise valid directory spoils the directory
mkdir "$d/model"
"$MKCKPT" --preset tiny "$d/model" || exit 1
cp "$d/offsets_gap.safetensors" "$d/model/extra.safetensors"
check 3 "extra.safetensors" inspect "$d/model"
check 3 "no such file or directory" inspect "$d/does-not-exist"
# a config whose head counts do not describe the weights: the Megatron
# mappings' "shape" refuses it, naming the rule and the key (4 key-value
# heads for 2 used to divide: a silently regrouped linear_qkv)
cp -r "$d/model" "$d/kv"
rm "$d/kv/extra.safetensors"
sed -i 's/"num_key_value_heads": 2/"num_key_value_heads": 4/' "$d/kv/config.json"
check 3 'key "model.layers.0.self_attn.k_proj.weight": is [32, 64], but the rule'"'"'s "shape" of k says [ng * hd, H] = [64, 64]: the config does not describe this checkpoint' \
	inspect "$d/kv" --mapping llama-hf-to-megatron
check 3 "the config does not describe this checkpoint" mount "$d/kv" "$d/mnt" --mapping llama-hf-to-megatron
grep -q " $d/mnt " /proc/self/mountinfo && { echo "FAIL: $d/kv got mounted"; fusermount3 -u "$d/mnt"; fail=1; }
rm "$d/model/extra.safetensors"
"$CKPTFS" convert "$d/model" "$d/meg" --mapping llama-hf-to-megatron >/dev/null 2>&1 || { echo "FAIL: convert"; fail=1; }
sed -i 's/"num_key_value_heads": 2/"num_key_value_heads": 1/' "$d/meg/config.json"
check 3 'is [128, 64], but the rule'"'"'s "shape" of x says [(nh + 2 * ng) * hd, H] = [96, 64]' \
	inspect "$d/meg" --mapping megatron-to-llama-hf
# a Gemma or gpt-oss config without head_dim: transformers takes 256 (Gemma) or
# 64 (gpt-oss), not hidden / heads, so these 32-wide heads are not what the
# config describes (the Megatron mappings used to ignore it, or divide)
for m in gemma:gemma:1024 gpt-oss:gpt-oss:256; do
	IFS=: read -r model map q <<<"$m"
	"$MKCKPT" --model "$model" "$d/$model" >/dev/null || exit 1
	sed -i '/"head_dim"/d' "$d/$model/config.json"
	check 3 "[nh * hd, H] = [$q, 64]: the config does not describe this checkpoint" \
		inspect "$d/$model" --mapping "$map-hf-to-megatron"
done
# fused experts with a smaller intermediate_size: w1 and w3 were narrowed
# out of the wrong rows of w13_weight (half of w1 each), silently
"$MKCKPT" --model mixtral "$d/mx" >/dev/null || exit 1
"$CKPTFS" convert "$d/mx" "$d/mxf" --mapping mixtral-hf-to-fused-experts >/dev/null 2>&1 || { echo "FAIL: convert"; fail=1; }
sed -i 's/"intermediate_size": 96/"intermediate_size": 48/' "$d/mxf/config.json"
check 3 'w13_weight": is [4, 192, 64], but the rule'"'"'s "shape" of x says [E, 2 * I, *] = [4, 96, 64]' \
	inspect "$d/mxf" --mapping mixtral-fused-experts-to-hf
check 2 "usage" inspect
check 2 "unknown option --bogus" inspect --bogus "$d/model"
check 2 "unknown command" frobnicate
echo "$n malformed classes refused by the CLI"
exit $fail
