package elfout

import (
	"fmt"

	"github.com/stint-project/stint/rewrite/elfin"
	"github.com/stint-project/stint/runtime"
)

// Sizes are the counts the layout is made of; nothing else decides it.
type Sizes struct {
	TrampEnd  uint64 // the end of the last trampoline (Frame.TrampStart and up)
	BlobLen   uint64
	Progs     int // program headers of the input
	Note      int // bytes of the marker note
	Rela      int // bytes of the copied DT_RELA and its added entry; 0 = none
	Stubs     int
	Deps      int
	TraceEnds int
	Reads     int // (reader, read) pairs, each written twice
	Rets      int // words of the rets table
	LoggedCap int // room for the logged-probe list, in words
	Seen      int // the logged keys of open-ended outcomes (runtime.Module.SeenVaddr), pairs of words of 8 bytes
	ColdCap   int // room for the cold probes' list (runtime.Module.ColdVaddr), in words
	Traps     int // int3 sites (runtime.Trap)
	Probes    int
	Counts    int // block counters (rewrite --counts), one per probe
	Patches   int
	Chunks    int
	Preinit   bool // a DT_PREINIT_ARRAY slot
	Dynamic   int  // entries of the moved .dynamic before our own; -1 = no PT_DYNAMIC
}

// Layout is where every part of the output goes. R-segment offsets are
// relative to the segment's start.
type Layout struct {
	RXVaddr, RXOff, RXSize  uint64
	RVaddr, ROff, RSize     uint64
	NPh                     int
	PhOff, NoteOff, RelaOff uint64
	StubsOff, DepsOff       uint64
	TraceEndsOff, ReadsOff  uint64
	RetsOff, LoggedOff      uint64
	SeenOff, ColdOff        uint64
	RWVaddr, RWOff, RWSize  uint64
	ProbesAt, PatchesAt     uint64 // link vaddrs in the RW segment
	ChunksAt, PreinitAt     uint64
	TrapsAt                 uint64
	DynAt, DynSize, GateAt  uint64
	CountsAt                uint64 // the block counters after the gate page (0 = none)
	FileEnd                 uint64 // the end of the RW segment in the file
}

// NewLayout lays out the segments: RX (blob, trampolines) | R (program
// headers, marker note, relocations, stub list, chunk dependencies, trace
// ends, reads, rets, logged probes, logged keys, cold probes) | RW (the module header in the page
// right below a 2 MiB boundary, the tables from that boundary on, the
// DT_PREINIT_ARRAY slot, .dynamic, the gate page, the block counters),
// then the reserve. It fails when the new segments reach the stub space.
func NewLayout(fr *Frame, s Sizes) (*Layout, error) {
	l := &Layout{RXVaddr: fr.RXVaddr, RXOff: fr.RXOff}
	l.RXSize = s.TrampEnd - fr.RXVaddr
	if tramps := s.TrampEnd - fr.RXVaddr - AlignUp(s.BlobLen, PageSize); tramps > HugePage {
		// More than one huge page of trampolines: pad the last one
		// out (int3), so that it is copied whole too.
		l.RXSize = AlignUp(s.TrampEnd, HugePage) - fr.RXVaddr
	}
	l.RVaddr = AlignUp(fr.RXVaddr+l.RXSize, PageSize)
	l.ROff = fr.RXOff + (l.RVaddr - fr.RXVaddr)
	l.NPh = s.Progs + 4 // RX, R, RW, note
	if fr.HasReserve {
		l.NPh++
	}
	l.NoteOff = AlignUp(l.PhOff+uint64(l.NPh)*elfin.PhdrSize, 8)
	l.RelaOff = AlignUp(l.NoteOff+uint64(s.Note), 8)
	l.StubsOff = AlignUp(l.RelaOff+uint64(s.Rela), 16)
	l.DepsOff = l.StubsOff + uint64(s.Stubs)*runtime.StubStructSize
	l.TraceEndsOff = AlignUp(l.DepsOff+uint64(s.Deps)*4, 8)
	l.ReadsOff = AlignUp(l.TraceEndsOff+uint64(s.TraceEnds)*4, 8)
	l.RetsOff = AlignUp(l.ReadsOff+2*uint64(s.Reads)*runtime.ReadStructSize, 8)
	l.LoggedOff = AlignUp(l.RetsOff+4*uint64(s.Rets), 8)
	l.SeenOff = AlignUp(l.LoggedOff+4*uint64(s.LoggedCap), 8)
	l.ColdOff = l.SeenOff + 16*uint64(s.Seen)
	l.RSize = AlignUp(l.ColdOff+4*uint64(s.ColdCap), PageSize)

	// The gap below the module header is address space, not file; when
	// the tables take more than one huge page they are padded to the
	// next one, so that the runtime can copy every page of them into
	// huge pages.
	l.RWOff = l.ROff + l.RSize
	l.RWVaddr = AlignUp(l.RVaddr+l.RSize+PageSize, HugePage) - PageSize
	const _ = uint(PageSize - runtime.ModuleStructSize) // (the header fits its page)
	l.ProbesAt = l.RWVaddr + PageSize
	l.PatchesAt = l.ProbesAt + uint64(s.Probes)*runtime.ProbeStructSize
	l.ChunksAt = l.PatchesAt + uint64(s.Patches)*runtime.PatchStructSize
	l.TrapsAt = AlignUp(l.ChunksAt+uint64(s.Chunks)*runtime.ChunkStructSize, 8)
	tablesEnd := l.TrapsAt + uint64(s.Traps)*runtime.TrapStructSize
	l.PreinitAt = AlignUp(tablesEnd, 16)
	if tablesEnd-l.ProbesAt > HugePage {
		l.PreinitAt = AlignUp(tablesEnd, HugePage)
	}
	l.DynAt = l.PreinitAt
	if s.Preinit {
		l.DynAt += 16
	}
	if s.Dynamic >= 0 {
		l.DynSize = uint64(s.Dynamic+6) * 16 // room for our tags and DT_NULL
	}
	l.GateAt = AlignUp(l.DynAt+l.DynSize, PageSize)
	l.RWSize = l.GateAt + GateSize - l.RWVaddr
	if s.Counts > 0 {
		l.CountsAt = l.GateAt + GateSize
		l.RWSize += AlignUp(uint64(s.Counts)*8, PageSize)
	}
	if newEnd := l.RWVaddr + AlignUp(l.RWSize, PageSize); newEnd > fr.StubLo {
		return nil, fmt.Errorf("new segments (%d MiB) do not fit below the stub area", (newEnd-fr.RXVaddr)>>20)
	}
	l.FileEnd = l.RWOff + AlignUp(l.RWSize, PageSize)
	return l, nil
}
