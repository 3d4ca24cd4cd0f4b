// Package bench measures what a backup costs against real etcd (3.6, one
// member, mutual TLS) and real MinIO, with databases of Kubernetes-like
// objects: etcdctl's snapshot save (the floor), the sequential
// snapshot-gzip-upload that etcd-manager does, and etcd-snapshot-uploader
// end to end. Each method runs as its own process so its peak RSS can be
// read. `make bench` runs it; docs/benchmarks.md records the figures.
package bench

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"

	"github.com/etcdadm/etcdadm-immutable/internal/backup"
	"github.com/etcdadm/etcdadm-immutable/internal/etcdclient"
	"github.com/etcdadm/etcdadm-immutable/internal/etcdmanager"
	"github.com/etcdadm/etcdadm-immutable/test/testenv"
)

const etcdVersion = "3.6.16"

// methodTimeout bounds one method's process.
const methodTimeout = 20 * time.Minute

// runs of each method per benchmark iteration: the median is reported,
// as single runs of a few seconds vary by 10-20 %, more on a machine
// that runs other work.
const runs = 3

var sizes = []struct {
	name  string
	bytes int64
}{
	{"256MiB", 256 << 20},
	{"1GiB", 1 << 30},
}

// benchEnv is what every method runs against, started once.
type benchEnv struct {
	pki      *testenv.PKI
	etcd     *testenv.EtcdMember
	s3       *testenv.S3Server
	etcdctl  string
	uploader string
	filler   *filler
	// watched are etcd's and MinIO's processes, whose CPU time is told
	// apart from everything else the machine runs.
	watched []int
	started int // runs so far, for unique prefixes
}

// measurement is one method's runs.
type measurement struct {
	Method string
	// Wall is the median of the runs, Best the fastest, Worst the slowest.
	Wall, Best, Worst time.Duration
	PeakRSS           int64 // bytes, of the method's process, the largest of the runs
	// RSSSampled: PeakRSS is the last of the samples taken while the
	// process ran, not the kernel's figure (see rssWatch).
	RSSSampled bool
	CPU        time.Duration // user+system of the method's process (median run)
	// CPU seconds etcd and MinIO used during the (median) run, and every
	// other process of the machine, the benchmark's own included: the
	// method shares the cores with etcd and MinIO; "others" is noise.
	EtcdCPU, MinIOCPU, OthersCPU float64
	Gzip                         int64 // gzip bytes it produced, 0 when it does not compress
	Phases                       []phase
}

// A method runs one backup of the database in a new process.
type method struct {
	name string
	run  func(e *benchEnv, b *testing.B, r runDir) measurement
}

var methods = []method{
	{"a-etcdctl-save", (*benchEnv).etcdctlSave},
	{"b-sequential", helperMethod(helperConfig{Mode: modeSequential})},
	{"b2-etcd-manager", helperMethod(helperConfig{Mode: modeEtcdManager})},
	{"c-uploader", uploaderMethod()},
	// For tuning: backup.Write's data path alone at gzip levels 1 (the
	// uploader's default), 3 and 5 (pgzip's default), with the uploader's
	// settings (keep in step with backup.Write and the uploader's main).
	{"d-pipeline-level1", pipelineMethod(1)},
	{"d-pipeline-level3", pipelineMethod(3)},
	{"d-pipeline-level5", pipelineMethod(5)},
}

// pipelineMethod is backup.Write's data path at a gzip level: two blocks of
// 512 KiB, s3store's and etcdclient's defaults, a 40 MiB memory limit.
func pipelineMethod(level int) func(*benchEnv, *testing.B, runDir) measurement {
	return helperMethod(helperConfig{Mode: modePipeline, Level: level, Blocks: 2, BlockSize: 512 << 10}, "GOMEMLIMIT=40MiB")
}

