// Command realapi is kube-apiserver for the tests, as far as k8s.io/apiserver makes it: a
// storage-less GenericAPIServer with the library's own options (so --shutdown-delay-duration,
// --shutdown-send-retry-after, --request-timeout and the rest are the real flags with the real
// defaults), the default handler chain, TLS on its port, the library's signal handler and its
// graceful termination. What it models is what the shim depends on: /readyz turning 500 at the
// first SIGTERM, the requests served through the shutdown delay, the 429s or the closed listener
// after it, the in-flight drain, exit 0, and exit 1 at a second signal.
//
// Not modelled: storage (etcd), API groups and admission. Node agents get a small non-resource
// handler in their place: PATCH /api/v1/nodes/NAME[/status] and GET /api/v1/nodes/NAME answer a
// Node with a growing resourceVersion (nothing is stored), GET /api/v1/namespaces/NAME a
// Namespace, GET /hold?seconds=N holds a request open that long. Anonymous requests are allowed
// only where kube's system:public-info-viewer allows them (/healthz, /livez, /readyz, /version);
// everything else needs a bearer token (--token-auth-file or --token), as an anonymous HTTP/2
// answer carries "Connection: close".
//
// Flags shared with the C++ stand-in (tests/sandbox/fake_apiserver.cpp) mean the same: --listen,
// --port-file, --pidfile, --signal-log ("SIGTERM <monotonic_us>"), --lifecycle-log ("WORD
// <monotonic_us> [detail]") and --name (every answer carries "X-Backend: NAME").
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/signal"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"

	"github.com/spf13/pflag"
	"golang.org/x/sys/unix"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apiserver/pkg/authentication/authenticator"
	"k8s.io/apiserver/pkg/authentication/group"
	"k8s.io/apiserver/pkg/authentication/request/anonymous"
	"k8s.io/apiserver/pkg/authentication/request/bearertoken"
	"k8s.io/apiserver/pkg/authentication/request/union"
	"k8s.io/apiserver/pkg/authentication/token/tokenfile"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	"k8s.io/apiserver/pkg/authorization/authorizerfactory"
	authzunion "k8s.io/apiserver/pkg/authorization/union"
	"k8s.io/apiserver/pkg/endpoints/handlers/negotiation"
	"k8s.io/apiserver/pkg/endpoints/handlers/responsewriters"
	"k8s.io/apiserver/pkg/server"
	"k8s.io/apiserver/pkg/server/options"
	"k8s.io/klog/v2"
)

// The patch types kube-apiserver accepts for a built-in resource (endpoints/installer.go).
var patchTypes = []string{
	string(types.JSONPatchType),
	string(types.MergePatchType),
	string(types.StrategicMergePatchType),
	string(types.ApplyYAMLPatchType),
}

// kube's system:public-info-viewer: what an anonymous client may GET.
var publicPaths = map[string]bool{"/healthz": true, "/livez": true, "/readyz": true, "/version": true}

func monotonicMicros() int64 {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts); err != nil {
		panic(err)
	}
	return ts.Nano() / 1000
}

// lineLog appends "WORD <monotonic_us> [detail]" lines, each in one write(2), so that a line is
// on disk before whatever follows it (a second signal's exit) can happen.
type lineLog struct{ f *os.File }

