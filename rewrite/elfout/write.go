package elfout

import (
	"cmp"
	"debug/elf"
	"errors"
	"fmt"
	"slices"

	"github.com/stint-project/stint/rewrite/elfin"
	"github.com/stint-project/stint/rewrite/facts"
	"github.com/stint-project/stint/rewrite/place"
	"github.com/stint-project/stint/runtime"
)

// Blob is the runtime blob and its entry offsets (runtime.BlobHeader).
type Blob struct {
	Data                 []byte
	EntryExec, EntryInit uint32
	EntryFini            uint32
}

// FiniHook is a static executable's exit hook: Jump (a jump to the
// blob's DT_FINI stub, padded with int3 to Cover bytes) replaces the
// instructions at Addr, which move to the trampoline Code at TrampAddr.
type FiniHook struct {
	Addr, Cover uint64
	Jump        []byte
	TrampAddr   uint64
	Code        []byte
}

// Image is everything the output is made of. Module holds the header
// fields the rewrite decides (flags, tool, counts, build-id, options, the
// log digest); Write adds the addresses, the entry points and the magic.
type Image struct {
	File      *elfin.File
	Mod       facts.Module
	Frame     *Frame
	Layout    *Layout
	Blob      Blob
	Writes    []place.Write // in the planner's order: a later write to a byte wins (applied by Prepare)
	Note      []byte
	Module    runtime.Module
	Patches   []runtime.Patch
	Chunks    []runtime.Chunk
	Stubs     []runtime.Stub
	Deps      []uint32
	TraceEnds []uint32
	Reads     []runtime.Read // sorted by reader, then by read
	Traps     []runtime.Trap // sorted by site
	Rets      []uint32
	Logged    []uint32    // written when Module.Flags has MFLogged
	Seen      [][2]uint64 // sorted keys, written when Module.NSeen is their number
	Cold      []uint32    // the open-ended probes of PatchCold patches (Module.NCold)
	Dyn       *DynPlan
	Fini      *FiniHook // nil: none
	// Extra are sections that are not loaded, added after the segments
	// (a compact trace's branch map); they need section headers.
	Extra []Section

	// Backing, when set, supplies the output's memory instead of the Go
	// heap (a mapping of the output file: see Backing).
	Backing Backing

	// Out, when Prepare made it, is the output being written: the
	// trampolines and probe records go straight into it (RX, Probe),
	// the only way they reach the output.
	Out      []byte
	areaRoom bool
}

// Backing is memory for the output image outside the Go heap: a shared
// mapping of the output file, whose written pages the rewriter may let go
// of (Release) since the file keeps them. The image is the rewrite's
// biggest allocation (cc1plus: 358 MB without its stub area).
type Backing interface {
	// Alloc returns room bytes of zeroed memory (an error: the heap then).
	Alloc(room uint64) ([]byte, error)
	// Release lets the pages written so far leave memory; a later access
	// brings them back as they were.
	Release()
}

// Release lets the output's written pages leave memory, when a Backing
// holds it (Backing.Release); nothing otherwise.
func (im *Image) Release() {
	if im.Backing != nil && im.Out != nil {
		im.Backing.Release()
	}
}

// Section is a section that is not loaded: its name and contents.
type Section struct {
	Name string
	Data []byte
}

// WriteParts assembles the output file: original | RX | R | RW |
// [section name table copy, section headers] | [stub area]; all but the
// stub area, which sa (nil: none) writes page by page after out: what a
// file needs, not the whole area in memory. notes say what it could not
// do.
func WriteParts(im *Image) (out []byte, sa *StubArea, notes []string, err error) {
	return write(im, false)
}

// WriteWithRoom is WriteParts with room in out's capacity for the stub
// area (sa.AppendTo then appends it in place).
func WriteWithRoom(im *Image) (out []byte, sa *StubArea, notes []string, err error) {
	return write(im, true)
}

