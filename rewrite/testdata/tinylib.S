/* A tiny shared object without libc (fuzz seed). Build (from rewrite/testdata):
 *   gcc -shared -nostdlib -Wl,--build-id=sha1 -o tiny.so tinylib.S
 */
	.text
	.globl tiny_add
	.type tiny_add, @function
tiny_add:
	lea (%rdi,%rsi), %rax
	test %rax, %rax
	jns 1f
	neg %rax
1:	ret
	.size tiny_add, .-tiny_add
	.section .note.GNU-stack,"",@progbits