func openLineLog(path string) (*lineLog, error) {
	if path == "" {
		return &lineLog{}, nil
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	return &lineLog{f: f}, nil
}

func (l *lineLog) write(word, detail string) {
	if l.f == nil {
		return
	}
	line := fmt.Sprintf("%s %d", word, monotonicMicros())
	if detail != "" {
		line += " " + detail
	}
	if _, err := l.f.WriteString(line + "\n"); err != nil {
		fmt.Fprintf(os.Stderr, "realapi: %s: %v\n", l.f.Name(), err)
	}
}

// writeFileAtomically makes PATH appear whole (a reader polling for it never sees it half
// written).
func writeFileAtomically(path, content string) error {
	if path == "" {
		return nil
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(content), 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

// lifecycleSignal is the library's signal NAME (lifecycle_signals.go). It keeps them unexported
// (only two have accessors, on Config), so they are read from the server by name: each
// lifecycle line is then written when the library signals its event, not guessed from outside.
func lifecycleSignal(s *server.GenericAPIServer, name string) <-chan struct{} {
	field := reflect.ValueOf(s).Elem().FieldByName("lifecycleSignals")
	signals := reflect.NewAt(field.Type(), unsafe.Pointer(field.UnsafeAddr())).Elem()
	signaled := signals.FieldByName(name).MethodByName("Signaled").Call(nil)[0]
	return signaled.Interface().(<-chan struct{})
}

func closed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// watchLifecycle writes the graceful termination's events to the lifecycle log in the order the
// library signals them; the channel it returns is closed once the last is written.
func watchLifecycle(s *server.GenericAPIServer, log *lineLog) <-chan struct{} {
	initiated := lifecycleSignal(s, "ShutdownInitiated")
	notAccepting := lifecycleSignal(s, "NotAcceptingNewRequest")
	drained := lifecycleSignal(s, "InFlightRequestsDrained")
	stopped := lifecycleSignal(s, "HTTPServerStoppedListening")
	done := make(chan struct{})
	go func() {
		defer close(done)
		<-initiated
		log.write("UNREADY", "ShutdownInitiated")
		<-notAccepting
		log.write("NOT_ACCEPTING", "NotAcceptingNewRequest")
		// These two come in either order, but with --shutdown-send-retry-after the listener
		// stops only once in-flight requests have drained: when both are signalled, drained
		// goes first.
		for drained != nil || stopped != nil {
			select {
			case <-drained:
			case <-stopped:
			}
			if closed(drained) {
				drained = nil
				log.write("IN_FLIGHT_DRAINED", "InFlightRequestsDrained")
			} else if closed(stopped) {
				stopped = nil
				log.write("STOPPED_LISTENING", "HTTPServerStoppedListening")
			}
		}
	}()
	return done
}

// relaySignals takes SIGTERM and SIGINT from the library's handler (server.SetupSignalContext,
// called before) and hands each on through server.RequestShutdown once it is logged: the
// library still decides (the first cancels its context, the second is os.Exit(1)), but the
// record of a second signal is written before that exit can happen. It runs before the pidfile
// is written: a signal between the Reset and the Notify would meet the default action.
func relaySignals(signals, lifecycle *lineLog) {
	signal.Reset(syscall.SIGTERM, syscall.SIGINT)
	ch := make(chan os.Signal, 4)
	signal.Notify(ch, syscall.SIGTERM, syscall.SIGINT)
	go func() {
		count := 0
		for sig := range ch {
			count++
			signals.write(unix.SignalName(sig.(syscall.Signal)), "")
			if count == 2 {
				lifecycle.write("EXIT", "1 second signal")
			}
			server.RequestShutdown()
		}
	}()
}

// agentAPI answers what node agents ask of the API in place of the real resource handlers:
// nothing is stored, every write gets the next resourceVersion, as etcd's revision grows.
type agentAPI struct {
	codecs   serializer.CodecFactory
	revision atomic.Int64
}

func (a *agentAPI) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	gv := corev1.SchemeGroupVersion
	parts := strings.Split(strings.TrimPrefix(req.URL.Path, "/api/v1/"), "/")
	fail := func(err error) { responsewriters.ErrorNegotiated(err, a.codecs, gv, w, req) }
	meta := func(name string, rv int64) metav1.ObjectMeta {
		return metav1.ObjectMeta{Name: name, UID: types.UID("realapi-" + name),
			ResourceVersion: strconv.FormatInt(rv, 10)}
	}
	switch {
	case len(parts) >= 2 && len(parts) <= 3 && parts[0] == "nodes" &&
		(len(parts) == 2 || parts[2] == "status"):
		rv := a.revision.Load()
		switch req.Method {
		case http.MethodPatch:
			contentType, _, _ := strings.Cut(req.Header.Get("Content-Type"), ";")
			if !slices.Contains(patchTypes, strings.TrimSpace(contentType)) {
				fail(negotiation.NewUnsupportedMediaTypeError(patchTypes))
				return
			}
			rv = a.revision.Add(1)
		case http.MethodGet:
		default:
			fail(apierrors.NewMethodNotSupported(corev1.Resource("nodes"), req.Method))
			return
		}
		node := &corev1.Node{ObjectMeta: meta(parts[1], rv),
			Status: corev1.NodeStatus{Conditions: []corev1.NodeCondition{
				{Type: corev1.NodeReady, Status: corev1.ConditionTrue}}}}
		a.write(w, req, node)
	case len(parts) == 2 && parts[0] == "namespaces":
		if req.Method != http.MethodGet {
			fail(apierrors.NewMethodNotSupported(corev1.Resource("namespaces"), req.Method))
			return
		}
		ns := &corev1.Namespace{ObjectMeta: meta(parts[1], a.revision.Load()),
			Status: corev1.NamespaceStatus{Phase: corev1.NamespaceActive}}
		a.write(w, req, ns)
	default:
		http.NotFound(w, req)
	}
}

func (a *agentAPI) write(w http.ResponseWriter, req *http.Request, obj runtime.Object) {
	responsewriters.WriteObjectNegotiated(a.codecs, negotiation.DefaultEndpointRestrictions,
		corev1.SchemeGroupVersion, w, req, http.StatusOK, obj, false)
}

// hold answers GET /hold?seconds=N after N seconds (or when the client goes): a request in
// flight for as long as a test needs, bounded like every request by --request-timeout.
func hold(w http.ResponseWriter, req *http.Request) {
	seconds, err := strconv.ParseFloat(req.URL.Query().Get("seconds"), 64)
	if err != nil || seconds < 0 {
		http.Error(w, "hold needs ?seconds=N", http.StatusBadRequest)
		return
	}
	select {
	case <-time.After(time.Duration(seconds * float64(time.Second))):
		fmt.Fprintf(w, "held %gs\n", seconds)
	case <-req.Context().Done():
	}
}

func withBackend(name string, h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		w.Header().Set("X-Backend", name)
		h.ServeHTTP(w, req)
	})
}

