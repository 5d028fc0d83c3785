package rewrite

import (
	"debug/elf"
	"fmt"
	"path/filepath"
	"slices"
	"testing"

	"github.com/stint-project/stint/rewrite/place"
	"github.com/stint-project/stint/runtime"
)

// TestPlanSwitch checks which patches the off-switch may switch, on a
// hand-made planner result. Instructions 0..9 start 16 bytes apart at
// 0x1000 (each patch within one word, but 8, which takes bytes 12..16 of
// its word); sites have a probe, evicted instructions none. Without
// --switch-sync a straddling site qualifies only with direct probes (a
// call rel32), not as an indirect call.
func TestPlanSwitch(t *testing.T) {
	const n = 10
	insts := make([]place.Inst, n)
	for i := range insts {
		insts[i] = place.Inst{Addr: 0x1000 + 16*uint64(i), Bytes: []byte{0x74, 0, 0, 0}}
	}
	insts[8] = place.Inst{Addr: 0x1000 + 16*8 + 12, Bytes: []byte{0xe8, 0, 0, 0, 0}} // bytes 12..16 of its word
	// 1 reads 2 (a B2 pun); 3 (a T3 site) lands in 4; 5 reads 6, which
	// reads 7 (a chain); 8 straddles a word and reads 9.
	reads := [][2]int{{1, 2}, {3, 4}, {5, 6}, {6, 7}, {8, 9}}
	tactics := make([]place.Tactic, n)
	for i := range tactics {
		tactics[i] = place.TacticB2
	}
	tactics[3] = place.TacticT3
	patched := make([]bool, n)
	evicted := make([]bool, n)
	read := make([]bool, n)
	for i := range patched {
		patched[i] = true
	}
	evicted[2], patched[2] = true, false // an evicted instruction: no probe
	for _, r := range reads {
		read[r[1]] = true
	}
	for _, tc := range []struct {
		sync  bool
		k8    kind
		evict bool // 9 is an instruction evicted for 8 (T1): 8 is then never a sync site
	}{{false, kCall, false}, {false, kIndCall, false}, {true, kCall, false}, {true, kIndCall, false}, {false, kCall, true}, {true, kCall, true}} {
		t.Run(fmt.Sprintf("sync=%v,%v,evict=%v", tc.sync, tc.k8, tc.evict), func(t *testing.T) {
			sync := tc.sync
			patched, evicted := slices.Clone(patched), slices.Clone(evicted)
			if tc.evict {
				patched[9], evicted[9] = false, true
			}
			kinds := make([]kind, n)
			for i := range kinds {
				kinds[i] = kJcc
			}
			kinds[8] = tc.k8
			rw := &rewriter{opts: Options{SwitchSync: sync}, c: &code{insts: insts, kinds: kinds}}
			modified := make([]*patchRec, n)
			var order []int
			for i := range insts {
				a := insts[i].Addr
				pr := &patchRec{inst: i, lo: a, hi: a + uint64(len(insts[i].Bytes)), restorable: !read[i]}
				if patched[i] {
					pr.nprobes = 1
				}
				modified[i] = pr
				order = append(order, i)
			}
			p := &place.Planner{Insts: insts, Reads: reads, Tactics: tactics}
			pairs := rw.planSwitch(p, order, modified, patched, evicted, read)
			want := map[int]bool{0: true, 1: true, 2: true, 3: true, 5: true, 6: true, 7: true, 8: (sync || tc.k8 == kCall) && !tc.evict}
			for i, pr := range modified {
				if pr.switchable != want[i] {
					t.Errorf("patch %d: switchable %v, want %v", i, pr.switchable, want[i])
				}
			}
			// 2 (evicted, read by a B2 pun) and the chain 6, 7 are readees;
			// 4 (a T3 landing pad) is not, nor 9 (its reader is switched
			// with threads parked, or not at all).
			for i, w := range map[int]bool{2: true, 4: false, 6: true, 7: true, 9: false} {
				if modified[i].readee != w {
					t.Errorf("patch %d: readee %v, want %v", i, modified[i].readee, w)
				}
			}
			if have, wantPairs := fmt.Sprint(pairs), "[{1 2} {5 6} {6 7}]"; have != wantPairs {
				t.Errorf("pairs %s, want %s", have, wantPairs)
			}
			for i, w := range map[int]bool{1: true, 5: true, 6: true, 3: false, 8: false} {
				if modified[i].reader != w {
					t.Errorf("patch %d: reader %v, want %v", i, modified[i].reader, w)
				}
			}
		})
	}
}

// TestKeepPeeks: a peek (a pun that reads only bytes its readee's patch
// wrote with their own values) makes no pair when one store writes the
// readee's patch, and stays a read when the patch straddles a word (the
// runtime's jmp-to-self sequence writes other values first); a pair that
// is a read anyway is not added twice.
func TestKeepPeeks(t *testing.T) {
	rw := &rewriter{st: &Stats{}}
	modified := []*patchRec{
		1: {lo: 0x1005, hi: 0x1009}, // within one word
		3: {lo: 0x100c, hi: 0x1011}, // straddles 0x1010
		5: {lo: 0x1020, hi: 0x1025},
	}
	p := &place.Planner{Reads: [][2]int{{4, 5}}, Peeks: [][2]int{{0, 1}, {2, 3}, {4, 5}}}
	rw.keepPeeks(p, modified)
	if have, want := fmt.Sprint(p.Reads), "[[4 5] [2 3]]"; have != want {
		t.Errorf("Reads %s, want %s", have, want)
	}
	if rw.st.Peeks != 1 {
		t.Errorf("Stats.Peeks = %d, want 1", rw.st.Peeks)
	}
}

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
