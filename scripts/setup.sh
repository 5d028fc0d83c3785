#!/usr/bin/env bash
# Installs what stint's tests and demo need on a Debian machine that has Go,
# only what is missing (apt-get update runs only then). Idempotent. A tool
# that is already on PATH (node and npm often come from elsewhere) is left
# alone.
set -euo pipefail
missing=()
need_cmd() { command -v "$1" >/dev/null 2>&1 || missing+=("$2"); }
need_file() { [ -e "$1" ] || missing+=("$2"); }
need_cmd gcc gcc
need_cmd g++ g++
need_cmd make make
need_cmd gzip gzip
need_cmd bzip2 bzip2
need_cmd xz xz-utils
need_cmd sqlite3 sqlite3
need_cmd valgrind valgrind
need_cmd git git
need_cmd node nodejs
need_cmd npm npm
need_cmd redis-server redis-server        # qos: the redis source, QDIME's Redis experiment
need_cmd redis-benchmark redis-tools
need_cmd genhtml lcov                     # trace export --format lcov is checked by genhtml
need_cmd chromium chromium                # report: the page is loaded in headless Chromium
need_cmd zsh zsh                          # --completion zsh is parsed by zsh
need_cmd fish fish                        # --completion fish completes in fish
need_file /usr/lib/x86_64-linux-gnu/libc.a libc6-dev
need_file /usr/lib/x86_64-linux-gnu/libbz2.so.1.0 libbz2-1.0
need_file /usr/lib/x86_64-linux-gnu/liblzma.so.5 liblzma5
need_file /usr/lib/x86_64-linux-gnu/libsqlite3.so.0 libsqlite3-0
if ((${#missing[@]})); then
	echo "setup: installing ${missing[*]}" >&2
	sudo=""
	[ "$(id -u)" = 0 ] || sudo=sudo
	$sudo apt-get update -qq
	DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
