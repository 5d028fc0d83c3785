// Command trace shows stint trace files (Arrow IPC streams written by a
// rewritten program; see package formats) to people.
//
//	$ trace stats gzip.4242.1795000000123456789.1a2b.arrow
//	gzip.4242.1795000000123456789.1a2b.arrow
//	  run        /usr/bin/gzip pid 4242 (parent 4200), tool branch, options "tool=branch every=0"
//	  started    2026-11-21T13:34:05.123456789Z
//	  ended      cleanly: end-of-stream marker at offset 1048576
//	  batches    16
//	  events     1043812 (distinct (src,dst,kind): 1043812)
//	  time span  0.412337s (first +0.000184s, last +0.412521s after start)
//	  kinds
//	    jcc-taken        612337  58.7%
//	  ...
//
//	$ trace cat --limit 3 --kind call gzip.4242.1795000000123456789.1a2b.arrow
//	...
//	kind          tid      time           src                    dst
//	call          4242     +0.000184211   gzip+0x3a10            gzip+0x2f40
//
// Exit status: 0 on success, 1 on an error (one line "trace: FILE:
// ..."), 2 on a usage error. A cut file is an error for cat (after
// printing what it holds) but only a fact for stats.
package main
