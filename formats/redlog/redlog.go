package redlog

import (
	"cmp"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/stint-project/stint/formats"
)

// Layout constants of the file (see the package documentation).
const (
	Magic       = "STINTLOG" // first 8 bytes of a log
	Version     = 1          // the header's version
	HeaderSize  = 32         // bytes of the header
	BlockMagic  = 0x4b4c4253 // "SBLK" little-endian: first u32 of a block
	BlockHead   = 48         // bytes of a block before its entries
	EntrySize   = 32         // bytes of one entry
	MaxBuildID  = 32         // longest build-id a block can hold
	MaxPerBlock = 1 << 16    // entries a writer puts in one block at most
	blockAlign  = 8          // blocks start at multiples of 8
	crcFrom     = 12         // the block CRC covers bytes crcFrom.. of the block
)

// Policy is what a log's entries mean and how a runtime decides, from
// them, what it need not record again (the header's policy field).
type Policy uint32

// Policies. Hash, BST and Merger are the region logs of DIME*, section
// 3.2.1-3.2.3; Exact is stint's own.
const (
	Exact  Policy = 1 // one entry per recorded site outcome (src, dst, dstmod, kind)
	Hash   Policy = 2 // regions; a region is skipped iff its address is logged
	BST    Policy = 3 // regions; skipped iff its address lies inside a logged region
	Merger Policy = 4 // regions; skipped iff it lies wholly inside a logged region
)

var policyNames = [...]string{Exact: "exact", Hash: "hash", BST: "bst", Merger: "merger"}

// Valid reports whether p is a defined policy.
func (p Policy) Valid() bool { return p >= Exact && p <= Merger }

// Region reports whether p is one of the paper's region policies.
func (p Policy) Region() bool { return p >= Hash && p <= Merger }

// String returns the policy's name ("exact", "hash", "bst", "merger") or
// "policy(N)".
func (p Policy) String() string {
	if p.Valid() {
		return policyNames[p]
	}
	return fmt.Sprintf("policy(%d)", uint32(p))
}

// ParsePolicy returns the policy named s (case does not matter).
func ParsePolicy(s string) (Policy, error) {
	n := strings.ToLower(strings.TrimSpace(s))
	for p := Exact; p <= Merger; p++ {
		if policyNames[p] == n {
			return p, nil
		}
	}
	return 0, fmt.Errorf("unknown log policy %q (want one of %s)", s, strings.Join(policyNames[1:], ", "))
}

// Entry is one entry as stored (the reserved field is not kept: it is
// written as zero and a non-zero value is reported as damage).
//
// For Exact, A is the source address, B the destination (a syscall's
// number for KindSyscall), DstMod the [BuildIDHash] of the destination
// module (0: B is absolute, relative to a module without a build-id, or
// a syscall number) and Kind the [formats.Kind]. For the region
// policies, A is the region's address, B its length, and DstMod and Kind
// are 0. Addresses are module-relative (link vaddrs) except an Exact B
// with no known module.
type Entry struct {
	A, B, DstMod uint64
	Kind         uint32
}

// Compare orders entries by A, B, DstMod, Kind.
func (e Entry) Compare(f Entry) int {
	return cmp.Or(cmp.Compare(e.A, f.A), cmp.Compare(e.B, f.B), cmp.Compare(e.DstMod, f.DstMod), cmp.Compare(e.Kind, f.Kind))
}

// check says what is wrong with e under policy p, or "".
func (e Entry) check(p Policy) string {
	if p == Exact {
		if k := formats.Kind(e.Kind); e.Kind > 255 || !k.Valid() {
			return fmt.Sprintf("entry kind %d is not an event kind", e.Kind)
		}
		return ""
	}
	if e.DstMod != 0 || e.Kind != 0 {
		return fmt.Sprintf("region entry <%#x,%d> has dstmod %#x, kind %d (want 0, 0)", e.A, e.B, e.DstMod, e.Kind)
	}
	if e.B == 0 {
		return fmt.Sprintf("region entry at %#x has length 0", e.A)
	}
	return ""
}

// SortEntries sorts es and removes duplicates, returning the shortened
// slice.
func SortEntries(es []Entry) []Entry {
	slices.SortFunc(es, Entry.Compare)
	return slices.Compact(es)
}

// BuildIDHash is the FNV-1a 64 hash of a build-id's bytes: how an Exact
// entry names its destination module (DstMod).
func BuildIDHash(id []byte) uint64 {
	h := uint64(14695981039346656037)
	for _, b := range id {
		h ^= uint64(b)
		h *= 1099511628211
	}
	return h
}

// ParseBuildID decodes a build-id given as hex (the key of [Log.Modules]
// and of [Append]'s blocks): 1 to [MaxBuildID] bytes.
func ParseBuildID(s string) ([]byte, error) {
	b, err := hex.DecodeString(s)
	if err != nil {
		return nil, fmt.Errorf("build-id %q: not hex", s)
	}
	if len(b) == 0 || len(b) > MaxBuildID {
		return nil, fmt.Errorf("build-id %q: %d bytes (want 1 to %d)", s, len(b), MaxBuildID)
	}
	return b, nil
}

// Errors of files that are not logs, or not logs this package can use.
var (
	ErrNotLog   = errors.New("not a stint redundancy log")
	ErrVersion  = errors.New("unknown log version")
	ErrPolicy   = errors.New("unknown log policy")
	ErrMismatch = errors.New("log has another policy")
)

// FormatError is the error of a file that cannot be read as a log at all.
// It wraps [ErrNotLog], [ErrVersion] or [ErrPolicy].
type FormatError struct {
	Offset int64  // where in the file
	Msg    string // what is wrong
	Err    error  // the sentinel
}

func (e *FormatError) Error() string {
	return fmt.Sprintf("offset %d: %v: %s", e.Offset, e.Err, e.Msg)
}

func (e *FormatError) Unwrap() error { return e.Err }

// Problem is damage found while reading a log that is otherwise
// readable: a torn append at the end, or a damaged block.
type Problem struct {
	Offset int64  // where the bad bytes start
	Len    int64  // how many bytes were skipped
	Torn   bool   // a block cut short at the end of the file: its writer died; the next append overwrites it
	Msg    string // what is wrong
}

func (p Problem) String() string {
	what := "damaged"
	if p.Torn {
		what = "torn append"
	}
	return fmt.Sprintf("offset %d: %s (%d bytes): %s", p.Offset, what, p.Len, p.Msg)
}
