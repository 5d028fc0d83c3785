package place

import (
	"bytes"
	"encoding/hex"
	"errors"
	"strings"
	"testing"
)

// stream builds instructions at base from "hex/flags" words: flags are
// letters t (target), u (untouchable), p (padding), r (relocatable), n
// (no read), s (reads no site).
func stream(t *testing.T, base uint64, words ...string) []Inst {
	t.Helper()
	var out []Inst
	a := base
	for _, w := range words {
		hx, fl, _ := strings.Cut(w, "/")
		b, err := hex.DecodeString(strings.ReplaceAll(hx, " ", ""))
		if err != nil {
			t.Fatal(err)
		}
		var f InstFlags
		for _, c := range fl {
			switch c {
			case 't':
				f |= InstTarget
			case 'u':
				f |= InstUntouchable
			case 'p':
				f |= InstPadding
			case 'r':
				f |= InstRelocatable
			case 'n':
				f |= InstNoRead
			case 's':
				f |= InstNoReadSites
			}
		}
		out = append(out, NewInst(a, b, f))
		a += uint64(len(b))
	}
	return out
}

const (
	codeBase  = 0x400000
	trampBase = 0x10000000
)

func newPlanner(insts []Inst, allowed ...Range) *Planner {
	return &Planner{
		Insts: insts,
		Space: NewAddrSpace(allowed),
		Near:  func(i int) uint64 { return trampBase + 64*uint64(i) },
	}
}

// wide allows stubs anywhere in the low 4 GiB outside the code page.
var wide = []Range{{Lo: 0x1000000, Hi: 0x100000000}}

func TestTactics(t *testing.T) {
	tests := []struct {
		name      string
		insts     []string
		allowed   []Range
		site      int
		want      Tactic
		evicted   []int
		stubs     int
		readAlone []int // instructions whose bytes must stay unchanged
	}{
		{name: "B1 call", insts: []string{"e8 00 00 00 00/r", "c3/r"}, allowed: wide, site: 0, want: TacticB1},
		{name: "B1 jcc rel32 with filler", insts: []string{"0f 84 10 00 00 00/r", "c3/r"}, allowed: wide, site: 0, want: TacticB1},
		{name: "B2 jcc rel8", insts: []string{"74 05/r", "48 8b 45 f8/r", "c3/r"}, allowed: wide, site: 0, want: TacticB2, stubs: 1, readAlone: []int{1}},
		{name: "B2 reads untouchable", insts: []string{"74 05/r", "48 8b 45 f8/u", "c3/r"}, allowed: wide, site: 0, want: TacticB2, stubs: 1, readAlone: []int{1}},
		{name: "B2 syscall", insts: []string{"0f 05/r", "48 89 45 f8/r", "c3/r"}, allowed: wide, site: 0, want: TacticB2, stubs: 1, readAlone: []int{1}},
		{name: "P ret then padding", insts: []string{"c3/r", "0f 1f 40 00/p", "55/tr"}, allowed: nil, site: 0, want: TacticP},
		{name: "P call *rax then int3", insts: []string{"ff d0/r", "cc/p", "cc/p", "cc/p", "55/tr"}, allowed: nil, site: 0, want: TacticP},
		// No stub space: B2 is impossible, the successor is a long
		// instruction whose eviction is again impossible without
		// space... so only T3 with direct jumps works.
		{name: "T3 forward into long neighbour", insts: []string{"74 05/r", "48 8b 45 f8/u", "48 b8 11 22 33 44 55 66 77 88/r", "c3/r"}, allowed: nil, site: 0, want: TacticT3, evicted: []int{2}},
		{name: "T3 backward into long neighbour", insts: []string{"48 b8 11 22 33 44 55 66 77 88/r", "90/r", "90/r", "90/r", "90/r", "74 05/r", "48 8b 45 f8/u"}, allowed: nil, site: 5, want: TacticT3, evicted: []int{0}},
		{name: "T3 into padding", insts: []string{"74 05/r", "48 8b 45 f8/u", "c3/r", "0f 1f 40 00/p", "0f 1f 40 00/p", "55/tr"}, allowed: nil, site: 0, want: TacticT3},
		// T3 one byte: c3 08 reads as eb 08, 5 bytes into the movabs,
		// which is evicted: its own jump fills bytes 0-4, the site's 5-9.
		{name: "T3 one-byte ret", insts: []string{"c3/r", "08 44 24 08/u", "48 b8 11 22 33 44 55 66 77 88/r"}, allowed: nil, site: 0, want: TacticT3, evicted: []int{2}},
		// A ret followed by padding: the rel8 goes into the padding.
		{name: "T3 ret rel8 in padding", insts: []string{"c3/r", "90/p", "31 c0/tu", "48 b8 11 22 33 44 55 66 77 88/r", "c3/u"}, allowed: nil, site: 0, want: TacticT3, evicted: []int{3}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p := newPlanner(stream(t, codeBase, tc.insts...), tc.allowed...)
			got, err := p.Patch(tc.site)
			if err != nil || got != tc.want {
				t.Fatalf("Patch = %v, %v; want %v", got, err, tc.want)
			}
			if len(p.Stubs) != tc.stubs {
				t.Errorf("stubs: have %d, want %d", len(p.Stubs), tc.stubs)
			}
			if !equalInts(p.Evicted, tc.evicted) {
				t.Errorf("evicted: have %v, want %v", p.Evicted, tc.evicted)
			}
			for _, x := range tc.readAlone {
				for _, w := range p.Writes {
					if w.Inst == x && !bytes.Equal(w.Bytes, p.Insts[x].Bytes()) {
						t.Errorf("instruction %d was only read but changed to % x", x, w.Bytes)
					}
				}
			}
			checkInvariants(t, p)
			// Patching again returns the same tactic and changes nothing.
			nw := len(p.Writes)
			if again, err := p.Patch(tc.site); err != nil || again != tc.want || len(p.Writes) != nw {
				t.Errorf("second Patch = %v, %v (writes %d→%d)", again, err, nw, len(p.Writes))
			}
		})
	}
}

