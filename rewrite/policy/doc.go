// Package policy decides what the rewriter patches: which instructions
// are probe sites and which probes each gets (E9Patch's E9Tool to the
// patcher's how). A [Plan] starts from a tool's sites and takes out
// those the --skip-covered log covers or --retire-since retires, moves an
// indirect call's probe to the instruction before it (pre-calls), probes
// a jcc's outcome at its destination where only the jcc leads (edge
// probes), and marks open-ended sites under a budget so that no patch
// comes to depend on them. After placement it decides which patches the
// runtime's off-switch may undo and redo, which jccs keep a watching
// probe, and the lists of returns and own sites the runtime switches on
// when new code runs.
//
// To add a kind of probe: its sites and filters go here (sites.go), its
// trampoline in package tramp, its event kind in runtime/include/stint_abi.h.
package policy
