// Package symbols names the functions of traced modules: it maps a
// module, identified by its GNU build-id and file path, and a
// module-relative address (a link vaddr, as trace files hold them) to
// the function that contains it.
//
// Names come from the module file's .symtab and .dynsym (STT_FUNC
// symbols with a size) and, when the file or its separate debug file
// carries DWARF, from DW_TAG_subprogram entries, whose names win over
// the symbol tables' for the same start address. C++ symbol names are
// demangled. Code no name covers
// but an .eh_frame FDE does is a function named sub_<hex start>, as
// disassemblers name them: stripped binaries keep their FDEs. A Go
// executable's functions come from its .gopclntab too, which stripping
// keeps. A separate debug file
// is looked up as /usr/lib/debug/.build-id/xx/yyyy….debug (the first
// byte of the build-id, then the rest, in hex).
//
// [Table.Lines] and [Table.LineAt] give file and line from the DWARF
// line tables (of the file, or of its separate debug file), parsed on
// first use. [Resolver.Image] returns a module's original code bytes,
// with the bytes of a stint rewrite's patches put back, for decoders.
//
// Hostile files: debug/elf and debug/dwarf return errors for malformed
// input; a module whose file cannot be read is reported by [Resolver.Table]
// and its addresses stay unnamed.
package symbols

import (
	"bytes"
	"debug/dwarf"
	"debug/elf"
	"debug/gosym"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"

	"github.com/ianlancetaylor/demangle"
	"github.com/stint-project/stint/internal/ehframe"
)

// ErrNoSymbols means a module file has neither function symbols nor
// DWARF subprograms.
var ErrNoSymbols = errors.New("no function symbols")

// Func is a function: its name and the addresses [Start, End).
type Func struct {
	Name       string
	Start, End uint64
}

// Table is a module's functions, sorted by start address.
type Table struct {
	Funcs  []Func
	Source string // what named them, e.g. "/usr/bin/gzip: symtab+dwarf"
	lines  *lazyLines
}

// Lookup returns the function containing addr, or nil.
func (t *Table) Lookup(addr uint64) *Func {
	if t == nil {
		return nil
	}
	i := sort.Search(len(t.Funcs), func(i int) bool { return t.Funcs[i].Start > addr }) - 1
	if i >= 0 && addr < t.Funcs[i].End {
		return &t.Funcs[i]
	}
	return nil
}

// Load reads the functions of the ELF file at path.
func Load(path string) (*Table, error) {
	f, err := elf.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	byStart := map[uint64]Func{}
	var srcs []string
	for _, get := range []struct {
		name string
		fn   func() ([]elf.Symbol, error)
	}{{"symtab", f.Symbols}, {"dynsym", f.DynamicSymbols}} {
		syms, err := get.fn()
		if err != nil {
			continue
		}
		n := 0
		for _, s := range syms {
			if elf.ST_TYPE(s.Info) != elf.STT_FUNC || s.Value == 0 || s.Size == 0 || s.Section == elf.SHN_UNDEF {
				continue
			}
			if _, ok := byStart[s.Value]; !ok {
				// C++ names as people read them (the original when it
				// does not demangle)
				byStart[s.Value] = Func{Name: demangle.Filter(s.Name), Start: s.Value, End: s.Value + s.Size}
				n++
			}
		}
		if n > 0 {
			srcs = append(srcs, get.name)
		}
	}
	var ll *lazyLines
	if d, err := f.DWARF(); err == nil {
		if n := addDWARF(d, byStart); n > 0 {
			srcs = append(srcs, "dwarf")
		}
		ll = &lazyLines{d: d}
	}
	if n := addGo(f, byStart); n > 0 {
		srcs = append(srcs, "gopclntab")
	}
	if n := addFDEs(f, byStart); n > 0 {
		srcs = append(srcs, "eh_frame")
	}
	if len(byStart) == 0 {
		return nil, fmt.Errorf("%s: %w", path, ErrNoSymbols)
	}
	t := &Table{Source: path + ": ", lines: ll}
	for i, s := range srcs {
		if i > 0 {
			t.Source += "+"
		}
		t.Source += s
	}
	for _, fn := range byStart {
		t.Funcs = append(t.Funcs, fn)
	}
	sort.Slice(t.Funcs, func(i, j int) bool { return t.Funcs[i].Start < t.Funcs[j].Start })
	return t, nil
}

