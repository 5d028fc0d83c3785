/*
 * entry.S - the blob header and the stubs the rewriter points at.
 *
 * The header must be the first bytes of the blob (the linker script puts
 * section .stint.header first). Offsets in it are differences of labels in
 * this section, so they are assembly-time constants: no relocations.
 */
#include "stint_abi.h"
#include "hit.h"

	.section .note.GNU-stack, "", @progbits

	.section .stint.header, "ax", @progbits
	.globl stint_blob_start
	.hidden stint_blob_start
stint_blob_start:
	.quad STINT_BLOB_MAGIC
	.long STINT_ABI_VERSION
#ifdef STINT_BLOB
	.long stint_blob_end - stint_blob_start
#else
	.long 0
#endif
	.long stint_entry_exec - stint_blob_start
	.long stint_entry_init - stint_blob_start
	.long stint_entry_fini - stint_blob_start
	.long stint_probe_entry - stint_blob_start
	.quad 0 /* module_rel: written by the rewriter */

/*
 * e_entry of a rewritten executable. The kernel (or ld.so) left argc at
 * 0(%rsp), a 16-byte aligned stack, and %rdx = a fini function (or 0).
 * stint_init_exec(blob, sp) returns the original entry address.
 */
	.p2align 4
	.globl stint_entry_exec
	.hidden stint_entry_exec
stint_entry_exec:
	mov %rsp, %rsi
	push %rdx
	push %rsi
	lea stint_blob_start(%rip), %rdi
	call stint_init_exec
	pop %rsi
	pop %rdx
	xor %ecx, %ecx
	xchg %rax, %rcx
	jmp *%rcx

/*
 * DT_INIT of a rewritten shared object: called as init(argc, argv, envp).
 * stint_init_shared(blob, argc, argv, envp) returns the original DT_INIT
 * (0 = none), which is tail-called with the original arguments.
 */
	.p2align 4
	.globl stint_entry_init
	.hidden stint_entry_init
stint_entry_init:
	push %rdi
	push %rsi
	push %rdx
	mov %rdx, %rcx
	mov %rsi, %rdx
	mov %rdi, %rsi
	lea stint_blob_start(%rip), %rdi
	call stint_init_shared
	pop %rdx
	pop %rsi
	pop %rdi
	test %rax, %rax
	jz 1f
	jmp *%rax
1:	ret

/* DT_FINI: flush this process's trace, then the original DT_FINI if any,
 * tail-called: its ret goes to our caller, whose address stint_fini gets. */
	.p2align 4
	.globl stint_entry_fini
	.hidden stint_entry_fini
stint_entry_fini:
	sub $8, %rsp
	mov 8(%rsp), %rsi
	lea stint_blob_start(%rip), %rdi
	call stint_fini
	add $8, %rsp
	test %rax, %rax
	jz 1f
	jmp *%rax
1:	ret

/*
 * Called from a trampoline's thunk: %rdi = struct stint_probe *, %rsi =
 * destination or value; the thunk saved %rdi and %rsi and stepped over the
 * red zone. Everything else the C code may clobber is saved here, and the
 * flags too (popfq restores DF, which cld clears for the C code). The C
 * code runs on a private stack when one is free (stacks.c): the program's
 * may be a goroutine's few KiB. %rbx holds that stack's top across the
 * call (callee-saved), and the stack is given back only once %rsp is off
 * it.
 */
	.p2align 4
	.globl stint_probe_entry
	.hidden stint_probe_entry
stint_probe_entry:
	/* The hit table (hit.h) first, with no flag changed: the module's
	 * word, then the slot's probe, destination and check, each compared
	 * as x - y by not and lea and tested by jrcxz. */
	push %rcx
	push %rdx
	mov HIT_PROBE_BACK(%rdi), %edx
	not %rdx
	lea 1(%rdi,%rdx), %rdx     /* the module: probe - module_back */
	mov HIT_MODULE_OFF(%rdx), %ecx
	jrcxz 3f                   /* the module does not answer from it */
	lea (%rdi,%rsi), %rdx
	movzwl %dx, %edx           /* the slot (HIT_SLOTS = 65536) */
	lea (%rdx,%rdx,2), %rdx
	movabs $HIT_ADDR, %rcx
	lea (%rcx,%rdx,8), %rdx    /* its entry, 24 bytes */
	mov (%rdx), %rcx
	not %rcx
	lea 1(%rdi,%rcx), %rcx     /* probe - entry's probe */
	jrcxz 4f
3:	pop %rdx
	pop %rcx
	jmp 6f
4:	mov 8(%rdx), %rcx
	not %rcx
	lea 1(%rsi,%rcx), %rcx     /* destination - entry's */
	jrcxz 5f
	jmp 3b
5:	mov 16(%rdx), %rcx
	not %rcx
	lea 1(%rdi,%rcx), %rcx
	lea (%rsi,%rcx), %rcx      /* probe + destination - entry's check */
	jrcxz 7f
	jmp 3b
7:	pop %rdx
	pop %rcx
	ret
6:	pushfq
	push %rax
	push %rcx
	push %rdx
	push %r8
	push %r9
	push %r10
	push %r11
	push %rbp
	push %rbx
	cld
	lea 80(%rsp), %rdx        /* 3rd argument: %rsp on entry (context mode uses it) */
	mov %rsp, %rbp
	and $-16, %rsp
	push %rdx
	push %rsi
	push %rdi
	push %rdi
	call stint_stack_get      /* the top of a private stack, or 0 */
	pop %rdi
	pop %rdi
	pop %rsi
	pop %rdx
	mov %rax, %rbx
	test %rax, %rax
	jz 1f
	mov %rax, %rsp
1:	call stint_record
	mov %rbp, %rsp
	test %rbx, %rbx
	jz 2f
	and $-16, %rsp
	mov %rbx, %rdi
	call stint_stack_put
	mov %rbp, %rsp
2:	pop %rbx
	pop %rbp
	pop %r11
	pop %r10
	pop %r9
	pop %r8
	pop %rdx
	pop %rcx
	pop %rax
	popfq
	ret

/*
 * long stint_spawn(uint64_t stack_top, void (*fn)(void)): start a thread
 * (clone with CLONE_VM|FS|FILES|SIGHAND|THREAD|SYSVSEM) that runs fn on
 * the stack ending at stack_top and then exits. Returns the new thread's
 * id or -errno. The child never returns here: fn is read from the new
 * stack after the system call.
 */
	.p2align 4
	.globl stint_spawn
	.hidden stint_spawn
stint_spawn:
	and $-16, %rdi
	mov %rsi, -16(%rdi)       /* fn, popped by the child */
	lea -16(%rdi), %rsi       /* child's stack */
	mov $0x50f00, %edi        /* flags */
	xor %edx, %edx            /* parent_tid */
	xor %r10d, %r10d          /* child_tid */
	xor %r8d, %r8d            /* tls */
	mov $56, %eax             /* SYS_clone */
	syscall
	test %rax, %rax
	jnz 1f
	/* child: %rsp = stack_top - 16, fn at (%rsp) */
	pop %rax
	and $-16, %rsp
	xor %ebp, %ebp
	call *%rax
	mov $60, %eax             /* SYS_exit (this thread only) */
	xor %edi, %edi
	syscall
	hlt
1:	ret

/*
 * The restorer of the runtime's SIGTRAP handler (trap.c): rt_sigreturn,
 * in glibc's __restore_rt bytes (paths.c, is_restorer, knows them).
 */
	.p2align 4
	.globl stint_sigreturn
	.hidden stint_sigreturn
stint_sigreturn:
	movq $15, %rax
	syscall
	hlt
