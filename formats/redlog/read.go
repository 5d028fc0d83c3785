package redlog

import (
	"bytes"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"hash/crc32"
	"io"
	"os"
	"slices"
	"time"

	"golang.org/x/sys/unix"
)

// Log is what a log file holds: its policy and, per module, the distinct
// entries of its good blocks.
type Log struct {
	Policy Policy
	// Modules maps a module's build-id (lower-case hex) to its entries,
	// sorted by [Entry.Compare] and without duplicates.
	Modules map[string][]Entry
	Blocks  int   // good blocks read
	Entries int   // entries in the good blocks, repeats included
	Size    int64 // bytes read
	// End is where the next block goes: after the last good block when
	// the file ends in a torn append (which the writer overwrites),
	// otherwise the end of the file rounded up to a multiple of 8.
	End int64
	// Last is the last good block: its offset and its first 16 bytes
	// (magic, count, CRC, build-id length). Blocks are only appended, so
	// a file whose block at Last.Off still starts so holds what this
	// read did up to Last's end, and more only after it (Prefix).
	Last Block
}

// Block names a block of a log file by its offset and its first 16
// bytes, the CRC among them.
type Block struct {
	Off  int64
	Head [16]byte
}

// Prefix reports whether the file read ended with its last good block,
// with no damage before it: then what a later reader finds after
// l.Size was appended since, and the entries up to l.Size are l's.
func (l *Log) Prefix(probs []Problem) bool {
	return len(probs) == 0 && l.Blocks > 0 && l.Last.Off+BlockHead <= l.Size && l.End == l.Size
}

// BuildIDs returns the keys of l.Modules, sorted.
func (l *Log) BuildIDs() []string {
	ids := make([]string, 0, len(l.Modules))
	for id := range l.Modules {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	return ids
}

// Distinct returns the number of distinct entries over all modules.
func (l *Log) Distinct() int {
	n := 0
	for _, es := range l.Modules {
		n += len(es)
	}
	return n
}

// Has reports whether the module with the given build-id (hex) has entry
// e.
func (l *Log) Has(buildID string, e Entry) bool {
	_, ok := slices.BinarySearchFunc(l.Modules[buildID], e, Entry.Compare)
	return ok
}

// ReadFile reads the log at path. It waits a little for a shared lock so
// that it does not see a writer's block half written, and reads anyway
// if a writer holds the lock for long (what that writer has not
// finished then shows as a torn append).
func ReadFile(path string) (*Log, []Problem, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, nil, err
	}
	defer f.Close()
	for i := 0; i < 50; i++ {
		err := unix.Flock(int(f.Fd()), unix.LOCK_SH|unix.LOCK_NB)
		if err == nil {
			defer unix.Flock(int(f.Fd()), unix.LOCK_UN)
			break
		}
		if err != unix.EWOULDBLOCK && err != unix.EINTR {
			break // no locks here (some file systems): read anyway
		}
		time.Sleep(20 * time.Millisecond)
	}
	st, err := f.Stat()
	if err != nil {
		return nil, nil, err
	}
	return Read(f, st.Size())
}

// Read reads a log of size bytes from r. The error is a *[FormatError]
// when the input is not a log at all (no header, unknown version or
// policy), or a read error; damage after the header is returned as
// Problems, in file order, and everything else is read.
//
// Read holds the whole file in memory (a log holds 32 bytes per entry);
// it reads in chunks, so a size larger than the input costs nothing.
func Read(r io.ReaderAt, size int64) (*Log, []Problem, error) {
	if size < 0 {
		return nil, nil, fmt.Errorf("negative size %d", size)
	}
	b, err := io.ReadAll(io.NewSectionReader(r, 0, size))
	if err != nil {
		return nil, nil, err
	}
	return parse(b)
}

func notLog(off int64, sentinel error, format string, args ...any) error {
	return &FormatError{Offset: off, Msg: fmt.Sprintf(format, args...), Err: sentinel}
}

// parseHeader checks the header and returns the policy.
func parseHeader(b []byte) (Policy, error) {
	if len(b) < HeaderSize {
		return 0, notLog(0, ErrNotLog, "%d bytes, shorter than the %d-byte header", len(b), HeaderSize)
	}
	if string(b[:8]) != Magic {
		return 0, notLog(0, ErrNotLog, "starts with %q, not %q", b[:8], Magic)
	}
	if v := le.Uint32(b[8:]); v != Version {
		return 0, notLog(8, ErrVersion, "version %d (this reader knows %d)", v, Version)
	}
	p := Policy(le.Uint32(b[12:]))
	if !p.Valid() {
		return 0, notLog(12, ErrPolicy, "policy %d", uint32(p))
	}
	// The reserved bytes are not checked: a later minor revision may use
	// them for something a version-1 reader can ignore.
	return p, nil
}

var le = binary.LittleEndian