func equalInts(a, b []int) bool {
	if len(a) != len(b) {
		return false
	}
	for k := range a {
		if a[k] != b[k] {
			return false
		}
	}
	return true
}

// punWindow returns the stub window of a 2-byte site's pun with k prefixes.
func TestPrefixMovesTheWindow(t *testing.T) {
	insts := stream(t, codeBase, "74 05/r", "48 8b 45 f8/u", "c3/r")
	// k=0: e9 X 48 8b 45 → 256 bytes at a+5+0x458b4800.
	// k=1: 26 e9 48 8b 45 f8 → exactly a+6+int32(0xf8458b48) (negative,
	// so not reachable) – use a successor whose bytes give a positive
	// single address instead.
	insts = stream(t, codeBase, "74 05/r", "48 8b 45 28/u", "c3/r")
	single := int64(codeBase) + 6 + int64(int32(0x28458b48))
	p := newPlanner(insts, Range{Lo: uint64(single) &^ 0xfff, Hi: uint64(single)&^0xfff + 0x1000})
	got, err := p.Patch(0)
	if err != nil || got != TacticB2 {
		t.Fatalf("Patch = %v, %v; want B2", got, err)
	}
	if len(p.Stubs) != 1 || int64(p.Stubs[0].Addr) != single {
		t.Fatalf("stubs %+v, want one at %#x", p.Stubs, single)
	}
	if w := p.Writes[0].Bytes; w[0] != jumpPrefixes[0] || w[1] != opJmp32 {
		t.Errorf("site bytes % x, want prefix then e9", w)
	}
	checkInvariants(t, p)
}

func TestSuccessorEviction(t *testing.T) {
	// Space only far away from the B2 window (+0x458b4800 ≈ 1.1 GiB), so
	// the pun must read bytes it chooses: the successor's.
	space := []Range{{Lo: 0x1000000, Hi: 0x2000000}}
	tests := []struct {
		name  string
		insts []string
		want  Tactic
		succ  Tactic
	}{
		{"T1 long successor", []string{"74 05/r", "48 8b 45 f8 00/r", "c3/r"}, TacticT1, TacticB1},
		{"T2 short successor", []string{"74 05/r", "48 8b 45/r", "c0 00 01/u", "c3/r"}, TacticT2, TacticB2},
		{"T1 ret over padding", []string{"c3/r", "90/p", "48 8b 45 f8 00/tr", "c3/r"}, TacticT1, TacticB1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p := newPlanner(stream(t, codeBase, tc.insts...), space...)
			got, err := p.Patch(0)
			if err != nil || got != tc.want {
				t.Fatalf("Patch = %v, %v; want %v", got, err, tc.want)
			}
			j := len(p.Evicted)
			if j != 1 {
				t.Fatalf("evicted %v, want the successor", p.Evicted)
			}
			if have := p.Tactics[p.Evicted[0]]; have != tc.succ {
				t.Errorf("successor tactic %v, want %v", have, tc.succ)
			}
			if !containsPair(p.Reads, [2]int{0, p.Evicted[0]}) {
				t.Errorf("Reads %v lacks (0, %d)", p.Reads, p.Evicted[0])
			}
			checkInvariants(t, p)
			// The successor is a site patched later: its tactic is the
			// recorded one.
			if tt, err := p.Patch(p.Evicted[0]); err != nil || tt != tc.succ {
				t.Errorf("Patch(successor) = %v, %v", tt, err)
			}
		})
	}
}

