#!/usr/bin/env bash
# Runs every test on a fresh Debian 12 machine: installs the dependencies,
# builds, runs `meson test`, runs the whole suite again in an
# AddressSanitizer + UndefinedBehaviorSanitizer build (mount daemons in the
# foreground, so their reports fail the tests), and the mount suites in a
# ThreadSanitizer build.
set -euo pipefail
cd "$(dirname "$0")/.."
bash tools/install-deps.sh
export PATH="/usr/local/cuda/bin:$PATH"
# Where nvcc exists the CUDA code must build: force it on so a detection
# failure fails the run instead of silently dropping the backend.
cuda=disabled
command -v nvcc >/dev/null 2>&1 && cuda=enabled

setup() { # dir options...
	local dir=$1
	shift
	if [ -f "$dir/build.ninja" ]; then
		meson setup --reconfigure "$dir" "$@" >/dev/null
	else
		meson setup "$dir" "$@" >/dev/null
	fi
}

rc=0
echo "== include direction (src/README.md)"
bash tools/check_includes.sh || rc=1
echo "== function length"
bash tools/check_function_length.sh || rc=1

echo "== build-test: -Wall -Wextra -Werror, CUDA $cuda"
setup build-test -Dcuda=$cuda
meson compile -C build-test >/dev/null
meson test -C build-test --print-errorlogs || rc=1

echo "== build-asan: AddressSanitizer + UndefinedBehaviorSanitizer"
setup build-asan -Dcuda=$cuda -Db_sanitize=address,undefined -Db_lundef=false
meson compile -C build-asan >/dev/null
ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
	meson test -C build-asan --print-errorlogs --timeout-multiplier 3 || rc=1

echo "== build-tsan: ThreadSanitizer, the mount suites (daemon threads, cache, FUSE), the planner's, catalog's, convert's and diff's threads"
setup build-tsan -Dcuda=disabled -Db_sanitize=thread -Db_lundef=false
meson compile -C build-tsan >/dev/null
TSAN_OPTIONS=halt_on_error=1 meson test -C build-tsan --suite mount --suite threads --print-errorlogs || rc=1

/usr/bin/python3 tools/test_summary.py build-test build-asan build-tsan || rc=1
exit $rc