// Prepare allocates im's output, with room for the stub area when
// areaRoom (im.Module.StubAreaSize and im.Extra must be known), copies
// the input file into it with im.Writes applied (the caller may drop
// them then: cc1plus's are 94 MB), and writes the blob and int3 in its
// RX segment: trampolines and probe records can then be written where
// they go (RX, Probe) instead of being built apart and copied (cc1plus:
// 160 MB of trampolines and 155 MB of probe records). WriteParts and
// WriteWithRoom finish it (with the same areaRoom).
func Prepare(im *Image, areaRoom bool) error {
	f, l := im.File, im.Layout
	// Room for all of it up front: the stub area can be a gigabyte of
	// mostly zeros (a big executable's), which growing the slice would
	// copy and clear again; capacity never written is never resident.
	room := l.FileEnd + uint64(len(f.Sects)+4)*elfin.ShdrSize + 1<<20 + 2*PageSize
	if areaRoom {
		room += im.Module.StubAreaSize
	}
	for _, x := range im.Extra {
		room += uint64(len(x.Data)) + 8
	}
	var out []byte
	if im.Backing != nil {
		if b, err := im.Backing.Alloc(room); err == nil && uint64(len(b)) >= room {
			out = b[:l.FileEnd:room]
		}
	}
	if out == nil {
		out = make([]byte, l.FileEnd, room)
	}
	im.Out, im.areaRoom = out, areaRoom
	copy(out, f.Data)
	for _, w := range im.Writes {
		off, ok := f.OffsetOf(w.Addr, uint64(len(w.Bytes)))
		if !ok {
			im.Out = nil
			return fmt.Errorf("patched bytes %#x+%d are not in the file", w.Addr, len(w.Bytes))
		}
		copy(out[off:], w.Bytes)
	}
	im.Release()
	copy(out[l.RXOff:], im.Blob.Data)
	elfin.LE.PutUint64(out[l.RXOff+runtime.BlobOffModuleRel:], l.RWVaddr-l.RXVaddr)
	// in steps, each let go: cc1plus's 128 MB at once made its peak
	for lo, hi := l.RXOff+uint64(len(im.Blob.Data)), l.RXOff+l.RXSize; lo < hi; lo += fillStep {
		FillInt3(out[lo:min(lo+fillStep, hi)])
		im.Release()
	}
	return nil
}

// releasePatches patch records, writeTables lets the written pages go.
const releasePatches = 1 << 18

// fillStep is how much of the RX segment Prepare fills with int3 before
// letting the pages go (Image.Release).
const fillStep = 16 << 20

// RX returns the n bytes at link vaddr addr in Prepare's RX segment,
// empty, with capacity n: an assembler appends a trampoline there (one
// longer than n would move out, which its caller checks).
func (im *Image) RX(addr uint64, n int) []byte {
	off := im.Layout.RXOff + (addr - im.Layout.RXVaddr)
	return im.Out[off : off : off+uint64(n)]
}

// Probe returns the bytes of probe record k in Prepare's RW segment.
func (im *Image) Probe(k int) []byte {
	off := im.Layout.RWOff + im.Layout.ProbesAt - im.Layout.RWVaddr + uint64(k)*runtime.ProbeStructSize
	return im.Out[off : off+runtime.ProbeStructSize]
}

// write assembles the output but the stub area; with areaRoom out has
// the capacity for it.
func write(im *Image, areaRoom bool) (out []byte, sa *StubArea, notes []string, err error) {
	f, l := im.File, im.Layout
	switch {
	case im.Out == nil:
		if err := Prepare(im, areaRoom); err != nil {
			return nil, nil, nil, err
		}
	case im.areaRoom != areaRoom:
		return nil, nil, nil, errors.New("output prepared with another room for the stub area")
	}
	out = im.Out
	rbuf := out[l.ROff : l.ROff+l.RSize]
	writeR(rbuf, im)
	im.Release()
	m := out[l.RWOff : l.RWOff+l.RWSize]
	writeTables(m, im)
	im.Release()
	newDyn, origEntry, origFini, dnotes, err := writeEntries(out, rbuf, m, im)
	if err != nil {
		return nil, nil, nil, err
	}
	notes = append(notes, dnotes...)
	hdr := im.Module
	fillHeader(&hdr, im, origEntry, origFini)
	hdr.Put(m)

	for k, ph := range programHeaders(f, im.Frame, l, len(im.Note), newDyn) {
		putProg(rbuf[l.PhOff+uint64(k)*elfin.PhdrSize:], ph)
	}
	elfin.LE.PutUint64(out[32:], l.ROff+l.PhOff)
	elfin.LE.PutUint16(out[56:], uint16(l.NPh))
	out, snote := sections(f, out, l, uint64(len(im.Note)), newDyn, im.Extra)
	if snote != "" {
		if len(im.Extra) > 0 {
			return nil, nil, nil, fmt.Errorf("cannot add section %s: %s", im.Extra[0].Name, snote)
		}
		notes = append(notes, snote)
	}
	return out, newStubArea(out, uint64(len(out)), l.RWOff, hdr.StubAreaSize, im.Stubs), notes, nil
}

