/* A tiny static executable without libc, the fuzz seed and a test of
 * static executables. Build (from rewrite/testdata):
 *   gcc -nostdlib -static -no-pie -Wl,--build-id=sha1 -o tiny tiny.S
 * It prints "tiny 3\n" (the loop count) and exits with status 0.
 */
	.text
	.globl _start
_start:
	xor %ebx, %ebx
1:	call step
	cmp $3, %ebx
	jne 1b
	lea msg(%rip), %rsi
	mov $7, %edx
	call write
	mov $60, %eax
	xor %edi, %edi
	syscall
step:
	lea 1(%rbx), %ebx
	add $'0', %bl
	mov %bl, msg+5(%rip)
	sub $'0', %bl
	ret
write:
	mov $1, %eax
	mov $1, %edi
	syscall
	ret
	.data
msg:	.ascii "tiny ?\n"
	.section .note.GNU-stack,"",@progbits
