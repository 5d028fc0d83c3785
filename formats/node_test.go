package formats

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strconv"
	"testing"
)

// nodeReader installs testdata/node (apache-arrow, pinned by its
// package-lock.json) into a cache directory outside the repository and
// returns the directory holding read.mjs.
func nodeReader(t *testing.T) string {
	t.Helper()
	if testing.Short() {
		t.Skip("runs node and npm: skipped under -short")
	}
	for _, tool := range []string{"node", "npm"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("%s not found", tool)
		}
	}
	src := filepath.Join("testdata", "node")
	h := sha256.New()
	for _, f := range []string{"package.json", "package-lock.json", "read.mjs"} {
		b, err := os.ReadFile(filepath.Join(src, f))
		if err != nil {
			t.Fatal(err)
		}
		h.Write(b)
	}
	cache, err := os.UserCacheDir()
	if err != nil {
		cache = os.TempDir()
	}
	dir := filepath.Join(cache, "stint-formats-node", hex.EncodeToString(h.Sum(nil))[:16])
	if _, err := os.Stat(filepath.Join(dir, "node_modules", "apache-arrow")); err == nil {
		return dir
	}
	tmp := dir + ".tmp"
	os.RemoveAll(tmp)
	if err := os.MkdirAll(tmp, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"package.json", "package-lock.json", "read.mjs"} {
		b, _ := os.ReadFile(filepath.Join(src, f))
		if err := os.WriteFile(filepath.Join(tmp, f), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	cmd := exec.Command("npm", "ci", "--no-audit", "--no-fund", "--ignore-scripts")
	cmd.Dir = tmp
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Skipf("npm ci failed (no network?): %v\n%s", err, out)
	}
	os.RemoveAll(dir)
	if err := os.Rename(tmp, dir); err != nil {
		t.Fatal(err)
	}
	return dir
}

type nodeSummary struct {
	Batches  []int             `json:"batches"`
	Rows     int               `json:"rows"`
	Fields   []string          `json:"fields"`
	Metadata map[string]string `json:"metadata"`
	First    map[string]string `json:"first"`
	Last     map[string]string `json:"last"`
}

func runNode(t *testing.T, dir, file string) nodeSummary {
	t.Helper()
	cmd := exec.Command("node", filepath.Join(dir, "read.mjs"), file)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("node read.mjs %s: %v\n%s", file, err, stderr.Bytes())
	}
	var s nodeSummary
	if err := json.Unmarshal(out, &s); err != nil {
		t.Fatalf("node output %q: %v", out, err)
	}
	return s
}

func eventMap(e Event) map[string]string {
	u := func(v uint64) string { return strconv.FormatUint(v, 10) }
	return map[string]string{
		"kind": u(uint64(e.Kind)), "tid": u(uint64(e.TID)), "time": u(e.Time),
		"src_module": u(uint64(e.SrcModule)), "src": u(e.Src),
		"dst_module": u(uint64(e.DstModule)), "dst": u(e.Dst), "value": u(e.Value),
	}
}

func TestNodeReader(t *testing.T) {
	dir := nodeReader(t)
	events := testEvents(10)
	b := writeTrace(t, events, 4, true)
	name := filepath.Join(t.TempDir(), "go.arrow")
	if err := os.WriteFile(name, b, 0o644); err != nil {
		t.Fatal(err)
	}
	files := map[string][]Event{name: events}
	if exe, ok := tryCWriter(t); ok {
		cname := filepath.Join(t.TempDir(), "c.arrow")
		if out, err := exec.Command(exe, cname, "zeros").CombinedOutput(); err != nil {
			t.Fatalf("cwriter: %v\n%s", err, out)
		}
		files[cname] = cwriterEvents(16)
	}
	for file, want := range files {
		s := runNode(t, dir, file)
		if s.Rows != len(want) {
			t.Errorf("%s: node read %d rows, want %d (batches %v)", file, s.Rows, len(want), s.Batches)
		}
		wantFields := []string{"kind:Uint8:false", "tid:Uint32:false", "time:Uint64:false", "src_module:Uint16:false",
			"src:Uint64:false", "dst_module:Uint16:false", "dst:Uint64:false", "value:Uint64:false"}
		if !reflect.DeepEqual(s.Fields, wantFields) {
			t.Errorf("%s: node fields %v", file, s.Fields)
		}
		if s.Metadata[MetaVersion] != Version || s.Metadata[MetaRun] == "" || s.Metadata[MetaModules] == "" {
			t.Errorf("%s: node metadata %v", file, s.Metadata)
		}
		if !reflect.DeepEqual(s.First, eventMap(want[0])) || !reflect.DeepEqual(s.Last, eventMap(want[len(want)-1])) {
			t.Errorf("%s: node first/last rows\nhave %v %v\nwant %v %v", file, s.First, s.Last, eventMap(want[0]), eventMap(want[len(want)-1]))
		}
	}
}

// tryCWriter builds the C writer if it can, for tests that only add to
// their coverage with it.
func tryCWriter(t *testing.T) (string, bool) {
	if _, err := exec.LookPath("gcc"); err != nil {
		return "", false
	}
	return buildCWriter(t), true
}
