package paths

import (
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"reflect"
	"testing"

	"github.com/stint-project/stint/formats"
)

// fastMap is a module with every kind of transfer and flag: those the
// fast walk takes and those it leaves to step.
func fastMap() *formats.PathMap {
	const (
		p   = formats.BranchProbed
		bit = formats.BranchBit
	)
	return &formats.PathMap{TextLo: 0x1000, TextHi: 0x2000, Branches: []formats.Branch{
		{Addr: 0x1000, Target: 0x1020, Len: 2, Kind: formats.BrJcc, Flags: p},
		{Addr: 0x1002, Target: 0x1100, Len: 5, Kind: formats.BrCall, Flags: p},
		{Addr: 0x1007, Target: 0x1200, Len: 5, Kind: formats.BrCall}, // pushes nothing
		{Addr: 0x100c, Target: 0x1000, Len: 2, Kind: formats.BrJcc, Flags: p},
		{Addr: 0x100e, Len: 2, Kind: formats.BrIndCall, Flags: p},
		{Addr: 0x1010, Target: 0x1000, Len: 2, Kind: formats.BrJmp},
		{Addr: 0x1020, Target: 0x1030, Len: 2, Kind: formats.BrJcc, Flags: formats.BranchMarked | bit},
		{Addr: 0x1022, Len: 1, Kind: formats.BrMark},
		{Addr: 0x1023, Target: 0x1000, Len: 2, Kind: formats.BrJmp},
		{Addr: 0x1030, Len: 1, Kind: formats.BrMark, Flags: bit},
		{Addr: 0x1031, Target: 0x1100, Len: 2, Kind: formats.BrIndJmp, Flags: p | formats.BranchPredicted},
		{Addr: 0x1100, Target: 0x1000, Len: 2, Kind: formats.BrJcc, Flags: p},
		{Addr: 0x1102, Len: 2, Kind: formats.BrIndJmp, Flags: p | formats.BranchSwitch},
		{Addr: 0x1104, Len: 1, Kind: formats.BrRet, Flags: p},
		{Addr: 0x1200, Target: 0x1104, Len: 2, Kind: formats.BrJcc},
		{Addr: 0x1202, Target: 0x1300, Len: 5, Kind: formats.BrCall, Flags: p},
		{Addr: 0x1207, Len: 1, Kind: formats.BrRet},
		{Addr: 0x1300, Target: 0x2800, Len: 5, Kind: formats.BrJmp}, // out of the text, in the module
		{Addr: 0x1305, Len: 2, Kind: formats.BrIndJmp},
	}}
}

// randomStream appends n random packets to w: mostly outcome bits, and
// destinations, places and signals at the map's addresses and outside.
func randomStream(r *rand.Rand, w *formats.PacketWriter, n int) {
	addrs := []uint64{0x1000, 0x1002, 0x1007, 0x100c, 0x1013, 0x1020, 0x1030, 0x1100, 0x1104, 0x1200, 0x1207, 0x1305, 0x2800, 0x5000}
	at := func() uint64 { return testBase + addrs[r.IntN(len(addrs))] }
	for range n {
		switch x := r.IntN(100); {
		case x < 85:
			w.Bit(r.IntN(3) != 0)
		case x < 91:
			w.TIP(at())
		case x < 92:
			w.PSB(at())
		case x < 93:
			w.Sync(at())
		case x < 94:
			w.SyncCall(at(), at())
		case x < 95:
			w.Async([]uint64{0, at()}[r.IntN(2)], at())
		case x < 96:
			w.AsyncEnd(at())
		case x < 97:
			w.AsyncTo(at(), at(), at())
		case x < 98:
			w.Lost(1)
		default:
			// a TNT of 63 bits, as the runtime writes them
			w.Flush()
			w.Data = append(w.Data, formats.PktLongTNT)
			w.Data = binary.LittleEndian.AppendUint64(w.Data, r.Uint64()|1<<63)
		}
	}
	w.Flush()
}

