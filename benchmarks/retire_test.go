package benchmarks

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// TestRetireSmoke runs the retire experiment on a small sqlite3 workload
// with one round: the retiring rewrite leaves sites unpatched that the
// plain one patches, coverage only grows from run 2 to run 3, and the
// report holds a paired slowdown for each.
func TestRetireSmoke(t *testing.T) {
	if testing.Short() {
		t.Skip("rewrites libsqlite3 and runs sqlite3 (skipped under -short)")
	}
	if _, err := exec.LookPath("sqlite3"); err != nil {
		t.Skip("sqlite3 not installed")
	}
	if _, err := os.Stat(SQLiteLib); err != nil {
		t.Skip(err)
	}
	tmp := t.TempDir()
	rw := buildRewrite(t, tmp)
	var log bytes.Buffer
	r := &Retire{Config: Config{Rewrite: rw, WorkDir: filepath.Join(tmp, "work"), Log: &log}, Results: filepath.Join(tmp, "results"),
		Rounds: 1, Budget: "10%", Period: "100ms", Workloads: []Workload{&SQLiteWorkload{Script: "workloads/sqlite.sql", Rows: 2000}}}
	var md bytes.Buffer
	if err := r.Run(context.Background(), &md); err != nil {
		t.Fatalf("%v\nlog:\n%s", err, log.String())
	}
	b, err := os.ReadFile(filepath.Join(r.Results, "issue3-retire.json"))
	if err != nil {
		t.Fatal(err)
	}
	var rep RetireReport
	if err := json.Unmarshal(b, &rep); err != nil {
		t.Fatal(err)
	}
	if len(rep.Workloads) != 1 || len(rep.Workloads[0].Variants) != 2 {
		t.Fatalf("report: %+v", rep.Workloads)
	}
	w := rep.Workloads[0]
	plain, ret := w.Variants[0], w.Variants[1]
	if plain.Retired != 0 || ret.Retired == 0 || ret.Patched >= plain.Patched {
		t.Errorf("patched %d (retired %d) with --skip-covered alone, %d (retired %d) with --retire-since", plain.Patched, plain.Retired, ret.Patched, ret.Retired)
	}
	for _, v := range w.Variants {
		if w.After2 <= 0 || v.After3 < w.After2 || v.After3 > 1 || len(v.Paired) != 1 || v.Paired[0] <= 0 || v.PairedMedian != v.Paired[0] {
			t.Errorf("%s: after 2 %v, after 3 %v, paired %v (median %v)", v.Name, w.After2, v.After3, v.Paired, v.PairedMedian)
		}
	}
	if !bytes.Contains(md.Bytes(), []byte("retire-since")) {
		t.Errorf("Markdown:\n%s", md.String())
	}
}
