package rewrite

import (
	"bytes"
	"debug/elf"
	"testing"

	"github.com/stint-project/stint/formats"
	"github.com/stint-project/stint/internal/fixtures"
)

// TestUnpatchedJccsProbedElsewhere: in a Go executable, where padding is
// off limits, the jccs and rets the planner cannot patch in place are
// probed from the instruction before them, or (jccs) told by marks; the
// branch map says so consistently: each marked jcc's two sides lead,
// through direct jmps, to marks of opposite bits, the taken side's the
// one the jcc's flag names, and the counts agree with the stats. Go's
// signal restorer keeps its bytes, and its stack switches are flagged.
func TestUnpatchedJccsProbedElsewhere(t *testing.T) {
	bin := fixtures.BuildGo(t, fixtures.GoAll()[0])
	out, st, err := RewriteBytes(readInput(t, bin), Options{Every: true})
	if err != nil {
		t.Fatal(err)
	}
	if st.PreJccs == 0 || st.PreRets == 0 {
		t.Errorf("%d jccs and %d rets probed from the instruction before them, want some of each", st.PreJccs, st.PreRets)
	}
	t.Logf("pre-jccs %d, pre-rets %d, marked jccs %d (%d marks), unknown %d", st.PreJccs, st.PreRets, st.MarkedJccs, st.Marks, st.UnknownJccs)
	m := branchMap(t, out)
	marked, unknown, marks := 0, 0, 0
	for _, br := range m.Branches {
		switch {
		case br.Kind == formats.BrMark:
			marks++
		case br.Kind == formats.BrJcc && br.Flags&formats.BranchMarked != 0:
			marked++
			taken, ok1 := firstMark(m, br.Target)
			notTaken, ok2 := firstMark(m, br.Addr+uint64(br.Len))
			if !ok1 || !ok2 || taken == notTaken || taken != (br.Flags&formats.BranchBit != 0) {
				t.Errorf("marked jcc at %#x: sides' marks %v/%v (found %v/%v), flag %#x", br.Addr, taken, notTaken, ok1, ok2, br.Flags)
			}
		case br.Kind == formats.BrJcc && br.Flags&formats.BranchProbed == 0:
			unknown++
		}
	}
	if marked != st.MarkedJccs || unknown != st.UnknownJccs || marks != st.Marks {
		t.Errorf("map: %d marked jccs, %d unknown, %d marks; stats %d, %d, %d", marked, unknown, marks, st.MarkedJccs, st.UnknownJccs, st.Marks)
	}
	// Go's signal restorer keeps its bytes: the runtime knows a handler
	// by its return address pointing at them
	in, err := elf.NewFile(bytes.NewReader(readInput(t, bin)))
	if err != nil {
		t.Fatal(err)
	}
	sym := symbolAddr(t, in, "runtime.sigreturn__sigaction.abi0")
	o, err := elf.NewFile(bytes.NewReader(out))
	if err != nil {
		t.Fatal(err)
	}
	// the indirect jmp that ends gogo (its stack switch) is flagged, and
	// only the runtime's few stack switchers are
	gogo := symbolAddr(t, in, "gogo")
	switches, gogoJmp := 0, false
	for _, br := range m.Branches {
		if br.Flags&formats.BranchSwitch != 0 {
			switches++
			gogoJmp = gogoJmp || br.Kind == formats.BrIndJmp && br.Addr >= gogo && br.Addr < gogo+0x40
		}
	}
	if !gogoJmp || switches > 8 {
		t.Errorf("%d stack switches flagged, gogo's jmp among them: %v", switches, gogoJmp)
	}
	want := []byte{0x48, 0xc7, 0xc0, 0x0f, 0x00, 0x00, 0x00, 0x0f, 0x05}
	if got := bytesAt(t, o, sym, len(want)); !bytes.Equal(got, want) {
		t.Errorf("the restorer at %#x is % x after the rewrite, want % x", sym, got, want)
	}
}

func symbolAddr(t *testing.T, f *elf.File, name string) uint64 {
	t.Helper()
	syms, err := f.Symbols()
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range syms {
		if s.Name == name {
			return s.Value
		}
	}
	t.Fatalf("no symbol %s", name)
	return 0
}

func bytesAt(t *testing.T, f *elf.File, addr uint64, n int) []byte {
	t.Helper()
	for _, p := range f.Progs {
		if p.Type == elf.PT_LOAD && addr >= p.Vaddr && addr+uint64(n) <= p.Vaddr+p.Filesz {
			b := make([]byte, n)
			if _, err := p.ReadAt(b, int64(addr-p.Vaddr)); err != nil {
				t.Fatal(err)
			}
			return b
		}
	}
	t.Fatalf("%#x is in no loaded segment", addr)
	return nil
}

// firstMark follows the run from a (straight on, through direct jmps)
// to its first mark, and returns its bit.
func firstMark(m *formats.PathMap, a uint64) (bit, ok bool) {
	for n := 0; n < 64; n++ {
		i := m.At(a)
		if i >= len(m.Branches) {
			return false, false
		}
		br := m.Branches[i]
		switch br.Kind {
		case formats.BrMark:
			return br.Flags&formats.BranchBit != 0, true
		case formats.BrJmp:
			a = br.Target
		default:
			return false, false
		}
	}
	return false, false
}

func branchMap(t *testing.T, file []byte) *formats.PathMap {
	t.Helper()
	f, err := elf.NewFile(bytes.NewReader(file))
	if err != nil {
		t.Fatal(err)
	}
	s := f.Section(formats.PathMapSection)
	if s == nil {
		t.Fatalf("no %s section", formats.PathMapSection)
	}
	b, err := s.Data()
	if err != nil {
		t.Fatal(err)
	}
	m, err := formats.DecodePathMap(b)
	if err != nil {
		t.Fatal(err)
	}
	return m
}
