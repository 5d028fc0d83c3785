package e2e

import (
	"bytes"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/stint-project/stint/rewrite"
)

// nodeScript exercises V8's interpreter, builtins and JIT and node's
// C++ (crypto, JSON).
const nodeScript = `const crypto = require('crypto');
let s = 0; for (let i = 0; i < 2e6; i++) s += i % 7;
const h = crypto.createHash('sha256').update('x'.repeat(100000)).digest('hex');
const a = []; for (let i = 0; i < 50000; i++) a.push({k: i, v: String(i)});
a.sort((x, y) => (x.v < y.v ? -1 : 1));
console.log(s, h.slice(0, 16), a[5].v, JSON.stringify(a.slice(0, 2)));`

// TestNodeRewritten: node (Debian's, about 100 MB, V8 inside) rewritten
// with the default tool prints what the original prints, traced and
// with STINT_DISABLE=1, and its trace's events are probed sites. V8
// reads constants from its builtins' code and maps the builtins again
// from the file (facts: InstData, InstRemapped), and its code segments
// have a page between them (runtime: page_rwx): each broke it once.
func TestNodeRewritten(t *testing.T) {
	if testing.Short() {
		t.Skip("rewrites a 100 MB executable")
	}
	node, err := exec.LookPath("node")
	if err != nil {
		t.Skip("node not installed (scripts/setup.sh installs it)")
	}
	if node, err = filepath.EvalSymlinks(node); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	out, st := rewritten(t, node, dir, rewrite.Options{})
	t.Logf("node: %d of %d sites patched", st.PatchedTotal(), st.Sites)
	want := run(t, nil, nil, node, "-e", nodeScript)
	traces := filepath.Join(dir, "traces")
	if got := run(t, nil, []string{"STINT_OUT=" + traces}, out, "-e", nodeScript); !bytes.Equal(got, want) {
		t.Errorf("traced: %q, want %q", clip(got), clip(want))
	}
	checkLibTraces(t, out, traces)
	if got := run(t, nil, []string{"STINT_DISABLE=1"}, out, "-e", nodeScript); !bytes.Equal(got, want) {
		t.Errorf("STINT_DISABLE=1: %q, want %q", clip(got), clip(want))
	}
}