func parse(b []byte) (*Log, []Problem, error) {
	p, err := parseHeader(b)
	if err != nil {
		return nil, nil, err
	}
	l := &Log{Policy: p, Modules: map[string][]Entry{}, Size: int64(len(b))}
	var probs []Problem
	added := map[string]bool{}
	off := HeaderSize
	for off < len(b) {
		n, msg := checkBlock(b, off)
		if msg == "" {
			l.Last.Off = int64(off)
			copy(l.Last.Head[:], b[off:])
			if m := l.addBlock(b[off:off+n], added); m != "" {
				probs = append(probs, Problem{Offset: int64(off), Len: int64(n), Msg: m})
			}
			off += n
			continue
		}
		next := -1
		for o := off + blockAlign; o+BlockHead <= len(b); o += blockAlign {
			if _, m := checkBlock(b, o); m == "" {
				next = o
				break
			}
		}
		if next >= 0 {
			probs = append(probs, Problem{Offset: int64(off), Len: int64(next - off),
				Msg: fmt.Sprintf("%s; next good block at offset %d", msg, next)})
			off = next
			continue
		}
		// No good block follows. The bad bytes may end in a torn
		// append after damage (a writer that appended after damaged
		// bytes and died): the first aligned offset from which the rest
		// is a block prefix, or zeros.
		tornAt := -1
		for o := off; o < len(b); o += blockAlign {
			// Zeros only count where the bad bytes start: a damaged
			// block's last entries are often zeros.
			if isTorn(b[o:]) && (o == off || !allZero(b[o:])) {
				tornAt = o
				break
			}
		}
		if tornAt > off {
			probs = append(probs, Problem{Offset: int64(off), Len: int64(tornAt - off),
				Msg: fmt.Sprintf("%s; no good block after it", msg)})
			_, msg = checkBlock(b, tornAt)
		}
		if tornAt >= 0 {
			probs = append(probs, Problem{Offset: int64(tornAt), Len: int64(len(b) - tornAt), Torn: true,
				Msg: msg + "; the next append overwrites it"})
			l.End = int64(tornAt)
		} else {
			probs = append(probs, Problem{Offset: int64(off), Len: int64(len(b) - off),
				Msg: msg + "; no good block after it"})
		}
		break
	}
	if l.End == 0 {
		l.End = (int64(len(b)) + blockAlign - 1) &^ (blockAlign - 1)
	}
	for id := range added {
		if es := SortEntries(l.Modules[id]); len(es) > 0 {
			l.Modules[id] = es
		} else {
			delete(l.Modules, id) // empty blocks, or only bad entries
		}
	}
	return l, probs, nil
}

// checkBlock checks the block at off and returns its size, or a message
// saying why there is no good block there.
func checkBlock(b []byte, off int) (int, string) {
	t := b[off:]
	if len(t) < BlockHead {
		return 0, fmt.Sprintf("block header cut short: %d of %d bytes", len(t), BlockHead)
	}
	if m := le.Uint32(t); m != BlockMagic {
		return 0, fmt.Sprintf("no block magic (found %#08x)", m)
	}
	count := uint64(le.Uint32(t[4:]))
	n := BlockHead + EntrySize*count
	if n > uint64(len(t)) {
		return 0, fmt.Sprintf("block of %d entries (%d bytes) runs past the end of the file (%d bytes left)", count, n, len(t))
	}
	if want, got := le.Uint32(t[8:]), crc32.ChecksumIEEE(t[crcFrom:n]); want != got {
		return 0, fmt.Sprintf("block CRC %08x, computed %08x", want, got)
	}
	bl := le.Uint32(t[12:])
	if bl == 0 || bl > MaxBuildID {
		return 0, fmt.Sprintf("build-id length %d (want 1 to %d)", bl, MaxBuildID)
	}
	if !allZero(t[16+bl : BlockHead]) {
		return 0, "build-id padding is not zero"
	}
	return int(n), ""
}

// addBlock adds the entries of a checked block, returning a message if
// some entries are invalid for the policy (they are left out).
func (l *Log) addBlock(blk []byte, added map[string]bool) string {
	id := hex.EncodeToString(blk[16 : 16+le.Uint32(blk[12:])])
	l.Blocks++
	bad, first := 0, ""
	es := l.Modules[id]
	for i := BlockHead; i < len(blk); i += EntrySize {
		e := Entry{A: le.Uint64(blk[i:]), B: le.Uint64(blk[i+8:]), DstMod: le.Uint64(blk[i+16:]), Kind: le.Uint32(blk[i+24:])}
		msg := e.check(l.Policy)
		if msg == "" && le.Uint32(blk[i+28:]) != 0 {
			msg = "entry's reserved field is not zero"
		}
		if msg != "" {
			if bad == 0 {
				first = fmt.Sprintf("entry %d: %s", (i-BlockHead)/EntrySize, msg)
			}
			bad++
			continue
		}
		es = append(es, e)
		l.Entries++
	}
	l.Modules[id] = es
	added[id] = true
	if bad > 0 {
		return fmt.Sprintf("block of module %s: %d bad entries left out (%s)", id, bad, first)
	}
	return ""
}

// isTorn reports whether t, the bytes from a bad block to the end of the
// file, look like a writer's unfinished append: a prefix of a block
// (its magic written, its entries not all), or zeros.
func isTorn(t []byte) bool {
	if allZero(t) {
		return true
	}
	var m [4]byte
	le.PutUint32(m[:], BlockMagic)
	if len(t) < 4 {
		return bytes.HasPrefix(m[:], t)
	}
	if !bytes.Equal(t[:4], m[:]) {
		return false
	}
	if len(t) < 8 {
		return true
	}
	return BlockHead+EntrySize*uint64(le.Uint32(t[4:])) > uint64(len(t))
}

func allZero(b []byte) bool {
	for _, c := range b {
		if c != 0 {
			return false
		}
	}
	return true
}
