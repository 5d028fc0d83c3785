package oracle

import "fmt"

// Kind is an event kind; the values are those of STINT_K_* in
// runtime/include/stint_abi.h (the trace's "kind" column).
type Kind uint8

const (
	JccTaken    Kind = 1
	JccNotTaken Kind = 2
	Jmp         Kind = 3 // direct jmp
	Call        Kind = 4 // direct call
	Ret         Kind = 5
	IndJmp      Kind = 6
	IndCall     Kind = 7
	Syscall     Kind = 8 // Dst zero, Value = rax
	Block       Kind = 9 // Src = Dst = first instruction of the block
)

var kindNames = [...]string{
	JccTaken:    "jcc-taken",
	JccNotTaken: "jcc-not-taken",
	Jmp:         "jmp",
	Call:        "call",
	Ret:         "ret",
	IndJmp:      "ind-jmp",
	IndCall:     "ind-call",
	Syscall:     "syscall",
	Block:       "block",
}

func (k Kind) String() string {
	if int(k) < len(kindNames) && kindNames[k] != "" {
		return kindNames[k]
	}
	return fmt.Sprintf("Kind(%d)", uint8(k))
}

// IsTransfer reports whether k is a control transfer (kinds 1-7).
func (k Kind) IsTransfer() bool { return k >= JccTaken && k <= IndCall }
