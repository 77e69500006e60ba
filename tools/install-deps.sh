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
[ ${#missing[@]} -eq 0 ] && exit 0
if [ "$(id -u)" -ne 0 ]; then
	echo "install-deps: need root to install: ${missing[*]}" >&2
	exit 1
fi
echo "install-deps: installing ${missing[*]}" >&2
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