type settings struct {
	listen, portFile, pidfile, signalLog, lifecycleLog, name string
	tokenAuthFile, token                                     string
	startupWait                                              time.Duration
}

// authn is kube-apiserver's order: bearer tokens, then anonymous (--anonymous-auth's default).
func authn(s *settings) (authenticator.Request, error) {
	var tokens []authenticator.Request
	if s.tokenAuthFile != "" {
		file, err := tokenfile.NewCSV(s.tokenAuthFile)
		if err != nil {
			return nil, err
		}
		tokens = append(tokens, bearertoken.New(file))
	}
	if s.token != "" {
		tokens = append(tokens, bearertoken.New(tokenfile.New(map[string]*user.DefaultInfo{
			s.token: {Name: "node-agent", UID: "node-agent"}})))
	}
	return union.NewFailOnError(group.NewAuthenticatedGroupAdder(union.New(tokens...)),
		anonymous.NewAuthenticator(nil)), nil
}

// authz: any authenticated user may do anything; anonymous ones only GET kube's public paths.
func authz() authorizer.Authorizer {
	public := authorizer.AuthorizerFunc(
		func(_ context.Context, a authorizer.Attributes) (authorizer.Decision, string, error) {
			if !a.IsResourceRequest() && a.GetVerb() == "get" && publicPaths[a.GetPath()] {
				return authorizer.DecisionAllow, "", nil
			}
			return authorizer.DecisionNoOpinion, "", nil
		})
	return authzunion.New(authorizerfactory.NewPrivilegedGroups(user.AllAuthenticated), public)
}

func run(s *settings, serving *options.SecureServingOptionsWithLoopback, runOptions *options.ServerRunOptions,
	lifecycle *lineLog, ctx context.Context) error {
	if s.listen != "" {
		host, port, err := net.SplitHostPort(s.listen)
		if err != nil {
			return fmt.Errorf("--listen: %w", err)
		}
		serving.BindAddress = net.ParseIP(host)
		if serving.BindPort, err = strconv.Atoi(port); err != nil || serving.BindAddress == nil {
			return fmt.Errorf("--listen needs IP:PORT, not %q", s.listen)
		}
		if serving.BindPort == 0 {
			// The library reads port 0 as "no HTTPS": pick a port here, as the stand-in does.
			if serving.Listener, serving.BindPort, err = options.CreateListener("tcp", s.listen,
				net.ListenConfig{}); err != nil {
				return err
			}
		}
	}
	if errs := append(serving.Validate(), runOptions.Validate()...); len(errs) > 0 {
		return errors.Join(errs...)
	}
	if err := serving.MaybeDefaultWithSelfSignedCerts("localhost", nil,
		[]net.IP{net.IPv4(127, 0, 0, 1)}); err != nil {
		return err
	}

	scheme := runtime.NewScheme()
	if err := corev1.AddToScheme(scheme); err != nil {
		return err
	}
	metav1.AddToGroupVersion(scheme, schema.GroupVersion{Version: "v1"})
	codecs := serializer.NewCodecFactory(scheme)
	config := server.NewConfig(codecs)
	if err := runOptions.ApplyTo(config); err != nil {
		return err
	}
	if err := serving.ApplyToConfig(config); err != nil {
		return err
	}
	var err error
	if config.Authentication.Authenticator, err = authn(s); err != nil {
		return err
	}
	config.Authorization.Authorizer = authz()
	// The library's own requests to itself (its loopback client), as in kube-apiserver.
	server.AuthorizeClientBearerToken(config.LoopbackClientConfig, &config.Authentication,
		&config.Authorization)
	config.BuildHandlerChainFunc = func(h http.Handler, c *server.Config) http.Handler {
		return withBackend(s.name, server.DefaultBuildHandlerChain(h, c))
	}
	// Post-start hooks run once the server serves: the port is open from here on.
	config.AddPostStartHookOrDie("realapi-listening", func(server.PostStartHookContext) error {
		port := strconv.Itoa(serving.BindPort)
		lifecycle.write("LISTENING", port)
		return writeFileAtomically(s.portFile, port+"\n")
	})
	// kube-apiserver's own hooks take seconds; /readyz stays 500 until this one is done too.
	config.AddPostStartHookOrDie("realapi-startup-wait", func(hc server.PostStartHookContext) error {
		select {
		case <-time.After(s.startupWait):
		case <-hc.Done():
		}
		return nil
	})

	generic, err := config.Complete(nil).New("realapi", server.NewEmptyDelegate())
	if err != nil {
		return err
	}
	generic.Handler.NonGoRestfulMux.HandlePrefix("/api/v1/", &agentAPI{codecs: codecs})
	generic.Handler.NonGoRestfulMux.HandleFunc("/hold", hold)
	written := watchLifecycle(generic, lifecycle)
	if err := generic.PrepareRun().RunWithContext(ctx); err != nil {
		return err
	}
	// Once RunWithContext is done, every event has been or is about to be signalled.
	<-written
	return nil
}