func containsPair(rs [][2]int, r [2]int) bool {
	for _, x := range rs {
		if x == r {
			return true
		}
	}
	return false
}

func TestFailures(t *testing.T) {
	tests := []struct {
		name  string
		insts []string
		site  int
		near  bool
		want  error
	}{
		{"untouchable site", []string{"e8 00 00 00 00/u"}, 0, true, ErrUntouchable},
		// 2-byte site, untouchable successor, no stub space, no neighbour.
		{"no tactic", []string{"74 05/r", "48 8b 45 f8/u", "c3/u"}, 0, true, ErrTooShort},
		{"bad index", []string{"c3/r"}, 3, true, ErrBadIndex},
		{"overlapping instructions", nil, 0, true, ErrBadInsts},
		{"instruction longer than 15 bytes", []string{"66 66 66 66 66 66 66 66 66 66 66 66 66 66 66 90/r"}, 0, true, ErrBadInsts},
		{"no Near", []string{"c3/r"}, 0, false, ErrNoNear},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			insts := stream(t, codeBase, tc.insts...)
			if tc.insts == nil {
				insts = []Inst{NewInst(0x1000, []byte{0x90, 0x90}, 0), NewInst(0x1001, []byte{0x90}, 0)}
			}
			p := newPlanner(insts)
			if !tc.near {
				p.Near = nil
			}
			_, err := p.Patch(tc.site)
			if !errors.Is(err, tc.want) {
				t.Fatalf("Patch error %v, want %v", err, tc.want)
			}
			if len(p.Writes) != 0 || len(p.Stubs) != 0 {
				t.Errorf("failed Patch left writes %v stubs %v", p.Writes, p.Stubs)
			}
		})
	}
}

func TestFarNearIsOutOfRange(t *testing.T) {
	p := newPlanner(stream(t, codeBase, "e8 00 00 00 00/r"))
	p.Near = func(int) uint64 { return 1 << 40 }
	if _, err := p.Patch(0); !errors.Is(err, ErrOutOfRange) {
		t.Fatalf("error %v, want ErrOutOfRange", err)
	}
}

// Ascending order without MarkSites: the first pun reads (and so locks)
// the next site, which can then not be patched. With MarkSites the pun
// refuses to read a site still to be patched.
func TestOrderAndMarkSites(t *testing.T) {
	words := []string{"74 05/r", "75 03/r", "48 8b 45 f8/u", "c3/u"}
	p := newPlanner(stream(t, codeBase, words...), wide...)
	if _, err := p.Patch(0); err != nil {
		t.Fatal(err)
	}
	if _, err := p.Patch(1); !errors.Is(err, ErrLocked) {
		t.Fatalf("Patch(1) after Patch(0) = %v, want ErrLocked", err)
	}

	p = newPlanner(stream(t, codeBase, words...), wide...)
	errs := p.PatchAll([]int{0, 1})
	for k, err := range errs {
		if err != nil {
			t.Errorf("PatchAll site %d: %v", k, err)
		}
	}
	if !containsPair(p.Reads, [2]int{0, 1}) {
		t.Errorf("Reads %v lacks (0, 1): site 0's pun reads site 1's jump", p.Reads)
	}
	checkInvariants(t, p)
}

