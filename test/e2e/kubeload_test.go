//go:build linux

package e2e

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// kubeReport is what the Kubernetes client helper saw: a writer creating
// namespaces, configmaps and leases through the apiservers, an informer
// (list, then watch from the list's resourceVersion, re-watch from the
// last one seen, re-list only on 410 Gone) on the configmaps, and a
// /readyz probe of every apiserver.
type kubeReport struct {
	Created      int      `json:"created"`      // creates an apiserver acknowledged
	FailedTries  int      `json:"failedTries"`  // create requests that failed (each retried)
	LongestStall string   `json:"longestStall"` // longest time from a failed create to the next acknowledged one
	Lost         []string `json:"lost"`         // acknowledged objects missing from the final lists
	// Unready: per apiserver, the time /readyz did not answer ok after it
	// first did, in all and the longest stretch.
	Unready    map[string]string `json:"unready"`
	Longest    map[string]string `json:"longestUnready"`
	NotReady   []string          `json:"notReadyAtEnd"`
	Events     int               `json:"events"`
	Missed     int               `json:"missed"`     // acknowledged configmaps the informer never saw
	Relists    int               `json:"relists"`    // lists after the first
	TooOld     int               `json:"tooOld"`     // 410 Gone: "too old resource version"
	Rewatches  int               `json:"rewatches"`  // watches that ended and were opened again from the last resourceVersion
	OutOfOrder int               `json:"outOfOrder"` // events not above the resourceVersion before them
	// WentBack: lists or events below the highest resourceVersion seen
	// before them (a client silently taken back in time).
	WentBack int `json:"wentBack"`
	// MaxRV is the highest resourceVersion the informer saw; Store the
	// configmaps in its cache at the end.
	MaxRV uint64   `json:"maxRV"`
	Store []string `json:"store"`
}

const kubeNS = "e2e-load"

// startKubeLoad runs the helper against the apiservers at urls (the first
// is the one the writer and the informer use until it fails). write=false
// keeps only the informer and the probes; with E2E_KUBE_WAIT_FOR=NAME in
// env, the helper asked to finish first waits (bounded) until its informer
// has configmap NAME.
func startKubeLoad(t *testing.T, c *cluster, k *kubePlane, urls []string, write bool, env ...string) *helper {
	t.Helper()
	return startHelper(t, c, "kube", nil, append(env, "E2E_KUBE_SERVERS="+strings.Join(urls, ","), "E2E_KUBE_CA="+k.caFile, "E2E_KUBE_CERT="+filepath.Join(k.dir, "admin.crt"), "E2E_KUBE_KEY="+filepath.Join(k.dir, "admin.key"), "E2E_KUBE_WRITE="+strconv.FormatBool(write))...)
}

func finishKubeLoad(t *testing.T, h *helper) kubeReport {
	t.Helper()
	var r kubeReport
	h.finish(t, 2*time.Minute, &r)
	return r
}

// kubeClient talks to the apiservers as client-go does: HTTP/2 with a
// health-checking ping, so a dead apiserver's connection is dropped in
// seconds.
type kubeClient struct {
	hc      *http.Client
	servers []string
}

func newKubeClient() (*kubeClient, error) {
	ca, err := os.ReadFile(os.Getenv("E2E_KUBE_CA"))
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(ca) {
		return nil, errors.New("E2E_KUBE_CA holds no certificate")
	}
	cert, err := tls.LoadX509KeyPair(os.Getenv("E2E_KUBE_CERT"), os.Getenv("E2E_KUBE_KEY"))
	if err != nil {
		return nil, err
	}
	tr := &http.Transport{
		TLSClientConfig:   &tls.Config{RootCAs: pool, Certificates: []tls.Certificate{cert}},
		DialContext:       (&net.Dialer{Timeout: 3 * time.Second}).DialContext,
		ForceAttemptHTTP2: true,
		HTTP2:             &http.HTTP2Config{SendPingTimeout: 5 * time.Second, PingTimeout: 5 * time.Second},
	}
	return &kubeClient{hc: &http.Client{Transport: tr}, servers: strings.Split(os.Getenv("E2E_KUBE_SERVERS"), ",")}, nil
}

// do sends one request; it returns the status code and body.
func (k *kubeClient) do(ctx context.Context, server, method, path string, body any) (int, []byte, error) {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return 0, nil, err
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, server+path, rd)
	if err != nil {
		return 0, nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := k.hc.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, b, err
}

