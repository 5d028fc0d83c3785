package formats

import (
	"encoding/binary"
	"fmt"
	"sort"
)

// PathMapSection is the ELF section (not loaded) in which the rewriter
// leaves a compact-trace module's branch map: what a decoder needs to
// walk the module's code between packets.
const PathMapSection = ".stint.paths"

// pathMapMagic is "STINTPTH" little-endian.
const pathMapMagic = 0x485450544e495453

// PathMapVersion is the layout version of a branch map. Versions 1 (no
// marks), 2 (no predicted indirect jmps) and 3 (no calls without a push)
// read the same.
const PathMapVersion = 4

// BranchKind is what a control transfer of the branch map is.
type BranchKind uint8

const (
	BrJcc BranchKind = iota + 1
	BrJmp
	BrCall
	BrRet
	BrIndJmp
	BrIndCall
	// BrMark is not a control transfer: a probe at a plain instruction
	// that appends one outcome bit, always the same (BranchBit), so that
	// a jcc no probe could be placed at is still decoded (BranchMarked).
	BrMark
)

func (k BranchKind) String() string {
	switch k {
	case BrJcc:
		return "jcc"
	case BrJmp:
		return "jmp"
	case BrCall:
		return "call"
	case BrRet:
		return "ret"
	case BrIndJmp:
		return "indirect jmp"
	case BrIndCall:
		return "indirect call"
	case BrMark:
		return "mark"
	}
	return fmt.Sprintf("BranchKind(%d)", uint8(k))
}

// Branch flags.
const (
	// BranchProbed: the site runs a probe. A jcc, ret or indirect branch
	// without one leaves the decoder without its outcome; a call without
	// one pushes nothing on the call stack the runtime keeps.
	BranchProbed = 0x1
	// BranchMarked: a jcc without a probe whose two destinations each
	// lead, straight on (through direct jmps at most, past no other
	// probe that appends), to a mark; the two marks append opposite
	// bits, so the next outcome bit says which way the jcc went. The
	// decoder leaves the bit to the mark.
	BranchMarked = 0x2
	// BranchBit: of a mark, the bit it appends; of a marked jcc, the bit
	// its taken side's mark appends.
	BranchBit = 0x4
	// BranchSwitch: an indirect jmp or call right after a switch to
	// another stack (Go's gogo, mcall and systemstack, longjmp): the
	// calls walked before say nothing of where the rets without probes
	// after it go.
	BranchSwitch = 0x8
	// BranchPredicted: a probed indirect jmp with a likely destination,
	// its Target (a PLT stub's jmp to a function of the module's own):
	// its probe appends bit 1 when it goes there, else the TIP.
	BranchPredicted = 0x10
	// BranchNoPush: a call chain's probed call that pushes nothing on
	// the call stack: a PLT stub's to a function the module does not
	// define, whose ret has no probe.
	BranchNoPush = 0x20
)

// Branch is one control transfer of a module, at a link vaddr.
type Branch struct {
	Addr   uint64 // link vaddr of the instruction
	Target uint64 // a direct branch's destination (link vaddr), a predicted one's likely one, else 0
	Len    uint8  // instruction length
	Kind   BranchKind
	Flags  uint8
}

// PathMap is a module's branch map: every control transfer in its code,
// sorted by address. Between two of them execution runs straight on.
type PathMap struct {
	// TextLo and TextHi bound the module's code (link vaddrs): a
	// destination inside them is instrumented code, where the decoder
	// walks; anywhere else, the thread has left it (the runtime decides
	// the same way).
	TextLo, TextHi uint64
	Branches       []Branch
}

const pathMapHeader = 32
const pathMapEntry = 24

// Encode returns the map's section contents: magic u64, version u32,
// count u32, text_lo u64, text_hi u64, then per branch addr u64, target u64, len u8, kind u8,
// flags u8, five zero bytes.
func (m *PathMap) Encode() []byte {
	b := make([]byte, pathMapHeader+pathMapEntry*len(m.Branches))
	le := binary.LittleEndian
	le.PutUint64(b, pathMapMagic)
	le.PutUint32(b[8:], PathMapVersion)
	le.PutUint32(b[12:], uint32(len(m.Branches)))
	le.PutUint64(b[16:], m.TextLo)
	le.PutUint64(b[24:], m.TextHi)
	for i, br := range m.Branches {
		e := b[pathMapHeader+pathMapEntry*i:]
		le.PutUint64(e, br.Addr)
		le.PutUint64(e[8:], br.Target)
		e[16], e[17], e[18] = br.Len, byte(br.Kind), br.Flags
	}
	return b
}

// DecodePathMap parses a branch map section, checking that its branches
// are sorted, do not overlap and have known kinds.
func DecodePathMap(b []byte) (*PathMap, error) {
	le := binary.LittleEndian
	if len(b) < pathMapHeader || le.Uint64(b) != pathMapMagic {
		return nil, fmt.Errorf("branch map: not a %s section", PathMapSection)
	}
	if v := le.Uint32(b[8:]); v < 1 || v > PathMapVersion {
		return nil, fmt.Errorf("branch map: version %d, want 1 to %d", v, PathMapVersion)
	}
	n := uint64(le.Uint32(b[12:]))
	if n*pathMapEntry != uint64(len(b)-pathMapHeader) {
		return nil, fmt.Errorf("branch map: %d branches in %d bytes", n, len(b)-pathMapHeader)
	}
	m := &PathMap{TextLo: le.Uint64(b[16:]), TextHi: le.Uint64(b[24:]), Branches: make([]Branch, n)}
	if m.TextHi < m.TextLo {
		return nil, fmt.Errorf("branch map: text %#x-%#x", m.TextLo, m.TextHi)
	}
	var end uint64
	for i := range m.Branches {
		e := b[pathMapHeader+pathMapEntry*i:]
		br := Branch{Addr: le.Uint64(e), Target: le.Uint64(e[8:]), Len: e[16], Kind: BranchKind(e[17]), Flags: e[18]}
		switch {
		case br.Kind < BrJcc || br.Kind > BrMark:
			return nil, fmt.Errorf("branch map: branch %d at %#x has kind %d", i, br.Addr, br.Kind)
		case br.Len == 0 || br.Len > 15:
			return nil, fmt.Errorf("branch map: branch %d at %#x is %d bytes long", i, br.Addr, br.Len)
		case br.Addr < m.TextLo || br.Addr+uint64(br.Len) > m.TextHi:
			return nil, fmt.Errorf("branch map: branch %d at %#x outside the text %#x-%#x", i, br.Addr, m.TextLo, m.TextHi)
		case br.Flags&BranchPredicted != 0 && (br.Kind != BrIndJmp || br.Flags&BranchProbed == 0 || br.Target < m.TextLo || br.Target >= m.TextHi):
			return nil, fmt.Errorf("branch map: branch %d at %#x: a predicted %v (probed: %v) to %#x, outside the text or not a probed indirect jmp",
				i, br.Addr, br.Kind, br.Flags&BranchProbed != 0, br.Target)
		case i > 0 && br.Addr < end:
			return nil, fmt.Errorf("branch map: branch %d at %#x overlaps or precedes the one before", i, br.Addr)
		}
		end = br.Addr + uint64(br.Len)
		m.Branches[i] = br
	}
	return m, nil
}

// At returns the index of the first branch at or after addr, or
// len(Branches).
func (m *PathMap) At(addr uint64) int {
	return sort.Search(len(m.Branches), func(i int) bool { return m.Branches[i].Addr >= addr })
}
