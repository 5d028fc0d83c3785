package facts

import (
	"bytes"

	"github.com/stint-project/stint/rewrite/place"
)

// restorerCode is a signal restorer: mov $15,%rax; syscall
// (rt_sigreturn), as glibc's __restore_rt and Go's sigreturn__sigaction
// spell it.
var restorerCode = [][]byte{{0x48, 0xc7, 0xc0, 0x0f, 0x00, 0x00, 0x00}, {0x0f, 0x05}}

// markRestorers makes the signal restorers in c untouchable: the runtime
// knows a signal handler by its return address pointing at these bytes
// (runtime/src/paths.c, is_restorer), which a patch there would hide,
// and only the kernel's return from a handler runs them.
func markRestorers(c *Code) {
	for i := 0; i+1 < len(c.Insts); i++ {
		if IsRestorer(c, i) {
			c.Insts[i].Flags |= place.InstUntouchable
			c.Insts[i+1].Flags |= place.InstUntouchable
			c.Insts[i].Flags &^= place.InstRelocatable
			c.Insts[i+1].Flags &^= place.InstRelocatable
		}
	}
}

// IsRestorer reports whether instruction i of c begins a signal
// restorer.
func IsRestorer(c *Code, i int) bool {
	if i+1 >= len(c.Insts) {
		return false
	}
	a, b := &c.Insts[i], &c.Insts[i+1]
	return bytes.Equal(a.Bytes(), restorerCode[0]) && bytes.Equal(b.Bytes(), restorerCode[1]) && b.Addr == a.Addr+uint64(a.Len())
}
