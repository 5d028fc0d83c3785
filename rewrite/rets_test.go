package rewrite

import (
	"cmp"
	"debug/elf"
	"encoding/binary"
	"io"
	"maps"
	"path/filepath"
	"slices"
	"testing"

	"github.com/stint-project/stint/runtime"
)

// TestRetLists rewrites libsqlite3 and checks every direct call's list
// of callee rets (stint_probe.rets, STINT_MF_RETS) against what the
// symbol table says independently: the callee, found through the call's
// rel32 and, for a PLT stub, the stub's jmp *disp(%rip) and the slot's
// relocation; its extent from the symbol's size (not the FDEs the
// rewriter uses). Each list must hold only ret probes, and every ret
// probe inside the callee's own extent; most calls that the symbols
// resolve must carry a list. Every other direct probe's list (call
// length 0) is its own function's: open-ended probes and jccs' only
// (some lists must hold jccs'), and every open-ended probe inside the
// extent of the function symbol that holds the probe; most direct probes
// inside such a symbol must carry one. Open-ended probes carry none.
func TestRetLists(t *testing.T) {
	const lib = "/usr/lib/x86_64-linux-gnu/libsqlite3.so.0"
	readInput(t, lib)
	out := filepath.Join(t.TempDir(), "lib.so")
	st, err := RewriteFile(lib, out, Options{Budget: "10%", Period: "100ms"})
	if err != nil {
		t.Fatal(err)
	}
	m, probes, rets := moduleRets(t, out)
	if m.Flags&runtime.MFRets == 0 || len(rets) == 0 {
		t.Fatalf("module flags %#x, %d words of lists: want STINT_MF_RETS and lists", m.Flags, len(rets))
	}

	ef, err := elf.Open(lib)
	if err != nil {
		t.Fatal(err)
	}
	defer ef.Close()
	syms, err := ef.DynamicSymbols()
	if err != nil {
		t.Fatal(err)
	}
	type fn struct{ lo, hi uint64 }
	funcs := map[uint64]fn{}  // by start
	bySlot := map[uint64]fn{} // GOT slot -> function
	for _, s := range syms {
		if elf.ST_TYPE(s.Info) == elf.STT_FUNC && s.Section != elf.SHN_UNDEF && s.Value != 0 && s.Size != 0 {
			funcs[s.Value] = fn{s.Value, s.Value + s.Size}
		}
	}
	for _, sec := range ef.Sections {
		if sec.Type != elf.SHT_RELA {
			continue
		}
		d, err := sec.Data()
		if err != nil {
			t.Fatal(err)
		}
		for o := 0; o+24 <= len(d); o += 24 {
			info := binary.LittleEndian.Uint64(d[o+8:])
			k := info >> 32
			if r := elf.R_X86_64(info & 0xffffffff); (r == elf.R_X86_64_JMP_SLOT || r == elf.R_X86_64_GLOB_DAT) && k > 0 && k <= uint64(len(syms)) {
				if f, ok := funcs[syms[k-1].Value]; ok {
					bySlot[binary.LittleEndian.Uint64(d[o:])] = f
				}
			}
		}
	}
	text := func(a uint64, n int) []byte {
		for _, p := range ef.Progs {
			if p.Type == elf.PT_LOAD && a >= p.Vaddr && a+uint64(n) <= p.Vaddr+p.Filesz {
				b := make([]byte, n)
				if _, err := p.ReadAt(b, int64(a-p.Vaddr)); err == nil {
					return b
				}
			}
		}
		return nil
	}
	// callee resolves a call target: a function, or a PLT stub
	// (endbr64, then [bnd] jmp *disp(%rip)) whose slot names one.
	callee := func(a uint64) (fn, bool) {
		if f, ok := funcs[a]; ok {
			return f, true
		}
		b := text(a, 11)
		if len(b) == 11 && b[0] == 0xf3 && b[1] == 0x0f && b[2] == 0x1e && b[3] == 0xfa {
			b, a = b[4:], a+4
		}
		if len(b) >= 7 && b[0] == 0xf2 {
			b, a = b[1:], a+1
		}
		if len(b) < 6 || b[0] != 0xff || b[1] != 0x25 {
			return fn{}, false
		}
		f, ok := bySlot[a+6+uint64(int64(int32(binary.LittleEndian.Uint32(b[2:]))))]
		return f, ok
	}

	retProbes := map[uint64]int{} // src -> probe index
	var retSrcs []uint64
	for k, p := range probes {
		if runtime.Kind(p.Kind) == runtime.KRet {
			retProbes[p.Src] = k
			retSrcs = append(retSrcs, p.Src)
		}
	}
	slices.Sort(retSrcs)
	isOpen := func(k runtime.Kind) bool { return k == runtime.KRet || k == runtime.KIndJmp || k == runtime.KIndCall }
	probeAt := map[uint64]uint32{} // open-ended site -> its first probe's index
	for k, p := range probes {
		if _, ok := probeAt[p.Src]; !ok && isOpen(runtime.Kind(p.Kind)) {
			probeAt[p.Src] = uint32(k)
		}
	}
	openSrcs := slices.Sorted(maps.Keys(probeAt))
	// listOf returns the list p's rets word names, failing the test if
	// it lies outside the table
	listOf := func(p runtime.Probe) []uint32 {
		off := p.Rets&(1<<28-1) - 1
		if int(off) >= len(rets) || int(off)+1+int(rets[off]) > len(rets) || rets[off] == 0 {
			t.Fatalf("probe %#x: list at %d (of %d words) out of bounds", p.Src, off, len(rets))
		}
		return rets[off+1 : off+1+rets[off]]
	}
	var funcList []fn
	for _, f := range funcs {
		funcList = append(funcList, f)
	}
	slices.SortFunc(funcList, func(a, b fn) int { return cmp.Compare(a.lo, b.lo) })
	ownIn, ownListed, owns, ownJccs := 0, 0, 0, 0
	resolved, listed, calls := 0, 0, 0
	for _, p := range probes {
		if p.Flags&runtime.PFDirect == 0 || runtime.Kind(p.Kind) != runtime.KCall {
			if p.Rets != 0 && (p.Flags&runtime.PFDirect == 0 || isOpen(runtime.Kind(p.Kind))) {
				t.Errorf("probe %#x (kind %d) has a rets word %#x; only direct probes may", p.Src, p.Kind, p.Rets)
			}
			if p.Flags&runtime.PFDirect == 0 {
				continue
			}
			var list []uint32
			if p.Rets != 0 {
				owns++
				if n := p.Rets >> 28; n != 0 {
					t.Errorf("probe %#x (kind %d): length %d in its rets word, want 0", p.Src, p.Kind, n)
				}
				list = listOf(p)
				for _, q := range list {
					if int(q) >= len(probes) {
						t.Fatalf("probe %#x: listed probe %d of %d", p.Src, q, len(probes))
					}
					switch k := runtime.Kind(probes[q].Kind); {
					case k == runtime.KJccTaken || k == runtime.KJccNotTaken:
						ownJccs++
					case !isOpen(k):
						t.Fatalf("probe %#x: listed probe %d is neither open-ended nor a jcc's", p.Src, q)
					}
				}
			}
			i, _ := slices.BinarySearchFunc(funcList, p.Src, func(f fn, a uint64) int { return cmp.Compare(f.lo, a+1) })
			if i == 0 || p.Src >= funcList[i-1].hi {
				continue
			}
			f := funcList[i-1]
			ownIn++
			if list == nil {
				continue
			}
			ownListed++
			j, _ := slices.BinarySearch(openSrcs, f.lo)
			for ; j < len(openSrcs) && openSrcs[j] < f.hi; j++ {
				if !slices.Contains(list, probeAt[openSrcs[j]]) {
					t.Errorf("probe %#x in %#x-%#x: its open-ended site %#x is not in the list", p.Src, f.lo, f.hi, openSrcs[j])
				}
			}
			continue
		}
		calls++
		var list []uint32
		if p.Rets != 0 {
			if n := p.Rets >> 28; n != 5 && n != 6 {
				t.Errorf("call %#x: length %d in its rets word", p.Src, n)
			}
			list = listOf(p)
			listed++
			for _, q := range list {
				if int(q) >= len(probes) || runtime.Kind(probes[q].Kind) != runtime.KRet {
					t.Fatalf("call %#x: listed probe %d is not a ret probe", p.Src, q)
				}
			}
		}
		f, ok := callee(p.Dst)
		if !ok {
			continue
		}
		resolved++
		if list == nil {
			continue
		}
		i, _ := slices.BinarySearch(retSrcs, f.lo)
		for ; i < len(retSrcs) && retSrcs[i] < f.hi; i++ {
			if !slices.Contains(list, uint32(retProbes[retSrcs[i]])) {
				t.Errorf("call %#x to %#x-%#x: its ret %#x is not in the list", p.Src, f.lo, f.hi, retSrcs[i])
			}
		}
	}
	t.Logf("%d direct calls, %d with a list (rewrite stats: %d); %d resolved by the symbols", calls, listed, st.CallRets, resolved)
	if listed != st.CallRets {
		t.Errorf("%d calls carry a list, the statistics say %d", listed, st.CallRets)
	}
	if resolved == 0 || listed < resolved/2 {
		t.Errorf("only %d lists for %d calls the symbols resolve", listed, resolved)
	}
	t.Logf("%d other direct probes with an own list (rewrite stats: %d sites); %d inside function symbols, %d of them with a list", owns, st.OwnSites, ownIn, ownListed)
	if st.OwnSites == 0 || owns < st.OwnSites {
		t.Errorf("%d probes carry an own list, the statistics say %d sites", owns, st.OwnSites)
	}
	if ownIn == 0 || ownListed < ownIn/2 {
		t.Errorf("only %d own lists for %d direct probes inside function symbols", ownListed, ownIn)
	}
	if ownJccs == 0 {
		t.Error("no own list holds a jcc's probe")
	}
}

