#!/usr/bin/env bash
# The main job end to end on the bundled default: rewrite /usr/bin/gzip,
# run the rewritten gzip on this repository's own sources, check its output
# is byte-identical to native gzip's, and show the branch trace it wrote.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
mkdir -p bin && go build -o bin/ ./cmd/rewrite ./cmd/trace
work=${STINT_DEMO_DIR:-/tmp/stint-demo}
rm -rf "$work" && mkdir -p "$work/traces"
git ls-files -z '*.go' '*.c' '*.h' '*.md' | xargs -0 cat > "$work/input.txt"
echo "== rewrite /usr/bin/gzip (branch profile: every jmp, jcc, call, ret)"
bin/rewrite --stats-json "$work/gzip.stats.json" -o "$work/gzip" /usr/bin/gzip
echo
echo "== run native and rewritten gzip on $(wc -c < "$work/input.txt") bytes"
/usr/bin/gzip -c < "$work/input.txt" > "$work/native.gz"
STINT_OUT="$work/traces" "$work/gzip" -c < "$work/input.txt" > "$work/stint.gz"
cmp "$work/native.gz" "$work/stint.gz" && echo "outputs are byte-identical"
echo
trace=$(ls "$work"/traces/*.arrow | head -1)
echo "== trace stats $trace"
bin/trace stats "$trace"
echo
echo "== first events"
bin/trace cat --limit 15 "$trace"
