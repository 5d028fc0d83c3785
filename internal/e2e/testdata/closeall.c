/*
 * closeall: closes every descriptor from 3 up, as daemons do at start
 * (close_range), opens a file of its own (which takes 3), then runs a
 * loop of data-dependent branches long enough for a complete trace to
 * grow its files many times, for TestDescriptorsClosedByProgram.
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdio.h>
#include <sys/syscall.h>
#include <unistd.h>

int main(void)
{
	syscall(SYS_close_range, 3U, ~0U, 0);
	int fd = open("/dev/null", O_WRONLY);
	unsigned x = 12345, sum = 0;
	for (int i = 0; i < 2000000; i++) {
		x = x * 1103515245u + 12345u;
		if (x & 0x10000)
			sum += x >> 7;
		else
			sum ^= x;
	}
	printf("fd %d, sum %u\n", fd, sum);
	return 0;
}
