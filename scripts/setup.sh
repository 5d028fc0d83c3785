#!/usr/bin/env bash
# Installs what stint's tests and demo need on a Debian machine that has Go,
# only what is missing (apt-get update runs only then). Idempotent.
set -euo pipefail
pkgs=(gcc g++ libc6-dev make gzip bzip2 libbz2-1.0 xz-utils liblzma5 sqlite3 libsqlite3-0 nodejs npm valgrind git)
missing=()
for p in "${pkgs[@]}"; do
	dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p")
done
if ((${#missing[@]})); then
	echo "setup: installing ${missing[*]}" >&2
	sudo=""
	[ "$(id -u)" = 0 ] || sudo=sudo
	$sudo apt-get update -qq
	DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
