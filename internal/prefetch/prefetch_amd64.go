// Package prefetch asks the CPU for a cache line ahead of its use: a
// loop over table lookups that would each miss asks for the slot of a
// lookup some turns ahead, so that the misses overlap instead of
// following each other (cov compare, report auto).
package prefetch

import "unsafe"

// Line asks the CPU to bring the cache line at p into its caches
// (PREFETCHT0) and returns at once. p need not be valid memory.
//
//go:noescape
func Line(p unsafe.Pointer)
