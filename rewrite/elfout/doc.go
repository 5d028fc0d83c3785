// Package elfout writes the rewritten file. [NewFrame] decides, before
// placement, where the trampolines and the stub space go; [NewLayout] is
// a pure function from the sizes of every table to the address and file
// offset of each; [Write] assembles the file from an [Image]: the
// original bytes with the patches, the RX segment (runtime blob,
// trampolines), the R segment (program headers, marker note, the tables
// the runtime reads), the RW segment (struct stint_module written
// through runtime.Module, probes, patches, chunks, the moved .dynamic,
// the gate page), section headers, and the stub area the runtime maps.
// Program headers (phdr.go), sections (sections.go) and the dynamic
// table (dynamic.go) have files of their own.
package elfout
