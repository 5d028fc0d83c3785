package benchmarks

import (
	"context"
	"os/exec"
	"strings"
	"testing"
)

func TestParseRedisCSV(t *testing.T) {
	for _, tc := range []struct {
		name, in string
		want     RedisResult
		wantErr  bool
	}{
		{"two tests", `"test","rps","avg_latency_ms"
"SET","40000.00","0.5"
"GET","60000.00","0.4"
`, RedisResult{"SET": 40000, "GET": 60000}, false},
		{"no header", `"SET","40000.00"` + "\n", nil, true},
		{"empty", "", nil, true},
		{"header only", `"test","rps"` + "\n", nil, true},
		{"bad rate", `"test","rps"` + "\n" + `"SET","fast"` + "\n", nil, true},
		{"zero rate", `"test","rps"` + "\n" + `"SET","0"` + "\n", nil, true},
		{"short line", `"test","rps"` + "\n" + `"SET"` + "\n", nil, true},
	} {
		have, err := ParseRedisCSV(strings.NewReader(tc.in))
		if (err != nil) != tc.wantErr {
			t.Errorf("%s: have err %v, want error %v", tc.name, err, tc.wantErr)
			continue
		}
		if len(have) != len(tc.want) {
			t.Errorf("%s: have %v, want %v", tc.name, have, tc.want)
		}
		for k, v := range tc.want {
			if have[k] != v {
				t.Errorf("%s: %s: have %v, want %v", tc.name, k, have[k], v)
			}
		}
	}
	// 1000 requests at 40,000/s and 1000 at 60,000/s: 2000 in 1/24 s.
	if have := (RedisResult{"SET": 40000, "GET": 60000}).Overall(1000); !near(have, 48000) {
		t.Errorf("Overall: have %v, want 48000", have)
	}
	if have := (RedisResult{}).Overall(1000); have != 0 {
		t.Errorf("Overall of nothing: have %v, want 0", have)
	}
}

// TestRedisWorkloadNative runs the native redis workload once: the
// server starts on a free port, answers the benchmark and stops.
func TestRedisWorkloadNative(t *testing.T) {
	if testing.Short() {
		t.Skip("starts redis-server (skipped under -short)")
	}
	if _, err := exec.LookPath("redis-benchmark"); err != nil {
		t.Skip("redis-benchmark not installed (scripts/bench-deps.sh)")
	}
	w := &RedisWorkload{Requests: 500, Tests: "set,get", Clients: 4}
	if err := w.Prepare(context.Background(), t.TempDir()); err != nil {
		t.Skip(err)
	}
	rps, err := w.Run(context.Background(), "", nil)
	if err != nil {
		t.Fatal(err)
	}
	if rps <= 0 {
		t.Errorf("have %v requests/s, want > 0", rps)
	}
	// A server that cannot start is an error, not a hang.
	if _, err := w.Run(context.Background(), "/bin/false", nil); err == nil {
		t.Error("a server that exits at once gave no error")
	}
}
