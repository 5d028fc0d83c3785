package rewrite

import (
	"errors"

	"github.com/stint-project/stint/rewrite/elfin"
)

// Sentinel errors for inputs the rewriter refuses. They are returned
// wrapped (test with errors.Is).
var (
	ErrNotELF           = elfin.ErrNotELF
	ErrNot64            = elfin.ErrNot64
	ErrNotX86_64        = elfin.ErrNotX86_64
	ErrNotExecutable    = elfin.ErrNotExecutable
	ErrTruncated        = elfin.ErrTruncated
	ErrAlreadyRewritten = errors.New("file was already rewritten by stint")
	ErrTooLarge         = errors.New("file is too large")
	ErrNoBlob           = errors.New("bad runtime blob")
)

// FormatError reports malformed input at a file offset.
type FormatError = elfin.FormatError
