// Package browsertest loads pages in headless Chromium for tests: it
// collects the page's console messages and takes a screenshot.
package browsertest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"image"
	"image/color"
	"image/png"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

// ErrNoChromium is returned when no Chromium binary is installed.
var ErrNoChromium = errors.New("chromium not installed (Debian package chromium)")

// Chromium returns the path of the Chromium binary.
func Chromium() (string, error) {
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			return p, nil
		}
	}
	return "", ErrNoChromium
}

// Timeout bounds one Chromium run.
const Timeout = 90 * time.Second

func run(ctx context.Context, profile string, args ...string) (stdout, stderr []byte, err error) {
	bin, err := Chromium()
	if err != nil {
		return nil, nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, Timeout)
	defer cancel()
	base := []string{"--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-extensions",
		"--user-data-dir=" + profile, "--enable-logging=stderr", "--v=0"}
	cmd := exec.CommandContext(ctx, bin, append(base, args...)...)
	var o, e bytes.Buffer
	cmd.Stdout, cmd.Stderr = &o, &e
	cmd.Env = append(os.Environ(), "HOME="+profile)
	err = cmd.Run()
	if err != nil {
		err = fmt.Errorf("%s: %w\n%s", bin, err, tail(e.String(), 2000))
	}
	return o.Bytes(), e.Bytes(), err
}

func tail(s string, n int) string {
	if len(s) > n {
		return s[len(s)-n:]
	}
	return s
}

// consoleLine matches Chromium's log line for a console message, e.g.
// [1:1:1121/193925.8:INFO:CONSOLE:1] "boom", source: file:///x.html (1)
// (every level is logged as INFO; uncaught exceptions and failed loads
// are console messages too).
var consoleLine = regexp.MustCompile(`:CONSOLE[:(]`)

// Load opens the page and returns its console messages and its DOM after
// load.
func Load(ctx context.Context, page, profile string) (console []string, dom string, err error) {
	abs, err := filepath.Abs(page)
	if err != nil {
		return nil, "", err
	}
	out, errOut, err := run(ctx, profile, "--dump-dom", "file://"+abs)
	if err != nil {
		return nil, "", err
	}
	for _, l := range strings.Split(string(errOut), "\n") {
		if consoleLine.MatchString(l) {
			console = append(console, l)
		}
	}
	return console, string(out), nil
}

// Screenshot renders the page at the given window size.
func Screenshot(ctx context.Context, page, profile string, w, h int) (image.Image, error) {
	abs, err := filepath.Abs(page)
	if err != nil {
		return nil, err
	}
	shot := filepath.Join(profile, "shot.png")
	if _, _, err := run(ctx, profile, fmt.Sprintf("--window-size=%d,%d", w, h), "--hide-scrollbars", "--screenshot="+shot, "file://"+abs); err != nil {
		return nil, err
	}
	f, err := os.Open(shot)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return png.Decode(f)
}

// CountNear counts the pixels within tol (per channel) of c.
func CountNear(img image.Image, c color.RGBA, tol int) int {
	n := 0
	b := img.Bounds()
	for y := b.Min.Y; y < b.Max.Y; y++ {
		for x := b.Min.X; x < b.Max.X; x++ {
			r, g, bl, _ := img.At(x, y).RGBA()
			if near(int(r>>8), int(c.R), tol) && near(int(g>>8), int(c.G), tol) && near(int(bl>>8), int(c.B), tol) {
				n++
			}
		}
	}
	return n
}

func near(a, b, tol int) bool { return a-b <= tol && b-a <= tol }

// Distinct counts the distinct colours of img (capped at limit).
func Distinct(img image.Image, limit int) int {
	seen := map[color.RGBA]bool{}
	b := img.Bounds()
	for y := b.Min.Y; y < b.Max.Y; y++ {
		for x := b.Min.X; x < b.Max.X; x++ {
			r, g, bl, a := img.At(x, y).RGBA()
			seen[color.RGBA{uint8(r >> 8), uint8(g >> 8), uint8(bl >> 8), uint8(a >> 8)}] = true
			if len(seen) >= limit {
				return limit
			}
		}
	}
	return len(seen)
}

// Check loads page in Chromium and fails t on any console message; then
// takes a w×h screenshot and fails t unless at least minPixels pixels are
// near each colour of want. It skips t when Chromium is missing or under
// -short.
func Check(t testing.TB, page string, w, h, minPixels int, want map[string]color.RGBA) {
	t.Helper()
	if testing.Short() {
		t.Skip("headless Chromium check skipped under -short")
	}
	if _, err := Chromium(); err != nil {
		t.Skipf("skipping the browser check: %v", err)
	}
	profile := t.TempDir()
	console, dom, err := Load(context.Background(), page, profile)
	if err != nil {
		t.Fatalf("load %s: %v", page, err)
	}
	for _, c := range console {
		t.Errorf("console message on %s: %s", filepath.Base(page), c)
	}
	if !strings.Contains(dom, "<svg") {
		t.Errorf("the DOM Chromium built has no <svg>")
	}
	img, err := Screenshot(context.Background(), page, t.TempDir(), w, h)
	if err != nil {
		t.Fatalf("screenshot %s: %v", page, err)
	}
	if n := Distinct(img, 64); n < 16 {
		t.Errorf("screenshot has %d distinct colours: blank?", n)
	}
	for name, c := range want {
		if n := CountNear(img, c, 24); n < minPixels {
			t.Errorf("screenshot has %d pixels of %s (%v), want at least %d", n, name, c, minPixels)
		}
	}
}
