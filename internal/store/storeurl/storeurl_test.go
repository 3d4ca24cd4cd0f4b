package storeurl

import (
	"context"
	"strings"
	"testing"
)

// Issue 26 finding 2: a misspelt parameter is refused, naming the ones
// an s3:// URL takes, instead of being ignored (the store then dialled
// AWS); a file:// URL takes none.
func TestOpenRefusesUnknownParameters(t *testing.T) {
	env := func(k string) string {
		if k == "AWS_ACCESS_KEY_ID" || k == "AWS_SECRET_ACCESS_KEY" {
			return "x"
		}
		return ""
	}
	for raw, want := range map[string][]string{
		"s3://bucket/p?region=r&endpint=https://minio:9000":          {`unknown parameter "endpint"`, "endpoint, region, path-style, ca-file"},
		"s3://bucket/p?endpoint=https://a:9000&endpoint=https://b:1": {`"endpoint" given 2 times`},
		"file:///var/lib/store?endpoint=x":                           {"file URLs take no parameters"},
	} {
		_, err := Open(context.Background(), raw, env)
		if err == nil {
			t.Errorf("%s: opened, want refused", raw)
			continue
		}
		for _, w := range want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%s: %q, want it to say %q", raw, err, w)
			}
		}
	}
	for _, raw := range []string{"s3://bucket/p?endpoint=https://minio:9000&region=r&path-style=true", "s3://bucket", "file:///" + t.TempDir()} {
		if _, err := Open(context.Background(), raw, env); err != nil {
			t.Errorf("%s: %v", raw, err)
		}
	}
}
