package export

import (
	"bufio"
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"strings"
)

// drcov's text header (DynamoRIO ext/drcovlib, file version 2 with the
// version 2 module table, which every reader takes).
const (
	drcovVersion = 2
	drcovFlavor  = "drcov"
	drcovColumns = "id, base, end, entry, checksum, timestamp, path"
)

// DrCovEntry is one record of a drcov BB table (struct bb_entry_t of
// drcovlib): a block's start as an offset from its module's start, its
// size in bytes and the module's index in the module table.
type DrCovEntry struct {
	Start  uint32
	Size   uint16
	Module uint16
}

// writeDrCov writes a drcov file: the module table (every module of the
// source, in id order; base = link base, end = base + size) and one BB
// record per executed block (see blockList: blocks start at branch
// destinations and block events and run to the first control transfer,
// plus each branch source and syscall as its own instruction). A block
// whose offset does not fit 32 bits is dropped.
func (e *exporter) writeDrCov(ctx context.Context, w io.Writer) error {
	a, err := e.aggregate(ctx, false, false, true)
	if err != nil {
		return err
	}
	blocks := e.blockList(a)

	ids := make([]uint16, 0, len(e.mods))
	index := map[uint16]uint16{}
	for id, m := range e.mods {
		if m != nil {
			index[uint16(id)] = uint16(len(ids))
			ids = append(ids, uint16(id))
		}
	}
	bw := bufio.NewWriter(w)
	fmt.Fprintf(bw, "DRCOV VERSION: %d\nDRCOV FLAVOR: %s\n", drcovVersion, drcovFlavor)
	fmt.Fprintf(bw, "Module Table: version 2, count %d\nColumns: %s\n", len(ids), drcovColumns)
	for i, id := range ids {
		m := e.mods[id]
		base := uint64(0)
		if s := e.symbols(id); s != nil {
			base = s.LinkBase
		}
		path := strings.NewReplacer("\n", "_", "\r", "_").Replace(m.Path)
		fmt.Fprintf(bw, "%3d, 0x%016x, 0x%016x, 0x%016x, 0x%08x, 0x%08x, %s\n", i, base, base+m.Size, uint64(0), 0, 0, path)
	}
	var entries []DrCovEntry
	for _, b := range blocks {
		base := uint64(0)
		if s := e.symbols(b.at.mod); s != nil {
			base = s.LinkBase
		}
		if b.at.addr < base || b.at.addr-base > 0xFFFFFFFF {
			continue
		}
		entries = append(entries, DrCovEntry{Start: uint32(b.at.addr - base), Size: uint16(min(b.size, 0xFFFF)), Module: index[b.at.mod]})
	}
	e.stats.Samples = len(entries)
	fmt.Fprintf(bw, "BB Table: %d bbs\n", len(entries))
	var rec [8]byte
	for _, en := range entries {
		binary.LittleEndian.PutUint32(rec[0:], en.Start)
		binary.LittleEndian.PutUint16(rec[4:], en.Size)
		binary.LittleEndian.PutUint16(rec[6:], en.Module)
		bw.Write(rec[:])
	}
	return bw.Flush()
}

// DrCovModule is one row of a drcov module table.
type DrCovModule struct {
	ID        int
	Base, End uint64
	Entry     uint64
	Path      string
}

// DrCovFile is a parsed drcov file.
type DrCovFile struct {
	Version int
	Flavor  string
	Modules []DrCovModule
	Blocks  []DrCovEntry
}

// DrCovError is malformed drcov input: Offset is the byte offset of the
// line or record at fault.
type DrCovError struct {
	Offset int64
	Msg    string
}

func (e *DrCovError) Error() string { return fmt.Sprintf("drcov: offset %d: %s", e.Offset, e.Msg) }

// maxDrCovModules bounds the module table a parsed header may claim.
const maxDrCovModules = 1 << 16