// addGo adds the functions of a Go executable's .gopclntab (the table
// Go's runtime unwinds with, which stripping keeps) that no symbol
// names (PIEs included: go1.26 gives them the section too).
func addGo(f *elf.File, byStart map[uint64]Func) int {
	sec, text := f.Section(".gopclntab"), f.Section(".text")
	if sec == nil || text == nil || sec.Type == elf.SHT_NOBITS {
		return 0
	}
	b, err := sec.Data()
	if err != nil {
		return 0
	}
	tab, err := gosym.NewTable(nil, gosym.NewLineTable(b, text.Addr))
	if err != nil {
		return 0
	}
	n := 0
	for _, fn := range tab.Funcs {
		if _, ok := byStart[fn.Entry]; ok || fn.End <= fn.Entry {
			continue
		}
		byStart[fn.Entry] = Func{Name: fn.Name, Start: fn.Entry, End: fn.End}
		n++
	}
	return n
}

// addFDEs adds, as sub_<hex start> (the name disassemblers give), each
// .eh_frame FDE's range that no named function contains: a stripped
// binary keeps its FDEs, so its functions still have bounds.
func addFDEs(f *elf.File, byStart map[uint64]Func) int {
	sec := f.Section(".eh_frame")
	if sec == nil || sec.Type == elf.SHT_NOBITS {
		return 0
	}
	b, err := sec.Data()
	if err != nil {
		return 0
	}
	named := make([]Func, 0, len(byStart))
	for _, fn := range byStart {
		named = append(named, fn)
	}
	sort.Slice(named, func(i, j int) bool { return named[i].Start < named[j].Start })
	inside := func(a uint64) bool {
		i := sort.Search(len(named), func(i int) bool { return named[i].Start > a }) - 1
		return i >= 0 && a < named[i].End
	}
	n := 0
	for _, fde := range ehframe.FDEs(b, sec.Addr) {
		if fde.Hi <= fde.Lo || inside(fde.Lo) {
			continue
		}
		if _, ok := byStart[fde.Lo]; ok {
			continue
		}
		byStart[fde.Lo] = Func{Name: fmt.Sprintf("sub_%x", fde.Lo), Start: fde.Lo, End: fde.Hi}
		n++
	}
	return n
}

// addDWARF adds the named subprograms with an address range; their
// names replace the symbol tables' names at the same start.
func addDWARF(d *dwarf.Data, byStart map[uint64]Func) int {
	r := d.Reader()
	n := 0
	for {
		e, err := r.Next()
		if err != nil || e == nil {
			return n
		}
		if e.Tag != dwarf.TagSubprogram {
			continue
		}
		name, _ := e.Val(dwarf.AttrName).(string)
		low, ok := e.Val(dwarf.AttrLowpc).(uint64)
		if name == "" || !ok || low == 0 {
			continue
		}
		var high uint64
		switch h := e.Val(dwarf.AttrHighpc).(type) {
		case uint64:
			high = h
		case int64:
			high = low + uint64(h)
		}
		if high <= low {
			continue
		}
		byStart[low] = Func{Name: name, Start: low, End: high}
		n++
	}
}

// BuildID returns the GNU build-id of the ELF file at path, lower-case
// hex, or "" if it has none.
func BuildID(path string) (string, error) {
	f, err := elf.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	for _, s := range f.Sections {
		if s.Type != elf.SHT_NOTE {
			continue
		}
		b, err := s.Data()
		if err != nil {
			continue
		}
		for len(b) >= 12 {
			nsz, dsz, typ := binary.LittleEndian.Uint32(b), binary.LittleEndian.Uint32(b[4:]), binary.LittleEndian.Uint32(b[8:])
			no := 12 + (uint64(nsz)+3)&^3
			end := no + (uint64(dsz)+3)&^3
			if end > uint64(len(b)) || no+uint64(dsz) > uint64(len(b)) {
				break
			}
			if typ == 3 && nsz == 4 && bytes.Equal(b[12:15], []byte("GNU")) {
				return hex.EncodeToString(b[no : no+uint64(dsz)]), nil
			}
			b = b[end:]
		}
	}
	return "", nil
}