// BenchmarkBackup backs up the same database with every method, for each
// size. Run it with -benchtime 1x: every run takes seconds.
// The database grows from one size to the next.
func BenchmarkBackup(b *testing.B) {
	e := setup(b)
	rows := map[string][]measurement{}
	for _, size := range sizes {
		b.Run(size.name, func(b *testing.B) {
			ctx, cancel := context.WithTimeout(b.Context(), 30*time.Minute)
			defer cancel()
			db, err := e.filler.fill(ctx, size.bytes)
			if err != nil {
				b.Fatal(err)
			}
			fmt.Printf("%s: filled to %.1f MiB (DbSize; %.1f MiB in use), %d objects, revision %d, in %.1fs\n",
				size.name, mib(db.Size), mib(db.InUse), db.Keys, db.Revision, db.Fill.Seconds())
			for _, m := range methods {
				b.Run(m.name, func(b *testing.B) {
					b.StopTimer()
					ms := summarize(m.name, runs*b.N, func() measurement { return m.run(e, b, e.newRun(b)) })
					b.ReportMetric(float64(ms.Wall.Nanoseconds()), "ns/op")
					b.ReportMetric(ms.Wall.Seconds(), "wall-s")
					b.ReportMetric(float64(db.Size)/1e6/ms.Wall.Seconds(), "MB/s")
					b.ReportMetric(mib(ms.PeakRSS), "peak-RSS-MiB")
					b.ReportMetric(ms.CPU.Seconds(), "cpu-s")
					rows[size.name] = append(rows[size.name], ms)
				})
			}
			printTable(os.Stdout, size.name, db, rows[size.name])
		})
	}
	printGrowth(os.Stdout, rows)
}

// summarize runs a method n times: the median run's figures, the range
// of the wall times, the largest peak RSS.
func summarize(name string, n int, run func() measurement) measurement {
	all := make([]measurement, n)
	for i := range all {
		all[i] = run()
	}
	slices.SortFunc(all, func(x, y measurement) int { return cmp.Compare(x.Wall, y.Wall) })
	m := all[n/2]
	m.Method = name
	m.Best, m.Worst = all[0].Wall, all[n-1].Wall
	for _, r := range all {
		if r.PeakRSS > m.PeakRSS {
			m.PeakRSS, m.RSSSampled = r.PeakRSS, r.RSSSampled
		}
	}
	return m
}

// runDir is where one run keeps its files, and its own prefix in the
// bucket (a fresh store for the uploader, so retention sees only its
// backup).
type runDir struct {
	scratch string
	prefix  string
}

func (e *benchEnv) newRun(b *testing.B) runDir {
	e.started++
	name := strings.NewReplacer("/", "_", "=", "_").Replace(b.Name())
	return runDir{scratch: b.TempDir(), prefix: fmt.Sprintf("bench/%03d-%s/", e.started, name)}
}

func setup(b *testing.B) *benchEnv {
	b.Helper()
	uploader, err := filepath.Abs(filepath.Join("..", "..", "bin", "etcd-snapshot-uploader"))
	if err != nil {
		b.Fatal(err)
	}
	if _, err := os.Stat(uploader); err != nil {
		b.Fatalf("%v: run `make build` (make bench does)", err)
	}
	e := &benchEnv{
		pki:      testenv.NewPKI(b),
		s3:       testenv.StartMinIO(b),
		etcdctl:  testenv.EtcdBin(b, etcdVersion, "etcdctl"),
		uploader: uploader,
	}
	// testenv passes etcd no --quota-backend-bytes; the default 2 GiB
	// holds the largest size.
	e.etcd = testenv.StartEtcdCluster(b, etcdVersion, 1, e.pki)[0]
	e.filler = &filler{cli: e.etcd.Client(b), endpoint: e.etcd.Endpoint(), g: newObjectGen(1)}
	e.watched = []int{pidWithArg(e.etcd.DataDir), pidWithArg(e.s3.DataDir)}
	fmt.Printf("BenchmarkBackup: etcd %s (1 member, mutual TLS), MinIO at %s, %d CPUs (GOMAXPROCS %d)\n",
		etcdVersion, e.s3.Endpoint, runtime.NumCPU(), runtime.GOMAXPROCS(0))
	return e
}

// env is a method process's whole environment: nothing of the
// benchmark's own but PATH.
func (e *benchEnv) env(scratch string, withS3 bool) []string {
	env := []string{"PATH=" + os.Getenv("PATH"), "HOME=" + scratch, "TMPDIR=" + scratch}
	if withS3 {
		env = append(env, "AWS_ACCESS_KEY_ID="+e.s3.AccessKey, "AWS_SECRET_ACCESS_KEY="+e.s3.SecretKey)
	}
	return env
}