// TestProbeThunks checks ABI 8's thunks on gzip: a direct probe of a
// switchable patch carries, in its cache field, where its arm jumps in
// the file (the off-switch sends arms back there); any other probe
// carries 0.
func TestProbeThunks(t *testing.T) {
	readInput(t, gzipPath)
	out := filepath.Join(t.TempDir(), "gzip")
	if _, err := RewriteFile(gzipPath, out, Options{Budget: "10%", Period: "100ms"}); err != nil {
		t.Fatal(err)
	}
	m, probes, _ := moduleRets(t, out)
	ef, err := elf.Open(out)
	if err != nil {
		t.Fatal(err)
	}
	defer ef.Close()
	patches := make([]runtime.Patch, m.NPatches)
	readAt(t, ef, m.PatchesVaddr, patches)
	thunks := 0
	for i, p := range probes {
		switchable := p.Patch < m.NPatches && patches[p.Patch].Flags&runtime.PatchSwitch != 0
		if p.Flags&runtime.PFDirect == 0 || p.Arm == 0 || !switchable {
			if p.Cache != 0 {
				t.Errorf("probe %d (src %#x, kind %d): cache %#x, want 0", i, p.Src, p.Kind, p.Cache)
			}
			continue
		}
		var rel int32
		readAt(t, ef, p.Arm, &rel)
		want := p.Arm + 4 + uint64(int64(rel))
		if p.Cache != want || want < m.TrampLo || want >= m.TrampHi {
			t.Errorf("probe %d (src %#x, kind %d): thunk %#x, want %#x (its arm's target, in the trampolines)", i, p.Src, p.Kind, p.Cache, want)
		}
		thunks++
	}
	if thunks == 0 {
		t.Error("no probe of a switchable patch")
	}
	t.Logf("%d of %d probes carry a thunk", thunks, len(probes))
}

