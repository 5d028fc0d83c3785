//go:build !amd64

package cov

import "unsafe"

// prefetch does nothing here: see prefetch_amd64.go.
func prefetch(p unsafe.Pointer) {}