// ParseDrCov reads a drcov file with a version 2 module table (what this
// package writes, and DynamoRIO's drcov before module table version 3),
// checking its structure: the header lines, the column list, one row per
// module, the BB count and exactly that many 8-byte records, each naming
// a module of the table.
func ParseDrCov(data []byte) (*DrCovFile, error) {
	f := &DrCovFile{}
	off := 0
	line := func() (string, int, error) {
		i := strings.IndexByte(string(data[off:min(len(data), off+4096)]), '\n')
		if i < 0 {
			return "", off, &DrCovError{Offset: int64(off), Msg: "missing line (no newline)"}
		}
		s, at := string(data[off:off+i]), off
		off += i + 1
		return s, at, nil
	}
	s, at, err := line()
	if err != nil {
		return nil, err
	}
	if _, err := fmt.Sscanf(s, "DRCOV VERSION: %d", &f.Version); err != nil || f.Version != 2 {
		return nil, &DrCovError{Offset: int64(at), Msg: fmt.Sprintf("bad version line %q", s)}
	}
	if s, at, err = line(); err != nil {
		return nil, err
	}
	if !strings.HasPrefix(s, "DRCOV FLAVOR: ") {
		return nil, &DrCovError{Offset: int64(at), Msg: fmt.Sprintf("bad flavor line %q", s)}
	}
	f.Flavor = strings.TrimPrefix(s, "DRCOV FLAVOR: ")
	if s, at, err = line(); err != nil {
		return nil, err
	}
	var mver, count int
	if _, err := fmt.Sscanf(s, "Module Table: version %d, count %d", &mver, &count); err != nil || mver != 2 || count < 0 || count > maxDrCovModules {
		return nil, &DrCovError{Offset: int64(at), Msg: fmt.Sprintf("bad module table line %q (want version 2)", s)}
	}
	if s, at, err = line(); err != nil {
		return nil, err
	}
	if s != "Columns: "+drcovColumns {
		return nil, &DrCovError{Offset: int64(at), Msg: fmt.Sprintf("bad columns line %q", s)}
	}
	for i := 0; i < count; i++ {
		if s, at, err = line(); err != nil {
			return nil, err
		}
		parts := strings.SplitN(s, ",", 7)
		if len(parts) != 7 {
			return nil, &DrCovError{Offset: int64(at), Msg: fmt.Sprintf("module row %q has %d columns, want 7", s, len(parts))}
		}
		var m DrCovModule
		var ck, ts uint64
		if _, err := fmt.Sscanf(strings.Join(parts[:6], ","), "%d, 0x%x, 0x%x, 0x%x, 0x%x, 0x%x", &m.ID, &m.Base, &m.End, &m.Entry, &ck, &ts); err != nil {
			return nil, &DrCovError{Offset: int64(at), Msg: fmt.Sprintf("bad module row %q: %v", s, err)}
		}
		if m.ID != i {
			return nil, &DrCovError{Offset: int64(at), Msg: fmt.Sprintf("module row %d has id %d", i, m.ID)}
		}
		m.Path = strings.TrimSpace(parts[6])
		f.Modules = append(f.Modules, m)
	}
	if s, at, err = line(); err != nil {
		return nil, err
	}
	var nbb int
	if _, err := fmt.Sscanf(s, "BB Table: %d bbs", &nbb); err != nil || nbb < 0 {
		return nil, &DrCovError{Offset: int64(at), Msg: fmt.Sprintf("bad BB table line %q", s)}
	}
	if rest := len(data) - off; rest != 8*nbb {
		return nil, &DrCovError{Offset: int64(off), Msg: fmt.Sprintf("BB table holds %d bytes, want %d (%d records of 8)", rest, 8*nbb, nbb)}
	}
	f.Blocks = make([]DrCovEntry, nbb)
	for i := range f.Blocks {
		r := data[off+8*i:]
		b := DrCovEntry{Start: binary.LittleEndian.Uint32(r), Size: binary.LittleEndian.Uint16(r[4:]), Module: binary.LittleEndian.Uint16(r[6:])}
		if int(b.Module) >= len(f.Modules) {
			return nil, &DrCovError{Offset: int64(off + 8*i), Msg: fmt.Sprintf("BB record %d names module %d of %d", i, b.Module, len(f.Modules))}
		}
		f.Blocks[i] = b
	}
	return f, nil
}
