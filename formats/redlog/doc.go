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
//	            inside a logged region; otherwise recorded and merged.
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
//	         8  b        u64: exact: dst; regions: region length
//	        16  dstmod   u64: exact: FNV-1a 64 of the destination module's
//	                     build-id bytes, 0 if dst is absolute (no known
//	                     module) or the kind has no destination (syscall);
//	                     regions: 0
//	        24  kind     u32: exact: the event kind (formats.Kind); regions: 0
//	        28  reserved u32: 0
//
// A block holds entries of one module (the source module for exact).
// Entries may repeat, within a block and across blocks (two processes
// may record the same outcome); readers deduplicate. Blocks are only
// ever appended.
//
// # Concurrency and damage
//
// A writer opens the file (creating it with the header if it is empty),
// takes flock(LOCK_EX) on it, reads what other writers appended since
// its last read, appends one block per module with its entries that are
// not already in the file, and releases the lock. Nothing is rewritten
// in place, so concurrent processes neither lose nor corrupt each
// other's entries, and a process killed meanwhile loses at most the
// block it was appending.
//
// A reader checks every block (magic, bounds, CRC). A block cut short at
// the end of the file is a torn append (its writer died): it is reported
// and ignored, and the next writer appends after the last good block,
// overwriting the torn bytes. Any other bad block is damage: it is
// reported with its offset, the reader resynchronises at the next
// 8-byte aligned "SBLK" magic whose block checks, and the damaged bytes
// are left in the file (never silently dropped). A file that does not
// start with the header, or whose version or policy is unknown, is not
// read at all: the runtime says so and runs without the log; it does
// not overwrite the file.
package redlog
