//go:build !amd64

// Package prefetch asks the CPU for a cache line ahead of its use (a
// no-op on this architecture: see prefetch_amd64.go).
package prefetch

import "unsafe"

// Line does nothing here.
func Line(p unsafe.Pointer) {}
