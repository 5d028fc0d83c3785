package elfout

import (
	"github.com/stint-project/stint/rewrite/facts"
	"github.com/stint-project/stint/rewrite/place"
)

const (
	PageSize  = 0x1000
	gib       = 1 << 30
	reachSlop = 16 << 20 // keep stubs this far inside rel32 reach
	// belowGap is the space right below a shared object kept free of
	// stubs: libraries loaded after it land there.
	belowGap = 256 << 20
	// HugePage is the size of the pages the runtime asks for when it
	// copies the trampolines and the tables into anonymous memory
	// (runtime/src/chunks.c, tables_huge): only whole ones that hold
	// nothing else are copied, so the layout puts both on its boundaries.
	HugePage = 2 << 20
	// GateSize is the gate page's size (struct stint_module.gate_vaddr).
	GateSize = 4096
)

// DefaultChunkGap is the chunk gap used when none is given (see
// place.DefaultChunkGap for the trade-off between mappings and memory).
// Stub space below a shared object uses at most belowChunkGap whatever
// the option: a library initialised late (dlopen) may find things mapped
// there, and a chunk that clashes loses its sites.
const DefaultChunkGap = place.DefaultChunkGap

const belowChunkGap = 1 << 20

// AlignUp rounds v up to a multiple of a (a power of two).
func AlignUp(v, a uint64) uint64 { return (v + a - 1) &^ (a - 1) }

// AlignDown rounds v down to a multiple of a (a power of two).
func AlignDown(v, a uint64) uint64 { return v &^ (a - 1) }

// Frame is where the new parts of the output go, decided before
// placement: the RX segment (the blob, then the trampolines, from
// TrampStart up) above the image, and the stub space, which placement
// allocates stubs in.
type Frame struct {
	RXVaddr, RXOff uint64 // the RX segment: link vaddr and file offset
	TrampStart     uint64 // the first trampoline's address
	StubLo, StubHi uint64 // the upper stub range (above the brk gap)
	Reserve        uint64 // the reserve page (HasReserve)
	HasReserve     bool
	Space          *place.AddrSpace
	Note           string // why there is no reserve, if there is none
}

// NewFrame lays out the frame of module m, whose file is fileLen bytes,
// with a blob of blobLen bytes; chunkGap is place.AddrSpace.ChunkGap (0 =
// DefaultChunkGap).
//
// The blob takes the pages right below a 2 MiB boundary above the image,
// so that the trampolines start on one (the gap below the blob is address
// space, not file). Stub space lies above the brk gap and below the
// reserve page; for a fixed-address executable also below the image, and
// for a PIE or shared object below it within rel32 reach.
func NewFrame(m facts.Module, fileLen, blobLen, chunkGap uint64) *Frame {
	blobPages := AlignUp(blobLen, PageSize)
	fr := &Frame{}
	fr.RXVaddr = AlignUp(AlignUp(m.ImageHi, PageSize)+blobPages, HugePage) - blobPages
	fr.RXOff = AlignUp(fileLen, PageSize)
	fr.TrampStart = fr.RXVaddr + blobPages
	fr.StubLo = AlignUp(m.ImageHi+gib, PageSize)
	limit := m.TextLo + 2*gib - reachSlop
	var allowed []place.Range
	if limit > fr.StubLo+2*PageSize {
		fr.HasReserve = true
		fr.Reserve = AlignDown(limit, PageSize) - PageSize
		fr.StubHi = fr.Reserve
		allowed = append(allowed, place.Range{Lo: fr.StubLo, Hi: fr.StubHi})
	} else {
		fr.Note = "image too large for a stub area above it; no reserve segment"
	}
	if lower, ok := lowerStubRange(m); ok {
		allowed = append([]place.Range{lower}, allowed...)
	}
	space := place.NewAddrSpace(allowed)
	space.ChunkGap = chunkGap
	if space.ChunkGap == 0 {
		space.ChunkGap = DefaultChunkGap
	}
	if m.Shared || (m.PIC && m.Static) {
		space.TightGap = min(space.ChunkGap, belowChunkGap)
		space.TightBelow = AlignDown(m.ImageLo, PageSize)
	}
	space.Reserve(place.Range{Lo: AlignDown(m.ImageLo, PageSize), Hi: fr.StubLo})
	fr.Space = space
	return fr
}

// lowerStubRange is the stub space below the image.
//
// A PIE executable is loaded far from anything else (the kernel's
// ELF_ET_DYN_BASE, with the mmap area far above), so the 2 GiB below it
// are free at start-up; stub addresses wrap below 0 as link vaddrs and
// are mapped relative to the load base. A shared object has its
// neighbours right below it: it gets the space below its first belowGap
// bytes, mapped with MAP_FIXED_NOREPLACE; a chunk that clashes there
// costs only its own sites (the runtime restores their patches). A static
// PIE has no interpreter, so the kernel maps it in the mmap area too,
// with [vvar] and [vdso] placed right below it. A fixed-address
// executable gets what lies below it within reach, above 64 KiB.
func lowerStubRange(m facts.Module) (place.Range, bool) {
	if m.PIC {
		lo := m.TextHi - 2*gib + reachSlop
		hi := AlignDown(m.ImageLo, PageSize) - PageSize
		if m.Shared || m.Static {
			hi = AlignDown(m.ImageLo, PageSize) - belowGap
		}
		if int64(hi) > int64(AlignUp(lo, PageSize)) {
			return place.Range{Lo: AlignUp(lo, PageSize), Hi: hi}, true
		}
		return place.Range{}, false
	}
	lo := uint64(64 << 10)
	if reach := m.ImageHi + gib + reachSlop; reach > 2*gib {
		lo = max(lo, reach-2*gib)
	}
	if m.ImageLo > lo+PageSize {
		return place.Range{Lo: AlignUp(lo, PageSize), Hi: AlignDown(m.ImageLo, PageSize)}, true
	}
	return place.Range{}, false
}