// TestNoRead: the stream of TestOrderAndMarkSites, where site 0's pun
// reads site 1's jump; with site 1 InstNoRead no patch may read it, so
// site 0 gets another tactic or none, and site 1 stays restorable alone.
func TestNoRead(t *testing.T) {
	p := newPlanner(stream(t, codeBase, "74 05/r", "75 03/rn", "48 8b 45 f8/u", "c3/u", "90/p", "90/p", "90/p", "90/p"), wide...)
	errs := p.PatchAll([]int{0, 1})
	if errs[1] != nil {
		t.Fatalf("site 1: %v", errs[1])
	}
	for _, r := range p.Reads {
		if r[1] == 1 && r[0] != 1 {
			t.Errorf("Reads %v: patch %d reads the InstNoRead patch 1", p.Reads, r[0])
		}
	}
	t.Logf("site 0: %v (%v)", p.Tactics[0], errs[0])
	checkInvariants(t, p)
}

// TestNoReadSites: the same stream with site 0 InstNoReadSites (an edge
// probe): neither its pun nor a neighbour evicted for it may read site
// 1's jump, which would keep site 1 patched for as long as site 0 is.
func TestNoReadSites(t *testing.T) {
	p := newPlanner(stream(t, codeBase, "74 05/rs", "75 03/r", "48 8b 45 f8/u", "c3/u", "90/p", "90/p", "90/p", "90/p"), wide...)
	errs := p.PatchAll([]int{0, 1})
	if errs[1] != nil {
		t.Fatalf("site 1: %v", errs[1])
	}
	for _, r := range p.Reads {
		if r[1] == 1 && r[0] != 1 {
			t.Errorf("Reads %v: patch %d reads site 1's patch for the InstNoReadSites site 0", p.Reads, r[0])
		}
	}
	t.Logf("site 0: %v (%v)", p.Tactics[0], errs[0])
	checkInvariants(t, p)
}

// TestNoReadSitesEvicts: an InstNoReadSites site (an edge probe) may
// not evict a neighbour either. The evicted instruction's jump is read
// by the site's patch, so it is never restored: a hot instruction (on
// sqlite3, a call to memset in sqlite3BtreeInsert evicted for an edge
// probe of a --skip-covered rewrite) then ran from a trampoline for the
// whole run, a call emulated, every return above it mispredicted. The
// streams are TestTactics' T3 cases: without the flag the neighbour is
// evicted, with it the site gets no tactic.
func TestNoReadSitesEvicts(t *testing.T) {
	for _, tt := range []struct {
		name  string
		insts []string
		site  int
	}{
		{"forward", []string{"74 05/r%s", "48 8b 45 f8/u", "48 b8 11 22 33 44 55 66 77 88/r", "c3/r"}, 0},
		{"backward", []string{"48 b8 11 22 33 44 55 66 77 88/r", "90/r", "90/r", "90/r", "90/r", "74 05/r%s", "48 8b 45 f8/u"}, 5},
	} {
		for _, flag := range []string{"", "s"} {
			words := append([]string(nil), tt.insts...)
			words[tt.site] = strings.Replace(words[tt.site], "%s", flag, 1)
			p := newPlanner(stream(t, codeBase, words...))
			err := p.PatchAll([]int{tt.site})[0]
			switch {
			case flag == "" && (err != nil || len(p.Evicted) == 0):
				t.Errorf("%s: without the flag: %v, evicted %v (the stream should need an eviction)", tt.name, err, p.Evicted)
			case flag == "s" && len(p.Evicted) > 0:
				t.Errorf("%s: the InstNoReadSites site evicted %v (tactic %v)", tt.name, p.Evicted, p.Tactics[tt.site])
			case flag == "s" && err == nil:
				t.Errorf("%s: the InstNoReadSites site was patched (%v) where only an eviction fits", tt.name, p.Tactics[tt.site])
			}
			checkInvariants(t, p)
		}
	}
}

