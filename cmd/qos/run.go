package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/pflag"

	"github.com/stint-project/stint/internal/cli"
	"github.com/stint-project/stint/qos"
)

const mainHelp = `qos measures a traced program's quality of service for the runtime.

QDIME's idea: instrument only as much as the program can afford. Every
period, qos measures a metric of the running program (a throughput, a
latency) and publishes it on a QoS page, a 4096-byte file in /dev/shm
whose path the program gets in STINT_QOS. At every period boundary the
stint runtime inside the rewritten program reads the latest value v and
sets the next period's instrumentation budget from the threshold T:

    b = (v - T) / (v + T) * P     when v is on the good side of T
    b = 0                          when it is not (the QoS comes first)

and the default budget (--default-budget) while qos has no fresh value.

Usage:
  qos run   [flags] -- PROGRAM ARGS...   run a (rewritten) program and
                                         measure it until it exits; exit
                                         with its status
  qos watch [flags] --page PATH          measure a program started
                                         elsewhere with STINT_QOS=PATH,
                                         until Ctrl-C or --pid exits
  qos show PAGE                          print a QoS page
  qos help [COMMAND]                     show help

Metric sources (--metric):
  file-rate:PATH     bytes/s written to PATH. A file that does not exist
                     yet is 0 bytes; a truncated or replaced file starts
                     counting again from 0. The file is also watched
                     between samples (every period/100, 2-50 ms) and the
                     rate taken over whole writes: gzip writes 256 KiB
                     at a time, and counting writes per period would
                     move its rate by 5% with their phase alone.
  log-rate:PATH      lines/s appended to PATH, e.g. an access log (one
                     request per line). Follows rotation and truncation
                     like tail -F; lines already there are not counted.
  redis://HOST:PORT  commands/s the server executed: the difference of
                     INFO's total_commands_processed over the time that
                     really passed, less qos's own INFO calls. (Redis's
                     instantaneous_ops_per_sec is its own average over
                     ~1.6 s, which lags and does not match the period.)
                     ?field=NAME publishes another INFO field as it is,
                     ?rate=NAME the per-second rate of a counter field.
                     redis://:PASSWORD@HOST:PORT sends AUTH first.
  prom:URL#SERIES    a series of a Prometheus text endpoint: NAME or
                     NAME{label="v",...} (every matching series is
                     summed). Counters become a per-second rate: a series
                     whose family is TYPE counter (or a histogram's or
                     summary's _count/_sum/_bucket), or, without a TYPE
                     line, whose name ends in _total. rate(SERIES) or
                     value(SERIES) says which explicitly.
  cmd:COMMAND        the first number that 'sh -c COMMAND' prints, run
                     once per period; it must finish within 3/4 of the
                     period or it is killed and the period has no value.

Rates are computed from two observations and the CLOCK_MONOTONIC time
between them, so the first period only sets the baseline.

Flags (run and watch):
  --metric SOURCE         the metric (required)
  --threshold N           T (required): 30000, 30k, 1.5M, 64Ki, 1MB/s
                          (k M G T = 1000^n, Ki Mi Gi Ti = 1024^n; B and
                          /s are decoration)
  --lower-is-better       the metric is a latency: T is a ceiling
  --tuning sum|span|value the denominator above: v+T (sum, the paper's,
                          conservative), M-T (span, with --max M, the best
                          value you expect) or v (value, the boldest)
  --max M                 M for --tuning span
  --period DUR            sampling period, also the runtime's budget
                          period (exported as STINT_PERIOD); default 1s
  --default-budget B      the budget while qos has no fresh value
                          (exported as STINT_BUDGET): 10% (default) of
                          the period, a duration (50ms), or none
  --log FILE              the runtime's redundancy log (STINT_LOG)
  --samples FILE          write one CSV row per period: mono_ns,value,state
                          (mono_ns is CLOCK_MONOTONIC, the clock of the
                          trace's time column; value empty when none)
  --page PATH             the page file (run: default
                          /dev/shm/stint-qos.<pid>.<random>, removed at exit)

Examples:
  # gzip must keep compressing at 1 MB/s or more (QDIME's gzip setup)
  qos run --metric file-rate:big.gz --threshold 1MB/s -- \
      sh -c './gzip.stint -c big > big.gz'

  # a rewritten redis-server must serve 30k commands/s
  qos run --metric redis://127.0.0.1:6379 --threshold 30k -- \
      ./redis-server.stint --port 6379

  # nginx at 3000 requests/s, measured on its access log
  qos run --metric log-rate:/var/log/nginx/access.log --threshold 3000 -- \
      ./nginx.stint -g 'daemon off;'

  # a latency from a Prometheus endpoint: p99 under 5 ms
  qos run --metric 'prom:http://127.0.0.1:9100/metrics#value(rpc_p99_seconds{svc="api"})' \
      --lower-is-better --threshold 0.005 -- ./server.stint

  # anything a command can print
  qos run --metric 'cmd:redis-cli -p 6379 dbsize' --threshold 1000 -- ./app.stint

  # a program started elsewhere
  STINT_QOS=/dev/shm/app.qos ./app.stint &
  qos watch --page /dev/shm/app.qos --pid $! --metric log-rate:app.log --threshold 500

When the source fails (the server is not up yet, the file is gone), the
page says "failing", the runtime uses the default budget, qos says so
once on stderr and tries again every period; the program is never
touched.

Exit status: run: the program's (128+N if killed by signal N; 1 or 2
when qos itself failed before starting it). watch, show: 0 ok, 1 error,
2 usage error.
`