// writeR writes the R segment's tables (program headers come last).
func writeR(rbuf []byte, im *Image) {
	l := im.Layout
	copy(rbuf[l.NoteOff:], im.Note)
	for k := range im.Stubs {
		im.Stubs[k].Put(rbuf[l.StubsOff+uint64(k)*runtime.StubStructSize:])
	}
	putWords(rbuf[l.TraceEndsOff:], im.TraceEnds)
	// The pairs sorted by reader, then (the second half) by read.
	for k := range im.Reads {
		im.Reads[k].Put(rbuf[l.ReadsOff+uint64(k)*runtime.ReadStructSize:])
	}
	byRead := slices.Clone(im.Reads)
	slices.SortFunc(byRead, func(a, b runtime.Read) int {
		return cmp.Or(cmp.Compare(a.Read, b.Read), cmp.Compare(a.Reader, b.Reader))
	})
	for k := range byRead {
		byRead[k].Put(rbuf[l.ReadsOff+uint64(len(im.Reads)+k)*runtime.ReadStructSize:])
	}
	putWords(rbuf[l.RetsOff:], im.Rets)
	if im.Module.Flags&runtime.MFLogged != 0 {
		putWords(rbuf[l.LoggedOff:], im.Logged)
	}
	putWords(rbuf[l.ColdOff:], im.Cold)
	if int(im.Module.NSeen) == len(im.Seen) {
		for k, key := range im.Seen {
			elfin.LE.PutUint64(rbuf[l.SeenOff+16*uint64(k):], key[0])
			elfin.LE.PutUint64(rbuf[l.SeenOff+16*uint64(k)+8:], key[1])
		}
	}
	putWords(rbuf[l.DepsOff:], im.Deps)
}

func putWords(b []byte, ws []uint32) {
	for k, w := range ws {
		elfin.LE.PutUint32(b[uint64(k)*4:], w)
	}
}

// writeTables writes the probes, patches, chunks and traps into the RW segment m.
func writeTables(m []byte, im *Image) {
	l := im.Layout
	for k := range im.Patches {
		if k%releasePatches == releasePatches-1 {
			im.Release() // cc1plus: 42 MB of them
		}
		im.Patches[k].Put(m[l.PatchesAt-l.RWVaddr+uint64(k)*runtime.PatchStructSize:])
	}
	for k := range im.Chunks {
		im.Chunks[k].Put(m[l.ChunksAt-l.RWVaddr+uint64(k)*runtime.ChunkStructSize:])
	}
	for k := range im.Traps {
		im.Traps[k].Put(m[l.TrapsAt-l.RWVaddr+uint64(k)*runtime.TrapStructSize:])
	}
}

// fillHeader completes the module header with what the layout decides.
func fillHeader(h *runtime.Module, im *Image, origEntry, origFini uint64) {
	l := im.Layout
	h.Magic = runtime.ModuleMagic
	h.ABIVersion = runtime.ABIVersion
	h.SelfVaddr = l.RWVaddr
	h.ProbesVaddr, h.PatchesVaddr, h.ChunksVaddr = l.ProbesAt, l.PatchesAt, l.ChunksAt
	h.TrampLo, h.TrampHi = l.RXVaddr, l.RXVaddr+l.RXSize
	h.OrigEntry, h.OrigFini = origEntry, origFini
	h.StubsVaddr, h.DepsVaddr = l.RVaddr+l.StubsOff, l.RVaddr+l.DepsOff
	h.GateVaddr = l.GateAt
	h.TraceEndsVaddr = l.RVaddr + l.TraceEndsOff
	if h.NReads > 0 {
		h.ReadsVaddr = l.RVaddr + l.ReadsOff
	}
	if h.NRets > 0 {
		h.RetsVaddr = l.RVaddr + l.RetsOff
	}
	if h.Flags&runtime.MFLogged != 0 {
		h.LoggedVaddr = l.RVaddr + l.LoggedOff
	}
	if h.NSeen > 0 {
		h.SeenVaddr = l.RVaddr + l.SeenOff
	}
	if h.NCold > 0 {
		h.ColdVaddr = l.RVaddr + l.ColdOff
	}
	h.CountsVaddr = l.CountsAt
	if h.NTraps > 0 {
		h.TrapsVaddr = l.TrapsAt
	}
}

