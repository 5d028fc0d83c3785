package cli

import (
	"fmt"
	"math"
	"strconv"
	"strings"
)

// Bytes is a pflag.Value for a size in bytes: a number with an optional
// suffix K, M, G or T (powers of 1024; KiB, MiB... and KB, MB... read the
// same), as GNU tools take them ("64M", "1MiB", "4096").
type Bytes struct{ N *uint64 }

func (b Bytes) String() string {
	if b.N == nil {
		return "0"
	}
	return strconv.FormatUint(*b.N, 10)
}

// Type names the value in --help.
func (b Bytes) Type() string { return "bytes" }

// Set parses s.
func (b Bytes) Set(s string) error {
	n, err := ParseBytes(s)
	if err != nil {
		return err
	}
	*b.N = n
	return nil
}

// ParseBytes parses a size: digits, then optionally K, M, G or T (with or
// without a following "iB" or "B"), each a power of 1024.
func ParseBytes(s string) (uint64, error) {
	t := strings.TrimSpace(s)
	i := 0
	for i < len(t) && t[i] >= '0' && t[i] <= '9' {
		i++
	}
	if i == 0 {
		return 0, fmt.Errorf("size %q: want a number of bytes, with K, M, G or T for powers of 1024", s)
	}
	n, err := strconv.ParseUint(t[:i], 10, 64)
	if err != nil {
		return 0, fmt.Errorf("size %q: %w", s, err)
	}
	unit := strings.ToUpper(t[i:])
	shift := map[string]uint{"": 0, "B": 0, "K": 10, "KB": 10, "KIB": 10, "M": 20, "MB": 20, "MIB": 20,
		"G": 30, "GB": 30, "GIB": 30, "T": 40, "TB": 40, "TIB": 40}
	sh, ok := shift[unit]
	if !ok {
		return 0, fmt.Errorf("size %q: unknown unit %q (want K, M, G or T)", s, t[i:])
	}
	if n > math.MaxUint64>>sh {
		return 0, fmt.Errorf("size %q: too large", s)
	}
	return n << sh, nil
}
