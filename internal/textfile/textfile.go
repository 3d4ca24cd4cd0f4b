// Package textfile writes Prometheus metrics in the text format for
// node_exporter's textfile collector: gauges, written whole or not at all.
package textfile

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"strconv"
	"strings"

	"github.com/etcdadm/etcdadm-immutable/internal/atomicfile"
)

// Gauges collects gauges in the order they are set.
type Gauges struct {
	b    bytes.Buffer
	seen map[string]bool
}

// Set adds one sample; labels is "" or `{name="value",...}`. The HELP and
// TYPE lines come with a name's first sample.
func (g *Gauges) Set(name, help, labels string, v float64) {
	if g.seen == nil {
		g.seen = map[string]bool{}
	}
	if !g.seen[name] {
		g.seen[name] = true
		fmt.Fprintf(&g.b, "# HELP %s %s\n# TYPE %s gauge\n", name, help, name)
	}
	fmt.Fprintf(&g.b, "%s%s %s\n", name, labels, strconv.FormatFloat(v, 'f', -1, 64))
}

// WriteFile replaces path with the gauges, atomically: a scrape never sees
// half a file.
func (g *Gauges) WriteFile(path string) error {
	if err := atomicfile.Write(path, g.b.Bytes(), 0o644, -1, -1); err != nil {
		return fmt.Errorf("metrics: %w", err)
	}
	return nil
}

// Bool is 1 for true, 0 for false.
func Bool(v bool) float64 {
	if v {
		return 1
	}
	return 0
}

// Previous is the value of the unlabelled sample name in the file at path
// (0 when there is none): what a failed run keeps of the last good one.
func Previous(path, name string) float64 {
	f, err := os.Open(path)
	if err != nil {
		return 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), name+" "); ok {
			x, _ := strconv.ParseFloat(v, 64)
			return x
		}
	}
	return 0
}
