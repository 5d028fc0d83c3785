/*
 * fdnums: prints the descriptor numbers its first opens get (natively
 * 3, then 4 and 5 for a pipe), for TestDescriptorsLeftToProgram.
 */
#include <fcntl.h>
#include <stdio.h>
#include <unistd.h>

int main(void)
{
	int fd = open("/dev/null", O_RDONLY);
	int p[2] = {-1, -1};
	if (pipe(p) != 0)
		return 1;
	printf("open %d, pipe %d %d\n", fd, p[0], p[1]);
	return 0;
}
