package oracle

import (
	"bytes"
	"debug/elf"
	"fmt"
	"sort"
	"strconv"
	"strings"
)

// Mapping is one line of /proc/PID/maps.
type Mapping struct {
	Start, End uint64
	Perm       string // e.g. "r-xp"
	Offset     uint64 // file offset of Start
	Inode      uint64
	Path       string // "" for anonymous memory; "[vdso]", "[heap]", ... for special ones
}

// Exec reports whether the mapping is executable.
func (m *Mapping) Exec() bool { return len(m.Perm) >= 3 && m.Perm[2] == 'x' }

// File reports whether the mapping is backed by a file (or is the vdso,
// which is an ELF image too).
func (m *Mapping) File() bool {
	return m.Path == "[vdso]" || strings.HasPrefix(m.Path, "/")
}

// MapsError is a malformed line of a maps file.
type MapsError struct {
	Line int // 1-based
	Msg  string
}

func (e *MapsError) Error() string { return fmt.Sprintf("maps line %d: %s", e.Line, e.Msg) }

// ParseMaps parses the contents of /proc/PID/maps. The result is sorted by
// Start.
func ParseMaps(data []byte) ([]Mapping, error) {
	var ms []Mapping
	for n, line := range bytes.Split(data, []byte{'\n'}) {
		if len(bytes.TrimSpace(line)) == 0 {
			continue
		}
		m, err := parseMapsLine(string(line))
		if err != nil {
			return nil, &MapsError{Line: n + 1, Msg: err.Error()}
		}
		ms = append(ms, m)
	}
	sort.Slice(ms, func(i, j int) bool { return ms[i].Start < ms[j].Start })
	return ms, nil
}

// parseMapsLine parses "start-end perm offset dev inode   path". The path
// is everything after the inode and the spaces that follow it, so it may
// contain spaces.
func parseMapsLine(s string) (Mapping, error) {
	var m Mapping
	field := func() (string, error) {
		s = strings.TrimLeft(s, " ")
		i := strings.IndexByte(s, ' ')
		if i < 0 {
			if s == "" {
				return "", fmt.Errorf("missing field")
			}
			f := s
			s = ""
			return f, nil
		}
		f := s[:i]
		s = s[i:]
		return f, nil
	}
	rng, err := field()
	if err != nil {
		return m, err
	}
	lo, hi, ok := strings.Cut(rng, "-")
	if !ok {
		return m, fmt.Errorf("bad range %q", rng)
	}
	if m.Start, err = strconv.ParseUint(lo, 16, 64); err != nil {
		return m, fmt.Errorf("bad start %q", lo)
	}
	if m.End, err = strconv.ParseUint(hi, 16, 64); err != nil {
		return m, fmt.Errorf("bad end %q", hi)
	}
	if m.End < m.Start {
		return m, fmt.Errorf("end %#x below start %#x", m.End, m.Start)
	}
	if m.Perm, err = field(); err != nil {
		return m, err
	}
	if len(m.Perm) != 4 {
		return m, fmt.Errorf("bad permissions %q", m.Perm)
	}
	off, err := field()
	if err != nil {
		return m, err
	}
	if m.Offset, err = strconv.ParseUint(off, 16, 64); err != nil {
		return m, fmt.Errorf("bad offset %q", off)
	}
	if _, err = field(); err != nil { // device
		return m, err
	}
	ino, err := field()
	if err != nil {
		return m, err
	}
	if m.Inode, err = strconv.ParseUint(ino, 10, 64); err != nil {
		return m, fmt.Errorf("bad inode %q", ino)
	}
	m.Path = strings.TrimLeft(s, " ")
	return m, nil
}

// linkBase returns the load base of the file mapped by m: the value that,
// subtracted from a run-time address inside m, gives the file's link
// vaddr. progs are the file's program headers (nil if unknown). For a
// fixed-address executable the base is 0.
func linkBase(m *Mapping, progs []elf.ProgHeader) uint64 {
	const page = 4096
	if m.Path == "[vdso]" {
		return m.Start
	}
	// A file page may belong to two segments (the end of one, the start
	// of the next): a segment that starts at the mapping's offset wins,
	// then one that contains it (a mapping split by mprotect, RELRO).
	for pass := 0; pass < 2; pass++ {
		for _, p := range progs {
			if p.Type != elf.PT_LOAD {
				continue
			}
			off := p.Off &^ (page - 1)
			if m.Offset == off || pass == 1 && m.Offset > off && m.Offset < p.Off+p.Filesz {
				return m.Start - (p.Vaddr&^(page-1) + (m.Offset - off))
			}
		}
	}
	// Unknown layout: assume link vaddr = file offset (true of most
	// shared objects and PIEs).
	return m.Start - m.Offset
}
