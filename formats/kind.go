package formats

import (
	"fmt"
	"strings"
)

// Kind is the value of the trace's kind column. The values mirror the
// STINT_K_* constants of runtime/include/stint_abi.h.
type Kind uint8

// Event kinds.
const (
	KindJccTaken    Kind = 1 // conditional branch, taken
	KindJccNotTaken Kind = 2 // conditional branch, not taken (dst = fall-through)
	KindJmp         Kind = 3 // direct jmp
	KindCall        Kind = 4 // direct call
	KindRet         Kind = 5 // ret (dst = return address)
	KindIndJmp      Kind = 6 // indirect jmp
	KindIndCall     Kind = 7 // indirect call
	KindSyscall     Kind = 8 // syscall: dst = 0, value = syscall number
	KindBlock       Kind = 9 // basic block entered: src = dst = its first instruction
)

// MaxKind is the largest defined Kind.
const MaxKind = KindBlock

var kindNames = [...]string{
	KindJccTaken:    "jcc-taken",
	KindJccNotTaken: "jcc-not-taken",
	KindJmp:         "jmp",
	KindCall:        "call",
	KindRet:         "ret",
	KindIndJmp:      "ind-jmp",
	KindIndCall:     "ind-call",
	KindSyscall:     "syscall",
	KindBlock:       "block",
}

// Valid reports whether k is one of the defined kinds.
func (k Kind) Valid() bool { return k >= KindJccTaken && k <= MaxKind }

// String returns the kind's name, e.g. "jcc-taken", or "kind(N)" for an
// undefined value.
func (k Kind) String() string {
	if k.Valid() {
		return kindNames[k]
	}
	return fmt.Sprintf("kind(%d)", uint8(k))
}

// ParseKind returns the Kind named s (as printed by [Kind.String]; case
// does not matter, and "_" may stand for "-").
func ParseKind(s string) (Kind, error) {
	n := strings.ReplaceAll(strings.ToLower(strings.TrimSpace(s)), "_", "-")
	for k := KindJccTaken; k <= MaxKind; k++ {
		if kindNames[k] == n {
			return k, nil
		}
	}
	return 0, fmt.Errorf("unknown event kind %q (want one of %s)", s, strings.Join(kindNames[1:], ", "))
}

// Tool is what a rewritten module traces. The values mirror the
// STINT_TOOL_* constants of runtime/include/stint_abi.h; the trace's run
// metadata carries the tool's name.
type Tool uint8

// Tools.
const (
	ToolBranch  Tool = 1 // every branch: jcc, jmp, call, ret, indirect jmp/call
	ToolCall    Tool = 2 // calls and returns
	ToolSyscall Tool = 3 // syscall instructions
	ToolBlock   Tool = 4 // basic block entries
)

var toolNames = [...]string{
	ToolBranch:  "branch",
	ToolCall:    "call",
	ToolSyscall: "syscall",
	ToolBlock:   "block",
}

// String returns the tool's name ("branch", "call", "syscall", "block"),
// or "tool(N)" for an undefined value.
func (t Tool) String() string {
	if t >= ToolBranch && t <= ToolBlock {
		return toolNames[t]
	}
	return fmt.Sprintf("tool(%d)", uint8(t))
}

// ParseTool returns the Tool named s.
func ParseTool(s string) (Tool, error) {
	n := strings.ToLower(strings.TrimSpace(s))
	for t := ToolBranch; t <= ToolBlock; t++ {
		if toolNames[t] == n {
			return t, nil
		}
	}
	return 0, fmt.Errorf("unknown tool %q (want one of %s)", s, strings.Join(toolNames[1:], ", "))
}
