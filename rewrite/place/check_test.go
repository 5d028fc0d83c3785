package place

import (
	"bytes"
	"math"
	"sort"
	"testing"

	"golang.org/x/arch/x86/x86asm"
)

// image is the patched code as the container would write it.
type image struct {
	p     *Planner
	bytes map[int][]byte // per written instruction
	stubs map[uint64]int
}

func newImage(t testing.TB, p *Planner) *image {
	t.Helper()
	im := &image{p: p, bytes: map[int][]byte{}, stubs: map[uint64]int{}}
	for _, w := range p.Writes {
		if _, dup := im.bytes[w.Inst]; dup {
			t.Errorf("two writes for instruction %d", w.Inst)
		}
		in := &p.Insts[w.Inst]
		if w.Addr != in.Addr || len(w.Bytes) != in.Len() {
			t.Errorf("write %#x+%d does not cover instruction %d (%#x+%d)", w.Addr, len(w.Bytes), w.Inst, in.Addr, in.Len())
		}
		im.bytes[w.Inst] = w.Bytes
	}
	for _, s := range p.Stubs {
		if _, dup := im.stubs[s.Addr]; dup {
			t.Errorf("two stubs at %#x", s.Addr)
		}
		im.stubs[s.Addr] = s.Inst
	}
	return im
}

// at returns up to n patched bytes from addr (fewer at the end of the code).
func (im *image) at(addr uint64, n int) []byte {
	var out []byte
	for len(out) < n {
		x := im.p.find(int64(addr))
		if x < 0 {
			break
		}
		b := im.p.Insts[x].Bytes()
		if w, ok := im.bytes[x]; ok {
			b = w
		}
		off := int(addr - im.p.Insts[x].Addr)
		k := min(n-len(out), len(b)-off)
		out = append(out, b[off:off+k]...)
		addr += uint64(k)
	}
	return out
}

// follow executes the jumps from the start of instruction i (decoded with
// x86asm) through stubs and returns where execution ends up.
func (im *image) follow(t testing.TB, i int) uint64 {
	t.Helper()
	pc := im.p.Insts[i].Addr
	for hop := 0; hop < 4; hop++ {
		if x, ok := im.stubs[pc]; ok {
			return im.p.Near(x)
		}
		code := im.at(pc, 15)
		in, err := x86asm.Decode(code, 64)
		if err != nil {
			t.Errorf("instruction %d: decode at %#x (% x): %v", i, pc, code, err)
			return 0
		}
		rel, ok := in.Args[0].(x86asm.Rel)
		if in.Op != x86asm.JMP || !ok {
			t.Errorf("instruction %d: %#x decodes to %v, not a direct jmp", i, pc, in)
			return 0
		}
		pc = pc + uint64(in.Len) + uint64(int64(rel))
		if im.p.find(int64(pc)) < 0 {
			if x, ok := im.stubs[pc]; ok {
				return im.p.Near(x)
			}
			return pc
		}
	}
	t.Errorf("instruction %d: too many hops", i)
	return 0
}

// checkInvariants checks the planner's results against its rules.
func checkInvariants(t testing.TB, p *Planner) {
	t.Helper()
	im := newImage(t, p)
	evicted := map[int]bool{}
	for _, x := range p.Evicted {
		if evicted[x] {
			t.Errorf("instruction %d evicted twice", x)
		}
		evicted[x] = true
	}
	reads := map[[2]int]bool{}
	for _, r := range p.Reads {
		reads[r] = true
	}
	for x, b := range im.bytes {
		in := &p.Insts[x]
		if bytes.Equal(b, in.Bytes()) {
			continue
		}
		if in.Flags&InstUntouchable != 0 {
			t.Errorf("untouchable instruction %d (%#x) modified", x, in.Addr)
		}
		if p.Tactics[x] == TacticNone && in.Flags&InstPadding == 0 && !inRun(p, x) {
			t.Errorf("instruction %d (%#x) modified but neither patched nor padding", x, in.Addr)
		}
	}
	fails := 0
	for i, tac := range p.Tactics {
		if tac == TacticNone {
			continue
		}
		if tac == TacticTrap {
			// an int3 (the runtime's SIGTRAP handler goes to Near)
			if b := im.bytes[i]; b == nil || b[0] != 0xcc {
				t.Errorf("instruction %d (%#x): a trap without its int3", i, p.Insts[i].Addr)
			}
			continue
		}
		if got, want := im.follow(t, i), p.Near(i); got != want {
			t.Errorf("instruction %d (%#x, %v): jumps to %#x, want Near %#x", i, p.Insts[i].Addr, tac, got, want)
			if fails++; fails > 10 {
				return
			}
		}
	}
	// Stubs: no overlap, in free space, reach their trampoline.
	addrs := make([]int64, 0, len(p.Stubs))
	for _, s := range p.Stubs {
		addrs = append(addrs, int64(s.Addr))
		if p.Space.freeIndex(int64(s.Addr), int64(s.Addr)+StubLen) < 0 {
			t.Errorf("stub %#x outside free space", s.Addr)
		}
		if d := int64(p.Near(s.Inst)) - (int64(s.Addr) + StubLen); d < math.MinInt32 || d > math.MaxInt32 {
			t.Errorf("stub %#x cannot reach %#x", s.Addr, p.Near(s.Inst))
		}
	}
	sort.Slice(addrs, func(a, b int) bool { return addrs[a] < addrs[b] })
	for k := 1; k < len(addrs); k++ {
		if addrs[k] < addrs[k-1]+StubLen {
			t.Errorf("stubs %#x and %#x overlap", addrs[k-1], addrs[k])
		}
	}
	// A jump whose rel32 lies in bytes another instruction's patch
	// changed must be recorded in Reads (restoring that instruction would
	// change the jump).
	for i, tac := range p.Tactics {
		if tac == TacticNone {
			continue
		}
		a := p.Insts[i].Addr
		code := im.at(a, 15)
		in, err := x86asm.Decode(code, 64)
		if err != nil || in.Op != x86asm.JMP || in.PCRel != 4 {
			continue
		}
		for ad := a + uint64(in.PCRelOff); ad < a+uint64(in.PCRelOff+4); ad++ {
			x := p.find(int64(ad))
			if x == i || x < 0 {
				continue
			}
			off := ad - p.Insts[x].Addr
			if w, mod := im.bytes[x]; mod && w[off] != p.Insts[x].Bytes()[off] && !reads[[2]int{i, x}] {
				t.Errorf("instruction %d reads modified bytes of %d, not in Reads", i, x)
			}
		}
	}
}

// inRun reports whether instruction x lies in a patched site's run
// (Planner.Run), which the site's patch may overwrite.
func inRun(p *Planner, x int) bool {
	if p.Run == nil {
		return false
	}
	for i := x - 1; i >= 0 && i >= x-4; i-- {
		if p.Tactics[i] != TacticNone && int64(p.Insts[x].Addr) < p.Run(i) {
			return true
		}
	}
	return false
}
