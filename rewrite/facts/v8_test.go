package facts

import (
	"debug/elf"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/stint-project/stint/rewrite/elfin"
	"github.com/stint-project/stint/rewrite/place"
)

// TestV8BuiltinsRemapped: the functions named Builtins_* (V8's embedded
// builtins, which V8 maps again from the file elsewhere) are untouchable
// and flagged so, from the first one's start to the last one's end; a
// function after them is not; the movabs whose immediate a rip-relative
// load reads is untouchable as data, the load itself is not.
func TestV8BuiltinsRemapped(t *testing.T) {
	gcc, err := exec.LookPath("gcc")
	if err != nil {
		t.Skip("needs gcc")
	}
	dir := t.TempDir()
	src := filepath.Join(dir, "v8.S")
	if err := os.WriteFile(src, []byte(`
	.text
	.globl _start
	.type _start, @function
_start:	call Builtins_A
	mov $60, %eax
	xor %edi, %edi
	syscall
	.size _start, .-_start
	.type Builtins_A, @function
Builtins_A:
	test %edi, %edi
	jz 1f
	nop
1:	ret
	.size Builtins_A, .-Builtins_A
	.type Builtins_B, @function
Builtins_B:
	test %edi, %edi
	jnz 1f
	nop
1:	ret
	.size Builtins_B, .-Builtins_B
	.type after, @function
after:	movabs $0x1122334455667788, %rcx
	mov after+2(%rip), %rdx
	ret
	.size after, .-after
	.section .note.GNU-stack,"",@progbits
`), 0o644); err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "v8")
	if out, err := exec.Command(gcc, "-nostdlib", "-static", "-no-pie", "-o", bin, src).CombinedOutput(); err != nil {
		t.Fatalf("gcc: %v\n%s", err, out)
	}
	ef, err := elf.Open(bin)
	if err != nil {
		t.Fatal(err)
	}
	syms, err := ef.Symbols()
	ef.Close()
	if err != nil {
		t.Fatal(err)
	}
	addr := map[string]uint64{}
	for _, s := range syms {
		addr[s.Name] = s.Value
	}
	f, err := elfin.Parse(readInput(t, bin))
	if err != nil {
		t.Fatal(err)
	}
	fx, err := Compute(f)
	if err != nil {
		t.Fatal(err)
	}
	if fx.Module.V8Builtins != addr["after"]-addr["Builtins_A"] {
		t.Errorf("V8Builtins = %d bytes, want %d", fx.Module.V8Builtins, addr["after"]-addr["Builtins_A"])
	}
	c := fx.Code
	for i, in := range c.Insts {
		inB := in.Addr >= addr["Builtins_A"] && in.Addr < addr["after"]
		if got := in.Flags&(place.InstRemapped|place.InstUntouchable) == place.InstRemapped|place.InstUntouchable; got != inB {
			t.Errorf("%#x %v: remapped and untouchable %v, want %v", in.Addr, c.Kinds[i], got, inB)
		}
		data := in.Addr == addr["after"] // the movabs
		if got := in.Flags&place.InstData != 0; got != data {
			t.Errorf("%#x: data %v, want %v", in.Addr, got, data)
		}
	}
}