// simStream appends to w what the runtime writes for a random walk of
// n transfers through fastMap: a consistent stream, unlike
// randomStream's, so that the walk goes far.
func simStream(r *rand.Rand, w *formats.PacketWriter, n int) {
	m := fastMap()
	var stack, rstack []uint64 // the runtime's call stack and the real one
	pos := uint64(0x1000)
	w.Sync(testBase + pos)
	place := func() { // a place anew, the runtime's stack emptied
		pos = []uint64{0x1000, 0x1013, 0x1100, 0x1200}[r.IntN(4)]
		stack, rstack = stack[:0], rstack[:0]
		w.PSB(testBase + pos)
	}
	dest := func() uint64 { return []uint64{0x1000, 0x1007, 0x1100, 0x1104, 0x5000}[r.IntN(5)] }
	for range n {
		i := m.At(pos)
		if i >= len(m.Branches) || len(stack) > 100 {
			place()
			continue
		}
		br := m.Branches[i]
		next, probed := br.Addr+uint64(br.Len), br.Flags&formats.BranchProbed != 0
		switch {
		case br.Kind == formats.BrJcc && probed:
			b := r.IntN(2) == 0
			w.Bit(b)
			pos = map[bool]uint64{true: br.Target, false: next}[b]
		case br.Kind == formats.BrJcc && br.Flags&formats.BranchMarked != 0:
			pos = []uint64{br.Target, next}[r.IntN(2)] // the mark appends
		case br.Kind == formats.BrMark:
			w.Bit(br.Flags&formats.BranchBit != 0)
			pos = next
		case br.Kind == formats.BrJmp || br.Kind == formats.BrCall:
			if br.Kind == formats.BrCall {
				if probed {
					stack = append(stack, next)
				}
				rstack = append(rstack, next)
			}
			pos = br.Target
		case br.Kind == formats.BrRet && probed && len(stack) > 0 && r.IntN(5) != 0:
			w.Bit(true)
			pos, stack = stack[len(stack)-1], stack[:len(stack)-1]
			if k := len(rstack); k > 0 && rstack[k-1] == pos {
				rstack = rstack[:k-1]
			}
		case br.Kind == formats.BrRet && !probed && len(rstack) > 0:
			pos, rstack = rstack[len(rstack)-1], rstack[:len(rstack)-1]
		case br.Kind == formats.BrIndJmp && br.Flags&formats.BranchPredicted != 0 && r.IntN(2) == 0:
			w.Bit(true)
			pos = br.Target
		case probed && br.Kind != formats.BrJcc:
			// a TIP: a ret the stack did not predict, an indirect branch
			pos = dest()
			w.TIP(testBase + pos)
			if br.Kind == formats.BrRet {
				stack, rstack = unwindTo(stack, pos), unwindTo(rstack, pos)
			}
			if br.Flags&formats.BranchSwitch != 0 {
				rstack = rstack[:0]
			}
			if br.Kind == formats.BrIndCall {
				stack, rstack = append(stack, next), append(rstack, next)
			}
		default:
			place() // no outcome: the runtime's walk resumes at a PSB
			continue
		}
		if pos < m.TextLo || pos >= m.TextHi {
			// outside: back at the return address on top of the stack
			if len(stack) == 0 {
				place()
				continue
			}
			pos, stack = stack[len(stack)-1], stack[:len(stack)-1]
			if k := len(rstack); k > 0 && rstack[k-1] == pos {
				rstack = rstack[:k-1]
			}
		}
	}
	w.Flush()
}

// unwindTo pops stack down to and including a, if it holds a within
// the search depth (as the runtime and the decoder do).
func unwindTo(stack []uint64, a uint64) []uint64 {
	for k := len(stack) - 1; k >= 0 && k >= len(stack)-stackSearch; k-- {
		if stack[k] == a {
			return stack[:k]
		}
	}
	return stack
}

// decodeEvents decodes trace name with map m: the whole events, the
// stats and the error (as text).
func decodeEvents(t *testing.T, name string, m *formats.PathMap) ([]formats.Event, Stats, string) {
	t.Helper()
	d, err := Open(name, Options{Maps: map[string]*formats.PathMap{"/m": m}})
	if err != nil {
		t.Fatal(err)
	}
	var evs []formats.Event
	st, err := d.Events(func(e formats.Event) error {
		evs = append(evs, e)
		return nil
	})
	return evs, st, fmt.Sprint(err)
}

// The fast walk changes nothing but the speed: on random packet streams
// (two chunks, with pending bits and a tail), the events, their times,
// the stats and the error are step's alone.
func TestFastSameAsStep(t *testing.T) {
	defer func() { noFast = false }()
	dir := t.TempDir()
	r := rand.New(rand.NewPCG(1, 2))
	decoded, errs := 0, 0
	for i := range 2000 {
		var c0, c1 formats.PacketWriter
		if i%2 == 0 {
			c0.Sync(testBase + 0x1000)
			randomStream(r, &c0, 1+r.IntN(200))
			randomStream(r, &c1, r.IntN(200))
		} else {
			simStream(r, &c0, r.IntN(400))
			simStream(r, &c1, r.IntN(400))
		}
		name := writeCompact(t, dir, []formats.Chunk{
			{TID: 3, Seq: 0, FirstNS: 1000, LastNS: 2000, Data: c0.Data},
			{TID: 3, Seq: 1, FirstNS: 3000, LastNS: 9000, Data: c1.Data,
				Pending: r.Uint64N(64), Tail: testBase + 0x1000 + r.Uint64N(0x400), TailBits: r.Uint64N(2)},
		})
		noFast = true
		want, wst, werr := decodeEvents(t, name, fastMap())
		noFast = false
		got, gst, gerr := decodeEvents(t, name, fastMap())
		if werr != "<nil>" {
			errs++
		}
		if !reflect.DeepEqual(got, want) || gst != wst || gerr != werr {
			t.Fatalf("stream %d: fast walk:\n%v\n%+v\n%s\nstep alone:\n%v\n%+v\n%s", i, got, gst, gerr, want, wst, werr)
		}
		decoded += len(want)
	}
	t.Logf("%d events, %d errors", decoded, errs)
	if decoded < 30000 {
		t.Errorf("%d events in 2000 streams: the streams stop too soon to test much", decoded)
	}
}
