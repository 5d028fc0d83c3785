package browsertest

import (
	"context"
	"image/color"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestDetects: the checks Check relies on can fail: a console error is
// seen, and a blank page has neither colours nor the wanted one.
func TestDetects(t *testing.T) {
	if testing.Short() {
		t.Skip("headless Chromium check skipped under -short")
	}
	if _, err := Chromium(); err != nil {
		t.Skipf("skipping: %v", err)
	}
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.html")
	os.WriteFile(bad, []byte(`<!DOCTYPE html><html><body><p>x</p><script>console.error("boom-from-test"); notDefined();</script></body></html>`), 0o644)
	console, _, err := Load(context.Background(), bad, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	if len(console) != 2 || !strings.Contains(console[0], "boom-from-test") || !strings.Contains(console[1], "notDefined") {
		t.Errorf("console messages %q, want the error and the exception", console)
	}
	blank := filepath.Join(dir, "blank.html")
	os.WriteFile(blank, []byte(`<!DOCTYPE html><html><body style="background:#fff"></body></html>`), 0o644)
	img, err := Screenshot(context.Background(), blank, t.TempDir(), 400, 300)
	if err != nil {
		t.Fatal(err)
	}
	if n := Distinct(img, 64); n > 2 {
		t.Errorf("blank page has %d colours", n)
	}
	if n := CountNear(img, color.RGBA{0x1f, 0x6f, 0xb4, 0xff}, 24); n != 0 {
		t.Errorf("blank page has %d blue pixels", n)
	}
	if b := img.Bounds(); b.Dx() != 400 || b.Dy() != 300 {
		t.Errorf("screenshot %v, want 400x300", b)
	}
}