type kubeObject struct {
	Metadata struct {
		Name            string `json:"name"`
		ResourceVersion string `json:"resourceVersion"`
	} `json:"metadata"`
	Code int `json:"code"` // a Status object's
}

type kubeList struct {
	Metadata struct {
		ResourceVersion string `json:"resourceVersion"`
	} `json:"metadata"`
	Items []kubeObject `json:"items"`
}

func rvOf(s string) uint64 { v, _ := strconv.ParseUint(s, 10, 64); return v }

// runKubeHelper is the helper's body (E2E_HELPER=kube).
func runKubeHelper() error {
	k, err := newKubeClient()
	if err != nil {
		return err
	}
	stop := make(chan os.Signal, 1)
	signal.Notify(stop, syscall.SIGTERM)
	done := make(chan struct{})
	var mu sync.Mutex
	var r kubeReport
	probes := startProbes(k, done)

	// The namespace the writer fills and the informer watches.
	for i := 0; ; i++ {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		code, b, err := k.do(ctx, k.servers[i%len(k.servers)], "POST", "/api/v1/namespaces", map[string]any{"metadata": map[string]string{"name": kubeNS}})
		cancel()
		if err == nil && (code == 201 || code == 409) {
			break
		}
		if i == 60 {
			return fmt.Errorf("create namespace %s: %d %s %v", kubeNS, code, b, err)
		}
		time.Sleep(time.Second)
	}
	inf := &informer{k: k, seen: map[string]bool{}, store: map[string]uint64{}, mu: &mu, r: &r}
	if err := inf.list(done); err != nil {
		return err
	}
	watchDone := make(chan struct{})
	go func() { defer close(watchDone); inf.run(done) }()

	var acked []string // kind/name
	if os.Getenv("E2E_KUBE_WRITE") == "true" {
		acked = writeObjects(k, stop, &mu, &r)
	} else {
		<-stop
		want := os.Getenv("E2E_KUBE_WAIT_FOR")
		for deadline := time.Now().Add(30 * time.Second); want != "" && time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
			mu.Lock()
			_, ok := inf.store[want]
			mu.Unlock()
			if ok {
				break
			}
		}
	}
	// Every acknowledged object is in the final lists, and every
	// acknowledged configmap reached the informer.
	lists := map[string]string{
		"ns":    "/api/v1/namespaces",
		"cm":    "/api/v1/namespaces/" + kubeNS + "/configmaps",
		"lease": "/apis/coordination.k8s.io/v1/namespaces/" + kubeNS + "/leases",
	}
	have := map[string]bool{}
	for kind, path := range lists {
		var l kubeList
		if err := k.anyServer(func(s string) error { return k.getJSON(s, path, &l) }); err != nil {
			return fmt.Errorf("final list of %s: %w", kind, err)
		}
		for _, it := range l.Items {
			have[kind+"/"+it.Metadata.Name] = true
		}
	}
	for _, a := range acked {
		if !have[a] {
			r.Lost = append(r.Lost, a)
		}
	}
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		mu.Lock()
		r.Missed = 0
		for _, a := range acked {
			if name, ok := strings.CutPrefix(a, "cm/"); ok && !inf.seen[name] {
				r.Missed++
			}
		}
		missed := r.Missed
		mu.Unlock()
		if missed == 0 || time.Now().After(deadline) {
			break
		}
	}
	close(done)
	<-watchDone
	r.Unready, r.Longest, r.NotReady = probes()
	mu.Lock()
	for name := range inf.store {
		r.Store = append(r.Store, name)
	}
	sort.Strings(r.Store)
	b, err := json.Marshal(r)
	mu.Unlock()
	if err != nil {
		return err
	}
	_, err = fmt.Println(string(b))
	return err
}

func (k *kubeClient) getJSON(server, path string, v any) error {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	code, b, err := k.do(ctx, server, "GET", path, nil)
	if err != nil {
		return err
	}
	if code != 200 {
		return fmt.Errorf("GET %s: %d %s", path, code, b)
	}
	return json.Unmarshal(b, v)
}

