package cct

import (
	"debug/elf"
	"slices"
	"sort"

	"github.com/stint-project/stint/analysis/symbols"
	"github.com/stint-project/stint/internal/ehframe"
)

// WithFrameStarts returns a SymbolSource that completes src's tables with
// the function starts of each module's .eh_frame_hdr search table, so
// that the stack repair also works in stripped modules (every x86-64
// binary built by gcc has one; FACTS.md: gzip, sqlite3, git, gdb and
// python3 do). A start that no named function covers becomes an unnamed
// function reaching to the next start (names stay module+offset). When
// src has no table for a module, the starts alone make one.
func WithFrameStarts(src SymbolSource) SymbolSource { return frameStarts{src} }

type frameStarts struct{ inner SymbolSource }

func (f frameStarts) Table(buildID, path string) (*symbols.Table, error) {
	var t *symbols.Table
	var err error
	if f.inner != nil {
		t, err = f.inner.Table(buildID, path)
	}
	if path == "" {
		return t, err
	}
	if id, e := symbols.BuildID(path); e != nil || id != "" && buildID != "" && id != buildID {
		return t, err // not the traced module's file
	}
	starts, e := ehFrameStarts(path)
	if e != nil || len(starts) == 0 {
		return t, err
	}
	out := &symbols.Table{Source: path + ": eh_frame_hdr"}
	if t != nil {
		out.Funcs = slices.Clone(t.Funcs)
		out.Source = t.Source + "+eh_frame_hdr"
	}
	for i, s := range starts {
		if t.Lookup(s) != nil {
			continue
		}
		end := s + 1
		if i+1 < len(starts) {
			end = starts[i+1]
		}
		// Stop at the next named function.
		if t != nil {
			j := sort.Search(len(t.Funcs), func(j int) bool { return t.Funcs[j].Start > s })
			if j < len(t.Funcs) && t.Funcs[j].Start < end {
				end = t.Funcs[j].Start
			}
		}
		out.Funcs = append(out.Funcs, symbols.Func{Start: s, End: end})
	}
	slices.SortFunc(out.Funcs, func(a, b symbols.Func) int {
		switch {
		case a.Start < b.Start:
			return -1
		case a.Start > b.Start:
			return 1
		}
		return 0
	})
	return out, nil
}

// ehFrameStarts returns the sorted function starts (link vaddrs) of the
// .eh_frame_hdr binary search table of the ELF file at path.
func ehFrameStarts(path string) ([]uint64, error) {
	f, err := elf.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var data []byte
	var base uint64
	if s := f.Section(".eh_frame_hdr"); s != nil && s.Type != elf.SHT_NOBITS {
		if data, err = s.Data(); err != nil {
			return nil, err
		}
		base = s.Addr
	} else {
		for _, p := range f.Progs {
			if p.Type == elf.PT_GNU_EH_FRAME && p.Filesz > 0 && p.Filesz < 1<<30 {
				data = make([]byte, p.Filesz)
				if _, err := p.ReadAt(data, 0); err != nil {
					return nil, err
				}
				base = p.Vaddr
			}
		}
	}
	return parseEhFrameHdr(data, base)
}

// parseEhFrameHdr returns the sorted, distinct starts of the
// .eh_frame_hdr table at vaddr base (package ehframe reads it).
func parseEhFrameHdr(d []byte, base uint64) ([]uint64, error) {
	starts, err := ehframe.HdrStarts(d, base)
	if err != nil {
		return nil, err
	}
	slices.Sort(starts)
	return slices.Compact(starts), nil
}
