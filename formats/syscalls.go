package formats

import "fmt"

// SyscallName names x86-64 system call number n ("read", "openat"), or
// "syscall_N" for a number Linux 6.1 does not define.
func SyscallName(n uint64) string {
	if s, ok := syscallNames[n]; ok {
		return s
	}
	return fmt.Sprintf("syscall_%d", n)
}
