// Command trace shows stint trace files (Arrow IPC streams written by a
// rewritten program; see package formats) to people.
//
//	$ trace stats demo.77.arrow
//	demo.77.arrow
//	  run        /usr/bin/cwriter pid 77 (parent 7), tool branch, options "tool=branch every=1"
//	  build-id   c0ffee
//	  started    2026-11-18T11:06:40.123456789Z
//	  ended      cleanly: zero padding (unsealed tail) at offset 73472
//	  batches    4
//	  events     16 (distinct (src,dst,kind): 16)
//	  time span  0.000000045s (first +0.000001000s, last +0.000001045s after start)
//	  kinds
//	    jcc-taken                 2  12.5%
//	    ...
//	  modules                                 as src     as dst
//	    0 cwriter                                  8          6
//	    1 libc.so.6                                8          6
//	    - (no module)                              0          4
//	  threads    4
//	    tid 102                   7  43.8%
//	    ...
//
//	$ trace cat --limit 2 demo.77.arrow
//	demo.77.arrow
//	  run        /usr/bin/cwriter pid 77 (parent 7), tool branch, options "tool=branch every=1"
//	  ...
//	modules
//	  id    base               size       rewritten path [build-id]
//	  0     0x555555554000     0x2000     yes       /usr/bin/cwriter [c0ffee]
//	  1     0x7ffff7d80000     0x1d5000   no        /lib/x86_64-linux-gnu/libc.so.6
//	events
//	  kind          tid      time           src                    dst                    value
//	  jcc-taken     100      +0.000001000   cwriter+0x401000       0x402000
//	  jcc-not-taken 100      +0.000001003   libc.so.6+0x401010     libc.so.6+0x402008
//
//	$ trace merge -o all.arrow gzip.4242.*.arrow gzip.4250.*.arrow
//	all.arrow: 2 runs from 2 files, 1843211 rows, 3 modules
//
// merge writes a merged trace (see package analysis/merge): the trace
// columns plus a run column, the run list and a module table unified by
// build-id in its schema metadata.
//
// Exit status: 0 on success, 1 on an error (one line "trace: FILE:
// ..." per bad file), 2 on a usage error. A cut file is an error for cat
// (after printing what it holds) but only a fact for stats.
package main
