package bench

import (
	"os"
	"runtime/debug"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"
)

// The peak RSS of a method's process. ru_maxrss alone overstates it: Go
// starts children with clone(CLONE_VM|CLONE_VFORK), and exec keeps the
// high-water mark of the memory it replaces, which is the benchmark's own,
// in the ru_maxrss the parent later reads. So before each start the
// benchmark lowers its own mark (clear_refs 5 resets it to the current
// RSS), and while the child runs it samples the child's VmHWM, which
// belongs to the child's own memory. ru_maxrss above the benchmark's mark
// is exact; otherwise the child stayed below it and the last sample is
// the figure (it can miss growth in the last sampleEvery before exit).
const sampleEvery = 5 * time.Millisecond

type rssWatch struct {
	parentMark int64
	sampled    atomic.Int64
	stop, done chan struct{}
}

// lowerOwnMark returns the process's new high-water mark.
func lowerOwnMark() int64 {
	debug.FreeOSMemory()
	_ = os.WriteFile("/proc/self/clear_refs", []byte("5"), 0)
	return vmHWM("self")
}

// watchRSS samples pid's VmHWM until stopped.
func watchRSS(parentMark int64, pid int) *rssWatch {
	w := &rssWatch{parentMark: parentMark, stop: make(chan struct{}), done: make(chan struct{})}
	id := strconv.Itoa(pid)
	go func() {
		defer close(w.done)
		tick := time.NewTicker(sampleEvery)
		defer tick.Stop()
		for {
			if v := vmHWM(id); v > w.sampled.Load() {
				w.sampled.Store(v)
			}
			select {
			case <-w.stop:
				return
			case <-tick.C:
			}
		}
	}()
	return w
}

// peak is the child's peak RSS in bytes, and whether it is a sample
// rather than the kernel's exact figure.
func (w *rssWatch) peak(ps *os.ProcessState) (int64, bool) {
	close(w.stop)
	<-w.done
	ru, ok := ps.SysUsage().(*syscall.Rusage)
	if ok && ru.Maxrss<<10 > w.parentMark+512<<10 {
		return ru.Maxrss << 10, false
	}
	return w.sampled.Load(), true
}

// vmHWM reads VmHWM of /proc/<id>/status in bytes; 0 once the process has
// released its memory.
func vmHWM(id string) int64 {
	b, err := os.ReadFile("/proc/" + id + "/status")
	if err != nil {
		return 0
	}
	for line := range strings.Lines(string(b)) {
		if v, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			kib, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			return kib << 10
		}
	}
	return 0
}

// userHZ is the unit of the CPU times in /proc (USER_HZ, 100 on every
// Linux architecture Go supports).
const userHZ = 100

// cpuSnap is the machine's busy CPU time and that of some processes, in
// userHZ ticks, at one moment.
type cpuSnap struct {
	busy  int64
	procs []int64
}

// snapCPU reads /proc/stat and /proc/<pid>/stat of pids.
func snapCPU(pids []int) cpuSnap {
	s := cpuSnap{procs: make([]int64, len(pids))}
	if b, err := os.ReadFile("/proc/stat"); err == nil {
		line, _, _ := strings.Cut(string(b), "\n")
		f := strings.Fields(line) // cpu user nice system idle iowait irq softirq steal guest...
		for i := 1; i < len(f) && i <= 8; i++ {
			if i == 4 || i == 5 { // idle, iowait
				continue
			}
			v, _ := strconv.ParseInt(f[i], 10, 64)
			s.busy += v
		}
	}
	for i, pid := range pids {
		s.procs[i] = procTicks(pid)
	}
	return s
}

// seconds of CPU between two snaps: the machine's, and each process's.
func cpuSeconds(from, to cpuSnap) (busy float64, procs []float64) {
	procs = make([]float64, len(to.procs))
	for i := range procs {
		procs[i] = float64(to.procs[i]-from.procs[i]) / userHZ
	}
	return float64(to.busy-from.busy) / userHZ, procs
}

// procTicks is a process's user+system time.
func procTicks(pid int) int64 {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0
	}
	_, rest, ok := strings.Cut(string(b), ") ") // the name may hold spaces
	if !ok {
		return 0
	}
	f := strings.Fields(rest) // state ppid ... utime(12th field after the name) stime
	if len(f) < 13 {
		return 0
	}
	u, _ := strconv.ParseInt(f[11], 10, 64)
	st, _ := strconv.ParseInt(f[12], 10, 64)
	return u + st
}

// pidWithArg finds the process whose command line holds arg.
func pidWithArg(arg string) int {
	dirs, _ := os.ReadDir("/proc")
	for _, d := range dirs {
		pid, err := strconv.Atoi(d.Name())
		if err != nil {
			continue
		}
		cmdline, err := os.ReadFile("/proc/" + d.Name() + "/cmdline")
		if err != nil {
			continue
		}
		for a := range strings.SplitSeq(string(cmdline), "\x00") {
			if a == arg {
				return pid
			}
		}
	}
	return 0
}

// sysProcAttr kills a method's process if the benchmark dies first.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}

// settle writes back dirty pages, so a run does not pay for the files the
// one before it wrote.
func settle() { syscall.Sync() }