func main() {
	s := &settings{}
	fs := pflag.NewFlagSet("realapi", pflag.ContinueOnError)
	serving := options.NewSecureServingOptions().WithLoopback()
	// kube-apiserver's: port 6443 required; the certificate generated in memory unless --cert-dir.
	serving.BindPort = 6443
	serving.Required = true
	serving.ServerCert.CertDirectory = ""
	serving.AddFlags(fs)
	runOptions := options.NewServerRunOptions()
	runOptions.AddUniversalFlags(fs)
	fs.StringVar(&s.listen, "listen", "", "IP:PORT to serve on (instead of --bind-address and "+
		"--secure-port); port 0 picks one, written to --port-file")
	fs.StringVar(&s.portFile, "port-file", "", "written with the port once it serves")
	fs.StringVar(&s.pidfile, "pidfile", "", "written with the PID once the process runs")
	fs.StringVar(&s.signalLog, "signal-log", "", `"SIGTERM <monotonic_us>" per signal`)
	fs.StringVar(&s.lifecycleLog, "lifecycle-log", "", `"WORD <monotonic_us> [detail]" per `+
		"event: LISTENING, UNREADY, NOT_ACCEPTING, IN_FLIGHT_DRAINED, STOPPED_LISTENING, EXIT")
	fs.StringVar(&s.name, "name", "realapi", "the X-Backend header of every answer")
	fs.StringVar(&s.tokenAuthFile, "token-auth-file", "", "kube's static token file (CSV: "+
		"token,user,uid[,\"group,...\"])")
	fs.StringVar(&s.token, "token", "", "a bearer token accepted for the user node-agent")
	fs.DurationVar(&s.startupWait, "startup-wait", 0, "how long a post-start hook keeps "+
		"/readyz at 500 after the port opened, as kube-apiserver's hooks do")
	klogFlags := flag.NewFlagSet("klog", flag.ContinueOnError)
	klog.InitFlags(klogFlags)
	// Level 1 has the library's graceful-termination steps: stderr tells a failed test's reader.
	if err := klogFlags.Set("v", "1"); err != nil {
		panic(err)
	}
	if err := fs.Parse(os.Args[1:]); errors.Is(err, pflag.ErrHelp) {
		os.Exit(0)
	} else if err != nil {
		fmt.Fprintf(os.Stderr, "realapi: %v\n", err)
		os.Exit(2)
	}
	if err := runOptions.ComponentGlobalsRegistry.Set(); err != nil {
		fmt.Fprintf(os.Stderr, "realapi: %v\n", err)
		os.Exit(2)
	}

	signals, err := openLineLog(s.signalLog)
	if err != nil {
		fmt.Fprintf(os.Stderr, "realapi: %v\n", err)
		os.Exit(1)
	}
	lifecycle, err := openLineLog(s.lifecycleLog)
	if err != nil {
		fmt.Fprintf(os.Stderr, "realapi: %v\n", err)
		os.Exit(1)
	}

	ctx := server.SetupSignalContext()
	relaySignals(signals, lifecycle)
	if err := writeFileAtomically(s.pidfile, fmt.Sprintf("%d\n", os.Getpid())); err != nil {
		fmt.Fprintf(os.Stderr, "realapi: --pidfile: %v\n", err)
		os.Exit(1)
	}
	code := 0
	if err := run(s, serving, runOptions, lifecycle, ctx); err != nil {
		fmt.Fprintf(os.Stderr, "realapi: %v\n", err)
		code = 1
	}
	lifecycle.write("EXIT", strconv.Itoa(code))
	klog.Flush()
	os.Exit(code)
}
