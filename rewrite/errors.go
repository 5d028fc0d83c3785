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

// OptionError is an option the rewriter refuses: a bad value, or one
// that needs or excludes another. It is the caller's mistake, not the
// input's (a command exits with its usage status).
type OptionError struct{ Err error }

func (e *OptionError) Error() string { return e.Err.Error() }
func (e *OptionError) Unwrap() error { return e.Err }

// FormatError reports malformed input at a file offset.
type FormatError = elfin.FormatError