// anyServer tries f on each apiserver in turn until one succeeds.
func (k *kubeClient) anyServer(f func(server string) error) error {
	var errs []error
	for _, s := range k.servers {
		err := f(s)
		if err == nil {
			return nil
		}
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// writeObjects creates a configmap every 200 ms, and every tenth tick a
// namespace and a lease, through one apiserver until it fails, then the
// next; each create is retried until acknowledged (201, or 409 when a
// timed-out try had made it). It returns the acknowledged objects.
func writeObjects(k *kubeClient, stop <-chan os.Signal, mu *sync.Mutex, r *kubeReport) []string {
	var acked []string
	server := 0
	var longest time.Duration
	create := func(kind, path string, obj map[string]any) bool {
		var failingSince time.Time
		for {
			select {
			case <-stop:
				return false
			default:
			}
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			code, _, err := k.do(ctx, k.servers[server], "POST", path, obj)
			cancel()
			if err == nil && (code == 201 || code == 409) {
				if !failingSince.IsZero() {
					longest = max(longest, time.Since(failingSince))
				}
				acked = append(acked, kind+"/"+obj["metadata"].(map[string]string)["name"])
				return true
			}
			mu.Lock()
			r.FailedTries++
			mu.Unlock()
			if failingSince.IsZero() {
				failingSince = time.Now()
			}
			server = (server + 1) % len(k.servers)
			time.Sleep(100 * time.Millisecond)
		}
	}
	meta := func(name string) map[string]string { return map[string]string{"name": name} }
	for i := 1; ; i++ {
		ok := create("cm", "/api/v1/namespaces/"+kubeNS+"/configmaps", map[string]any{"metadata": meta(fmt.Sprintf("cm-%06d", i)), "data": map[string]string{"seq": strconv.Itoa(i)}})
		if ok && i%10 == 0 {
			ok = create("ns", "/api/v1/namespaces", map[string]any{"metadata": meta(fmt.Sprintf("e2e-ns-%05d", i))}) &&
				create("lease", "/apis/coordination.k8s.io/v1/namespaces/"+kubeNS+"/leases", map[string]any{"metadata": meta(fmt.Sprintf("lease-%05d", i)), "spec": map[string]any{"holderIdentity": "e2e", "leaseDurationSeconds": 30}})
		}
		if !ok {
			break
		}
		select {
		case <-stop:
		case <-time.After(200 * time.Millisecond):
			continue
		}
		break
	}
	mu.Lock()
	r.Created = len(acked)
	r.LongestStall = longest.Round(time.Millisecond).String()
	mu.Unlock()
	return acked
}

// informer is client-go's reflector, reduced to what the scenarios judge.
type informer struct {
	k      *kubeClient
	server int
	mu     *sync.Mutex
	r      *kubeReport
	seen   map[string]bool   // configmaps ever delivered
	store  map[string]uint64 // the cache: name → resourceVersion
	lists  int
	lastRV uint64
}

func (in *informer) path() string { return "/api/v1/namespaces/" + kubeNS + "/configmaps" }

// list replaces the cache from a list, trying each apiserver in turn.
func (in *informer) list(done <-chan struct{}) error {
	for try := 0; ; try++ {
		var l kubeList
		err := in.k.getJSON(in.k.servers[in.server], in.path(), &l)
		if err == nil {
			in.mu.Lock()
			rv := rvOf(l.Metadata.ResourceVersion)
			if in.lists > 0 {
				in.r.Relists++
			}
			in.lists++
			if rv < in.r.MaxRV {
				in.r.WentBack++
			}
			in.store = map[string]uint64{}
			for _, it := range l.Items {
				in.store[it.Metadata.Name] = rvOf(it.Metadata.ResourceVersion)
				in.seen[it.Metadata.Name] = true
			}
			in.lastRV, in.r.MaxRV = rv, max(in.r.MaxRV, rv)
			in.mu.Unlock()
			return nil
		}
		in.server = (in.server + 1) % len(in.k.servers)
		select {
		case <-done:
			return errors.New("stopped")
		case <-time.After(500 * time.Millisecond):
		}
		if try == 600 {
			return fmt.Errorf("list configmaps: %w", err)
		}
	}
}

// run watches from the last resourceVersion until done: a watch that ends
// is opened again (on the next apiserver if it failed), a 410 Gone
// re-lists.
func (in *informer) run(done <-chan struct{}) {
	for {
		gone, err := in.watch(done)
		select {
		case <-done:
			return
		default:
		}
		if gone {
			in.mu.Lock()
			in.r.TooOld++
			in.mu.Unlock()
			if in.list(done) != nil {
				return
			}
			continue
		}
		in.mu.Lock()
		in.r.Rewatches++
		in.mu.Unlock()
		if err != nil {
			in.server = (in.server + 1) % len(in.k.servers)
		}
		select {
		case <-done:
			return
		case <-time.After(500 * time.Millisecond):
		}
	}
}

type watchEvent struct {
	Type   string     `json:"type"`
	Object kubeObject `json:"object"`
}

// watch reads one watch stream; gone says the apiserver answered 410.
func (in *informer) watch(done <-chan struct{}) (gone bool, err error) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		select {
		case <-done:
			cancel()
		case <-ctx.Done():
		}
	}()
	url := fmt.Sprintf("%s%s?watch=1&allowWatchBookmarks=true&timeoutSeconds=300&resourceVersion=%d", in.k.servers[in.server], in.path(), in.lastRV)
	req, err := http.NewRequestWithContext(ctx, "GET", url, nil)
	if err != nil {
		return false, err
	}
	resp, err := in.k.hc.Do(req)
	if err != nil {
		return false, err
	}
	defer resp.Body.Close()
	if resp.StatusCode == http.StatusGone {
		return true, nil
	}
	if resp.StatusCode != 200 {
		b, _ := io.ReadAll(resp.Body)
		return false, fmt.Errorf("watch: %d %s", resp.StatusCode, b)
	}
	dec := json.NewDecoder(resp.Body)
	for {
		var ev watchEvent
		if err := dec.Decode(&ev); err != nil {
			if errors.Is(err, io.EOF) {
				return false, nil // the apiserver's timeout: watch again
			}
			return false, err
		}
		if ev.Type == "ERROR" {
			if ev.Object.Code == http.StatusGone {
				return true, nil
			}
			return false, fmt.Errorf("watch error event: code %d", ev.Object.Code)
		}
		rv := rvOf(ev.Object.Metadata.ResourceVersion)
		in.mu.Lock()
		if ev.Type != "BOOKMARK" {
			in.r.Events++
			if rv <= in.lastRV {
				in.r.OutOfOrder++
			}
			if rv < in.r.MaxRV {
				in.r.WentBack++
			}
			name := ev.Object.Metadata.Name
			in.seen[name] = true
			if ev.Type == "DELETED" {
				delete(in.store, name)
			} else {
				in.store[name] = rv
			}
		}
		in.lastRV, in.r.MaxRV = max(in.lastRV, rv), max(in.r.MaxRV, rv)
		in.mu.Unlock()
	}
}

