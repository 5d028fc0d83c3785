/* For TestOtherVersionState: make the process-wide state as a runtime of
 * another ABI version would have (its magic, version 10) at its fixed
 * address, then dlopen argv[1] (a rewritten libz, whose runtime starts in
 * its DT_INIT) and print what its zlibVersion returns. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>

int main(int argc, char **argv)
{
	if (argc != 2)
		return 2;
	void *p = mmap((void *)0x3e5700000000ULL, 1 << 20, PROT_READ | PROT_WRITE,
		       MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);
	if (p == MAP_FAILED) {
		perror("mmap");
		return 1;
	}
	uint64_t magic = 0x4c424f4c47544e53ULL; /* "SNTGLOBL" */
	uint32_t abi = 10;
	memcpy(p, &magic, 8);
	memcpy((char *)p + 8, &abi, 4);
	void *h = dlopen(argv[1], RTLD_NOW);
	if (!h) {
		fprintf(stderr, "%s\n", dlerror());
		return 1;
	}
	const char *(*version)(void) = (const char *(*)(void))dlsym(h, "zlibVersion");
	if (!version)
		return 1;
	printf("zlib %s\n", version());
	return 0;
}
