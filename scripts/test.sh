#!/usr/bin/env bash
# The test suite, with its set-up: what CI runs (.ci/run).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
go vet ./...
go test -count=1 -timeout 45m ./...