func (e *benchEnv) etcdctlSave(b *testing.B, r runDir) measurement {
	file := filepath.Join(r.scratch, "snapshot.db")
	cmd := exec.Command(e.etcdctl,
		"--endpoints", e.etcd.Endpoint(),
		"--cacert", e.pki.CACert, "--cert", e.pki.ClientCert, "--key", e.pki.ClientKey,
		"snapshot", "save", file)
	cmd.Env = e.env(r.scratch, false)
	m, _ := e.measure(b, cmd)
	if _, err := os.Stat(file); err != nil {
		b.Fatal(err)
	}
	return m
}

// uploaderMethod runs bin/etcd-snapshot-uploader with its defaults;
// env is added to its environment (GOMEMLIMIT=..., say).
func uploaderMethod(env ...string) func(*benchEnv, *testing.B, runDir) measurement {
	return func(e *benchEnv, b *testing.B, r runDir) measurement {
		return e.uploaderRun(b, r, env)
	}
}

func (e *benchEnv) uploaderRun(b *testing.B, r runDir, env []string) measurement {
	prefix := r.prefix
	metrics := filepath.Join(r.scratch, "etcd_backup.prom")
	cmd := exec.Command(e.uploader,
		"--store", e.s3.URL(prefix),
		"--endpoints", e.etcd.Endpoint(),
		"--cacert", e.pki.CACert, "--cert", e.pki.ClientCert, "--key", e.pki.ClientKey,
		"--metrics-file", metrics)
	cmd.Env = append(e.env(r.scratch, true), env...)
	m, out := e.measure(b, cmd)
	b.Logf("uploader: %s", lastLine(out))
	var in backup.Integrity
	if err := json.Unmarshal(e.object(b, prefix+backup.IntegrityPrefix, ".json"), &in); err != nil {
		b.Fatalf("integrity record: %v", err)
	}
	if got := e.objectSize(b, prefix, "/"+etcdmanager.DataFile); got != in.GzipSize {
		b.Fatalf("uploaded %d bytes, integrity record says %d", got, in.GzipSize)
	}
	m.Gzip = in.GzipSize
	m.Phases = []phase{{"backup.Write", in.DurationSeconds}}
	if run := promValue(b, metrics, "etcdadm_backup_last_duration_seconds"); run > 0 {
		m.Phases = append(m.Phases, phase{"whole run", run})
	}
	return m
}

// promValue reads one value from a node_exporter textfile.
func promValue(b *testing.B, path, name string) float64 {
	raw, err := os.ReadFile(path)
	if err != nil {
		b.Fatal(err)
	}
	for line := range strings.Lines(string(raw)) {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), name+" "); ok {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				b.Fatalf("%s: %s: %v", path, name, err)
			}
			return f
		}
	}
	return 0
}

// helperMethod runs a mode of TestHelperProcess in a child test binary;
// env is added to its environment.
func helperMethod(preset helperConfig, env ...string) func(*benchEnv, *testing.B, runDir) measurement {
	return func(e *benchEnv, b *testing.B, r runDir) measurement {
		mode := preset.Mode
		key := r.prefix + etcdmanager.DataFile
		cfg := preset
		cfg.Etcd = etcdclient.Config{
			Endpoints: []string{e.etcd.Endpoint()},
			CACert:    e.pki.CACert, Cert: e.pki.ClientCert, Key: e.pki.ClientKey,
		}
		cfg.Dir = r.scratch
		cfg.S3Host = strings.TrimPrefix(e.s3.Endpoint, "http://")
		cfg.Bucket = e.s3.Bucket
		cfg.Key = key
		cfg.StoreURL = e.s3.URL("")
		raw, err := json.Marshal(cfg)
		if err != nil {
			b.Fatal(err)
		}
		cmd := exec.Command(os.Args[0], "-test.run=^TestHelperProcess$", "-test.count=1")
		cmd.Env = append(append(e.env(r.scratch, true), env...), envHelper+"="+string(raw))
		m, out := e.measure(b, cmd)
		var res helperResult
		for line := range strings.Lines(string(out)) {
			if s, ok := strings.CutPrefix(line, resultMarker); ok {
				if err := json.Unmarshal([]byte(s), &res); err != nil {
					b.Fatalf("%s: result: %v", mode, err)
				}
			}
		}
		if res.SnapshotBytes == 0 {
			b.Fatalf("%s: no result in its output:\n%s", mode, out)
		}
		if got := e.objectSize(b, "", key); got != res.GzipBytes {
			b.Fatalf("%s: uploaded %d bytes, gzip made %d", mode, got, res.GzipBytes)
		}
		m.Gzip, m.Phases = res.GzipBytes, res.Phases
		return m
	}
}

