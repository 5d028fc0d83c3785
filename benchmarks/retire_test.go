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
// plain one patches, coverage only grows from run 2 to run 3 and from
// the retiring run 3 to run 4, run 4's rewrite retires about as much as
// run 3's did (below), and the report holds a paired slowdown for each.
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
	if len(rep.Workloads) != 1 || len(rep.Workloads[0].Variants) != 3 {
		t.Fatalf("report: %+v", rep.Workloads)
	}
	w := rep.Workloads[0]
	plain, ret, ret4 := w.Variants[0], w.Variants[1], w.Variants[2]
	if plain.Retired != 0 || ret.Retired == 0 || ret.Patched >= plain.Patched {
		t.Errorf("patched %d (retired %d) with --skip-covered alone, %d (retired %d) with --retire-since", plain.Patched, plain.Retired, ret.Patched, ret.Retired)
	}
	// Run 4 retires about what run 3 did, not a superset: a site retired
	// at run 3 can still get a new outcome in it through another probe
	// (an edge probe at a jcc's destination, for one) and then not retire
	// at run 4, and a site first seen in run 2 retires only at run 4.
	// Run 4 came out 1 to 2 short of some 5,370 in 2 of 8 runs at
	// 3f2d9bb and 2 of 7 at 414b9cc.
	if plain.Run != 3 || ret.Run != 3 || ret4.Run != 4 || ret4.Retired < ret.Retired*99/100 {
		t.Errorf("runs %d, %d, %d; run 4 retired %d sites, run 3 %d", plain.Run, ret.Run, ret4.Run, ret4.Retired, ret.Retired)
	}
	for _, v := range w.Variants {
		after, before := v.After3, w.After2
		if v.Run == 4 {
			after, before = v.After4, ret.After3
		}
		if w.After2 <= 0 || after < before || after > 1 || len(v.Paired) != 1 || v.Paired[0] <= 0 || v.PairedMedian != v.Paired[0] {
			t.Errorf("run %d %s: after 2 %v, before %v, after %v, paired %v (median %v)", v.Run, v.Name, w.After2, before, after, v.Paired, v.PairedMedian)
		}
	}
	if !bytes.Contains(md.Bytes(), []byte("retire-since")) {
		t.Errorf("Markdown:\n%s", md.String())
	}
}
