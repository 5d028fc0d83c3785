package runtime

import "testing"

func TestParseToolNames(t *testing.T) {
	for _, tool := range []Tool{ToolBranch, ToolCall, ToolSyscall, ToolBlock} {
		have, ok := ParseTool(tool.String())
		if !ok || have != tool {
			t.Errorf("ParseTool(%q) = %v, %v", tool.String(), have, ok)
		}
	}
	if _, ok := ParseTool("nope"); ok {
		t.Error("ParseTool accepted nope")
	}
}
