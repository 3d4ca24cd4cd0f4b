package ignition

import (
	"fmt"
	"net/url"
	"os"
	"strings"
)

func downloads(base, sumsFile, etcdVersion string) ([]download, error) {
	base, err := checkBaseURL("--binaries-base-url", base)
	if err != nil {
		return nil, err
	}
	sums, err := readSums(sumsFile)
	if err != nil {
		return nil, err
	}
	etcdRel := "etcd/v" + etcdVersion
	var want []download
	for _, p := range programs() {
		want = append(want, download{path: BinDir + "/" + p, url: "bin/" + p})
	}
	for _, p := range etcdPrograms() {
		want = append(want, download{path: EtcdDir + "/v" + etcdVersion + "/" + p, url: etcdRel + "/" + p})
	}
	var files []string
	for _, d := range want {
		files = append(files, d.url)
	}
	hashes, missing := lookupSums(sums, files)
	for i := range want {
		want[i].sha256, want[i].url = hashes[i], base+"/"+want[i].url
	}
	if len(missing) > 0 {
		return nil, fmt.Errorf("--sha256-file %s: no sha256 for %s; refusing to render downloads Ignition cannot verify (write the file with: cd DIR && sha256sum bin/%s %s/*)",
			sumsFile, strings.Join(missing, ", "), strings.Join(programs(), " bin/"), etcdRel)
	}
	return want, nil
}

// lookupSums gives the sha256 of each of files in sums (a SHA256SUMS
// file's), and the files it has none for.
func lookupSums(sums map[string]string, files []string) (hashes, missing []string) {
	for _, f := range files {
		h, ok := sums[f]
		if !ok {
			missing = append(missing, f)
		}
		hashes = append(hashes, h)
	}
	return hashes, missing
}

// checkBaseURL checks --binaries-base-url, to which file paths are
// appended, and returns it without a trailing slash.
func checkBaseURL(flag, base string) (string, error) {
	u, err := url.Parse(base)
	switch {
	case err != nil:
		return "", fmt.Errorf("%s: %w", flag, err)
	case u.Scheme != "http" && u.Scheme != "https" || u.Host == "":
		return "", fmt.Errorf("%s %q: expected http(s)://host[:port]/path", flag, base)
	case u.RawQuery != "" || u.Fragment != "" || u.User != nil:
		return "", fmt.Errorf("%s %q: no query, fragment or credentials: the file paths are appended to it", flag, base)
	}
	return strings.TrimSuffix(base, "/"), nil
}

// readSums reads --sha256-file: relative path -> sha256.
func readSums(path string) (map[string]string, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("--sha256-file: %w", err)
	}
	sums, err := parseSums(raw)
	if err != nil {
		return nil, fmt.Errorf("--sha256-file %s: %w", path, err)
	}
	return sums, nil
}

// parseSums reads sha256sum output: "<64 hex>  <path>" or "<hex> *<path>"
// (binary mode); blank lines and # comments are skipped.
func parseSums(b []byte) (map[string]string, error) {
	out := map[string]string{}
	for i, line := range strings.Split(string(b), "\n") {
		line = strings.TrimRight(line, "\r")
		if strings.TrimSpace(line) == "" || strings.HasPrefix(strings.TrimSpace(line), "#") {
			continue
		}
		sum, name, ok := strings.Cut(line, " ")
		if !ok || !hexRE.MatchString(sum) {
			return nil, fmt.Errorf("line %d: expected \"<64 hex digits>  <path>\" (sha256sum's format), got %q", i+1, line)
		}
		name = strings.TrimPrefix(strings.TrimPrefix(name, " "), "*")
		name = strings.TrimPrefix(name, "./")
		sum = strings.ToLower(sum)
		if old, dup := out[name]; dup && old != sum {
			return nil, fmt.Errorf("line %d: %s listed twice with different hashes", i+1, name)
		}
		out[name] = sum
	}
	return out, nil
}