// measure runs cmd to completion with the benchmark timer running and
// returns its figures and its output; a failure ends the benchmark.
func (e *benchEnv) measure(b *testing.B, cmd *exec.Cmd) (measurement, []byte) {
	b.Helper()
	ctx, cancel := context.WithTimeout(b.Context(), methodTimeout)
	defer cancel()
	run := exec.CommandContext(ctx, cmd.Path, cmd.Args[1:]...)
	run.Env = cmd.Env
	var stdout, stderr bytes.Buffer
	run.Stdout, run.Stderr = &stdout, &stderr
	run.SysProcAttr = sysProcAttr()
	settle()
	e.waitQuiet(b)
	mark := lowerOwnMark()
	cpu0 := snapCPU(e.watched)
	b.StartTimer()
	start := time.Now()
	if err := run.Start(); err != nil {
		b.Fatal(err)
	}
	watch := watchRSS(mark, run.Process.Pid)
	err := run.Wait()
	wall := time.Since(start)
	b.StopTimer()
	busy, procs := cpuSeconds(cpu0, snapCPU(e.watched))
	if err != nil {
		b.Fatalf("%s: %v\nstdout:\n%s\nstderr:\n%s", filepath.Base(cmd.Path), err, tailOf(stdout.String()), tailOf(stderr.String()))
	}
	m := measurement{
		Wall: wall,
		CPU:  run.ProcessState.UserTime() + run.ProcessState.SystemTime(),
	}
	m.PeakRSS, m.RSSSampled = watch.peak(run.ProcessState)
	if len(procs) == 2 {
		m.EtcdCPU, m.MinIOCPU = procs[0], procs[1]
		m.OthersCPU = max(0, busy-m.CPU.Seconds()-m.EtcdCPU-m.MinIOCPU)
	}
	return m, append(stdout.Bytes(), stderr.Bytes()...)
}

// Before each run, wait (up to quietWait) until the rest of the machine
// uses less than quietCores, so runs on a shared machine are comparable.
const (
	quietWait  = 20 * time.Second
	quietCores = 0.15
)

func (e *benchEnv) waitQuiet(b *testing.B) {
	b.Helper()
	deadline := time.Now().Add(quietWait)
	logged := false
	for {
		from := snapCPU(e.watched)
		time.Sleep(time.Second) // the window the load is measured over
		busy, procs := cpuSeconds(from, snapCPU(e.watched))
		others := busy
		for _, p := range procs {
			others -= p
		}
		if others < quietCores || time.Now().After(deadline) {
			if others >= quietCores {
				b.Logf("other processes still use %.1f cores after %s; running anyway", others, quietWait)
			}
			return
		}
		if !logged {
			b.Logf("other processes use %.1f cores; waiting up to %s for them", others, quietWait)
			logged = true
		}
	}
}

// objectSize is the size of the object under prefix whose key ends in
// suffix.
func (e *benchEnv) objectSize(b *testing.B, prefix, suffix string) int64 {
	b.Helper()
	return e.find(b, prefix, suffix).Size
}

// object reads the object under prefix whose key ends in suffix.
func (e *benchEnv) object(b *testing.B, prefix, suffix string) []byte {
	b.Helper()
	ctx, cancel := context.WithTimeout(b.Context(), time.Minute)
	defer cancel()
	key := e.find(b, prefix, suffix).Key
	obj, err := e.s3.Client(b).GetObject(ctx, e.s3.Bucket, key, minio.GetObjectOptions{})
	if err != nil {
		b.Fatalf("get %s: %v", key, err)
	}
	defer obj.Close()
	raw, err := io.ReadAll(obj)
	if err != nil {
		b.Fatalf("get %s: %v", key, err)
	}
	return raw
}

func (e *benchEnv) find(b *testing.B, prefix, suffix string) minio.ObjectInfo {
	b.Helper()
	ctx, cancel := context.WithTimeout(b.Context(), time.Minute)
	defer cancel()
	for oi := range e.s3.Client(b).ListObjects(ctx, e.s3.Bucket, minio.ListObjectsOptions{Prefix: prefix, Recursive: true}) {
		if oi.Err != nil {
			b.Fatalf("list %s: %v", prefix, oi.Err)
		}
		if strings.HasSuffix(oi.Key, suffix) {
			return oi
		}
	}
	b.Fatalf("no object *%s under %q", suffix, prefix)
	return minio.ObjectInfo{}
}

