package ignition

import (
	"bytes"
	"context"
	"fmt"
	"net/url"
	"os"
	"strings"
	"unicode/utf8"

	"github.com/etcdadm/etcdadm-immutable/internal/store/storeurl"
)

// checkStore parses the store URL by storeurl's rules without opening it:
// a file:// directory exists on the hosts, not necessarily here, and an S3
// store is checked with placeholder credentials (minio contacts nothing
// until the first request). kind is "file" or "s3" for a good URL.
func checkStore(raw string) (kind string, err error) {
	if raw == "" {
		return "", fmt.Errorf("no store: pass --store file:///path or --store s3://BUCKET/PREFIX")
	}
	u, err := url.Parse(raw)
	if err != nil {
		return "", fmt.Errorf("--store %q: %w; expected %s", raw, err, storeurl.Help)
	}
	switch u.Scheme {
	case "file":
		switch {
		case u.Host != "" && u.Host != "localhost":
			return "", fmt.Errorf("--store %q: file URLs need three slashes (file:///path)", raw)
		case u.Opaque != "" || !strings.HasPrefix(u.Path, "/") || u.Path == "/":
			return "", fmt.Errorf("--store %q: name an absolute directory, e.g. file:///var/lib/etcdadm/store", raw)
		case u.RawQuery != "" || u.Fragment != "":
			return "", fmt.Errorf("--store %q: file URLs take no query or fragment", raw)
		case strings.ContainsAny(u.Path, " \t\n%\\\""):
			// The units name the directory in ReadWritePaths=.
			return "", fmt.Errorf("--store %q: the hosts' units name this directory in their settings: use a path without spaces, %%, \\ or quotes", raw)
		}
		return "file", checkEnvValue(raw)
	case "s3":
		// ca-file names a file on the hosts: not ours to read here.
		q := u.Query()
		q.Del("ca-file")
		v := *u
		v.RawQuery = q.Encode()
		placeholder := func(k string) string {
			if k == "AWS_ACCESS_KEY_ID" || k == "AWS_SECRET_ACCESS_KEY" {
				return "placeholder"
			}
			return ""
		}
		if _, err := storeurl.Open(context.Background(), v.String(), placeholder); err != nil {
			return "", fmt.Errorf("--store: %w", err)
		}
		return "s3", checkEnvValue(raw)
	default:
		return "", fmt.Errorf("--store %q: unsupported scheme %q; expected %s", raw, u.Scheme, storeurl.Help)
	}
}

func credentials(path, storeKind string) (string, error) {
	if path == "" {
		switch storeKind {
		case "file":
			return "# No S3 credentials: the store is a file:// directory. The units load this\n" +
				"# file with LoadCredential=aws:" + CredentialsFile + ", so it must exist.\n", nil
		case "":
			return "", nil // the store URL is wrong: that error says enough
		}
		return "", fmt.Errorf("an s3:// store needs credentials: pass --s3-credentials-file PATH (an AWS shared-credentials file with aws_access_key_id and aws_secret_access_key)")
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return "", fmt.Errorf("--s3-credentials-file: %w", err)
	}
	switch {
	case !utf8.Valid(b) || bytes.IndexByte(b, 0) >= 0:
		return "", fmt.Errorf("--s3-credentials-file %s: not a text file; expected an AWS shared-credentials file", path)
	case !bytes.Contains(bytes.ToLower(b), []byte("aws_access_key_id")):
		return "", fmt.Errorf("--s3-credentials-file %s: no aws_access_key_id; expected an AWS shared-credentials file:\n    [default]\n    aws_access_key_id = ...\n    aws_secret_access_key = ...", path)
	case !defaultProfileRE.Match(b):
		// The units set no AWS_PROFILE, so the store reads [default].
		return "", fmt.Errorf("--s3-credentials-file %s: no [default] profile; the hosts read that one (rename the section to [default])", path)
	}
	if !bytes.HasSuffix(b, []byte("\n")) {
		b = append(b, '\n')
	}
	return string(b), nil
}
