// Package ehframe reads the function ranges an x86-64 ELF module
// describes for its unwinder: the FDEs of .eh_frame and the binary search
// table of .eh_frame_hdr. Stripped binaries keep both, so they give every
// function's start where there is no symbol table. The rewriter decodes
// from those starts; the analysis names functions by them.
//
// The format is DWARF call frame information as modified by the LSB
// (Linux Standard Base Core, "Exception Frames"): a CIE_id of 0 marks a
// CIE, any other value is the distance back to the FDE's CIE; pointers use
// the DW_EH_PE encodings named by the CIE's 'R' augmentation.
//
// # Security
//
// Input is untrusted section bytes. Every read is bounds-checked by a
// sticky-error cursor; a malformed entry ends the walk (FDEs) or yields an
// error (HdrStarts), never a panic. Output is bounded by the input's size.
package ehframe
