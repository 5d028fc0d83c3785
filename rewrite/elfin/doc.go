// Package elfin reads the rewriter's input: a 64-bit little-endian x86-64
// ELF executable or shared object, as raw structures that mirror the ELF
// specification ([Header64], [Prog64], [Sect64]) and the few tables the
// rewriter needs (dynamic entries, notes, relocations, dynamic symbols).
//
// # Security
//
// The input is untrusted. [Parse] checks every header, table and offset
// against the input's size before use; malformed input yields a
// [*FormatError] (with the file offset of the offending structure) or
// one of the sentinel errors, never a panic.
package elfin
