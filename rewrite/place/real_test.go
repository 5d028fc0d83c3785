package place

import (
	"debug/elf"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"

	"golang.org/x/arch/x86/x86asm"
)

// sweep decodes text (at vaddr) linearly with x86asm the way the container
// does, and returns the instructions with their flags and the indices of
// the branch sites (jmp, jcc, call, ret, syscall, loop/jrcxz).
func sweep(text []byte, vaddr uint64) ([]Inst, []int) {
	var insts []Inst
	var isBranch []bool
	var uncond []bool
	for off := 0; off < len(text); {
		in, err := x86asm.Decode(text[off:], 64)
		if err != nil || in.Len == 0 {
			insts = append(insts, NewInst(vaddr+uint64(off), text[off:off+1], InstUntouchable))
			isBranch = append(isBranch, false)
			uncond = append(uncond, false)
			off++
			continue
		}
		insts = append(insts, NewInst(vaddr+uint64(off), text[off:off+in.Len], InstRelocatable))
		br, un := false, false
		switch in.Op {
		case x86asm.JMP, x86asm.RET, x86asm.UD2, x86asm.HLT:
			br, un = in.Op == x86asm.JMP || in.Op == x86asm.RET, true
		case x86asm.CALL, x86asm.SYSCALL, x86asm.LOOP, x86asm.LOOPE, x86asm.LOOPNE, x86asm.JRCXZ, x86asm.JECXZ:
			br = true
		default:
			br = strings.HasPrefix(in.Op.String(), "J")
		}
		isBranch = append(isBranch, br)
		uncond = append(uncond, un)
		off += in.Len
	}
	find := func(a uint64) int {
		lo, hi := 0, len(insts)
		for lo < hi {
			m := (lo + hi) / 2
			if insts[m].Addr <= a {
				lo = m + 1
			} else {
				hi = m
			}
		}
		return lo - 1
	}
	for k := range insts {
		in, err := x86asm.Decode(insts[k].Bytes(), 64)
		if err != nil || !isBranch[k] {
			continue
		}
		rel, ok := in.Args[0].(x86asm.Rel)
		if !ok {
			continue
		}
		t := insts[k].Addr + uint64(len(insts[k].Bytes())) + uint64(int64(rel))
		if t < vaddr || t >= vaddr+uint64(len(text)) {
			continue
		}
		x := find(t)
		if insts[x].Addr == t {
			insts[x].Flags |= InstTarget
		} else {
			insts[x].Flags |= InstUntouchable
			insts[x].Flags &^= InstRelocatable
		}
	}
	pad := false
	var sites []int
	for k := range insts {
		in := &insts[k]
		b := in.Bytes()
		isPad := b[0] == 0xcc || b[0] == 0x90 || len(b) > 1 && (b[0] == 0x0f && b[1] == 0x1f || b[0] == 0x66 && (b[1] == 0x90 || b[1] == 0x0f || b[1] == 0x2e || b[1] == 0x66))
		if pad && isPad && in.Flags&(InstTarget|InstUntouchable) == 0 {
			in.Flags |= InstPadding
			in.Flags &^= InstRelocatable
		} else {
			pad = false
		}
		if uncond[k] {
			pad = true
		}
		if isBranch[k] && in.Flags&InstUntouchable == 0 {
			sites = append(sites, k)
		}
	}
	return insts, sites
}

type realResult struct {
	sites, patched int
	tactics        map[Tactic]int
	fails          map[string]int
	evicted        int
	stubs, pages   int
	chunks         int
	chunkBytes     uint64
	srcBytes       uint64
}

// planFile plans every branch of path's .text the way the container would.
func planFile(t testing.TB, path string) (*Planner, realResult) {
	f, err := elf.Open(path)
	if err != nil {
		t.Skipf("%s: %v", path, err)
	}
	defer f.Close()
	sec := f.Section(".text")
	if sec == nil {
		t.Skipf("%s: no .text", path)
	}
	text, err := sec.Data()
	if err != nil {
		t.Fatal(err)
	}
	var imageEnd uint64
	for _, pr := range f.Progs {
		if pr.Type == elf.PT_LOAD && pr.Vaddr+pr.Memsz > imageEnd {
			imageEnd = pr.Vaddr + pr.Memsz
		}
	}
	insts, sites := sweep(text, sec.Addr)
	// Near trampolines in a segment after the image; stubs below the image
	// (PIE) and beyond the first GiB after it.
	trampBase := (imageEnd + 0xfff) &^ 0xfff
	var next uint64 = trampBase
	near := map[int]uint64{}
	// As package rewrite lays stubs out: above the image after a GiB left
	// for brk, within rel32 reach of all the code (16 MiB slack). Below
	// the image only for a PIE executable (a shared object's neighbours
	// are other mappings), wrapping below 0 as the ABI allows.
	const gib, slack = 1 << 30, 16 << 20
	textHi := sec.Addr + uint64(len(text))
	allowed := []Range{{Lo: (imageEnd + gib + 0xfff) &^ 0xfff, Hi: (sec.Addr + 2*gib - slack) &^ 0xfff}}
	isExec := false
	for _, pr := range f.Progs {
		isExec = isExec || pr.Type == elf.PT_INTERP
	}
	if f.Type == elf.ET_DYN && isExec {
		lo, hi := int64(textHi)-2*gib+slack, int64(-64<<10)
		allowed = append(allowed, Range{Lo: uint64(lo), Hi: uint64(hi)})
	}
	p := &Planner{
		Insts: insts,
		Space: NewAddrSpace(allowed),
		Near: func(i int) uint64 {
			if a, ok := near[i]; ok {
				return a
			}
			near[i] = next
			next += 64
			return near[i]
		},
	}
	r := realResult{sites: len(sites), tactics: map[Tactic]int{}, fails: map[string]int{}}
	errs := p.PatchAll(sites)
	for k, err := range errs {
		if err != nil {
			var pe *PatchError
			if errors.As(err, &pe) {
				r.fails[fmt.Sprintf("%v (len %d)", pe.Err, insts[sites[k]].Len())]++
			} else {
				r.fails[err.Error()]++
			}
			continue
		}
		r.patched++
		r.tactics[p.Tactics[sites[k]]]++
	}
	r.evicted = len(p.Evicted)
	r.stubs, r.pages = p.Space.Stubs(), p.Space.Pages()
	ch := p.Space.Chunks(4096)
	r.chunks = len(ch)
	for _, c := range ch {
		r.chunkBytes += c.Hi - c.Lo
	}
	r.srcBytes = p.Space.Layout(4096).SrcSize
	return p, r
}

