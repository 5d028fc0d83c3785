#!/usr/bin/env bash
# Installs what the issue-3 and issue-4 benchmarks need beyond
# scripts/setup.sh: redis-server and redis-tools (redis-cli,
# redis-benchmark), nginx-light and wrk from Debian's packages, only
# when a command is missing. Idempotent; apt-get update runs only when
# something is to be installed. As root it runs apt-get
# directly; otherwise through sudo, and only when sudo works without a
# password (checked with `sudo -n true`), so it never hangs on a prompt.
set -euo pipefail
missing=()
need_cmd() { command -v "$1" >/dev/null 2>&1 || missing+=("$2"); }
need_cmd redis-server redis-server
need_cmd redis-cli redis-tools
need_cmd redis-benchmark redis-tools
need_cmd nginx nginx-light   # issue 4: QDIME's web-server experiment
need_cmd wrk wrk
if ((${#missing[@]} == 0)); then
	exit 0
fi
# redis-tools may be named twice.
readarray -t pkgs < <(printf '%s\n' "${missing[@]}" | sort -u)
sudo=""
if [ "$(id -u)" != 0 ]; then
	if ! command -v sudo >/dev/null 2>&1 || ! sudo -n true 2>/dev/null; then
		echo "bench-deps: need root (or password-less sudo) to install: ${pkgs[*]}" >&2
		exit 1
	fi
	sudo="sudo -n"
fi
echo "bench-deps: installing ${pkgs[*]}" >&2
$sudo apt-get update -qq
DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${pkgs[@]}" >/dev/null
# Debian's package starts a system-wide server on port 6379 where an init
# system runs; the benchmarks start their own on a free port and do not
# need it.
for c in redis-server redis-cli redis-benchmark nginx wrk; do
	command -v "$c" >/dev/null 2>&1 || { echo "bench-deps: $c still missing" >&2; exit 1; }
done
