// Command nodeagent is a node agent (the machine-config daemon, kubelet's node status loop) as
// it talks to kube-apiserver: client-go over HTTP/2 on a kept-alive connection, with client-go's
// own retries (a 429 or 5xx with Retry-After is waited out and sent again, up to 10 times; a GET
// is sent again after a broken connection, a PATCH is not). Every --interval it PATCHes its
// node's status and GETs /version.
//
// --policy says what it makes of an error: naive, any error is Degraded (as the machine-config
// daemon that turned one "connection reset by peer" into a Degraded node); retry, after an error
// it waits one interval, doubling up to 16, and reports Degraded only when its errors have lasted
// --degraded-after. Either way a success ends Degraded. As tests/e2e's stand-in agents do.
//
// --csv gets one line per request, the columns of tests/e2e's load client plus the request:
// conn (reused or new), send_s (CLOCK_MONOTONIC seconds), latency_ms, status (0: no answer),
// error (a short kind, or -), backend (X-Backend), retried (client-go's extra attempts), failed,
// request (patch or version). --transition-log gets "DEGRADED <monotonic_us> <request> <error>"
// and "RECOVERED <monotonic_us>" at each change. It runs until SIGTERM/SIGINT or --duration and
// ends with a summary line on stderr.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net/http"
	"net/http/httptrace"
	"os"
	"os/signal"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	utilnet "k8s.io/apimachinery/pkg/util/net"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

func monotonicMicros() int64 {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts); err != nil {
		panic(err)
	}
	return ts.Nano() / 1000
}

// attempt is one HTTP exchange of a request, as the transport saw it.
type attempt struct {
	status  int
	backend string
	reused  bool
}

// recorder keeps every attempt client-go makes, its retries included, as recordingTransport
// passes them on. The agent sends one request at a time, so one list serves.
type recorder struct {
	mu       sync.Mutex
	attempts []attempt
}

type recordingTransport struct {
	next http.RoundTripper
	rec  *recorder
}

func (t recordingTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	a := attempt{}
	trace := &httptrace.ClientTrace{GotConn: func(i httptrace.GotConnInfo) { a.reused = i.Reused }}
	resp, err := t.next.RoundTrip(req.WithContext(httptrace.WithClientTrace(req.Context(), trace)))
	if resp != nil {
		a.status = resp.StatusCode
		a.backend = resp.Header.Get("X-Backend")
	}
	t.rec.mu.Lock()
	t.rec.attempts = append(t.rec.attempts, a)
	t.rec.mu.Unlock()
	return resp, err
}

func (r *recorder) take() []attempt {
	r.mu.Lock()
	defer r.mu.Unlock()
	taken := r.attempts
	r.attempts = nil
	return taken
}

// errorKind names a transport error briefly, as the load client's table does.
func errorKind(err error) string {
	switch {
	case utilnet.IsConnectionRefused(err):
		return "refused"
	case utilnet.IsConnectionReset(err):
		return "reset"
	case errors.Is(err, syscall.EPIPE):
		return "broken_pipe"
	case utilnet.IsTimeout(err) || errors.Is(err, context.DeadlineExceeded):
		return "timeout"
	case utilnet.IsHTTP2ConnectionLost(err):
		return "http2_lost"
	case utilnet.IsProbableEOF(err):
		return "eof"
	}
	return "other:" + strings.NewReplacer(",", ";", "\n", " ").Replace(err.Error())
}

type settings struct {
	server, token, tokenFile, ca, node, policy, csv, transitionLog string
	insecure                                                       bool
	interval, degradedAfter, requestTimeout, duration              time.Duration
}

type agent struct {
	s           *settings
	client      *kubernetes.Clientset
	rec         *recorder
	csv         *os.File
	transitions *os.File

	requests, errorsSeen, degradedCount int
	errorsInARow                        int
	degraded                            bool
	runStart                            int64 // send time of the first error of the current run
}

// one sends one request and records it; false when the agent was stopped during it.
func (a *agent) one(ctx context.Context, what string, send func(context.Context) error) bool {
	sent := monotonicMicros()
	err := send(ctx)
	end := monotonicMicros()
	if ctx.Err() != nil {
		return false // stopped: not an answer from the server
	}
	attempts := a.rec.take()
	last := attempt{}
	if len(attempts) > 0 {
		last = attempts[len(attempts)-1]
	}
	kind := "-"
	if err != nil && last.status == 0 {
		kind = errorKind(err)
	}
	failed := err != nil || last.status < 200 || last.status > 299
	conn := "new"
	if last.reused {
		conn = "reused"
	}
	fmt.Fprintf(a.csv, "%s,%.6f,%.3f,%d,%s,%s,%d,%d,%s\n", conn, float64(sent)/1e6,
		float64(end-sent)/1e3, last.status, kind, orDash(last.backend), max(len(attempts)-1, 0),
		boolInt(failed), what)
	a.requests++
	if !failed {
		a.errorsInARow = 0
		a.runStart = 0
		if a.degraded {
			a.degraded = false
			a.transition("RECOVERED", "")
		}
		return true
	}
	a.errorsSeen++
	a.errorsInARow++
	if a.runStart == 0 {
		a.runStart = sent
	}
	persists := time.Duration(end-a.runStart)*time.Microsecond >= a.s.degradedAfter
	if !a.degraded && (a.s.policy == "naive" || persists) {
		a.degraded = true
		a.degradedCount++
		reason := kind
		if kind == "-" {
			reason = fmt.Sprintf("http_%d", last.status)
		}
		a.transition("DEGRADED", what+" "+reason)
	}
	return true
}