const runHelp = `qos run [flags] -- PROGRAM ARGS...

Create a QoS page, start PROGRAM with STINT_QOS (the page), STINT_PERIOD
(--period) and STINT_BUDGET (--default-budget) in its environment (and
STINT_LOG with --log), measure the metric every period until PROGRAM
exits, remove the page and exit with PROGRAM's status (128+N if it was
killed by signal N). SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1 and SIGUSR2
are passed on to it (servers stop or reload on them); it
runs in its own process group and, when qos's standard input is the
terminal, in the terminal's foreground (so Ctrl-C reaches it once).

Example:
  qos run --metric redis://127.0.0.1:6379 --threshold 30k \
      --samples redis.qos.csv -- ./redis-server.stint --port 6379
`

const watchHelp = `qos watch [flags] --page PATH [--pid PID]

Serve the QoS page PATH for a program started elsewhere with
STINT_QOS=PATH (the runtime maps the page once it exists, so either may
start first; give the program the same STINT_PERIOD and STINT_BUDGET).
Measures every period until Ctrl-C, or until process PID exits. The page
is left with state "stopped" after Ctrl-C (a later watch can take over;
the program keeps reading it) and removed when PID exited.

Example:
  STINT_QOS=/dev/shm/app.qos STINT_PERIOD=1s ./app.stint &
  qos watch --page /dev/shm/app.qos --pid $! --metric log-rate:app.log --threshold 500
`

const showHelp = `qos show PAGE

Print a QoS page: the analyzer's settings, state, latest value, its age
and the number of samples. Checks the file's size, magic and version.
`

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		io.WriteString(stderr, mainHelp)
		return cli.Usagef("no command given")
	}
	var af analyzerFlags
	wfs, _ := watchFlags(&af)
	cmds := map[string]struct {
		help string
		run  func(context.Context, []string, io.Writer, io.Writer) error
	}{
		"run":   {runHelp + "\nFlags:\n" + runFlags(&af).FlagUsages(), runRun},
		"watch": {watchHelp + "\nFlags:\n" + wfs.FlagUsages(), runWatch},
		"show":  {showHelp, runShow},
	}
	cli.Subcommands(args, "run", "watch", "show", "help")
	name := args[0]
	switch name {
	case "-h", "--help", "help":
		if len(args) > 1 && name == "help" {
			c, ok := cmds[args[1]]
			if !ok {
				return cli.Usagef("help: unknown command %q (commands: run, watch, show)", args[1])
			}
			_, err := io.WriteString(stdout, c.help)
			return err
		}
		_, err := io.WriteString(stdout, mainHelp)
		return err
	}
	c, ok := cmds[name]
	if !ok {
		return cli.Usagef("unknown command %q (run 'qos --help')", name)
	}
	err := c.run(ctx, args[1:], stdout, stderr)
	if errors.Is(err, pflag.ErrHelp) {
		_, err = io.WriteString(stdout, c.help)
	}
	return err
}

// numberValue is a pflag.Value for thresholds: 30k, 1.5M, 1MB/s.
type numberValue struct {
	v   float64
	set bool
}

func (n *numberValue) String() string {
	if !n.set {
		return ""
	}
	return qos.FormatNumber(n.v)
}
func (n *numberValue) Type() string { return "number" }
func (n *numberValue) Set(s string) error {
	v, err := qos.ParseNumber(s)
	if err != nil {
		return err
	}
	n.v, n.set = v, true
	return nil
}

