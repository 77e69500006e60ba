#!/usr/bin/env bash
# Installs every Debian 12 package ckptfs needs to build, test and run its
# demo. Idempotent: silent when everything is already there.
set -euo pipefail
pkgs=(
	gcc meson ninja-build pkg-config    # build
	libasan8 libubsan1 libtsan2         # sanitizer runtimes (the test builds)
	libfuse3-dev fuse3                  # the mount
	libcjson-dev liburing-dev           # JSON, io_uring
	check                               # unit tests
	python3 python3-numpy python3-torch openmpi-bin libopenmpi-dev               # real clients in the tests
)
missing=()
for p in "${pkgs[@]}"; do
	dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
# the real llama.cpp for the GGUF tests: node-llama-cpp's prebuilt binaries
# (npm), and Hugging Face's GGUF parser, into build-node/ beside the build
# directories
node_modules() {
	local dir
	dir="$(cd "$(dirname "$0")/.." && pwd)/build-node"
	[ -f "$dir/node_modules/node-llama-cpp/package.json" ] &&
		[ -f "$dir/node_modules/@huggingface/gguf/package.json" ] && return 0
	command -v npm >/dev/null 2>&1 || missing+=(nodejs npm)
	NODE_DIR="$dir"
}
NODE_DIR=
node_modules
install_node() {
	[ -n "$NODE_DIR" ] || return 0
	echo "install-deps: npm install node-llama-cpp@3.22.1 @huggingface/gguf@0.4.6 into $NODE_DIR" >&2
	mkdir -p "$NODE_DIR"
	(cd "$NODE_DIR" && npm install --no-audit --no-fund --loglevel=error node-llama-cpp@3.22.1 \
		@huggingface/gguf@0.4.6 >/dev/null)
}
if [ ${#missing[@]} -eq 0 ]; then
	install_node
	exit 0
fi
if [ "$(id -u)" -ne 0 ]; then
	echo "install-deps: need root to install: ${missing[*]}" >&2
	exit 1
fi
echo "install-deps: installing ${missing[*]}" >&2
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
install_node