// TestPeeks: a ret's pun that reads only the opcode of the jmp rel32
// after it, whose B1 patch writes the same opcode back, peeks at that
// patch (Planner.Peeks) without reading it (Reads); a pun that reads a
// byte the neighbour's patch changed reads it. The code sits high enough
// that a rel32 whose top byte is 0xe9 lands in the stub range.
func TestPeeks(t *testing.T) {
	const base = 0x20000000
	p := newPlanner(stream(t, base, "c3/r", "0f 1f 00/p", "e9 00 01 00 00/r", "0f 1f 00/p"), wide...)
	for k, err := range p.PatchAll([]int{0, 2}) {
		if err != nil {
			t.Fatalf("PatchAll site %d: %v", k, err)
		}
	}
	if p.Tactics[0] != TacticB2 && p.Tactics[0] != TacticP {
		t.Fatalf("site 0 got tactic %v, want a pun (B2 or P)", p.Tactics[0])
	}
	if !containsPair(p.Peeks, [2]int{0, 2}) || containsPair(p.Reads, [2]int{0, 2}) {
		t.Errorf("Peeks %v, Reads %v: want (0, 2) a peek only", p.Peeks, p.Reads)
	}
	checkInvariants(t, p)

	t.Logf("with padding: site 0 %v, site 2 %v", p.Tactics[0], p.Tactics[2])

	// Without the padding the pun reads three bytes of the rel32 too.
	p = newPlanner(stream(t, base, "c3/r", "e9 00 01 00 00/r", "0f 1f 00/p"), wide...)
	for k, err := range p.PatchAll([]int{0, 1}) {
		if err != nil {
			t.Fatalf("PatchAll site %d: %v", k, err)
		}
	}
	t.Logf("without: site 0 %v, site 1 %v", p.Tactics[0], p.Tactics[1])
	if p.Tactics[0] != TacticNone && !containsPair(p.Reads, [2]int{0, 1}) {
		t.Errorf("site 0 (%v): Reads %v lacks (0, 1)", p.Tactics[0], p.Reads)
	}
	checkInvariants(t, p)
}

func TestNeverTwoPatchesOnSameBytes(t *testing.T) {
	// Dense short sites: every byte written belongs to one patch, and each
	// instruction is patched once.
	var words []string
	for k := 0; k < 40; k++ {
		words = append(words, "74 05/r", "48 8b 45 f8/r", "c3/r", "0f 1f 00/p", "55/tr", "48 89 e5/r")
	}
	insts := stream(t, codeBase, words...)
	var sites []int
	for k, in := range insts {
		if in.Bytes()[0] == 0x74 || in.Bytes()[0] == 0xc3 {
			sites = append(sites, k)
		}
	}
	p := newPlanner(insts, wide...)
	for k, err := range p.PatchAll(sites) {
		if err != nil {
			t.Errorf("site %d: %v", sites[k], err)
		}
	}
	checkInvariants(t, p)
}

// TestShortJumps: with ShortJumps, a site whose 5-byte jump would
// straddle an aligned 16-byte word gets a 2-byte jump to padding and
// keeps the rest of its bytes (its patch is the two bytes); a site that
// would not straddle, one at the word's last byte, or one with no
// padding in reach keeps its B1.
func TestShortJumps(t *testing.T) {
	// 12 bytes of nops, then the site (a call) at byte 12 of its word.
	lead := []string{"90/r", "90/r", "90/r", "90/r", "90/r", "90/r", "90/r", "90/r", "90/r", "90/r", "90/r", "90/r"}
	pad := []string{"cc/p", "cc/p", "cc/p", "cc/p", "cc/p", "cc/p", "cc/p", "cc/p"}
	tests := []struct {
		name  string
		insts []string
		site  int
		want  Tactic
	}{
		{"straddling, padding after", append(append(append([]string{}, lead...), "e8 00 00 00 00/r", "c3/r"), pad...), 12, TacticT3},
		{"straddling, padding before", append(append(append([]string{"c3/r"}, pad...), lead[:3]...), "e8 00 00 00 00/r", "c3/r"), 12, TacticT3},
		{"not straddling", append(append(append([]string{}, lead[:4]...), "e8 00 00 00 00/r", "c3/r"), pad...), 4, TacticB1},
		{"last byte of the word", append(append(append([]string{}, lead...), "90/r", "90/r", "90/r", "e8 00 00 00 00/r", "c3/r"), pad...), 15, TacticB1},
		{"no padding", append(append([]string{}, lead...), "e8 00 00 00 00/r", "c3/r"), 12, TacticB1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			insts := stream(t, codeBase, tc.insts...)
			p := newPlanner(insts, wide...)
			p.ShortJumps = true
			got, err := p.Patch(tc.site)
			if err != nil || got != tc.want {
				t.Fatalf("Patch = %v, %v; want %v", got, err, tc.want)
			}
			in := insts[tc.site]
			if in.Addr&15 != uint64(tc.site)&15 {
				t.Fatalf("site at %#x: the test's layout is off", in.Addr)
			}
			var site []byte
			for _, w := range p.Writes {
				if w.Inst == tc.site {
					site = w.Bytes
				}
			}
			if site == nil {
				t.Fatal("no write to the site")
			}
			changed := 0
			for k := range site {
				if site[k] != in.Bytes()[k] {
					changed = k + 1
				}
			}
			if tc.want == TacticT3 && (site[0] != 0xeb || changed != 2) {
				t.Errorf("site bytes % x: want a jmp rel8 and the rest as it was", site)
			}
			if tc.want == TacticT3 {
				target := int64(in.Addr) + 2 + int64(int8(site[1]))
				x := -1
				for k := range insts {
					if int64(insts[k].Addr) == target {
						x = k
					}
				}
				if x < 0 || insts[x].Flags&InstPadding == 0 {
					t.Errorf("the short jump lands at %#x, not on padding", target)
				}
			}
		})
	}
}

