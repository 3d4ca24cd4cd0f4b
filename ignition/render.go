// Package ignition renders the Butane and Ignition configs of an etcd
// master: etcdadm's settings and S3 credentials in /etc/etcdadm, the etcd
// user (sysusers.d) and directories (tmpfiles.d), the binaries (downloaded
// and verified by Ignition, or baked into the image), and every embedded
// systemd unit; or, with --binaries sysext, the sysext images (the units
// come with them: the config adds drop-ins) and their sysupdate transfers.
// Butane is translated with Ignition's own butane/config, strictly (a
// warning is an error), and the result is parsed again with Ignition's
// config/v3_4. It is pure apart from reading the two files Options names:
// etcdadm render and the e2e harness call Render.
package ignition

import (
	"fmt"
	"strings"

	butane "github.com/coreos/ignition/v2/butane/config"
	"github.com/coreos/ignition/v2/butane/config/common"
	v3_4 "github.com/coreos/ignition/v2/config/v3_4"
	"github.com/coreos/ignition/v2/config/v3_4/types"
	"github.com/coreos/vcontext/report"
)

// ignitionVersion is the Ignition spec both our Butane versions produce.
const ignitionVersion = "3.4.0"

// Render returns the Butane config for opts and its translation to
// Ignition (indented JSON, ending in a newline). Nothing is returned
// unless both are clean; errors wrap ErrInvalid (bad options, naming the
// flag to fix) or ErrTranslate.
func Render(opts Options) (butaneYAML, ignJSON []byte, err error) {
	p, err := opts.resolve()
	if err != nil {
		return nil, nil, err
	}
	bu, err := p.butane()
	if err != nil {
		return nil, nil, err
	}
	ign, err := Translate(bu)
	if err != nil {
		return nil, nil, err
	}
	return bu, ign, nil
}

// Translate turns Butane into Ignition JSON the way Render does: strict,
// then checked with Ignition's parser. Useful for configs edited by hand.
func Translate(bu []byte) ([]byte, error) {
	ign, rpt, err := butane.TranslateBytes(bu, common.TranslateBytesOptions{
		// Inline files stay readable (data:, URLs) and the output does not
		// depend on the gzip implementation.
		TranslateOptions: common.TranslateOptions{NoResourceAutoCompression: true},
		Pretty:           true,
	})
	if err != nil {
		return nil, fmt.Errorf("%w: butane: %w%s", ErrTranslate, err, entries(rpt))
	}
	if len(rpt.Entries) > 0 {
		return nil, fmt.Errorf("%w: butane (strict: every entry counts):%s", ErrTranslate, entries(rpt))
	}
	if _, err := Parse(ign); err != nil {
		return nil, err
	}
	if !strings.HasSuffix(string(ign), "\n") {
		ign = append(ign, '\n')
	}
	return ign, nil
}

// Parse parses Ignition JSON with Ignition's own config/v3_4 (spec 3.4.0,
// what flatcar 1.1.0 and fcos 1.5.0 produce). Strict like Translate.
func Parse(ign []byte) (types.Config, error) {
	cfg, rpt, err := v3_4.Parse(ign)
	if err != nil {
		return types.Config{}, fmt.Errorf("%w: ignition %s: %w%s", ErrTranslate, ignitionVersion, err, entries(rpt))
	}
	if len(rpt.Entries) > 0 {
		return types.Config{}, fmt.Errorf("%w: ignition %s (strict: every entry counts):%s", ErrTranslate, ignitionVersion, entries(rpt))
	}
	return cfg, nil
}

// entries lists a report one entry per line, each with its path and
// line:column in the input.
func entries(r report.Report) string {
	var b strings.Builder
	for _, e := range r.Entries {
		b.WriteString("\n  " + e.String())
	}
	return b.String()
}
