package redlog

import (
	"bytes"
	"fmt"
	"hash/crc32"
	"io"
	"os"
	"slices"

	"golang.org/x/sys/unix"
)

// EncodeHeader returns the 32-byte header of a log of policy p.
func EncodeHeader(p Policy) []byte {
	h := make([]byte, HeaderSize)
	copy(h, Magic)
	le.PutUint32(h[8:], Version)
	le.PutUint32(h[12:], uint32(p))
	return h
}

// AppendBlocks appends to dst the blocks holding es for the module with
// the given build-id (raw bytes, 1 to [MaxBuildID]), at most
// [MaxPerBlock] entries per block, and returns the extended slice. It
// writes es as given: callers deduplicate. No entries, no block.
func AppendBlocks(dst []byte, buildID []byte, es []Entry) ([]byte, error) {
	if len(buildID) == 0 || len(buildID) > MaxBuildID {
		return dst, fmt.Errorf("build-id of %d bytes (want 1 to %d)", len(buildID), MaxBuildID)
	}
	for len(es) > 0 {
		n := min(len(es), MaxPerBlock)
		start := len(dst)
		dst = slices.Grow(dst, BlockHead+EntrySize*n)
		dst = dst[:start+BlockHead+EntrySize*n]
		blk := dst[start:]
		clear(blk)
		le.PutUint32(blk, BlockMagic)
		le.PutUint32(blk[4:], uint32(n))
		le.PutUint32(blk[12:], uint32(len(buildID)))
		copy(blk[16:], buildID)
		for i, e := range es[:n] {
			o := BlockHead + EntrySize*i
			le.PutUint64(blk[o:], e.A)
			le.PutUint64(blk[o+8:], e.B)
			le.PutUint64(blk[o+16:], e.DstMod)
			le.PutUint32(blk[o+24:], e.Kind)
		}
		le.PutUint32(blk[8:], crc32.ChecksumIEEE(blk[crcFrom:]))
		es = es[n:]
	}
	return dst, nil
}

// AppendStats says what an [Append] did.
type AppendStats struct {
	Added    int       // entries appended
	Blocks   int       // blocks appended
	Created  bool      // the file was created (or was empty) and got its header
	Problems []Problem // damage found in the file before appending
}

// Append adds to the log at path the entries of blocks (build-id in hex →
// entries) that the log does not hold yet, creating the log with a
// header for policy if the file is absent or empty.
//
// It follows the writer's protocol of the package documentation: it
// holds flock(LOCK_EX) on the file while it reads it and appends, so
// concurrent writers (other processes, or other goroutines: each Append
// opens the file itself) neither lose nor duplicate each other's
// entries; it appends after the last good block, overwriting a torn
// append, and after damaged bytes, which it leaves in place (and returns
// among the Problems). A file that is not a log, or a log of another
// policy (ErrMismatch), is left alone and is an error; so are invalid
// build-ids and entries.
func Append(path string, policy Policy, blocks map[string][]Entry) (AppendStats, error) {
	var st AppendStats
	if !policy.Valid() {
		return st, fmt.Errorf("append: %w %d", ErrPolicy, uint32(policy))
	}
	ids := make([]string, 0, len(blocks))
	raw := map[string][]byte{}
	for id, es := range blocks {
		b, err := ParseBuildID(id)
		if err != nil {
			return st, fmt.Errorf("append: %w", err)
		}
		for _, e := range es {
			if msg := e.check(policy); msg != "" {
				return st, fmt.Errorf("append: module %s: %s", id, msg)
			}
		}
		ids = append(ids, id)
		raw[id] = b
	}
	slices.Sort(ids)

	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return st, err
	}
	defer f.Close()
	fd := int(f.Fd())
	for {
		err = unix.Flock(fd, unix.LOCK_EX)
		if err != unix.EINTR {
			break
		}
	}
	if err != nil {
		return st, fmt.Errorf("lock %s: %w", path, err)
	}
	defer unix.Flock(fd, unix.LOCK_UN)

	fi, err := f.Stat()
	if err != nil {
		return st, err
	}
	b, err := io.ReadAll(io.NewSectionReader(f, 0, fi.Size()))
	if err != nil {
		return st, err
	}
	hdr := EncodeHeader(policy)
	if len(b) < HeaderSize && bytes.HasPrefix(hdr, b) {
		// Empty, or a creator died while writing the header.
		if _, err := f.WriteAt(hdr, 0); err != nil {
			return st, err
		}
		b = hdr
		st.Created = true
	}
	l, probs, err := parse(b)
	if err != nil {
		return st, err
	}
	st.Problems = probs
	if l.Policy != policy {
		return st, fmt.Errorf("%w: the file's policy is %v, not %v", ErrMismatch, l.Policy, policy)
	}

	var out []byte
	size := int64(len(b))
	at := min(l.End, size)
	out = append(out, make([]byte, l.End-at)...) // pad after unaligned damage
	for _, id := range ids {
		es := SortEntries(slices.Clone(blocks[id]))
		es = slices.DeleteFunc(es, func(e Entry) bool { return l.Has(id, e) })
		if len(es) == 0 {
			continue
		}
		st.Added += len(es)
		st.Blocks += (len(es) + MaxPerBlock - 1) / MaxPerBlock
		if out, err = AppendBlocks(out, raw[id], es); err != nil {
			return st, err
		}
	}
	if st.Added == 0 {
		return st, nil
	}
	if _, err := f.WriteAt(out, at); err != nil {
		return st, fmt.Errorf("append to %s: %w", path, err)
	}
	if end := at + int64(len(out)); end < size {
		// The torn append was longer than what replaced it.
		if err := f.Truncate(end); err != nil {
			return st, fmt.Errorf("append to %s: %w", path, err)
		}
	}
	return st, nil
}
