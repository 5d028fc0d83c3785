package policy

import (
	"os"
	"testing"

	"github.com/stint-project/stint/internal/ehframe"
	"github.com/stint-project/stint/rewrite/elfin"
	"github.com/stint-project/stint/rewrite/facts"
	"github.com/stint-project/stint/runtime"
)

// TestToolSitesGzip counts each tool's sites in gzip against the decoded
// instructions.
func TestToolSitesGzip(t *testing.T) {
	data, err := os.ReadFile("/usr/bin/gzip")
	if err != nil {
		t.Skipf("need /usr/bin/gzip: %v", err)
	}
	f, err := elfin.Parse(data)
	if err != nil {
		t.Fatal(err)
	}
	fx, err := facts.Compute(f)
	if err != nil {
		t.Fatal(err)
	}
	c := fx.Code
	eh := f.Section(".eh_frame")
	starts := ehframe.Starts(f.SectData(eh), eh.Addr)
	count := map[facts.Kind]int{}
	for _, k := range c.Kinds {
		count[k]++
	}
	sites := map[runtime.Tool]int{}
	for _, tool := range []runtime.Tool{runtime.ToolBranch, runtime.ToolCall, runtime.ToolSyscall, runtime.ToolBlock} {
		sites[tool] = len(ToolSites(c, tool))
	}
	if sites[runtime.ToolBranch] != count[facts.Jcc]+count[facts.Jcxz]+count[facts.Jmp]+count[facts.Call]+count[facts.Ret]+count[facts.IndJmp]+count[facts.IndCall] {
		t.Errorf("branch sites %d do not match the decoded branches %v", sites[runtime.ToolBranch], count)
	}
	if sites[runtime.ToolCall] != count[facts.Call]+count[facts.IndCall]+count[facts.Ret] {
		t.Errorf("call sites %d", sites[runtime.ToolCall])
	}
	if sites[runtime.ToolSyscall] != count[facts.Syscall] {
		t.Errorf("syscall sites %d, syscalls %d", sites[runtime.ToolSyscall], count[facts.Syscall])
	}
	if sites[runtime.ToolBlock] < len(starts) || sites[runtime.ToolBlock] > len(c.Insts)/2 {
		t.Errorf("block sites %d for %d functions", sites[runtime.ToolBlock], len(starts))
	}
	t.Logf("sites per tool: %v", sites)

}
