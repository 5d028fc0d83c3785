package export

import (
	"context"
	"fmt"
	"io"
	"sort"

	"github.com/google/pprof/profile"
)

// mappingSpan is the address space each module gets in a pprof profile:
// module i (in module table order) is mapped at (i+1)*mappingSpan, and a
// location's address is that start plus the link vaddr. Traces hold
// module-relative addresses, and several runs (each with its own load
// bases) may be combined, so run-time addresses do not exist; disjoint
// synthetic ranges keep pprof's per-mapping views apart. Addresses in no
// known module go to the mapping "[unknown]" at mappingSpan*(n+1).
const mappingSpan = 1 << 40

// writePProf writes a gzip'd profile.proto. Call traces give one sample
// per call context (value: calls into it), its locations the callee's
// entry then the call sites up to the root; other traces give one sample
// per event location (value: events there; the source of a branch or
// syscall, the block of a block event). Every location carries its
// function and, when the DWARF line table has it, file and line; every
// mapping its module's path and build-id.
func (e *exporter) writePProf(ctx context.Context, w io.Writer) error {
	st := e.useStacks()
	a, err := e.aggregate(ctx, st, !st, false)
	if err != nil {
		return err
	}
	valueType := &profile.ValueType{Type: "events", Unit: "count"}
	if st {
		valueType = &profile.ValueType{Type: "calls", Unit: "count"}
	}
	p := &profile.Profile{
		SampleType: []*profile.ValueType{valueType},
		PeriodType: &profile.ValueType{Type: valueType.Type, Unit: "count"},
		Period:     1,
	}
	if tool := e.tool; tool != 0 {
		p.Comments = append(p.Comments, "stint "+tool.String()+" trace")
	}
	pb := &pprofBuilder{e: e, p: p, maps: map[uint16]*profile.Mapping{}, locs: map[addr]*profile.Location{}, funcs: map[funcKey]*profile.Function{}}
	if st {
		for id := int32(1); id < int32(len(a.stacks.nodes)); id++ {
			n := a.stacks.nodes[id]
			if n.count == 0 {
				continue
			}
			s := &profile.Sample{Value: []int64{n.count}}
			for _, at := range a.stacks.path(id) {
				s.Location = append(s.Location, pb.location(at))
			}
			p.Sample = append(p.Sample, s)
		}
	} else {
		keys := make([]addr, 0, len(a.flat))
		for at := range a.flat {
			keys = append(keys, at)
		}
		sort.Slice(keys, func(i, j int) bool { return less(keys[i], keys[j]) })
		for _, at := range keys {
			p.Sample = append(p.Sample, &profile.Sample{Value: []int64{a.flat[at]}, Location: []*profile.Location{pb.location(at)}})
		}
	}
	e.stats.Samples = len(p.Sample)
	// Mappings in module table order: pprof names the profile after the
	// first, which is then the executable rather than the first module
	// an event happened to touch.
	sort.Slice(p.Mapping, func(i, j int) bool { return p.Mapping[i].Start < p.Mapping[j].Start })
	for i, m := range p.Mapping {
		m.ID = uint64(i + 1)
	}
	if err := p.CheckValid(); err != nil {
		return fmt.Errorf("pprof: %w", err)
	}
	return p.Write(w)
}

type funcKey struct {
	name, file string
	mod        uint16
}

type pprofBuilder struct {
	e     *exporter
	p     *profile.Profile
	maps  map[uint16]*profile.Mapping
	locs  map[addr]*profile.Location
	funcs map[funcKey]*profile.Function
}

// mapping returns the mapping of module id (NoModule: "[unknown]").
func (pb *pprofBuilder) mapping(id uint16) *profile.Mapping {
	if m, ok := pb.maps[id]; ok {
		return m
	}
	slot := uint64(len(pb.e.mods)) // unknown: after every module
	m := &profile.Mapping{File: "[unknown]"}
	if mod := pb.e.module(id); mod != nil {
		slot = uint64(id)
		m.File, m.BuildID = mod.Path, mod.BuildID
		s := pb.e.symbols(id)
		m.HasFunctions = s != nil && len(s.Funcs) > 0
		m.HasFilenames = s != nil && len(s.Lines) > 0
		m.HasLineNumbers = m.HasFilenames
	}
	m.Start = (slot + 1) * mappingSpan
	m.Limit = m.Start + mappingSpan - 1
	m.ID = uint64(len(pb.p.Mapping) + 1)
	pb.p.Mapping = append(pb.p.Mapping, m)
	pb.maps[id] = m
	return m
}

// location returns the location of at, creating it (with its mapping,
// function and line) on first use.
func (pb *pprofBuilder) location(at addr) *profile.Location {
	if l, ok := pb.locs[at]; ok {
		return l
	}
	m := pb.mapping(at.mod)
	l := &profile.Location{ID: uint64(len(pb.p.Location) + 1), Mapping: m, Address: m.Start + at.addr%mappingSpan}
	s := pb.e.symbols(at.mod)
	name := pb.e.funcName(at.mod, at.addr)
	file, line := s.Line(at.addr)
	if name == "" {
		pb.e.stats.Unresolved++
		name = pb.e.place(at.mod, at.addr)
	}
	fk := funcKey{name: name, file: file, mod: at.mod}
	fn, ok := pb.funcs[fk]
	if !ok {
		fn = &profile.Function{ID: uint64(len(pb.p.Function) + 1), Name: name, SystemName: name, Filename: file}
		if f := s.Func(at.addr); f != nil {
			if ff, fl := s.Line(f.Start); ff == file {
				fn.StartLine = int64(fl)
			}
		}
		pb.p.Function = append(pb.p.Function, fn)
		pb.funcs[fk] = fn
	}
	l.Line = []profile.Line{{Function: fn, Line: int64(line)}}
	pb.p.Location = append(pb.p.Location, l)
	pb.locs[at] = l
	return l
}
