package benchmarks

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// NginxWorkload runs nginx as one process (no master, no daemon: the way
// QDIME ran Apache, whose children refused Pin) serving a static page,
// with its access log on, drives it with wrk for a fixed time and stops
// it with SIGQUIT (a graceful exit, so the runtime writes its run end).
// The figure of merit is wrk's requests per second; the QoS metric is
// the access log's growth in lines per second.
type NginxWorkload struct {
	Server   string        // nginx (default /usr/sbin/nginx)
	Wrk      string        // wrk (default: from PATH)
	Duration time.Duration // wrk -d
	Conns    int           // wrk -c (default 32)
	// Wrap, when set, wraps the server's command line (the QoS analyzer
	// with metric source metric); see [QoSWrap].
	Wrap QoSWrap
	work string
	// Load is the CLOCK_MONOTONIC window of the last run's load.
	Load Window
}

// QoSWrap returns argv run under something else (qos run) that reads
// the metric source metric.
type QoSWrap func(argv []string, metric string) []string

// Window is an interval of CLOCK_MONOTONIC, ns.
type Window struct{ Start, End uint64 }

// ErrNoNginx says nginx or wrk is not installed (scripts/bench-deps.sh).
var ErrNoNginx = errors.New("nginx or wrk not installed (run scripts/bench-deps.sh)")

func (n *NginxWorkload) Key() string { return "nginx" }
func (n *NginxWorkload) Title() string {
	return fmt.Sprintf("nginx (one process, access log) under wrk -c %d -d %v", n.conns(), n.Duration)
}
func (n *NginxWorkload) Target() string {
	if n.Server != "" {
		return n.Server
	}
	return "/usr/sbin/nginx"
}
func (n *NginxWorkload) OutPath(dir string) string { return filepath.Join(dir, "nginx.stint") }
func (n *NginxWorkload) Unit() string              { return "req/s" }
func (n *NginxWorkload) HigherIsBetter() bool      { return true }

func (n *NginxWorkload) conns() int {
	if n.Conns > 0 {
		return n.Conns
	}
	return 32
}

// AccessLog is the access log of the runs.
func (n *NginxWorkload) AccessLog() string { return filepath.Join(n.work, "logs", "access.log") }

func (n *NginxWorkload) Prepare(ctx context.Context, work string) error {
	if n.Wrk == "" {
		n.Wrk = "wrk"
	}
	if _, err := os.Stat(n.Target()); err != nil {
		return fmt.Errorf("%w: %v", ErrNoNginx, err)
	}
	if _, err := exec.LookPath(n.Wrk); err != nil {
		return fmt.Errorf("%w: %v", ErrNoNginx, err)
	}
	if n.Duration <= 0 {
		return fmt.Errorf("nginx workload needs a duration > 0")
	}
	n.work = filepath.Join(work, "nginx")
	for _, d := range []string{"www", "logs", "tmp"} {
		if err := os.MkdirAll(filepath.Join(n.work, d), 0o755); err != nil {
			return err
		}
	}
	// A 4 KiB page and a small one, so requests take more than one path.
	page := bytes.Repeat([]byte("stint nginx benchmark page. "), 150)
	if err := os.WriteFile(filepath.Join(n.work, "www", "index.html"), page, 0o644); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(n.work, "www", "small.txt"), []byte("ok\n"), 0o644)
}

const nginxConf = `daemon off;
master_process off;
worker_processes 1;
error_log %[1]s/logs/error.log;
pid %[1]s/nginx.pid;
events { worker_connections 1024; }
http {
  access_log %[1]s/logs/access.log;
  client_body_temp_path %[1]s/tmp;
  proxy_temp_path %[1]s/tmp;
  fastcgi_temp_path %[1]s/tmp;
  uwsgi_temp_path %[1]s/tmp;
  scgi_temp_path %[1]s/tmp;
  server { listen 127.0.0.1:%[2]d; root %[1]s/www; }
}
`

var wrkRate = regexp.MustCompile(`Requests/sec:\s+([0-9.]+)`)

func (n *NginxWorkload) Run(ctx context.Context, mod string, env []string) (float64, error) {
	bin := n.Target()
	if mod != "" {
		bin = mod
	}
	port, err := freePort()
	if err != nil {
		return 0, err
	}
	conf := filepath.Join(n.work, "nginx.conf")
	if err := os.WriteFile(conf, []byte(fmt.Sprintf(nginxConf, n.work, port)), 0o644); err != nil {
		return 0, err
	}
	os.Remove(n.AccessLog())
	argv := []string{bin, "-c", conf, "-p", n.work}
	if n.Wrap != nil {
		argv = n.Wrap(argv, "log-rate:"+n.AccessLog())
	}
	srv, err := startServer(argv, env)
	if err != nil {
		return 0, err
	}
	addr := "127.0.0.1:" + strconv.Itoa(port)
	if err := srv.ready(ctx, 60*time.Second, "listening", func() error {
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err == nil {
			c.Close()
		}
		return err
	}); err != nil {
		return 0, err
	}
	url := "http://" + addr + "/index.html"
	n.Load.Start = monoNS()
	client := pinned([]string{n.Wrk, "-t", "1", "-c", strconv.Itoa(n.conns()),
		"-d", fmt.Sprintf("%ds", int(n.Duration.Seconds()+0.5)), url}, otherCPU())
	out, werr := exec.CommandContext(ctx, client[0], client[1:]...).CombinedOutput()
	n.Load.End = monoNS()
	// SIGQUIT: graceful shutdown; nginx exits through exit(), so the
	// runtime flushes its trace. The analyzer (if any) passes it on.
	syscall.Kill(srv.cmd.Process.Pid, syscall.SIGQUIT)
	serr := srv.stopped("SIGQUIT", 2*time.Minute)
	if werr != nil {
		return 0, fmt.Errorf("wrk: %w: %s", werr, lastLine(string(out)))
	}
	if serr != nil {
		return 0, serr
	}
	m := wrkRate.FindSubmatch(out)
	if m == nil {
		return 0, fmt.Errorf("wrk printed no Requests/sec: %s", lastLine(string(out)))
	}
	return strconv.ParseFloat(string(m[1]), 64)
}

// monoNS is CLOCK_MONOTONIC in ns: the clock of the traces' time column.
func monoNS() uint64 {
	var ts unix.Timespec
	unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts)
	return uint64(ts.Nano())
}
