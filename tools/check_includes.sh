#!/usr/bin/env bash
# The include direction of src/: a directory may include only its own
# headers and those of the directories before it in this order (src/README.md
# says what each owns). Prints every violation; exits 1 if there is one.
set -euo pipefail
cd "$(dirname "$0")/../src"
order=(util ckpt layout map plan kern exec gen view lib fs cli)
rank() {
	local i
	for i in "${!order[@]}"; do
		[ "${order[$i]}" = "$1" ] && { echo "$i"; return; }
	done
	echo "unknown"
}
bad=0
for dir in */; do
	dir=${dir%/}
	r=$(rank "$dir")
	if [ "$r" = unknown ]; then
		echo "check_includes: src/$dir is not in the layer order (tools/check_includes.sh)"
		bad=1
		continue
	fi
	while IFS=: read -r file line inc; do
		to=${inc#*\"../}
		to=${to%%/*}
		t=$(rank "$to")
		if [ "$t" = unknown ] || [ "$t" -ge "$r" ] && [ "$to" != "$dir" ]; then
			echo "check_includes: src/$file:$line includes ../$to/ (a later layer than $dir)"
			bad=1
		fi
	done < <(grep -Hn '#include "\.\./' "$dir"/*.c "$dir"/*.h "$dir"/*.cu 2>/dev/null |
		sed 's/^\([^:]*\):\([0-9]*\):\(.*\)$/\1:\2:\3/')
done
[ "$bad" -eq 0 ] && echo "check_includes: src/ includes follow ${order[*]}"
exit "$bad"