func (a *agent) transition(word, detail string) {
	if a.transitions == nil {
		return
	}
	line := fmt.Sprintf("%s %d", word, monotonicMicros())
	if detail != "" {
		line += " " + detail
	}
	fmt.Fprintln(a.transitions, line)
}

// pause is how long after this round the next one starts: the interval, or with the retry policy
// after errors the interval doubled per error in a row, at most 16 intervals.
func (a *agent) pause() time.Duration {
	if a.s.policy == "naive" || a.errorsInARow == 0 {
		return a.s.interval
	}
	return a.s.interval << min(a.errorsInARow-1, 4)
}

func (a *agent) run(ctx context.Context) {
	patch := []byte(`{"status":{"conditions":[{"type":"Ready","status":"True"}]}}`)
	for {
		roundStart := time.Now()
		ok := a.one(ctx, "patch", func(ctx context.Context) error {
			_, err := a.client.CoreV1().Nodes().Patch(ctx, a.s.node, types.StrategicMergePatchType,
				patch, metav1.PatchOptions{}, "status")
			return err
		}) && a.one(ctx, "version", func(ctx context.Context) error {
			_, err := a.client.Discovery().RESTClient().Get().AbsPath("/version").Do(ctx).Raw()
			return err
		})
		if !ok {
			return
		}
		next := a.pause()
		if a.errorsInARow == 0 {
			next -= time.Since(roundStart) // keep the interval's rhythm while all is well
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(next):
		}
	}
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

func openOut(path string) (*os.File, error) {
	if path == "" || path == "-" {
		return os.Stdout, nil
	}
	return os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
}

func main() {
	s := &settings{}
	flag.StringVar(&s.server, "server", "", "the API's URL, https://HOST:PORT")
	flag.StringVar(&s.token, "token", "", "bearer token")
	flag.StringVar(&s.tokenFile, "token-file", "", "file holding the bearer token")
	flag.StringVar(&s.ca, "certificate-authority", "", "CA file to verify the server with")
	flag.BoolVar(&s.insecure, "insecure-skip-tls-verify", false, "do not verify the server")
	flag.StringVar(&s.node, "node", "", "the node it writes")
	flag.StringVar(&s.policy, "policy", "naive", "naive or retry")
	flag.DurationVar(&s.interval, "interval", time.Second, "time between rounds")
	flag.DurationVar(&s.degradedAfter, "degraded-after", 10*time.Second,
		"retry policy: how long errors last before Degraded")
	flag.DurationVar(&s.requestTimeout, "request-timeout", 10*time.Second,
		"client-go's timeout per attempt")
	flag.DurationVar(&s.duration, "duration", 0, "stop after this long (0: at SIGTERM/SIGINT)")
	flag.StringVar(&s.csv, "csv", "-", "the requests' CSV (-: stdout)")
	flag.StringVar(&s.transitionLog, "transition-log", "", "DEGRADED/RECOVERED lines")
	flag.Parse()
	usage := func(msg string) {
		fmt.Fprintf(os.Stderr, "nodeagent: %s\n", msg)
		os.Exit(2)
	}
	if s.server == "" || s.node == "" {
		usage("--server and --node are needed")
	}
	if s.policy != "naive" && s.policy != "retry" {
		usage("--policy is naive or retry")
	}
	if s.interval <= 0 {
		usage("--interval must be positive")
	}

	rec := &recorder{}
	config := &rest.Config{
		Host:            s.server,
		BearerToken:     s.token,
		BearerTokenFile: s.tokenFile,
		TLSClientConfig: rest.TLSClientConfig{CAFile: s.ca, Insecure: s.insecure},
		Timeout:         s.requestTimeout,
		UserAgent:       "nodeagent/" + s.policy,
	}
	config.Wrap(func(rt http.RoundTripper) http.RoundTripper { return recordingTransport{rt, rec} })
	client, err := kubernetes.NewForConfig(config)
	if err != nil {
		usage(err.Error())
	}
	a := &agent{s: s, client: client, rec: rec}
	if a.csv, err = openOut(s.csv); err != nil {
		usage(err.Error())
	}
	if s.transitionLog != "" {
		if a.transitions, err = os.OpenFile(s.transitionLog,
			os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644); err != nil {
			usage(err.Error())
		}
	}
	fmt.Fprintln(a.csv, "conn,send_s,latency_ms,status,error,backend,retried,failed,request")

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	if s.duration > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, s.duration)
		defer cancel()
	}
	a.run(ctx)
	fmt.Fprintf(os.Stderr, "nodeagent: %d requests, %d errors, %d Degraded transitions, policy %s\n",
		a.requests, a.errorsSeen, a.degradedCount, s.policy)
}
