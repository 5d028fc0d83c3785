package benchmarks

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

func TestPinned(t *testing.T) {
	argv := []string{"sqlite3", ":memory:"}
	if got := pinned(argv, -1); !slices.Equal(got, argv) {
		t.Errorf("pinned(-1) = %q, want %q", got, argv)
	}
	if got := pinned(argv, 1); !slices.Equal(got, []string{"taskset", "--cpu-list", "1", "sqlite3", ":memory:"}) {
		t.Errorf("pinned(1) = %q", got)
	}
}

// A pinned command and the threads it starts may run on PinCPU only.
func TestRunOncePinned(t *testing.T) {
	old := PinCPU
	defer func() { PinCPU = old }()
	PinCPU = 0
	if err := CheckPin(); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(t.TempDir(), "status")
	if _, err := RunOnce(context.Background(), Cmd{Argv: []string{"grep", "Cpus_allowed_list", "/proc/self/status"}, Out: out, Pin: true}); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	if f := strings.Fields(string(b)); len(f) != 2 || f[1] != "0" {
		t.Errorf("pinned command's %q, want CPU 0 only", strings.TrimSpace(string(b)))
	}
	PinCPU = 1 << 20
	if CheckPin() == nil {
		t.Error("CheckPin accepted a CPU this machine does not have")
	}
}

// TestSpeedProbe: the probe's four figures are there and positive.
func TestSpeedProbe(t *testing.T) {
	var cpu, chase, sys, touch float64
	s := speedProbe()
	if _, err := fmt.Sscanf(s, "speed probe: 10^8 xorshift steps %f ms, 32 MiB shuffled and 2*10^6 steps chased %f ms, 10,000 getppid %f ms, 4,096 first page touches %f ms",
		&cpu, &chase, &sys, &touch); err != nil {
		t.Fatalf("%q: %v", s, err)
	}
	if cpu <= 0 || chase <= 0 || sys <= 0 || touch <= 0 {
		t.Fatalf("%q: a figure not positive", s)
	}
	t.Log(s)
}
