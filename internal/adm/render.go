package adm

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/urfave/cli/v2"

	"github.com/etcdadm/etcdadm-immutable/ignition"
	"github.com/etcdadm/etcdadm-immutable/internal/atomicfile"
	"github.com/etcdadm/etcdadm-immutable/internal/cliflags"
	"github.com/etcdadm/etcdadm-immutable/internal/settings"
)

func renderCommand() *cli.Command {
	return &cli.Command{
		Name:  "render",
		Usage: "emit the Butane and Ignition config of a master (flatcar or fcos)",
		Description: `Renders, offline (the store is not contacted), what a master boots from:
/etc/etcdadm/etcdadm.env (the store URL and shared settings, no secrets),
/etc/etcdadm/s3-credentials (0600, root: the --s3-credentials-file, or a comment
for a file:// store), the etcd user (sysusers.d) and its directories
(tmpfiles.d), the binaries, /opt/etcd/current -> vX.Y.Z and every systemd unit
(etcd.service is started by etcd-member-join, not enabled).

Without --name the config serves every master (each takes its member name from
its hostname or its volume); with --name, --host and --ip it is one host's,
with those in /etc/etcdadm/host.env.

Binaries: --binaries baked when /opt/etcdadm/bin and /opt/etcd/vX.Y.Z are in
the image; --binaries url to have Ignition download them from
--binaries-base-url (bin/etcdadm, bin/etcd-member-join,
bin/etcd-snapshot-uploader, etcd/vX.Y.Z/{etcd,etcdctl,etcdutl}) and check each
against --sha256-file (sha256sum's output for those relative paths).

--binaries sysext: etcd and etcdadm come as the systemd-sysext images of
'make images' (images/sysext/build.sh), our units with them. Serve that
directory as it is and pass its URL as --binaries-base-url and its SHA256SUMS
as --sha256-file: Ignition downloads etcd-vX.Y.Z-x86-64.raw (--etcd-version's,
and one per --sysext-etcd-version, one a minor) and the etcdadm image into
/opt/extensions/NAME/ and links /etc/extensions/NAME.raw to each (NAME:
etcd-X.Y, etcdadm), checking their sha256; systemd-sysupdate transfers
(/etc/sysupdate.NAME.d/NAME.transfer and .conf) keep them current from the
same URL (or --sysext-update-url): etcd-sysupdate.timer runs 'etcdadm
sysupdate', which fetches newer images, merges them, and declares a newer
etcd patch once every host has it, so the version switchers roll the
members onto it one at a time (never across a minor; 'etcdadm sysupdate
--help'). With --sysext-baked the images are
in the host's image at /etc/extensions already and nothing is downloaded.
The config writes no unit files (the image has them), only drop-ins, and
enables etcdadm-sysext.service: once systemd-sysext merged the images it
reloads systemd and starts etcdadm-sysext.target, which starts the enabled
units. Member join copies the etcd version
/opt/etcd/current names from its image into /opt/etcd. On fcos the config
enables systemd-sysext.service (Flatcar enables it itself).

Translation is strict: any Butane or Ignition warning is an error. The output
holds the S3 credentials: --out-dir files are written 0600.`,
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "variant", Required: true, Usage: "flatcar (Butane flatcar 1.1.0) or fcos (Butane fcos 1.5.0); both give Ignition 3.4.0"},
			optionalStoreFlag(),
			&cli.StringFlag{Name: "etcd-version", Required: true, Usage: "etcd version the host runs first, e.g. 3.6.16 (the spec's; /opt/etcd/current links to it)"},
			&cli.StringFlag{Name: "s3-credentials-file", Usage: "AWS shared-credentials file, copied into the config (needed for s3:// stores)"},
			&cli.StringFlag{Name: "binaries", Required: true, Usage: "url (Ignition downloads and verifies them), baked (already in the image) or sysext (systemd-sysext images of 'make images')"},
			&cli.StringFlag{Name: "binaries-base-url", Usage: "with --binaries url: http(s) URL serving bin/<program> and etcd/vX.Y.Z/<program>; with --binaries sysext: serving the images and SHA256SUMS"},
			&cli.StringFlag{Name: "sha256-file", Usage: "with --binaries url: sha256sum output for those paths (cd DIR && sha256sum bin/* etcd/vX.Y.Z/*); with --binaries sysext: the images' SHA256SUMS"},
			&cli.BoolFlag{Name: "sysext-baked", Usage: "with --binaries sysext: the images are in /etc/extensions already (etcdadm.raw, etcd-X.Y.raw); nothing is downloaded"},
			&cli.StringSliceFlag{Name: "sysext-etcd-version", Usage: "with --binaries sysext: also install this etcd version's image, one a minor, repeatable (the version switcher then needs no download)"},
			&cli.StringFlag{Name: "sysext-etcdadm-version", Usage: "with --binaries sysext: the etcdadm image to install, when --sha256-file lists several"},
			&cli.StringFlag{Name: "sysext-update-url", Usage: "with --binaries sysext: where systemd-sysupdate looks for newer images and their SHA256SUMS (default: --binaries-base-url)"},
			&cli.StringFlag{Name: "name", Usage: "this host's member name, for a per-host config (ETCDADM_MEMBER_NAME in host.env)"},
			&cli.StringFlag{Name: "host", Usage: "how peers reach this host, address or DNS name (ETCDADM_HOST in host.env)"},
			&cli.StringSliceFlag{Name: "ip", Usage: "this host's addresses for its certificates, repeatable (ETCDADM_IPS in host.env)"},
			&cli.StringFlag{Name: "host-log-level", Value: "info", Usage: "ETCDADM_LOG_LEVEL of the units: debug, info, warn or error"},
			&cli.BoolFlag{Name: "manual", Usage: "a master built by hand ('etcdadm init' / 'etcdadm join'): no --store, only member join at boot and certificate renewal"},
			&cli.StringSliceFlag{Name: "enable", Usage: "also enable this embedded unit, repeatable (e.g. etcd-dns-registrar.service when the cluster has a DNS suffix)"},
			&cli.DurationFlag{Name: "backup-interval", Usage: "how often the snapshot timer backs up (default 15m): minutes that divide an hour, or hours that divide a day"},
			&cli.StringSliceFlag{Name: "env", Usage: "further shared setting for etcdadm.env, KEY=VALUE with KEY ETCDADM_*, repeatable (e.g. ETCDADM_FOUND_GRACE=2m): KEY must be a variable one of the binaries reads (their --help lists them as [$ETCDADM_...]) and VALUE what that flag accepts"},
			&cli.StringFlag{Name: "out-dir", Usage: "write NAME.bu and NAME.ign here (NAME: --name, else master) instead of stdout"},
			&cli.StringFlag{Name: "format", Value: "ignition", Usage: "what to print without --out-dir: ignition or butane"},
		},
		Action: renderAction,
	}
}