func printTable(w io.Writer, size string, db dbInfo, rows []measurement) {
	defer fmt.Fprintln(w)
	fmt.Fprintf(w, "\n%s: DbSize %d bytes (%.1f MiB), %d objects; %d runs of each method\n\n", size, db.Size, mib(db.Size), db.Keys, runs)
	fmt.Fprintln(w, "| method | wall s: median (best-worst) | MB/s | × (a) | peak RSS MiB | CPU s: method / etcd / MinIO / others | gzip MiB | DB/gzip | phases |")
	fmt.Fprintln(w, "|---|---:|---:|---:|---:|---:|---:|---:|---|")
	by := map[string]measurement{}
	for _, r := range rows {
		by[r.Method] = r
	}
	a, haveA := by["a-etcdctl-save"]
	for _, r := range rows {
		ratio, gz, shrink := "", "", ""
		if haveA {
			ratio = fmt.Sprintf("%.2f", r.Wall.Seconds()/a.Wall.Seconds())
		}
		if r.Gzip > 0 {
			gz = fmt.Sprintf("%.1f", mib(r.Gzip))
			shrink = fmt.Sprintf("%.2f", float64(db.Size)/float64(r.Gzip))
		}
		rss := fmt.Sprintf("%.1f", mib(r.PeakRSS))
		if r.RSSSampled {
			rss = "~" + rss
		}
		var ph []string
		for _, p := range r.Phases {
			ph = append(ph, fmt.Sprintf("%s %.1fs", p.Name, p.Seconds))
		}
		fmt.Fprintf(w, "| %s | %.2f (%.2f-%.2f) | %.0f | %s | %s | %.1f / %.1f / %.1f / %.1f | %s | %s | %s |\n",
			r.Method, r.Wall.Seconds(), r.Best.Seconds(), r.Worst.Seconds(), float64(db.Size)/1e6/r.Wall.Seconds(),
			ratio, rss, r.CPU.Seconds(), r.EtcdCPU, r.MinIOCPU, r.OthersCPU, gz, shrink, strings.Join(ph, ", "))
	}
	c, haveC := by["c-uploader"]
	if !haveC {
		return
	}
	fmt.Fprintln(w)
	if haveA {
		x, best := c.Wall.Seconds()/a.Wall.Seconds(), c.Best.Seconds()/a.Best.Seconds()
		fmt.Fprintf(w, "target (c) ≤ 1.25×(a): median %.2f×, best %.2f×: %s\n", x, best, verdict(x <= 1.25))
	}
	for _, name := range []string{"b-sequential", "b2-etcd-manager"} {
		if r, ok := by[name]; ok {
			x, best := r.Wall.Seconds()/c.Wall.Seconds(), r.Best.Seconds()/c.Best.Seconds()
			fmt.Fprintf(w, "target (c) ≥ 1.5× faster than %s: median %.2f×, best %.2f×: %s\n", name, x, best, verdict(x >= 1.5))
		}
	}
	if size == sizes[len(sizes)-1].name {
		fmt.Fprintf(w, "target peak RSS of (c) ≤ 64 MiB at %s: %.1f MiB: %s\n", size, mib(c.PeakRSS), verdict(c.PeakRSS <= 64<<20))
	}
}

// printGrowth compares peak RSS across sizes.
func printGrowth(w io.Writer, rows map[string][]measurement) {
	small, large := sizes[0].name, sizes[len(sizes)-1].name
	for _, m := range rows[small] {
		for _, l := range rows[large] {
			if l.Method == m.Method {
				fmt.Fprintf(w, "peak RSS of %s: %.1f MiB at %s, %.1f MiB at %s: %+.1f MiB\n",
					m.Method, mib(m.PeakRSS), small, mib(l.PeakRSS), large, mib(l.PeakRSS-m.PeakRSS))
			}
		}
	}
}

func verdict(ok bool) string {
	if ok {
		return "met"
	}
	return "MISSED"
}

func mib(n int64) float64 { return float64(n) / (1 << 20) }

func lastLine(b []byte) string {
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	return lines[len(lines)-1]
}

func tailOf(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	if len(lines) > 30 {
		lines = lines[len(lines)-30:]
	}
	return strings.Join(lines, "\n")
}
