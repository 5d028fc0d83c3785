package tramp

import (
	"testing"

	"github.com/stint-project/stint/rewrite/place"
	"github.com/stint-project/stint/runtime"
	"golang.org/x/arch/x86/x86asm"
)

// TestJmpOnTail: a compact trace's jcc arms, with tails (fragment
// linking), relocate each tail's instructions after the arm's append
// and jump to the tail's end; a long tail stops where one more
// instruction would put the arm's short jumps out of reach of their
// stubs, and then jumps to the first instruction it left out. The
// trampoline must assemble (a short jump out of range sets Err).
func TestJmpOnTail(t *testing.T) {
	const base, site, tgt = 0x500000, 0x401000, 0x402000
	in, k, _ := siteFor(t, site, []byte{0x74, 0x10}) // je
	for _, n := range []int{3, 40} {
		var plain []place.Inst // mov %rax,0x8(%rbx,%rcx,8), 5 bytes each
		for i := 0; i < n; i++ {
			plain = append(plain, place.NewInst(uint64(0x403000+5*i), []byte{0x48, 0x89, 0x44, 0xcb, 0x08}, 0))
		}
		const end = 0x404000
		a := &Asm{Base: base, Inline: true, Paths: true}
		a.Cold = a.ColdAt(0x600000)
		a.Tail = func(uint64) ([]*place.Inst, uint64) {
			var steps []*place.Inst
			for i := range plain {
				steps = append(steps, &plain[i])
			}
			return steps, end
		}
		a.Site(runtime.ToolBranch, &in, k, tgt, []uint64{0x700000, 0x700040}, 0x800000, true)
		a.FlushCold()
		if a.Err != nil {
			t.Fatalf("%d-instruction tails: %v", n, a.Err)
		}
		// each tail: its relocated movs, then a jmp rel32 to where it ends
		var tails [][2]uint64 // (instructions relocated, the jmp's target)
		run := uint64(0)
		for _, d := range disasm(t, a.B, base) {
			switch {
			case d.in.Op == x86asm.MOV && d.in.Len == 5:
				run++
			case d.in.Op == x86asm.JMP && d.in.Len == 5 && run > 0:
				tails = append(tails, [2]uint64{run, d.addr + 5 + uint64(int64(d.in.Args[0].(x86asm.Rel)))})
				run = 0
			}
		}
		if len(tails) != 2 {
			t.Fatalf("%d-instruction tails: %d tails found (%v), want 2 (one per arm)", n, len(tails), tails)
		}
		for _, tl := range tails {
			want := uint64(end)
			if tl[0] < uint64(n) {
				want = plain[tl[0]].Addr // cut: on at the first one left out
			}
			if tl[1] != want {
				t.Errorf("%d-instruction tail relocated %d and jumps to %#x, want %#x", n, tl[0], tl[1], want)
			}
			if n == 3 && tl[0] != 3 {
				t.Errorf("a 3-instruction tail relocated %d of them", tl[0])
			}
			if n == 40 && tl[0] == 40 {
				t.Errorf("a 40-instruction tail was relocated whole: past the short jumps' reach")
			}
		}
	}
}