// TestRun: a site whose run (Planner.Run: the instructions and branch a
// pre-site's trampoline runs) makes room for a jmp rel32 takes it with
// no stub, overwriting the run; without the run, or when a pun of a
// site above has read the run's bytes, it needs a stub.
func TestRun(t *testing.T) {
	words := []string{"48 89 df/r", "74 05/r", "48 8b 45 f8 00/r", "c3/r"} // mov ; je ; mov ; ret
	for _, tc := range []struct {
		name  string
		run   bool
		stubs bool
	}{
		{"run", true, false},
		{"no run", false, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := newPlanner(stream(t, codeBase, words...), wide...)
			if tc.run {
				end := int64(codeBase + 5) // the mov and the je
				p.Run = func(i int) int64 {
					if i == 0 {
						return end
					}
					return 0
				}
			}
			got, err := p.Patch(0)
			if err != nil {
				t.Fatal(err)
			}
			if tc.stubs != (len(p.Stubs) > 0) {
				t.Errorf("tactic %v, %d stubs", got, len(p.Stubs))
			}
			if tc.run && (got != TacticP || len(p.Evicted) != 0) {
				t.Errorf("tactic %v, evicted %v: want P over the run, nothing evicted", got, p.Evicted)
			}
			checkInvariants(t, p)
		})
	}
}

// TestTrap: where no tactic applies, Trap writes an int3 over the site's
// first byte alone; it refuses an untouchable site and a byte a pun has
// read, and no later pun reads the int3 (the runtime must be able to
// restore it alone).
func TestTrap(t *testing.T) {
	p := newPlanner(stream(t, codeBase, "74 05/r", "48 8b 45 f8/u", "c3/u"))
	if _, err := p.Patch(0); !errors.Is(err, ErrTooShort) {
		t.Fatalf("Patch = %v, want ErrTooShort", err)
	}
	if tc, err := p.Trap(0); err != nil || tc != TacticTrap {
		t.Fatalf("Trap = %v, %v", tc, err)
	}
	if len(p.Writes) != 1 || !bytes.Equal(p.Writes[0].Bytes, []byte{0xcc, 0x05}) || len(p.Stubs) != 0 {
		t.Fatalf("writes %v stubs %v, want 74 05 -> cc 05 alone", p.Writes, p.Stubs)
	}
	if tc, _ := p.Patch(0); tc != TacticTrap {
		t.Errorf("Patch after Trap = %v, want the trap kept", tc)
	}
	checkInvariants(t, p)

	p = newPlanner(stream(t, codeBase, "c3/u"))
	if _, err := p.Trap(0); !errors.Is(err, ErrUntouchable) {
		t.Errorf("Trap of an untouchable site = %v", err)
	}

	// site 0's pun reads site 1's first byte: site 1 can trap only first
	words := []string{"74 05/r", "75 03/r", "48 8b 45 f8/u", "c3/u"}
	p = newPlanner(stream(t, codeBase, words...), wide...)
	if _, err := p.Patch(0); err != nil {
		t.Fatal(err)
	}
	if _, err := p.Trap(1); !errors.Is(err, ErrLocked) {
		t.Errorf("Trap of a byte a pun read = %v, want ErrLocked", err)
	}
	p = newPlanner(stream(t, codeBase, words...), wide...)
	if err := p.MarkSites([]int{0, 1}); err != nil {
		t.Fatal(err)
	}
	if _, err := p.Trap(1); err != nil {
		t.Fatal(err)
	}
	tc, err := p.Patch(0)
	for _, r := range p.Reads {
		if r[1] == 1 {
			t.Errorf("Reads %v: patch %d reads the int3 of site 1", p.Reads, r[0])
		}
	}
	t.Logf("site 0 after site 1's trap: %v (%v)", tc, err)
	checkInvariants(t, p)
}
