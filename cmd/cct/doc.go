// Command cct builds call-context trees from stint traces and compares
// them (DIME*'s node and edge coverage; see package analysis/cct).
//
//	$ rewrite --tool call --every -o setjmp.st setjmp
//	$ STINT_OUT=out ./setjmp.st
//	$ cct build -o setjmp.cct.json out/setjmp.st.*.arrow
//	runs      1 (--every: counts are calls)
//	threads   1
//	calls     65
//	returns   5: 1 matched, 4 unmatched, 0 frames unwound above a match
//	repair    61 frames popped, 2 inferred, 0 popped by an unmatched return of their own function
//	tree      28 contexts, 27 edges, depth 20, deepest stack 20, 9 unnamed
//	...
//	tree (calls, +inferred entries; 4 levels)
//	_start  0 +1
//	  __libc_start_main  1
//	    main  0 +1
//	      setjmp.st+0x1040  6
//	      deep  5
//	$ cct compare --root main budgeted.arrow setjmp.cct.json
//	       reference  compared  common  extra  coverage
//	nodes  25         23        23      0      92.0%
//	edges  26         24        24      0      92.3%
//	calls                                      96.9%
//
// Exit status: 0 ok, 1 bad data, 2 usage error.
package main