// tuningValue is a pflag.Value for --tuning.
type tuningValue struct{ t qos.Tuning }

func (t *tuningValue) String() string { return t.t.String() }
func (t *tuningValue) Type() string   { return "sum|span|value" }
func (t *tuningValue) Set(s string) error {
	v, err := qos.ParseTuning(s)
	t.t = v
	return err
}

// periodValue is a pflag.Value for --period.
type periodValue struct{ d time.Duration }

func (p *periodValue) String() string { return p.d.String() }
func (p *periodValue) Type() string   { return "duration" }
func (p *periodValue) Set(s string) error {
	d, err := qos.ParsePeriod(s)
	p.d = d
	return err
}

// analyzerFlags are the flags run and watch share.
type analyzerFlags struct {
	metric, budget, log, samples, page string
	threshold, max                     numberValue
	lower                              bool
	tuning                             tuningValue
	period                             periodValue
}

func (f *analyzerFlags) add(fs *pflag.FlagSet) {
	f.period.d = time.Second
	fs.StringVar(&f.metric, "metric", "", "metric source (see qos --help)")
	fs.Var(&f.threshold, "threshold", "QoS threshold T: 30000, 30k, 1.5M, 1MB/s")
	fs.BoolVar(&f.lower, "lower-is-better", false, "the metric is a latency: T is a ceiling")
	fs.Var(&f.tuning, "tuning", "denominator of the budget: sum (v+T), span (M-T), value (v)")
	fs.Var(&f.max, "max", "M, the best value expected, for --tuning span")
	fs.Var(&f.period, "period", "sampling and budget period (STINT_PERIOD)")
	fs.StringVar(&f.budget, "default-budget", "10%", "budget without a fresh sample (STINT_BUDGET): 10%, 50ms, none")
	fs.StringVar(&f.log, "log", "", "the runtime's redundancy log (STINT_LOG)")
	fs.StringVar(&f.samples, "samples", "", "write a CSV row per period (mono_ns,value,state) to FILE")
	fs.StringVar(&f.page, "page", "", "the QoS page file")
}

// options checks the flags and opens what they name; the returned
// closer closes the samples file.
func (f *analyzerFlags) options(fs *pflag.FlagSet) (qos.Options, func() error, error) {
	nop := func() error { return nil }
	var o qos.Options
	if f.metric == "" {
		return o, nop, cli.Usagef("%s: --metric SOURCE is required (e.g. --metric file-rate:out.gz; see qos --help)", fs.Name())
	}
	if !f.threshold.set {
		return o, nop, cli.Usagef("%s: --threshold N is required (e.g. --threshold 30k)", fs.Name())
	}
	if f.tuning.t == qos.TuneSpan && !f.max.set {
		return o, nop, cli.Usagef("%s: --tuning span needs --max M (the best value you expect)", fs.Name())
	}
	if f.max.set && f.tuning.t != qos.TuneSpan {
		return o, nop, cli.Usagef("%s: --max is only used with --tuning span", fs.Name())
	}
	budget, err := qos.BudgetEnv(f.budget, f.period.d)
	if err != nil {
		return o, nop, cli.Usagef("%s: %w", fs.Name(), err)
	}
	src, err := qos.ParseSource(f.metric, qos.SourceOptions{Period: f.period.d})
	if err != nil {
		return o, nop, cli.Usagef("%s: %w", fs.Name(), err)
	}
	o = qos.Options{
		Config: qos.Config{
			Threshold:     f.threshold.v,
			Max:           f.max.v,
			Tuning:        f.tuning.t,
			LowerIsBetter: f.lower,
			Interval:      f.period.d,
			Source:        f.metric,
		},
		Source:        src,
		Period:        f.period.d,
		PagePath:      f.page,
		DefaultBudget: budget,
		Log:           f.log,
	}
	if err := o.Config.Check(); err != nil {
		return o, nop, cli.Usagef("%s: %w", fs.Name(), err)
	}
	if f.samples == "" {
		return o, nop, nil
	}
	sf, err := os.Create(f.samples)
	if err != nil {
		return o, nop, fmt.Errorf("samples: %w", err)
	}
	o.Samples = sf
	return o, sf.Close, nil
}

func parseFlags(fs *pflag.FlagSet, args []string) error { return cli.ParseFlags(fs, "qos", args) }

