package symbols

import (
	"debug/dwarf"
	"errors"
	"io"
	"sort"
	"sync"
)

// LineRange says that the code at [Start, End) comes from line Line of
// file Files[File] of its [Lines].
type LineRange struct {
	Start, End uint64
	File       uint32 // index in Lines.Files
	Line       uint32
}

// Lines is a module's DWARF line table, flattened: the address ranges of
// every row of every compilation unit, sorted by Start. Files holds the
// file names the ranges refer to, as the line table spells them (joined
// with the compilation directory when relative).
type Lines struct {
	Ranges []LineRange
	Files  []string
}

// At returns the file and line of the code at addr; ok is false when
// the table says nothing about addr.
func (l *Lines) At(addr uint64) (file string, line int, ok bool) {
	if l == nil {
		return "", 0, false
	}
	i := sort.Search(len(l.Ranges), func(i int) bool { return l.Ranges[i].End > addr })
	if i < len(l.Ranges) && l.Ranges[i].Start <= addr {
		r := l.Ranges[i]
		return l.Files[r.File], int(r.Line), true
	}
	return "", 0, false
}

// Overlapping calls f for every range that overlaps [start, end), in
// address order.
func (l *Lines) Overlapping(start, end uint64, f func(LineRange)) {
	if l == nil || end <= start {
		return
	}
	i := sort.Search(len(l.Ranges), func(i int) bool { return l.Ranges[i].End > start })
	for ; i < len(l.Ranges) && l.Ranges[i].Start < end; i++ {
		f(l.Ranges[i])
	}
}

// lazyLines parses a DWARF line table on first use, so that tables only
// asked for names cost nothing more.
type lazyLines struct {
	once  sync.Once
	d     *dwarf.Data
	lines *Lines
	err   error
}

// Lines returns the module's line table, parsed on the first call, or
// nil when the module has no DWARF line information (the error then
// says why, or is nil for a module without DWARF at all).
func (t *Table) Lines() (*Lines, error) {
	if t == nil || t.lines == nil {
		return nil, nil
	}
	ll := t.lines
	ll.once.Do(func() {
		ll.lines, ll.err = readLines(ll.d)
		ll.d = nil
	})
	return ll.lines, ll.err
}

// LineAt returns the file and line of the code at addr, from the DWARF
// line table; ok is false when there is none or it says nothing of addr.
func (t *Table) LineAt(addr uint64) (file string, line int, ok bool) {
	l, _ := t.Lines()
	return l.At(addr)
}

// ErrNoLines means a module's DWARF has no line table rows.
var ErrNoLines = errors.New("no DWARF line table")

// readLines flattens every compilation unit's line program. A row
// covers the addresses from its own to the next row's of the same
// sequence; an end_sequence row ends the sequence and covers nothing.
// Zero-length ranges and line 0 ("no source line") are dropped. A
// malformed line program stops that unit and is returned with what was
// read (which is still sorted and usable).
func readLines(d *dwarf.Data) (*Lines, error) {
	l := &Lines{}
	fileIdx := map[string]uint32{}
	intern := func(name string) uint32 {
		if i, ok := fileIdx[name]; ok {
			return i
		}
		i := uint32(len(l.Files))
		l.Files = append(l.Files, name)
		fileIdx[name] = i
		return i
	}
	var firstErr error
	r := d.Reader()
	for {
		cu, err := r.Next()
		if err != nil {
			if firstErr == nil {
				firstErr = err
			}
			break
		}
		if cu == nil {
			break
		}
		if cu.Tag != dwarf.TagCompileUnit && cu.Tag != dwarf.TagPartialUnit {
			r.SkipChildren()
			continue
		}
		r.SkipChildren()
		lr, err := d.LineReader(cu)
		if err != nil {
			if firstErr == nil {
				firstErr = err
			}
			continue
		}
		if lr == nil {
			continue
		}
		var prev dwarf.LineEntry
		have := false
		for {
			var e dwarf.LineEntry
			err := lr.Next(&e)
			if err == io.EOF {
				break
			}
			if err != nil {
				if firstErr == nil {
					firstErr = err
				}
				break
			}
			if have && e.Address > prev.Address && prev.Line > 0 && prev.File != nil {
				l.Ranges = append(l.Ranges, LineRange{Start: prev.Address, End: e.Address, File: intern(prev.File.Name), Line: uint32(prev.Line)})
			}
			if e.EndSequence {
				have = false
				continue
			}
			prev, have = e, true
		}
	}
	sort.SliceStable(l.Ranges, func(i, j int) bool { return l.Ranges[i].Start < l.Ranges[j].Start })
	// Clip overlaps (a unit's stale sequence over another's code) so
	// that At and Overlapping can binary search by End.
	out := l.Ranges[:0]
	for _, rg := range l.Ranges {
		if n := len(out); n > 0 && out[n-1].End > rg.Start {
			if out[n-1].End >= rg.End {
				continue
			}
			rg.Start = out[n-1].End
		}
		out = append(out, rg)
	}
	l.Ranges = out
	if len(l.Ranges) == 0 {
		if firstErr != nil {
			return nil, firstErr
		}
		return nil, ErrNoLines
	}
	return l, firstErr
}
