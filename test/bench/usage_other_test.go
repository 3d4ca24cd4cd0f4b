//go:build !linux

package bench

import (
	"os"
	"syscall"
)

type rssWatch struct{}

func lowerOwnMark() int64 { return 0 }

func watchRSS(int64, int) *rssWatch { return &rssWatch{} }

func (*rssWatch) peak(*os.ProcessState) (int64, bool) { return -1, false }

type cpuSnap struct{}

func snapCPU([]int) cpuSnap { return cpuSnap{} }

func cpuSeconds(_, to cpuSnap) (float64, []float64) { return 0, nil }

func pidWithArg(string) int { return 0 }

func sysProcAttr() *syscall.SysProcAttr { return nil }

func settle() {}
