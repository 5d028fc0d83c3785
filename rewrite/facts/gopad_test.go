package facts

import (
	"testing"

	"github.com/stint-project/stint/internal/fixtures"
	"github.com/stint-project/stint/rewrite/elfin"
	"github.com/stint-project/stint/rewrite/place"
)

// TestGoPaddingUntouchable: in a Go executable no byte is free padding
// (Go's runtime dies on a signal whose PC is in a function's padding), and
// the int3 runs between its functions are there to be kept; gzip, built by
// gcc, keeps its padding free.
func TestGoPaddingUntouchable(t *testing.T) {
	goBin := fixtures.BuildGo(t, fixtures.GoAll()[0])
	for _, c := range []struct {
		path string
		isGo bool
	}{{goBin, true}, {gzipPath, false}} {
		f, err := elfin.Parse(readInput(t, c.path))
		if err != nil {
			t.Fatal(err)
		}
		fx, err := Compute(f)
		if err != nil {
			t.Fatal(err)
		}
		if fx.Module.Go != c.isGo {
			t.Errorf("%s: Module.Go = %v, want %v", c.path, fx.Module.Go, c.isGo)
		}
		padding, int3 := 0, 0
		for i, in := range fx.Code.Insts {
			if in.Flags&place.InstPadding != 0 {
				padding++
			}
			if fx.Code.Kinds[i] != Bad && len(in.Bytes()) == 1 && in.Bytes()[0] == 0xcc {
				int3++
			}
		}
		if c.isGo && (padding != 0 || int3 == 0) {
			t.Errorf("%s: %d padding instructions (want 0) among %d int3", c.path, padding, int3)
		}
		if !c.isGo && padding == 0 {
			t.Errorf("%s: no padding found", c.path)
		}
	}
}
