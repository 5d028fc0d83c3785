/*
 * sys.h - the little of an operating system interface the runtime needs:
 * raw Linux x86-64 system calls and a few constants. No libc: the runtime
 * runs before the program's libc is initialised (or in programs without
 * one) and from inside signal handlers.
 */
#ifndef STINT_SYS_H
#define STINT_SYS_H

#include <stdint.h>
#include <stddef.h>

#define SYS_read 0
#define SYS_write 1
#define SYS_close 3
#define SYS_fstat 5
#define SYS_newfstatat 262
#define SYS_mmap 9
#define SYS_rt_sigaction 13
#define SYS_rt_sigprocmask 14
#define SYS_rt_sigreturn 15
#define SYS_tgkill 234
#define SYS_mprotect 10
#define SYS_munmap 11
#define SYS_madvise 28
#define SYS_sched_yield 24
#define SYS_getpid 39
#define SYS_kill 62
#define SYS_exit 60 /* this thread only */
#define SYS_fallocate 285
#define SYS_ftruncate 77
#define SYS_pwrite64 18
#define SYS_getcwd 79
#define SYS_mkdir 83
#define SYS_readlink 89
#define SYS_getppid 110
#define SYS_gettid 186
#define SYS_process_vm_readv 310
#define SYS_arch_prctl 158
#define S_ARCH_GET_FS 0x1003
#define S_ARCH_SET_GS 0x1001
#define S_ARCH_GET_GS 0x1004
#define SYS_clock_gettime 228
#define SYS_openat 257

#define S_AT_FDCWD (-100)
#define S_O_RDONLY 0
#define S_O_RDWR 2
#define S_O_CREAT 0100
#define S_O_EXCL 0200
#define S_O_TRUNC 01000
#define S_O_DIRECTORY 0200000
#define S_O_CLOEXEC 02000000

#define S_PROT_NONE 0
#define S_PROT_READ 1
#define S_PROT_WRITE 2
#define S_PROT_EXEC 4
#define S_MAP_SHARED 0x01
#define S_MAP_PRIVATE 0x02
#define S_MAP_FIXED 0x10
#define S_MAP_ANONYMOUS 0x20
#define S_MAP_NORESERVE 0x4000
#define S_MAP_FIXED_NOREPLACE 0x100000
#define S_MADV_NORMAL 0
#define S_MADV_RANDOM 1
#define S_MADV_WIPEONFORK 18
#define S_MADV_POPULATE_WRITE 23

#define S_SIG_SETMASK 2

#define S_CLOCK_REALTIME 0
#define S_CLOCK_MONOTONIC 1
#define S_CLOCK_THREAD_CPUTIME_ID 3

#define SYS_membarrier 324
#define SYS_prlimit64 302
#define MEMBARRIER_SYNC_CORE 32 /* MEMBARRIER_CMD_PRIVATE_EXPEDITED_SYNC_CORE */
#define MEMBARRIER_REGISTER_SYNC_CORE 64

#define S_AT_NULL 0
#define S_AT_SYSINFO_EHDR 33
#define S_AT_EXECFN 31
#define S_AT_HWCAP2 26
#define S_AT_SECURE 23
#define S_HWCAP2_FSGSBASE 2

#define S_EEXIST 17
#define S_ENOMEM 12
#define S_ENOENT 2

struct s_timespec {
	long tv_sec;
	long tv_nsec;
};

static inline long sys_call0(long n)
{
	long r;
	__asm__ volatile("syscall" : "=a"(r) : "a"(n) : "rcx", "r11", "memory");
	return r;
}

static inline long sys_call1(long n, long a)
{
	long r;
	__asm__ volatile("syscall" : "=a"(r) : "a"(n), "D"(a) : "rcx", "r11", "memory");
	return r;
}

static inline long sys_call2(long n, long a, long b)
{
	long r;
	__asm__ volatile("syscall" : "=a"(r) : "a"(n), "D"(a), "S"(b) : "rcx", "r11", "memory");
	return r;
}

static inline long sys_call3(long n, long a, long b, long c)
{
	long r;
	__asm__ volatile("syscall" : "=a"(r) : "a"(n), "D"(a), "S"(b), "d"(c) : "rcx", "r11", "memory");
	return r;
}

static inline long sys_call4(long n, long a, long b, long c, long d)
{
	long r;
	register long r10 __asm__("r10") = d;
	__asm__ volatile("syscall" : "=a"(r) : "a"(n), "D"(a), "S"(b), "d"(c), "r"(r10) : "rcx", "r11", "memory");
	return r;
}

static inline long sys_call6(long n, long a, long b, long c, long d, long e, long f)
{
	long r;
	register long r10 __asm__("r10") = d;
	register long r8 __asm__("r8") = e;
	register long r9 __asm__("r9") = f;
	__asm__ volatile("syscall" : "=a"(r) : "a"(n), "D"(a), "S"(b), "d"(c), "r"(r10), "r"(r8), "r"(r9) : "rcx", "r11", "memory");
	return r;
}

/* The kernel's struct stat (x86-64, 144 bytes), for fstat and newfstatat. */
struct s_stat {
	uint64_t dev, ino, nlink;
	uint32_t mode, uid, gid, pad;
	uint64_t rdev;
	int64_t size;
	uint64_t rest[12];
};

/* Results in [-4095, -1] are negated errno values. */
static inline int sys_failed(long r) { return (unsigned long)r > (unsigned long)-4096L; }

static inline long sys_mmap(uintptr_t addr, size_t len, int prot, int flags, int fd, long off)
{
	return sys_call6(SYS_mmap, (long)addr, (long)len, prot, flags, fd, off);
}

#endif /* STINT_SYS_H */
