// Package oracle records the control transfers of an unmodified program by
// single-stepping it under ptrace: an independent reference against which
// stint's traces of the rewritten program are checked.
//
// [Record] starts the program stopped, follows every thread and every
// child (fork, vfork, clone, across exec), single-steps each, and for every
// instruction executed inside the chosen module's executable mappings
// decodes the instruction (golang.org/x/arch/x86/x86asm) and classifies
// the transfer with the same kinds as the trace (STINT_K_* in
// runtime/include/stint_abi.h): conditional jumps taken or not taken
// (including jrcxz and loop*), direct jmp and call, ret, indirect jmp and
// call, syscalls (with rax), and block entries.
//
// Addresses: an event's Src is module-relative (the link vaddr, so runs
// with different load addresses compare); its Dst names the mapped file it
// lands in and the link vaddr inside that file, or is absolute when it
// lands in anonymous memory.
//
// What the oracle takes as a block entry: an instruction of the module
// that is reached by a control transfer (any of kinds 1-7, from any
// module), the first instruction a thread or process runs, the first
// instruction of a signal handler, and any instruction listed in
// [Options.Leaders]. Fall-through into a static block leader is only seen
// through Leaders.
//
// Signals sent to the program are passed on to it unchanged. The kernel's
// jump into a signal handler is not an instruction and is not recorded as
// a transfer. A syscall instruction is recorded when it is about to be
// executed (as a probe placed before it would), so an exit or execve
// appears too; a syscall that a signal interrupts and the kernel restarts
// after the handler (SA_RESTART) runs again without passing the code in
// front of it, so it is recorded once.
//
// Single-stepping costs a few microseconds per instruction: use it on
// small programs, with [Options.Timeout].
package oracle