var realBinaries = []string{
	"/usr/bin/gzip",
	"/usr/lib/x86_64-linux-gnu/libsqlite3.so.0",
	"/usr/bin/git",
	"/usr/bin/gdb",
}

func TestRealBinaries(t *testing.T) {
	if testing.Short() {
		t.Skip("slow: plans real binaries")
	}
	for _, path := range realBinaries {
		t.Run(path[strings.LastIndex(path, "/")+1:], func(t *testing.T) {
			if _, err := os.Stat(path); err != nil {
				t.Skipf("missing: %v", err)
			}
			p, r := planFile(t, path)
			pct := 100 * float64(r.patched) / float64(r.sites)
			t.Logf("%s: %d sites, %d patched (%.3f%%) B1 %d B2 %d T1 %d T2 %d T3 %d P %d; evicted %d; stubs %d in %d pages; %d chunks, %d KiB",
				path, r.sites, r.patched, pct,
				r.tactics[TacticB1], r.tactics[TacticB2], r.tactics[TacticT1], r.tactics[TacticT2], r.tactics[TacticT3], r.tactics[TacticP],
				r.evicted, r.stubs, r.pages, r.chunks, r.chunkBytes>>10)
			t.Logf("  chunks (gap %d KiB): %d, %d MiB mapped, source area %d KiB", DefaultChunkGap>>10, r.chunks, r.chunkBytes>>20, r.srcBytes>>10)
			for _, gap := range []uint64{1, 16 << 10, 1 << 20} {
				p.Space.ChunkGap = gap
				l := p.Space.Layout(4096)
				var mapped uint64
				for _, c := range l.Chunks {
					mapped += c.Hi - c.Lo
				}
				t.Logf("  chunks (gap %d KiB): %d, %d MiB mapped, source area %d KiB", gap>>10, len(l.Chunks), mapped>>20, l.SrcSize>>10)
			}
			for k, v := range r.fails {
				t.Logf("  failed: %d × %s", v, k)
			}
			checkInvariants(t, p)
			if strings.HasSuffix(path, "gzip") && pct < 99.9 {
				t.Errorf("gzip: %.3f%% patched, want >= 99.9%%", pct)
			}
		})
	}
}

// BenchmarkPlan plans every branch of gdb (the largest binary above).
func BenchmarkPlan(b *testing.B) {
	const path = "/usr/bin/gdb"
	f, err := elf.Open(path)
	if err != nil {
		b.Skipf("%s: %v", path, err)
	}
	defer f.Close()
	sec := f.Section(".text")
	text, err := sec.Data()
	if err != nil {
		b.Fatal(err)
	}
	insts, sites := sweep(text, sec.Addr)
	b.ResetTimer()
	for range b.N {
		var next uint64 = 0x4000000
		near := map[int]uint64{}
		p := &Planner{Insts: insts, Space: NewAddrSpace([]Range{{Lo: 0x44000000, Hi: 0x100000000}}),
			Near: func(i int) uint64 {
				if a, ok := near[i]; ok {
					return a
				}
				near[i] = next
				next += 64
				return near[i]
			}}
		p.PatchAll(sites)
	}
	b.ReportMetric(float64(len(sites)), "sites")
}

// FuzzPlan: any byte string, decoded and planned, yields patches that
// decode to jumps reaching Near, never touch untouchable bytes, and never
// panic.
func FuzzPlan(f *testing.F) {
	f.Add([]byte{0x74, 0x05, 0x48, 0x8b, 0x45, 0xf8, 0xc3, 0x0f, 0x1f, 0x00, 0x55, 0xe8, 0, 0, 0, 0})
	f.Add([]byte{0xc3, 0x08, 0x44, 0x24, 0x08, 0x48, 0xb8, 1, 2, 3, 4, 5, 6, 7, 8, 0xeb, 0xf0})
	f.Add([]byte{0x0f, 0x05, 0xff, 0xd0, 0xcc, 0xcc, 0x75, 0xfe, 0xe9, 1, 0, 0, 0})
	f.Fuzz(func(t *testing.T, code []byte) {
		if len(code) == 0 || len(code) > 1024 {
			return
		}
		insts, sites := sweep(code, codeBase)
		p := newPlanner(insts, Range{Lo: 0x1000000, Hi: 0x100000000})
		p.PatchAll(sites)
		checkInvariants(t, p)
	})
}
