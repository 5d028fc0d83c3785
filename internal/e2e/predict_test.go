package e2e

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/stint-project/stint/rewrite"
)

// predictSQL is a small deterministic sqlite3 workload: libsqlite3 calls
// its own exported functions through its PLT all the way.
const predictSQL = `create table t(x integer primary key, y text);
with recursive c(x) as (select 1 union all select x+1 from c where x < 300)
insert into t select x, printf('row %d', x*7919 % 1000) from c;
select count(*), sum(x), max(y) from t where y like 'row 1%';
select y, count(*) from t group by substr(y, 1, 5) order by 2 desc limit 3;
`

// interposer defines one of libsqlite3's exported functions, which
// libsqlite3 calls through its PLT, and forwards it: with it preloaded,
// that PLT stub goes elsewhere than its likely destination every time.
const interposer = `#define _GNU_SOURCE
#include <dlfcn.h>
int sqlite3VdbeOneByteSerialTypeLen(unsigned char t) {
	static int (*f)(unsigned char);
	if (!f)
		f = (int (*)(unsigned char))dlsym(RTLD_NEXT, "sqlite3VdbeOneByteSerialTypeLen");
	return f(t);
}
`

// TestCompactLibraryMatchesRows: libsqlite3's compact complete trace,
// decoded, holds the same per-thread sequence of events as its row
// trace (one row per probed event): with predicted indirect jmps (the
// PLT stubs to its own functions append one bit when they go there),
// without (--no-opt pred), and with one of those functions interposed
// by a preloaded library (its stub never goes where predicted: a TIP,
// out of the module, and back through the entry probe of the function
// the interposer forwards to). Branches either mode cannot show (no
// probe in the row build, none the decoder walks in the compact one)
// are left out of both.
func TestCompactLibraryMatchesRows(t *testing.T) {
	lib := filepath.Join(libdir, "libsqlite3.so.0")
	need(t, lib, "/usr/bin/sqlite3", "/usr/bin/gcc")
	shim := filepath.Join(t.TempDir(), "interpose.so")
	src := shim + ".c"
	if err := os.WriteFile(src, []byte(interposer), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("gcc", "-shared", "-fPIC", "-O2", "-o", shim, src, "-ldl").CombinedOutput(); err != nil {
		t.Fatalf("gcc: %v\n%s", err, out)
	}
	stdin := []byte(predictSQL)
	trace := func(opts rewrite.Options, env ...string) (string, *rewrite.Stats, [][]edge) {
		dir := t.TempDir()
		out, st := rewritten(t, lib, dir, opts)
		traces := filepath.Join(dir, "traces")
		native := run(t, stdin, env, "/usr/bin/sqlite3", ":memory:")
		traced := run(t, stdin, append([]string{"LD_LIBRARY_PATH=" + dir, "STINT_OUT=" + traces}, env...), "/usr/bin/sqlite3", ":memory:")
		if string(native) != string(traced) {
			t.Fatalf("%+v: output differs from native:\n%s\n%s", opts, native, traced)
		}
		m, _, err := Probed(out)
		if err != nil {
			t.Fatal(err)
		}
		_, seqs := traceEdges(t, readTraces(t, traces), fmt.Sprintf("%x", m.BuildID[:m.BuildIDLen]))
		return out, st, seqs
	}
	call := rewrite.Options{Tool: rewrite.ToolCall, Every: true}
	for _, c := range []struct {
		name string
		opts rewrite.Options
		env  []string
		pred bool
	}{
		{"predicted", rewrite.Options{Every: true}, nil, true},
		{"no-opt pred", rewrite.Options{Every: true, NoOpt: []string{"pred"}}, nil, false},
		{"interposed", rewrite.Options{Every: true}, []string{"LD_PRELOAD=" + shim}, true},
		// a call chain: SITE packets, and calls to libc that push nothing
		{"call chain", call, nil, false},
		{"call chain interposed", call, []string{"LD_PRELOAD=" + shim}, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			rowsOpts := rewrite.Options{Tool: c.opts.Tool, Every: true, Rows: true}
			rowsOut, _, rows := trace(rowsOpts, c.env...)
			_, probes, err := Probed(rowsOut)
			if err != nil {
				t.Fatal(err)
			}
			probed := probedKinds(probes)
			out, st, have := trace(c.opts, c.env...)
			if c.pred != (st.Predicted > 0) {
				t.Errorf("%d indirect jmps predicted", st.Predicted)
			}
			walk := walkable(t, out, false)
			keep := func(e edge) bool { return walk(e) && probed[[2]uint64{e.Src, uint64(e.Kind)}] }
			if c.opts.Tool == rewrite.ToolCall {
				keep = callsOnly(keep)
			}
			want, have := filterSeqs(rows, keep), filterSeqs(have, keep)
			n, away := 0, 0
			for _, s := range want {
				n += len(s)
				for _, e := range s {
					if e.DstMod == filepath.Base(shim) {
						away++
					}
				}
			}
			if n < 100000 {
				t.Fatalf("the row trace holds %d events to compare, want 100000 or more", n)
			}
			// (a call chain's events name the stub, not where it goes)
			if c.opts.Tool != rewrite.ToolCall && (c.env != nil) != (away > 0) {
				t.Fatalf("%d events go to the interposer", away)
			}
			if len(want) == 1 && len(have) == 1 {
				// the row trace has a few events more while ld.so runs
				// the module's initializers: frame_dummy's jmp, whose
				// function's entry probe could not be placed (its
				// endbr64 is too short), is walked only once a later
				// probe says where the thread is
				want[0] = alignStart(t, want[0], have[0], 4)
			}
			compareSeqs(t, want, have)
		})
	}
}

// alignStart drops up to max events from the first 64 of w where they
// differ from h's, while w is longer.
func alignStart(t *testing.T, w, h []edge, max int) []edge {
	for n := 0; n < max && len(w) > len(h); n++ {
		k := 0
		for k < 64 && k < len(h) && w[k] == h[k] {
			k++
		}
		if k == 64 || k == len(h) {
			break
		}
		t.Logf("the row trace's event %d, %v, is not in the compact one", k+n, w[k])
		w = append(w[:k:k], w[k+1:]...)
	}
	return w
}