// readAt reads v at link vaddr a of ef's loaded segments.
func readAt(t *testing.T, ef *elf.File, a uint64, v any) {
	t.Helper()
	for _, p := range ef.Progs {
		if p.Type == elf.PT_LOAD && a >= p.Vaddr && a < p.Vaddr+p.Filesz {
			r := io.NewSectionReader(p, int64(a-p.Vaddr), int64(p.Filesz-(a-p.Vaddr)))
			if err := binary.Read(r, binary.LittleEndian, v); err != nil {
				t.Fatalf("read %#x: %v", a, err)
			}
			return
		}
	}
	t.Fatalf("%#x is not in the file", a)
}

// moduleRets reads a rewritten file's module (.stint.data), probes and
// rets table.
func moduleRets(t *testing.T, path string) (runtime.Module, []runtime.Probe, []uint32) {
	t.Helper()
	ef, err := elf.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer ef.Close()
	read := func(a uint64, v any) { readAt(t, ef, a, v) }
	sd := ef.Section(".stint.data")
	if sd == nil {
		t.Fatal("no .stint.data")
	}
	var m runtime.Module
	read(sd.Addr, &m)
	if m.Magic != runtime.ModuleMagic {
		t.Fatalf("module magic %#x", m.Magic)
	}
	probes := make([]runtime.Probe, m.NProbes)
	read(m.ProbesVaddr, probes)
	rets := make([]uint32, m.NRets)
	if m.NRets > 0 {
		read(m.RetsVaddr, rets)
	}
	return m, probes, rets
}
