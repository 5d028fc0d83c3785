package paths

import (
	"debug/elf"
	"fmt"
	"io"
	"os"
	"sort"

	"github.com/stint-project/stint/formats"
)

// module is one entry of a trace's module table, with its branch map
// when it records a compact trace.
type module struct {
	formats.Module
	m   *formats.PathMap // nil: not instrumented for compact traces
	tgt []int32          // per branch: the index of the first branch at or after its direct target
	// sites: the indices of the direct calls and rets, in address order:
	// a call chain's SITE packets number them
	sites []int32
}

// index precomputes tgt (a target outside the text gets an index that
// the walk looks up instead: -1) and sites.
func (md *module) index() {
	bs := md.m.Branches
	md.tgt = make([]int32, len(bs))
	for i, br := range bs {
		if br.Kind == formats.BrCall || br.Kind == formats.BrRet {
			md.sites = append(md.sites, int32(i))
		}
		md.tgt[i] = -1
		direct := br.Kind == formats.BrJcc || br.Kind == formats.BrJmp || br.Kind == formats.BrCall || br.Flags&formats.BranchPredicted != 0
		if direct && br.Target >= md.m.TextLo && br.Target < md.m.TextHi {
			md.tgt[i] = int32(md.m.At(br.Target))
		}
	}
}

// modules finds the module of a run-time address as the runtime does
// (module_of): the first of the table, by id, with a - base < size.
type modules struct {
	list []*module // by id
	all  map[uint16]*module
	last *module
}

// loadModules reads the branch map of every rewritten module of the
// table from its file (the path the loader mapped). A rewritten module
// whose file is gone, or has another build-id or no map, is an error
// only if the trace needs it (the caller decides: it has no map here).
func loadModules(ms []formats.Module, opts Options) (*modules, []string) {
	out := &modules{all: map[uint16]*module{}}
	var notes []string
	for _, fm := range ms {
		md := &module{Module: fm}
		if pm, ok := opts.Maps[fm.Path]; ok {
			md.m = pm
			md.index()
		} else if fm.Rewritten {
			path := fm.Path
			if o, ok := opts.Binaries[fm.Path]; ok {
				path = o
			}
			m, err := readPathMap(path)
			switch {
			case err != nil:
				notes = append(notes, fmt.Sprintf("module %d (%s): %v", fm.ID, fm.Path, err))
			case m != nil:
				md.m = m
				md.index()
			}
		}
		out.all[fm.ID] = md
		out.list = append(out.list, md)
	}
	sort.Slice(out.list, func(i, j int) bool { return out.list[i].ID < out.list[j].ID })
	return out, notes
}

// readPathMap reads the branch map of the ELF file at path; nil, nil
// when the file has none.
func readPathMap(path string) (*formats.PathMap, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return ReadMap(f)
}

// ReadMap reads the branch map of the ELF file r (section
// formats.PathMapSection); nil, nil when it has none (a module
// rewritten for another mode).
func ReadMap(r io.ReaderAt) (*formats.PathMap, error) {
	ef, err := elf.NewFile(r)
	if err != nil {
		return nil, err
	}
	s := ef.Section(formats.PathMapSection)
	if s == nil {
		return nil, nil
	}
	b, err := s.Data()
	if err != nil {
		return nil, fmt.Errorf("section %s: %w", formats.PathMapSection, err)
	}
	return formats.DecodePathMap(b)
}

// at returns the module that holds run-time address a, or nil (the last
// one found is tried first: most transfers stay in their module).
func (ms *modules) at(a uint64) *module {
	if m := ms.last; m != nil && a-m.Base < m.Size {
		return m
	}
	for _, m := range ms.list {
		if a-m.Base < m.Size {
			ms.last = m
			return m
		}
	}
	return nil
}

// inside reports whether a lies in code with a branch map: where the
// decoder walks (the runtime's "instrumented code", paths.c).
func (ms *modules) inside(a uint64) (*module, bool) {
	m := ms.at(a)
	if m == nil || m.m == nil {
		return m, false
	}
	return m, m.inText(a)
}

// inText reports whether run-time address a lies in md's code (md has a
// branch map).
func (md *module) inText(a uint64) bool {
	off := a - md.Base
	return off >= md.m.TextLo && off < md.m.TextHi
}