// Resolver finds and caches the symbol tables and code images of
// modules. It is not safe for concurrent use.
type Resolver struct {
	// DebugDir is where separate debug files are looked up by build-id
	// (default /usr/lib/debug/.build-id).
	DebugDir string
	cache    map[string]*entry
	images   map[string]*imageEntry
}

type entry struct {
	t   *Table
	err error
}

type imageEntry struct {
	im  *Image
	err error
}

// NewResolver returns a resolver that looks in /usr/lib/debug/.build-id.
func NewResolver() *Resolver {
	return &Resolver{DebugDir: "/usr/lib/debug/.build-id", cache: map[string]*entry{}}
}

// Table returns the functions of the module with the given build-id and
// path: from the file at path if its build-id matches (or either is
// unknown), else, or if that file has no symbols, from its separate
// debug file. When the file at path has symbols but no DWARF and a
// separate debug file exists, the debug file's table (with its line
// table) is returned instead. The error says why a module has no names
// (file missing, different build-id, stripped).
func (r *Resolver) Table(buildID, path string) (*Table, error) {
	if r.cache == nil {
		r.cache = map[string]*entry{}
	}
	key := buildID + "\x00" + path
	if e, ok := r.cache[key]; ok {
		return e.t, e.err
	}
	t, err := r.load(buildID, path)
	r.cache[key] = &entry{t, err}
	return t, err
}

// matches reports whether the file at path is the module with the given
// build-id (or either build-id is unknown).
func matches(buildID, path string) error {
	id, err := BuildID(path)
	switch {
	case err != nil:
		return err
	case id != "" && buildID != "" && id != buildID:
		return fmt.Errorf("%s: build-id %s, the trace's module has %s", path, id, buildID)
	}
	return nil
}

// debugFile returns the path of the separate debug file for buildID, or
// "" if there is none.
func (r *Resolver) debugFile(buildID string) string {
	if len(buildID) <= 2 || r.DebugDir == "" {
		return ""
	}
	dbg := filepath.Join(r.DebugDir, buildID[:2], buildID[2:]+".debug")
	if _, err := os.Stat(dbg); err != nil {
		return ""
	}
	return dbg
}

func (r *Resolver) load(buildID, path string) (*Table, error) {
	var errs []error
	var fromPath *Table
	if path != "" {
		if err := matches(buildID, path); err != nil {
			errs = append(errs, err)
		} else {
			t, err := Load(path)
			if err == nil && t.lines != nil {
				return t, nil
			}
			if err != nil {
				errs = append(errs, err)
			}
			fromPath = t
		}
	}
	if dbg := r.debugFile(buildID); dbg != "" {
		t, err := Load(dbg)
		if err == nil {
			return t, nil
		}
		errs = append(errs, err)
	}
	if fromPath != nil {
		return fromPath, nil
	}
	if len(errs) == 0 {
		return nil, fmt.Errorf("no file for module %q (build-id %q)", path, buildID)
	}
	return nil, errors.Join(errs...)
}

// Image returns the original code of the module with the given build-id
// and path (see [Image]), read from the file at path if its build-id
// matches. A separate debug file holds no code, so there is no fallback.
func (r *Resolver) Image(buildID, path string) (*Image, error) {
	if r.images == nil {
		r.images = map[string]*imageEntry{}
	}
	key := buildID + "\x00" + path
	if e, ok := r.images[key]; ok {
		return e.im, e.err
	}
	var im *Image
	err := matches(buildID, path)
	if err == nil {
		im, err = LoadImage(path)
	}
	r.images[key] = &imageEntry{im, err}
	return im, err
}