// runFlags is qos run's flag set.
func runFlags(f *analyzerFlags) *pflag.FlagSet {
	fs := pflag.NewFlagSet("run", pflag.ContinueOnError)
	fs.SetInterspersed(false)
	f.add(fs)
	return fs
}

func runRun(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	var f analyzerFlags
	fs := runFlags(&f)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	argv := fs.Args()
	if len(argv) == 0 {
		return cli.Usagef("run: no program given (qos run [flags] -- PROGRAM ARGS...)")
	}
	o, closeSamples, err := f.options(fs)
	if err != nil {
		return err
	}
	defer closeSamples()
	o.Stdin, o.Stdout, o.Stderr, o.Messages = os.Stdin, stdout, stderr, stderr
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGQUIT, syscall.SIGUSR1, syscall.SIGUSR2)
	defer signal.Stop(sigs)
	o.Signals = sigs
	// Signals reach the program through o.Signals; the context that
	// cli.Main cancels on them must not also stop it.
	res, err := qos.RunProgram(context.WithoutCancel(ctx), o, argv)
	if err != nil {
		return err
	}
	if err := closeSamples(); err != nil {
		return fmt.Errorf("samples: %w", err)
	}
	msg := ""
	if res.Signal != "" {
		msg = fmt.Sprintf("%s: killed by signal %s", argv[0], res.Signal)
	}
	if res.ExitCode != 0 || msg != "" {
		return &cli.ExitStatus{Code: res.ExitCode, Msg: msg}
	}
	return nil
}

// watchFlags is qos watch's flag set.
func watchFlags(f *analyzerFlags) (*pflag.FlagSet, *int) {
	fs := pflag.NewFlagSet("watch", pflag.ContinueOnError)
	f.add(fs)
	return fs, fs.Int("pid", 0, "stop when process PID exits")
}

func runWatch(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	var f analyzerFlags
	fs, pid := watchFlags(&f)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return cli.Usagef("watch: unexpected arguments %q (to start a program, use qos run)", strings.Join(fs.Args(), " "))
	}
	if f.page == "" {
		return cli.Usagef("watch: --page PATH is required: the path the program has in STINT_QOS")
	}
	if *pid < 0 {
		return cli.Usagef("watch: --pid %d: want a process id", *pid)
	}
	o, closeSamples, err := f.options(fs)
	if err != nil {
		return err
	}
	defer closeSamples()
	o.Messages = stderr
	fmt.Fprintf(stderr, "qos: serving %s (the program needs STINT_QOS=%s STINT_PERIOD=%s", f.page, f.page, qos.PeriodEnv(o.Period))
	if o.DefaultBudget != "" {
		fmt.Fprintf(stderr, " STINT_BUDGET=%s", o.DefaultBudget)
	}
	fmt.Fprintln(stderr, ")")
	if _, err := qos.Watch(ctx, o, *pid); err != nil {
		return err
	}
	return closeSamples()
}

func runShow(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := pflag.NewFlagSet("show", pflag.ContinueOnError)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() != 1 {
		return cli.Usagef("show: want one page file (qos show PAGE)")
	}
	s, err := qos.ReadPage(fs.Arg(0))
	if err != nil {
		return err
	}
	dir := "higher is better"
	if s.LowerIsBetter {
		dir = "lower is better"
	}
	fmt.Fprintf(stdout, "page       %s (version %d)\n", fs.Arg(0), s.Version)
	fmt.Fprintf(stdout, "source     %s\n", s.Source)
	fmt.Fprintf(stdout, "analyzer   pid %d, every %v\n", s.AnalyzerPID, s.Interval)
	fmt.Fprintf(stdout, "threshold  %s (%s)\n", qos.FormatNumber(s.Threshold), dir)
	if s.Tuning == qos.TuneSpan {
		fmt.Fprintf(stdout, "tuning     span, max %s\n", qos.FormatNumber(s.Max))
	} else {
		fmt.Fprintf(stdout, "tuning     %s\n", s.Tuning)
	}
	fmt.Fprintf(stdout, "state      %s\n", s.State)
	if s.SampleMono == 0 {
		fmt.Fprintf(stdout, "value      none yet\n")
	} else {
		age := qos.Monotonic() - s.SampleMono
		fmt.Fprintf(stdout, "value      %s (%v ago)\n", qos.FormatNumber(s.Value), age.Round(time.Millisecond))
	}
	fmt.Fprintf(stdout, "samples    %d\n", s.Samples)
	return nil
}
