// Package redlog reads, writes and merges stint's redundancy log: the
// file that remembers, across runs, what a traced program has already
// recorded, so later runs spend their budget on what is still unseen
// (DIME*, section 3). The injected runtime reads it at start and appends
// to it at intervals and at exit (runtime/src/redlog.c); the rewriter
// reads it for --skip-covered; `trace log` prints and checks it.
//
// # Keys
//
// Entries are keyed by the GNU build-id of the module they belong to and
// by module-relative addresses (link vaddrs), so they hold across ASLR
// and for shared libraries loaded at any base. A module without a
// build-id cannot be logged.
//
// # Policies
//
// A log holds entries of one policy, named in its header:
//
//	exact   (1) one entry per recorded site outcome: (src, dst, kind), dst
//	            keyed by the destination module's build-id. A probe
//	            whose outcomes are all in the log is never armed again.
//	hash    (2) the paper's hash-table log of code regions (addr, len):
//	            a region is skipped iff its address is a logged address.
//	bst     (3) the paper's BST log: skipped iff its address lies inside
//	            a logged region.
//	merger  (4) the paper's merger BST: skipped iff the whole region lies
//	            inside one logged region; otherwise recorded and merged
//	            with the logged regions it overlaps or touches.
//
// [RegionLog] implements the three region rules in Go, [ExactSet] the
// exact lookup. Two details the paper leaves open, settled here: the
// merger condition is addr(A)+len(A) <= addr(B)+len(B) (the paper's
// formula has "<", its prose "the whole current trace is part of a log
// entry"); and bst's "merge directly consecutive traces" before saving
// makes <100,50> and <150,50> one entry <100,100> (the paper prints
// <100,200>, which would cover 100..299).
//
// An exact entry's dst is module-relative like its src, except with no
// known destination module (absolute). A destination in a module without
// a build-id is module-relative with dstmod 0, so it cannot be told from
// an absolute one; such entries may not carry over to another run. A
// syscall site's outcomes are its syscall numbers.
//
// # File layout
//
// All integers little-endian. A 32-byte header, then blocks, each a
// multiple of 8 bytes long and 8-byte aligned:
//
//	header:  0  magic    "STINTLOG" (8 bytes)
//	         8  version  u32 = 1
//	        12  policy   u32 (1 exact, 2 hash, 3 bst, 4 merger)
//	        16  reserved 16 zero bytes
//
//	block:   0  magic    u32 = 0x4b4c4253 ("SBLK")
//	         4  count    u32: number of entries
//	         8  crc      u32: CRC-32 (IEEE) of bytes 12 .. end of the block
//	        12  bidlen   u32: build-id length, 1..32
//	        16  build-id 32 bytes, zero padded
//	        48  entries  count x 32 bytes
//
//	entry:   0  a        u64: exact: src; regions: region address
//	         8  b        u64: exact: dst (syscall: the syscall number);
//	                     regions: region length
//	        16  dstmod   u64: exact: FNV-1a 64 of the destination module's
//	                     build-id bytes ([BuildIDHash]); 0 if dst is
//	                     absolute (no known module), relative to a module
//	                     without a build-id, or a syscall number;
//	                     regions: 0
//	        24  kind     u32: exact: the event kind (formats.Kind); regions: 0
//	        28  reserved u32: 0
//
// A block holds entries of one module (the source module for exact).
// Entries may repeat, within a block and across blocks (two processes
// may record the same outcome); readers deduplicate. Blocks are only
// ever appended. Writers put at most 65536 entries in a block ([MaxPerBlock])
// and write no empty blocks; readers accept any count that fits in the
// file, and empty blocks. Readers ignore the header's reserved bytes;
// writers write zeros there, in the build-id padding and in the entries'
// reserved fields, and zero dstmod and kind in region entries.
//
// An entry of a good block that does not fit the policy (exact: a kind
// that is not an event kind 1..9; regions: length 0, or a non-zero
// dstmod or kind), or whose reserved field is not zero, is reported and
// left out; the block's other entries are read.
//
// # Concurrency and damage
//
// A writer opens the file (creating it if absent), takes flock(LOCK_EX)
// on it, and then: if the file is shorter than a header and holds a
// prefix of the header it would write (empty, or its creator died while
// writing the header), writes the header; reads the whole file (or what
// other writers appended since its last read); appends, for each module,
// one block with its entries that are not already in the file; and
// releases the lock. Nothing is rewritten in place, so concurrent
// processes neither lose nor corrupt each other's entries, and a process
// killed meanwhile loses at most the blocks it was appending.
//
// A reader takes flock(LOCK_SH) while it reads, so that no writer appends
// or truncates meanwhile (the runtime waits for one at most 100 ms, then
// reads without the lock and does not report a torn append: a writer
// may still be writing it). A reader checks every block: magic, bounds,
// CRC, build-id length 1..32 and zero padding. A block at offset X that fails is one of:
//
//   - a torn append: no good block follows, and the bytes from X to the
//     end of the file are a prefix of a block (part of its magic; or the
//     magic and fewer bytes than its count says) or all zero. Its writer
//     died. It is reported and ignored, and the next writer writes its
//     blocks at X and truncates the file after them, so the torn bytes
//     go. When X starts damage (below) and no good block follows, the
//     torn append, if any, starts at the first 8-byte aligned offset
//     after X from which the rest is a block prefix.
//   - damage: any other bad block, including a complete last block with
//     a bad CRC. It is reported with its offset; the reader
//     resynchronises at the next 8-byte aligned offset where a good block
//     starts (magic, bounds and CRC all check), and if there is none,
//     stops. The damaged bytes stay in the file (never silently
//     dropped): the next writer appends after the end of the file, first
//     padding it with zeros to a multiple of 8 if it is not one.
//
// A file that does not start with the header, or whose version or policy
// is unknown, is not read at all ([FormatError] wrapping [ErrNotLog],
// [ErrVersion] or [ErrPolicy]): the runtime says so and runs without the
// log; it does not overwrite the file. Neither does a writer whose policy
// is not the file's ([ErrMismatch]).
//
// # Hostile input
//
// [Read] holds the file in memory, reading it in chunks (a log holds 32
// bytes per entry, so it is small), and never panics on any input
// (FuzzRead). Resynchronisation checks each 8-byte aligned offset after
// damage; a file crafted to hold many block magics with large counts
// costs time quadratic in its size.
package redlog
