package offline

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/stint-project/stint/formats"
)

func genFile(t testing.TB, events int64, distinct int) (string, GenStats) {
	t.Helper()
	p := filepath.Join(t.TempDir(), "synthetic.arrow")
	f, err := os.Create(p)
	if err != nil {
		t.Fatal(err)
	}
	st, err := Generate(f, GenConfig{Events: events, Distinct: distinct, Seed: 1})
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		t.Fatal(err)
	}
	return p, st
}

func TestGenerateSmall(t *testing.T) {
	const n = 200_000
	p, st := genFile(t, n, 2000)
	if st.Events != n {
		t.Fatalf("wrote %d events, want %d", st.Events, n)
	}
	// The mix: mostly jcc, about a tenth calls and returns each.
	frac := func(k ...formats.Kind) float64 {
		var s int64
		for _, x := range k {
			s += st.ByKind[x]
		}
		return float64(s) / n
	}
	if j := frac(formats.KindJccTaken, formats.KindJccNotTaken); j < 0.5 || j > 0.8 {
		t.Errorf("jcc share %.2f, want 0.5-0.8", j)
	}
	if c := frac(formats.KindCall, formats.KindIndCall); c < 0.04 || c > 0.15 {
		t.Errorf("call share %.2f, want 0.04-0.15", c)
	}
	if st.Distinct < 1000 || st.Distinct > 2500 {
		t.Errorf("%d distinct events, want about 2000", st.Distinct)
	}
	tr, err := formats.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	if int64(len(tr.Events)) != n || tr.End != formats.EndMarker {
		t.Errorf("read %d events, end %v", len(tr.Events), tr.End)
	}
	ctx := context.Background()
	for _, op := range Ops {
		res, err := RunOp(ctx, op, p, n)
		if err != nil {
			t.Fatalf("%s: %v", op, err)
		}
		t.Logf("%s: %s", op, res.Detail)
		switch op {
		case "cov":
			// The file against itself: every distinct event, all covered.
			if want := "distinct events, coverage 1.000"; !strings.Contains(res.Detail, want) || !strings.HasPrefix(res.Detail, itoa(st.Distinct)+" ") {
				t.Errorf("cov: %q, want %d %s", res.Detail, st.Distinct, want)
			}
		case "merge":
			if res.Detail != itoa(n)+" rows" {
				t.Errorf("merge: %q", res.Detail)
			}
		case "cct":
			// Calls and returns nest: none unmatched.
			if !strings.Contains(res.Detail, "(0 unmatched)") {
				t.Errorf("cct: %q", res.Detail)
			}
		}
	}
	if _, err := RunOp(ctx, "frob", p, n); err == nil {
		t.Error("unknown op: no error")
	}
}

func itoa(n int) string { return strconv.Itoa(n) }

// BenchmarkOps measures the three analyses on a 2M-event trace; run it
// with -benchtime=1x and GOMAXPROCS=1 for single-core figures (the
// 100M-event numbers come from cmd/offline).
func BenchmarkOps(b *testing.B) {
	const n = 2_000_000
	p, _ := genFile(b, n, 100_000)
	for _, op := range Ops {
		b.Run(op, func(b *testing.B) {
			var ev int64
			for b.Loop() {
				res, err := RunOp(context.Background(), op, p, n)
				if err != nil {
					b.Fatal(err)
				}
				ev += res.Events
			}
			b.ReportMetric(float64(ev)/b.Elapsed().Seconds()/1e6, "Mevents/s")
		})
	}
}