// writeEntries points the entry points at the blob: e_entry (an
// executable without a preinit array), the moved .dynamic's DT_INIT (a
// shared object), DT_FINI and DT_PREINIT_ARRAY, or a static executable's
// .fini hook. It returns the new PT_DYNAMIC (nil: none), what the module
// header keeps of the original entry and fini, and a note when a static
// executable gets no exit hook.
func writeEntries(out, rbuf, m []byte, im *Image) (newDyn *elfin.Prog64, origEntry, origFini uint64, notes []string, err error) {
	f, l, dp := im.File, im.Layout, im.Dyn
	entryInit := l.RXVaddr + uint64(im.Blob.EntryInit)
	entryFini := l.RXVaddr + uint64(im.Blob.EntryFini)
	if im.Mod.Exec && !dp.Preinit {
		origEntry = f.Hdr.Entry
		elfin.LE.PutUint64(out[24:], l.RXVaddr+uint64(im.Blob.EntryExec))
	}
	switch {
	case dp.Entries != nil:
		d := slices.Clone(dp.Entries)
		set := func(tag elf.DynTag, val uint64) (old uint64) {
			for k := range d {
				if d[k].Tag == tag {
					old = d[k].Val
					d[k].Val = val
					return old
				}
			}
			d = append(d, elfin.DynEntry{Tag: tag, Val: val})
			return 0
		}
		if im.Mod.Shared {
			origEntry = set(elf.DT_INIT, entryInit)
		}
		origFini = set(elf.DT_FINI, entryFini)
		if dp.Preinit {
			set(elf.DT_PREINIT_ARRAY, l.PreinitAt)
			set(elf.DT_PREINIT_ARRAYSZ, 8)
			elfin.LE.PutUint64(m[l.PreinitAt-l.RWVaddr:], entryInit)
			if dp.Rela != nil {
				copy(rbuf[l.RelaOff:], dp.Rela)
				r := rbuf[l.RelaOff+uint64(len(dp.Rela)):]
				elfin.LE.PutUint64(r[0:], l.PreinitAt)
				elfin.LE.PutUint64(r[8:], uint64(elf.R_X86_64_RELATIVE))
				elfin.LE.PutUint64(r[16:], entryInit)
				set(elf.DT_RELA, l.RVaddr+l.RelaOff)
				set(elf.DT_RELASZ, uint64(len(dp.Rela))+24)
			}
		}
		if uint64(len(d)+1)*16 > l.DynSize {
			return nil, 0, 0, nil, errors.New("internal error: dynamic section overflow")
		}
		for k, e := range d {
			elfin.LE.PutUint64(m[l.DynAt-l.RWVaddr+uint64(k)*16:], uint64(e.Tag))
			elfin.LE.PutUint64(m[l.DynAt-l.RWVaddr+uint64(k)*16+8:], e.Val)
		}
		newDyn = &elfin.Prog64{Type: elf.PT_DYNAMIC, Flags: elf.PF_R | elf.PF_W, Off: l.RWOff + (l.DynAt - l.RWVaddr), Vaddr: l.DynAt, Paddr: l.DynAt,
			Filesz: l.DynSize, Memsz: l.DynSize, Align: 8}
	case im.Fini != nil && writeFiniHook(out, f, l, im.Fini):
		origFini = im.Fini.TrampAddr
	default:
		notes = append(notes, "static executable without a usable .fini: no exit hook (the trace has no end marker; the log is saved every second only)")
	}
	return newDyn, origEntry, origFini, append(notes, dp.Notes...), nil
}

// writeFiniHook writes the hook's jump over .fini's first instructions
// and their trampoline.
func writeFiniHook(out []byte, f *elfin.File, l *Layout, h *FiniHook) bool {
	off, ok := f.OffsetOf(h.Addr, h.Cover)
	if !ok {
		return false
	}
	copy(out[off:off+h.Cover], h.Jump)
	copy(out[l.RXOff+(h.TrampAddr-l.RXVaddr):], h.Code)
	return true
}

// FillInt3 fills b with int3 (0xcc).
func FillInt3(b []byte) {
	if len(b) == 0 {
		return
	}
	b[0] = 0xcc
	for n := 1; n < len(b); n *= 2 {
		copy(b[n:], b[:n])
	}
}
