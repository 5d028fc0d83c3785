#!/usr/bin/env bash
# The main job end to end on the bundled default: rewrite /usr/bin/gzip with
# a 10% time budget and a redundancy log, trace one full (unbudgeted) run as
# the reference, run the budgeted gzip twice, check every output is
# byte-identical to native gzip's, compare the budgeted runs' coverage
# with the full run (cov compare) and write a report (report auto).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
mkdir -p bin && go build -tags duckdb_arrow -o bin/ ./cmd/...
work=${STINT_DEMO_DIR:-/tmp/stint-demo}
rm -rf "$work" && mkdir -p "$work"
# About 30 MB of text: this repository's sources, repeated.
git ls-files -z '*.go' '*.c' '*.h' '*.md' | xargs -0 cat > "$work/src.txt"
: > "$work/input.txt"
while [ "$(wc -c < "$work/input.txt")" -lt 30000000 ]; do cat "$work/src.txt" >> "$work/input.txt"; done
echo "== rewrite /usr/bin/gzip: branch profile, 10% budget per 50 ms, exact redundancy log"
bin/rewrite --budget 10% --period 50ms --log "$work/gzip.log" --stats-json "$work/gzip.stats.json" -o "$work/gzip" /usr/bin/gzip
echo
echo "== native gzip on $(wc -c < "$work/input.txt") bytes"
time /usr/bin/gzip -c < "$work/input.txt" > "$work/native.gz"
echo
echo "== full run (no budget, no log): the reference"
time STINT_BUDGET=none STINT_LOG= STINT_OUT="$work/full" "$work/gzip" -c < "$work/input.txt" > "$work/full.gz"
cmp "$work/native.gz" "$work/full.gz" && echo "output byte-identical to native"
for run in 1 2; do
	echo
	echo "== budgeted run $run (10% budget, log $work/gzip.log)"
	time STINT_OUT="$work/run$run" "$work/gzip" -c < "$work/input.txt" > "$work/run$run.gz"
	cmp "$work/native.gz" "$work/run$run.gz" && echo "output byte-identical to native"
done
echo
echo "== cov compare run1 run2 full"
bin/cov compare --functions 10 "$work"/run1/*.arrow "$work"/run2/*.arrow "$work"/full/*.arrow
echo
echo "== the redundancy log"
bin/trace log show "$work/gzip.log"
echo
echo "== trace stats of run 1 (events, and the budget's period records)"
bin/trace stats "$work"/run1/*.arrow
echo
echo "== report: $work/report.html (one self-contained page: coverage over runs, budget per period, overshoots, slowdowns)"
bin/report auto --full "$work"/full/*.arrow -o "$work/report.html" "$work"/run1/*.arrow "$work"/run2/*.arrow
echo
echo "== exports: a pprof profile and an lcov tracefile of the full run"
bin/trace export -f pprof -o "$work/full.pb.gz" "$work"/full/*.arrow
bin/trace export -f lcov -o "$work/full.info" "$work"/full/*.arrow
echo "go tool pprof -top $work/full.pb.gz; genhtml --no-source -o $work/lcov $work/full.info"
