package cov

import "unsafe"

// prefetch asks the CPU to bring the cache line at p into its caches
// (PREFETCHT0) and returns at once: a table lookup asks for its slot
// some lookups ahead, so that the misses overlap.
//
//go:noescape
func prefetch(p unsafe.Pointer)
