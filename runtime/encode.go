package runtime

import (
	"encoding/binary"
	"unsafe"
)

// Put methods write the mirrored structs in the C layout (little-endian,
// the offsets of stint_abi.h, which abi_test.go pins), so that the
// rewriter writes the ABI through these types and never at literal
// offsets. Each b must hold the struct's size; padding is left as it is.

var le = binary.LittleEndian

func off[T any](p *T, f unsafe.Pointer) uintptr { return uintptr(f) - uintptr(unsafe.Pointer(p)) }

// Put writes m into b[:ModuleStructSize].
func (m *Module) Put(b []byte) {
	_ = b[ModuleStructSize-1]
	le.PutUint64(b[off(m, unsafe.Pointer(&m.Magic)):], m.Magic)
	le.PutUint32(b[off(m, unsafe.Pointer(&m.ABIVersion)):], m.ABIVersion)
	le.PutUint32(b[off(m, unsafe.Pointer(&m.Flags)):], m.Flags)
	le.PutUint32(b[off(m, unsafe.Pointer(&m.Tool)):], m.Tool)
	le.PutUint32(b[off(m, unsafe.Pointer(&m.NProbes)):], m.NProbes)
	for _, f := range []*uint64{&m.SelfVaddr, &m.ImageEnd, &m.ProbesVaddr, &m.PatchesVaddr, &m.ChunksVaddr,
		&m.TextLo, &m.TextHi, &m.TrampLo, &m.TrampHi, &m.OrigEntry, &m.OrigFini, &m.Base, &m.RuntimeState,
		&m.StubsVaddr, &m.DepsVaddr, &m.StubAreaSize, &m.TraceEndsVaddr, &m.GateVaddr, &m.ReadsVaddr,
		&m.RetsVaddr, &m.StubFileOff, &m.StubFileTag, &m.LogSum, &m.LoggedVaddr, &m.CountsVaddr, &m.CDBase, &m.TrapsVaddr, &m.LogEnd, &m.LogLast, &m.SeenVaddr, &m.ColdVaddr} {
		le.PutUint64(b[off(m, unsafe.Pointer(f)):], *f)
	}
	for _, f := range []*uint32{&m.NPatches, &m.NChunks, &m.BuildIDLen, &m.ModuleID, &m.NStubs, &m.NDeps,
		&m.NTraceEnds, &m.Hit, &m.NReads, &m.PadRd, &m.NRets, &m.PadRt, &m.LogCount, &m.NLogged, &m.NTraps, &m.FiniProbe, &m.NSeen, &m.NCold} {
		le.PutUint32(b[off(m, unsafe.Pointer(f)):], *f)
	}
	copy(b[off(m, unsafe.Pointer(&m.BuildID)):], m.BuildID[:])
	copy(b[off(m, unsafe.Pointer(&m.LogLastHead)):], m.LogLastHead[:])
	copy(b[off(m, unsafe.Pointer(&m.Options)):], m.Options[:])
}

// Put writes p into b[:ProbeStructSize].
func (p *Probe) Put(b []byte) {
	_ = b[ProbeStructSize-1]
	for _, f := range []*uint64{&p.Src, &p.Dst, &p.Arm, &p.ArmTo, &p.Cache, &p.Cache2} {
		le.PutUint64(b[off(p, unsafe.Pointer(f)):], *f)
	}
	for _, f := range []*uint32{&p.ModuleBack, &p.Patch, &p.Rets} {
		le.PutUint32(b[off(p, unsafe.Pointer(f)):], *f)
	}
	b[off(p, unsafe.Pointer(&p.Kind))] = p.Kind
	b[off(p, unsafe.Pointer(&p.Flags))] = p.Flags
	b[off(p, unsafe.Pointer(&p.State))] = p.State
	b[off(p, unsafe.Pointer(&p.Pad0))] = p.Pad0[0]
}

// Put writes p into b[:PatchStructSize].
func (p *Patch) Put(b []byte) {
	_ = b[PatchStructSize-1]
	le.PutUint64(b[off(p, unsafe.Pointer(&p.Addr)):], p.Addr)
	b[off(p, unsafe.Pointer(&p.Len))] = p.Len
	b[off(p, unsafe.Pointer(&p.Flags))] = p.Flags
	le.PutUint16(b[off(p, unsafe.Pointer(&p.NProbes)):], p.NProbes)
	le.PutUint32(b[off(p, unsafe.Pointer(&p.Remaining)):], p.Remaining)
	copy(b[off(p, unsafe.Pointer(&p.Orig)):], p.Orig[:])
}

// Put writes c into b[:ChunkStructSize].
func (c *Chunk) Put(b []byte) {
	_ = b[ChunkStructSize-1]
	for _, f := range []*uint64{&c.Vaddr, &c.Size, &c.SrcOff} {
		le.PutUint64(b[off(c, unsafe.Pointer(f)):], *f)
	}
	for _, f := range []*uint32{&c.Flags, &c.NDeps, &c.DepsOff, &c.Pad} {
		le.PutUint32(b[off(c, unsafe.Pointer(f)):], *f)
	}
}

// Put writes s into b[:StubStructSize].
func (s *Stub) Put(b []byte) {
	_ = b[StubStructSize-1]
	le.PutUint64(b[off(s, unsafe.Pointer(&s.Off)):], s.Off)
	copy(b[off(s, unsafe.Pointer(&s.Code)):], s.Code[:])
}

// Put writes s into b[:StubFileStructSize].
func (s *StubFile) Put(b []byte) {
	_ = b[StubFileStructSize-1]
	for _, f := range []*uint64{&s.Magic, &s.Tag, &s.AreaSize, &s.NStubs} {
		le.PutUint64(b[off(s, unsafe.Pointer(f)):], *f)
	}
}

// Put writes t into b[:TrapStructSize].
func (t *Trap) Put(b []byte) {
	_ = b[TrapStructSize-1]
	le.PutUint64(b[off(t, unsafe.Pointer(&t.Site)):], t.Site)
	le.PutUint64(b[off(t, unsafe.Pointer(&t.Tramp)):], t.Tramp)
	le.PutUint32(b[off(t, unsafe.Pointer(&t.Patch)):], t.Patch)
	le.PutUint32(b[off(t, unsafe.Pointer(&t.Hits)):], t.Hits)
}

// Put writes r into b[:ReadStructSize].
func (r *Read) Put(b []byte) {
	_ = b[ReadStructSize-1]
	le.PutUint32(b[off(r, unsafe.Pointer(&r.Reader)):], r.Reader)
	le.PutUint32(b[off(r, unsafe.Pointer(&r.Read)):], r.Read)
}