func renderAction(c *cli.Context) error {
	format, outDir := c.String("format"), c.String("out-dir")
	if format != "ignition" && format != "butane" {
		return cli.Exit(fmt.Sprintf("--format %q: use ignition or butane", format), 2)
	}
	if outDir != "" && c.IsSet("format") {
		return cli.Exit("--format is for stdout; --out-dir writes both NAME.bu and NAME.ign", 2)
	}
	env := map[string]string{}
	known := settings.New(append(settings.Daemons(), settings.Commands(App(io.Discard))...)...)
	var bad []string
	for _, kv := range c.StringSlice("env") {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || k == "" {
			return cli.Exit(fmt.Sprintf("--env %q: expected KEY=VALUE", kv), 2)
		}
		// Other keys: ignition says where they belong.
		if strings.HasPrefix(k, "ETCDADM_") {
			if err := known.Check(k, v); err != nil {
				bad = append(bad, "--env "+err.Error())
			}
		}
		env[k] = v
	}
	if len(bad) > 0 {
		return cli.Exit(fmt.Sprintf("render: %s\nNothing was written.", strings.Join(bad, "\n")), 2)
	}
	opts := ignition.Options{
		Variant:              ignition.Variant(c.String("variant")),
		Store:                c.String("store"),
		EtcdVersion:          c.String("etcd-version"),
		BackupInterval:       c.Duration("backup-interval"),
		LogLevel:             c.String("host-log-level"),
		Env:                  env,
		S3CredentialsFile:    c.String("s3-credentials-file"),
		Name:                 c.String("name"),
		Host:                 c.String("host"),
		IPs:                  c.StringSlice("ip"),
		Binaries:             ignition.Binaries(c.String("binaries")),
		BinariesBaseURL:      c.String("binaries-base-url"),
		SHA256File:           c.String("sha256-file"),
		SysextBaked:          c.Bool("sysext-baked"),
		SysextEtcdVersions:   c.StringSlice("sysext-etcd-version"),
		SysextEtcdadmVersion: c.String("sysext-etcdadm-version"),
		SysextUpdateURL:      c.String("sysext-update-url"),
		EnableUnits:          c.StringSlice("enable"),
		Manual:               c.Bool("manual"),
	}
	bu, ign, err := ignition.Render(opts)
	if err != nil {
		return cli.Exit(fmt.Sprintf("render: %v\nNothing was written.", err), 2)
	}
	if outDir == "" {
		out := ign
		if format == "butane" {
			out = bu
		}
		_, err := c.App.Writer.Write(out)
		return err
	}
	if err := os.MkdirAll(outDir, 0o755); err != nil {
		return fmt.Errorf("render: %w", err)
	}
	name := opts.OutputName()
	buPath, ignPath := filepath.Join(outDir, name+".bu"), filepath.Join(outDir, name+".ign")
	if err := writePrivate(buPath, bu); err != nil {
		return err
	}
	if err := writePrivate(ignPath, ign); err != nil {
		return err
	}
	fmt.Fprintf(c.App.ErrWriter, "wrote %s and %s\n", buPath, ignPath)
	return nil
}

// writePrivate writes b to path (0600: the configs hold the S3
// credentials) through a temp file, so a reader never sees half a config.
func writePrivate(path string, b []byte) error {
	if err := atomicfile.Write(path, b, 0o600, -1, -1); err != nil {
		return fmt.Errorf("render: %w", err)
	}
	return nil
}

// optionalStoreFlag is --store, required unless --manual (render checks).
func optionalStoreFlag() cli.Flag {
	f := cliflags.Store().(*cli.StringFlag)
	f.Required = false
	return f
}
