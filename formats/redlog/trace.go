package redlog

import (
	"github.com/stint-project/stint/formats"
)

// TraceModules turns a trace's events into Exact entries, keyed by the
// modules of its module table.
type TraceModules struct {
	ids  map[uint16]string // module id → build-id (hex), "" if it has none
	hash map[uint16]uint64 // module id → BuildIDHash; absent: no build-id
}

// NewTraceModules indexes a trace's module table.
func NewTraceModules(ms []formats.Module) *TraceModules {
	t := &TraceModules{ids: map[uint16]string{}, hash: map[uint16]uint64{}}
	for _, m := range ms {
		t.ids[m.ID] = ""
		if b, err := ParseBuildID(m.BuildID); err == nil {
			t.ids[m.ID] = m.BuildID
			t.hash[m.ID] = BuildIDHash(b)
		}
	}
	return t
}

// Entry returns the Exact entry of event e and the build-id of its
// source module (the block it goes in). ok is false for rows that are
// not events (budget records) and for events whose source module is not
// in the table or has no build-id: those cannot be logged.
//
// The destination is keyed as the package documentation says: by the
// hash of its module's build-id; with DstMod 0 when it has no module
// (absolute) or its module has no build-id (module-relative); and a
// syscall's "destination" is its number, with DstMod 0.
func (t *TraceModules) Entry(e formats.Event) (buildID string, ent Entry, ok bool) {
	if !e.Kind.Valid() {
		return "", Entry{}, false
	}
	id := t.ids[e.SrcModule]
	if id == "" {
		return "", Entry{}, false
	}
	ent = Entry{A: e.Src, Kind: uint32(e.Kind)}
	switch {
	case e.Kind == formats.KindSyscall:
		ent.B = e.Value
	default:
		ent.B, ent.DstMod = e.Dst, t.hash[e.DstModule]
	}
	return id, ent, true
}
