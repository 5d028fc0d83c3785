package rewrite

import (
	"debug/elf"
	"path/filepath"
	"testing"

	"github.com/stint-project/stint/runtime"
)

// TestOpenEndedUnread: with a budget, no patch depends on the bytes of a
// ret's, an indirect jump's or an indirect call's patch (place.InstNoRead),
// so each can be undone alone: they never run out of outcomes, and one
// kept patched for a neighbour's sake detours on every execution for
// good. On libsqlite3 without the rule, 30 such patches could not be
// undone at all and 239 were readees; the unbudgeted rewrite here shows
// that the rule, not the binary, is what the test sees.
func TestOpenEndedUnread(t *testing.T) {
	const lib = "/usr/lib/x86_64-linux-gnu/libsqlite3.so.0"
	readInput(t, lib)
	for _, budget := range []string{"10%", ""} {
		opts := Options{Budget: budget}
		if budget != "" {
			opts.Period = "100ms"
		}
		out := filepath.Join(t.TempDir(), "lib.so")
		if _, err := RewriteFile(lib, out, opts); err != nil {
			t.Fatal(err)
		}
		m, probes, _ := moduleRets(t, out)
		ef, err := elf.Open(out)
		if err != nil {
			t.Fatal(err)
		}
		patches := make([]runtime.Patch, m.NPatches)
		readAt(t, ef, m.PatchesVaddr, patches)
		ef.Close()
		open := map[uint32]bool{}
		for _, p := range probes {
			switch runtime.Kind(p.Kind) {
			case runtime.KRet, runtime.KIndJmp, runtime.KIndCall:
				if p.Patch < m.NPatches {
					open[p.Patch] = true
				}
			}
		}
		pinned, readees := 0, 0
		for k := range open {
			f := patches[k].Flags
			if f&runtime.PatchRestorable == 0 {
				pinned++
			}
			if f&runtime.PatchRead != 0 {
				readees++
			}
		}
		t.Logf("budget %q: %d open-ended patches, %d not restorable, %d readees", budget, len(open), pinned, readees)
		switch {
		case len(open) < 1000:
			t.Errorf("budget %q: only %d open-ended patches", budget, len(open))
		case budget != "" && pinned+readees != 0:
			t.Errorf("budget %q: %d open-ended patches not restorable, %d readees; want none", budget, pinned, readees)
		case budget == "" && pinned+readees == 0:
			t.Errorf("without a budget no open-ended patch is read by another: the check above would prove nothing")
		}
	}
}
