// Package offline measures stint's offline analyses on large synthetic
// traces: how many events per second one core streams through `cov
// compare`, `trace merge` and `cct build`, and their peak memory, at two
// numbers of distinct events, to show that memory follows distinct
// events and not total events (issue 5, part 6).
//
// [Generate] writes a synthetic trace with package formats' writer: a
// made-up program whose call graph is a binary tree of functions, walked
// by a few threads with a shadow stack, so that calls and returns nest
// as in a real program and the call-context tree is as large as the
// call graph. The mix of kinds is close to a branch trace of gzip:
// mostly conditional branches, about a tenth calls and a tenth returns,
// some jumps, indirect calls and jumps, and syscalls. The number of
// distinct events is set by the number of functions (about 17 per
// function).
//
// The 100-million-event run is a command (benchmarks/offline/cmd/offline)
// and is never run by CI; the package's test runs a small version.
package offline

import (
	"fmt"
	"io"
	"math/rand/v2"

	"github.com/stint-project/stint/formats"
)

// GenConfig configures [Generate].
type GenConfig struct {
	Events   int64  // events to write
	Distinct int    // about this many distinct events (at least 64)
	Threads  int    // threads (default 4)
	Seed     uint64 // PRNG seed
	Every    bool   // write the run as an --every trace (default mode otherwise; the events are the same)
}

// GenStats says what [Generate] wrote.
type GenStats struct {
	Events    int64
	Distinct  int // distinct (src, dst, kind) events written
	Functions int // functions of the synthetic program
	ByKind    [formats.MaxKind + 1]int64
}

// Module is the synthetic program's module.
var Module = formats.Module{ID: 0, Path: "/synthetic/offline", BuildID: "0ff1ce", Base: 0x555500000000, Size: 1 << 30, Rewritten: true}

// Per function: 6 jcc sites (two outcomes each), a jmp, two call sites
// (the second indirect in one function of 8), an indirect jmp in one of
// 4, a syscall in one of 16, and a ret.
const (
	fnSize   = 0x100
	fnBase   = 0x10000
	nJcc     = 6
	siteJcc  = 0x10 // + 8*j
	siteJmp  = 0x80
	siteCall = 0x90 // + 8*c
	siteInd  = 0xb0
	siteSys  = 0xc0
	siteRet  = 0xf0
	perFn    = 17 // about this many distinct events per function
	maxDepth = 64
	switchAt = 4096 // events per thread before the next thread runs
)

type genFrame struct {
	fn     int
	retTo  uint64 // return address in the caller
	caller int
}

// Generate writes a synthetic trace of cfg.Events events to w.
func Generate(w io.Writer, cfg GenConfig) (GenStats, error) {
	var st GenStats
	if cfg.Events < 0 {
		return st, fmt.Errorf("events %d: want >= 0", cfg.Events)
	}
	nfn := max(4, cfg.Distinct/perFn)
	if nfn > 1<<20 {
		return st, fmt.Errorf("distinct %d: at most %d", cfg.Distinct, perFn<<20)
	}
	st.Functions = nfn
	threads := cfg.Threads
	if threads <= 0 {
		threads = 4
	}
	opts := "tool=branch every=0"
	if cfg.Every {
		opts = "tool=branch every=1"
	}
	run := formats.Run{Binary: Module.Path, BuildID: Module.BuildID, Tool: "branch", Options: opts, PID: 4242, PPID: 1, MonoStartNS: 1e9}
	fw, err := formats.NewWriter(w, run, []formats.Module{Module})
	if err != nil {
		return st, err
	}
	rng := rand.New(rand.NewPCG(cfg.Seed, 0x5eed))
	// seen marks distinct events: per function, slots for 12 jcc
	// outcomes, jmp, 2 calls, ind-jmp, syscall, and a ret per caller
	// site (the function's parent calls it from one of its two sites).
	const slots = 2*nJcc + 1 + 2 + 1 + 1 + 2
	seen := make([]uint64, (nfn*slots+63)/64)
	mark := func(fn, slot int) {
		i := fn*slots + slot
		if seen[i/64]&(1<<(i%64)) == 0 {
			seen[i/64] |= 1 << (i % 64)
			st.Distinct++
		}
	}
	addr := func(fn int) uint64 { return fnBase + uint64(fn)*fnSize }
	stacks := make([][]genFrame, threads)
	for i := range stacks {
		stacks[i] = []genFrame{{fn: 0}}
	}
	batch := make([]formats.Event, 0, formats.DefaultBatchRows)
	now := uint64(2e9)
	tid := 0
	for n := int64(0); n < cfg.Events; n++ {
		if n%switchAt == 0 {
			tid = int(n/switchAt) % threads
		}
		s := stacks[tid]
		top := &s[len(s)-1]
		fn := top.fn
		base := addr(fn)
		c1 := 2*fn + 1
		leaf := c1 >= nfn || len(s) >= maxDepth
		now += 1 + rng.Uint64N(64)
		e := formats.Event{TID: uint32(1000 + tid), Time: now}
		r := rng.Uint32N(1000)
		switch {
		case r < 100 && !leaf: // call a child
			c := rng.IntN(2)
			child := c1 + c
			if child >= nfn {
				c, child = 0, c1
			}
			e.Kind, e.Src, e.Dst = formats.KindCall, base+siteCall+8*uint64(c), addr(child)
			if c == 1 && fn%8 == 0 {
				e.Kind = formats.KindIndCall
			}
			mark(fn, 2*nJcc+1+c)
			s = append(s, genFrame{fn: child, retTo: e.Src + 5, caller: c})
		case (r < 200 || leaf && r < 300) && len(s) > 1: // return
			e.Kind, e.Src, e.Dst = formats.KindRet, base+siteRet, top.retTo
			mark(fn, 2*nJcc+5+top.caller)
			s = s[:len(s)-1]
		case r < 250:
			e.Kind, e.Src, e.Dst = formats.KindJmp, base+siteJmp, base+siteJcc
			mark(fn, 2*nJcc)
		case r < 265 && fn%4 == 0:
			e.Kind, e.Src, e.Dst = formats.KindIndJmp, base+siteInd, base+siteJcc+8
			mark(fn, 2*nJcc+3)
		case r < 275 && fn%16 == 0:
			e.Kind, e.Src, e.Value = formats.KindSyscall, base+siteSys, uint64(fn%300)
			mark(fn, 2*nJcc+4)
		default:
			j := rng.IntN(nJcc)
			src := base + siteJcc + 8*uint64(j)
			if rng.IntN(2) == 0 {
				e.Kind, e.Src, e.Dst = formats.KindJccTaken, src, base+siteJcc+8*uint64((j+2)%nJcc)
				mark(fn, 2*j)
			} else {
				e.Kind, e.Src, e.Dst = formats.KindJccNotTaken, src, src+2
				mark(fn, 2*j+1)
			}
		}
		stacks[tid] = s
		st.ByKind[e.Kind]++
		batch = append(batch, e)
		if len(batch) == cap(batch) {
			if err := fw.Write(batch...); err != nil {
				return st, err
			}
			batch = batch[:0]
		}
		st.Events++
	}
	if err := fw.Write(batch...); err != nil {
		return st, err
	}
	return st, fw.Close()
}
