package policy

import (
	"fmt"
	"slices"
	"testing"

	"github.com/stint-project/stint/internal/blocks"
	"github.com/stint-project/stint/rewrite/facts"
	"github.com/stint-project/stint/rewrite/place"
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
		insts[i] = place.NewInst(0x1000+16*uint64(i), []byte{0x74, 0, 0, 0}, 0)
	}
	insts[8] = place.NewInst(0x1000+16*8+12, []byte{0xe8, 0, 0, 0, 0}, 0) // bytes 12..16 of its word
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
		k8    facts.Kind
		evict bool // 9 is an instruction evicted for 8 (T1): 8 is then never a sync site
	}{{false, facts.Call, false}, {false, facts.IndCall, false}, {true, facts.Call, false}, {true, facts.IndCall, false}, {false, facts.Call, true}, {true, facts.Call, true}} {
		t.Run(fmt.Sprintf("sync=%v,%v,evict=%v", tc.sync, tc.k8, tc.evict), func(t *testing.T) {
			sync := tc.sync
			patched, evicted := slices.Clone(patched), slices.Clone(evicted)
			if tc.evict {
				patched[9], evicted[9] = false, true
			}
			kinds := make([]facts.Kind, n)
			for i := range kinds {
				kinds[i] = facts.Jcc
			}
			kinds[8] = tc.k8
			pc := &Plan{opts: Options{SwitchSync: sync}, fx: &facts.Facts{Code: &facts.Code{Insts: insts, Kinds: kinds}}}
			modified := blocks.New[PatchRec](n)
			var order []int
			for i := range insts {
				a := insts[i].Addr
				pr := modified.Add(i)
				*pr = PatchRec{Inst: i, Lo: a, Hi: a + uint64(len(insts[i].Bytes())), Restorable: !read[i]}
				if patched[i] {
					pr.NProbes = 1
				}
				order = append(order, i)
			}
			p := &place.Planner{Insts: insts, Reads: reads, Tactics: tactics}
			pairs := pc.Switchable(p, order, modified, patched, evicted, read)
			want := map[int]bool{0: true, 1: true, 2: true, 3: true, 5: true, 6: true, 7: true, 8: (sync || tc.k8 == facts.Call) && !tc.evict}
			for i := range n {
				if pr := modified.Get(i); pr.Switchable != want[i] {
					t.Errorf("patch %d: switchable %v, want %v", i, pr.Switchable, want[i])
				}
			}
			// 2 (evicted, read by a B2 pun) and the chain 6, 7 are readees;
			// 4 (a T3 landing pad) is not, nor 9 (its reader is switched
			// with threads parked, or not at all).
			for i, w := range map[int]bool{2: true, 4: false, 6: true, 7: true, 9: false} {
				if modified.Get(i).Readee != w {
					t.Errorf("patch %d: readee %v, want %v", i, modified.Get(i).Readee, w)
				}
			}
			if have, wantPairs := fmt.Sprint(pairs), "[{1 2} {5 6} {6 7}]"; have != wantPairs {
				t.Errorf("pairs %s, want %s", have, wantPairs)
			}
			for i, w := range map[int]bool{1: true, 5: true, 6: true, 3: false, 8: false} {
				if modified.Get(i).Reader != w {
					t.Errorf("patch %d: reader %v, want %v", i, modified.Get(i).Reader, w)
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
	pc := &Plan{}
	modified := blocks.New[PatchRec](6)
	for i, r := range map[int]PatchRec{
		1: {Lo: 0x1005, Hi: 0x1009}, // within one word
		3: {Lo: 0x100c, Hi: 0x1011}, // straddles 0x1010
		5: {Lo: 0x1020, Hi: 0x1025},
	} {
		*modified.Add(i) = r
	}
	p := &place.Planner{Reads: [][2]int{{4, 5}}, Peeks: [][2]int{{0, 1}, {2, 3}, {4, 5}}}
	pc.KeepPeeks(p, modified)
	if have, want := fmt.Sprint(p.Reads), "[[4 5] [2 3]]"; have != want {
		t.Errorf("Reads %s, want %s", have, want)
	}
	if pc.Peeks != 1 {
		t.Errorf("Plan.Peeks = %d, want 1", pc.Peeks)
	}
}
