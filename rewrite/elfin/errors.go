package elfin

import (
	"errors"
	"fmt"
)

// Sentinel errors for inputs Parse refuses. They are returned wrapped
// (test with errors.Is).
var (
	ErrNotELF        = errors.New("not an ELF file")
	ErrNot64         = errors.New("not a 64-bit little-endian ELF file")
	ErrNotX86_64     = errors.New("not an x86-64 ELF file")
	ErrNotExecutable = errors.New("not an executable or shared object (relocatable object or core file)")
	ErrTruncated     = errors.New("file is truncated")
)

// FormatError reports malformed input at a file offset.
type FormatError struct {
	Off int64  // file offset of the offending structure
	Msg string // what is wrong
	Err error  // optional sentinel (ErrTruncated, ...)
}

func (e *FormatError) Error() string {
	s := fmt.Sprintf("malformed ELF at offset %#x: %s", e.Off, e.Msg)
	if e.Err != nil {
		s += ": " + e.Err.Error()
	}
	return s
}

func (e *FormatError) Unwrap() error { return e.Err }

// Errorf returns a *FormatError at file offset off.
func Errorf(off int64, err error, format string, args ...any) error {
	return &FormatError{Off: off, Msg: fmt.Sprintf(format, args...), Err: err}
}
