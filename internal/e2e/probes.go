// Package e2e holds stint's end-to-end tests: fixtures and real programs
// of this machine are rewritten, run beside the original, and their traces
// checked against the probed sites and against a ptrace oracle.
package e2e

import (
	"debug/elf"

	"github.com/stint-project/stint/runtime"
)

// Probed reads the probe table the rewriter left in a rewritten file.
func Probed(path string) (*runtime.Module, []runtime.Probe, error) {
	return moduleTable[runtime.Probe](path, func(m *runtime.Module) (uint64, uint32) { return m.ProbesVaddr, m.NProbes })
}

// RetsTable reads the ret lists of a rewritten file's direct calls
// (STINT_MF_RETS): at a probe's Rets offset, a count and that many probe
// indices.
func RetsTable(path string) ([]uint32, error) {
	_, t, err := moduleTable[uint32](path, func(m *runtime.Module) (uint64, uint32) { return m.RetsVaddr, m.NRets })
	return t, err
}

// ReadsTable reads the (reader, read) pairs of a rewritten file's
// switchable readees: sorted by reader, then the same pairs by read.
func ReadsTable(path string) ([]runtime.Read, error) {
	_, t, err := moduleTable[runtime.Read](path, func(m *runtime.Module) (uint64, uint32) { return m.ReadsVaddr, 2 * m.NReads })
	return t, err
}

// Patched reads the patch table the rewriter left in a rewritten file.
func Patched(path string) (*runtime.Module, []runtime.Patch, error) {
	return moduleTable[runtime.Patch](path, func(m *runtime.Module) (uint64, uint32) { return m.PatchesVaddr, m.NPatches })
}

// readVaddr reads n bytes at link vaddr (runtime.ReadVaddr).
func readVaddr(f *elf.File, vaddr uint64, n int) ([]byte, error) {
	return runtime.ReadVaddr(f, vaddr, n)
}

// moduleTable reads a table of a rewritten file (runtime.ReadTable).
func moduleTable[T any](path string, at func(m *runtime.Module) (uint64, uint32)) (*runtime.Module, []T, error) {
	return runtime.ReadTable[T](path, at)
}