// startProbes asks every apiserver's /readyz every 250 ms until done; the
// returned func (call after done is closed) gives each one's unready time
// after it was first ready, in all and the longest stretch.
func startProbes(k *kubeClient, done <-chan struct{}) func() (total, longest map[string]string, notReady []string) {
	var wg sync.WaitGroup
	total := make([]time.Duration, len(k.servers))
	longest := make([]time.Duration, len(k.servers))
	ready := make([]bool, len(k.servers))
	for i, s := range k.servers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var readyOnce bool
			var downSince time.Time
			end := func(now time.Time) {
				if !downSince.IsZero() {
					d := now.Sub(downSince)
					total[i] += d
					longest[i] = max(longest[i], d)
					downSince = time.Time{}
				}
			}
			for {
				ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
				code, _, err := k.do(ctx, s, "GET", "/readyz", nil)
				cancel()
				now := time.Now()
				ready[i] = err == nil && code == 200
				if ready[i] {
					readyOnce = true
					end(now)
				} else if readyOnce && downSince.IsZero() {
					downSince = now
				}
				select {
				case <-done:
					end(time.Now())
					return
				case <-time.After(250 * time.Millisecond):
				}
			}
		}()
	}
	return func() (map[string]string, map[string]string, []string) {
		wg.Wait()
		t, l := map[string]string{}, map[string]string{}
		var notReady []string
		for i, s := range k.servers {
			host := strings.TrimSuffix(strings.TrimPrefix(s, "https://"), ":6443")
			t[host], l[host] = total[i].Round(10*time.Millisecond).String(), longest[i].Round(10*time.Millisecond).String()
			if !ready[i] {
				notReady = append(notReady, host)
			}
		}
		return t, l, notReady
	}
}
