package bench

import (
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"time"
)

// objectGen makes Kubernetes-like objects as the API server would store
// them for JSON resources: pods, configmaps, events and secrets of 1-8 KiB,
// with varied names, uids and timestamps, repetitive structure (field names,
// labels, images shared by the pods of one app) and some random tokens and
// base64 payload, so gzip shrinks them about as much as a real cluster's
// data. Seeded, so every run writes the same objects in the same order.
type objectGen struct {
	r    *rand.Rand
	seq  int // objects made so far; part of every name, so keys never repeat
	base time.Time
	apps []podApp
	ns   []string
}

// podApp is a deployment: its pods share labels, image, env names.
type podApp struct {
	name, ns, hash, image, sa string
	env                       []string
}

// Object sizes (bytes of the JSON value).
const (
	minObject = 1 << 10
	maxObject = 8 << 10
)

var words = strings.Fields(`api gateway billing payments checkout cart search index
worker queue cache redis postgres kafka metrics auth session frontend backend ingest
report export import sync notify mailer scheduler cron batch stream analytics profile
user account order inventory catalog pricing shipping tracking ledger audit events
webhook proxy edge config feature flags timeout retry enabled max min pool size
connections replicas region zone cluster primary replica endpoint host port path level
format json debug info warn trace sample rate window interval threshold limit burst
tls cert key token service internal external public private stable canary blue green
storage volume backup restore migrate schema database table shard partition consumer
producer topic group offset commit rollback health ready live probe grpc http upstream`)

var eventReasons = []string{"Scheduled", "Pulling", "Pulled", "Created", "Started", "Killing",
	"BackOff", "Unhealthy", "SuccessfulCreate", "ScalingReplicaSet", "FailedMount", "Preempted"}

func newObjectGen(seed uint64) *objectGen {
	g := &objectGen{
		r:    rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)),
		base: time.Date(2025, 3, 1, 0, 0, 0, 0, time.UTC),
	}
	for i := range 40 {
		g.ns = append(g.ns, fmt.Sprintf("team-%s-%d", g.word(), i))
	}
	for range 400 {
		a := podApp{
			name: g.word() + "-" + g.word(),
			ns:   g.ns[g.r.IntN(len(g.ns))],
			hash: g.alnum(10),
		}
		a.image = fmt.Sprintf("registry.example.com/%s/%s:v1.%d.%d", a.ns, a.name, g.r.IntN(40), g.r.IntN(20))
		a.sa = a.name
		for range 8 + g.r.IntN(40) {
			a.env = append(a.env, strings.ToUpper(g.word()+"_"+g.word()+"_"+g.word()))
		}
		g.apps = append(g.apps, a)
	}
	return g
}

// next returns the etcd key and value of a new object.
func (g *objectGen) next() (string, []byte) {
	g.seq++
	switch k := g.r.IntN(100); {
	case k < 35:
		return g.pod()
	case k < 55:
		return g.configMap()
	case k < 90:
		return g.event()
	default:
		return g.secret()
	}
}

func (g *objectGen) word() string { return words[g.r.IntN(len(words))] }

func (g *objectGen) alnum(n int) string {
	const set = "bcdfghjklmnpqrstvwxz2456789"
	b := make([]byte, n)
	for i := range b {
		b[i] = set[g.r.IntN(len(set))]
	}
	return string(b)
}

func (g *objectGen) uid() string {
	var b [16]byte
	g.fill(b[:])
	h := hex.EncodeToString(b[:])
	return h[:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:]
}

func (g *objectGen) hexN(n int) string {
	b := make([]byte, (n+1)/2)
	g.fill(b)
	return hex.EncodeToString(b)[:n]
}

func (g *objectGen) blob(n int) string {
	b := make([]byte, n)
	g.fill(b)
	return base64.StdEncoding.EncodeToString(b)
}

func (g *objectGen) fill(b []byte) {
	for i := 0; i < len(b); i += 8 {
		v := g.r.Uint64()
		for j := i; j < len(b) && j < i+8; j++ {
			b[j] = byte(v)
			v >>= 8
		}
	}
}

func (g *objectGen) time() string {
	return g.base.Add(time.Duration(g.r.IntN(90*24*3600)) * time.Second).Format(time.RFC3339)
}

func (g *objectGen) rv() string { return strconv.Itoa(1_000_000 + g.seq*3 + g.r.IntN(3)) }

func (g *objectGen) ip(prefix string) string {
	return fmt.Sprintf("%s.%d.%d", prefix, g.r.IntN(256), 1+g.r.IntN(254))
}

func (g *objectGen) node() string {
	return fmt.Sprintf("ip-10-0-%d-%d.eu-west-1.compute.internal", g.r.IntN(16), 1+g.r.IntN(60))
}

func (g *objectGen) size(lo, hi int) int { return lo + g.r.IntN(hi-lo+1) }

func (g *objectGen) suffix() string { return strconv.FormatInt(int64(g.seq), 36) }

func managedField(manager, op, ts, fields string) string {
	return fmt.Sprintf(`{"manager":%q,"operation":%q,"apiVersion":"v1","time":%q,"fieldsType":"FieldsV1","fieldsV1":%s}`, manager, op, ts, fields)
}

const podFields = `{"f:metadata":{"f:generateName":{},"f:labels":{".":{},"f:app.kubernetes.io/name":{},"f:pod-template-hash":{}},"f:ownerReferences":{".":{},"k:{\"uid\":\"x\"}":{}}},"f:spec":{"f:containers":{"k:{\"name\":\"app\"}":{".":{},"f:env":{},"f:image":{},"f:imagePullPolicy":{},"f:name":{},"f:ports":{},"f:resources":{}}},"f:dnsPolicy":{},"f:restartPolicy":{},"f:schedulerName":{},"f:securityContext":{},"f:serviceAccountName":{},"f:terminationGracePeriodSeconds":{}}}`

func (g *objectGen) pod() (string, []byte) {
	a := g.apps[g.r.IntN(len(g.apps))]
	name := a.name + "-" + a.hash + "-" + g.alnum(3) + g.suffix()
	created := g.time()
	target := g.size(2560, maxObject-256)
	node := g.node()
	var tail []byte
	tail = fmt.Appendf(tail, `],"resources":{"limits":{"cpu":"%dm","memory":"%dMi"},"requests":{"cpu":"%dm","memory":"%dMi"}},`+
		`"volumeMounts":[{"name":"config","mountPath":"/etc/%s"},{"name":"kube-api-access-%s","readOnly":true,"mountPath":"/var/run/secrets/kubernetes.io/serviceaccount"}],`+
		`"livenessProbe":{"httpGet":{"path":"/healthz","port":8080,"scheme":"HTTP"},"initialDelaySeconds":10,"timeoutSeconds":1,"periodSeconds":10,"successThreshold":1,"failureThreshold":3},`+
		`"readinessProbe":{"httpGet":{"path":"/ready","port":8080,"scheme":"HTTP"},"timeoutSeconds":1,"periodSeconds":5,"successThreshold":1,"failureThreshold":3},`+
		`"terminationMessagePath":"/dev/termination-log","terminationMessagePolicy":"File","imagePullPolicy":"IfNotPresent"}],`+
		`"restartPolicy":"Always","terminationGracePeriodSeconds":30,"dnsPolicy":"ClusterFirst","serviceAccountName":%q,"serviceAccount":%q,"nodeName":%q,"securityContext":{},"schedulerName":"default-scheduler",`+
		`"tolerations":[{"key":"node.kubernetes.io/not-ready","operator":"Exists","effect":"NoExecute","tolerationSeconds":300},{"key":"node.kubernetes.io/unreachable","operator":"Exists","effect":"NoExecute","tolerationSeconds":300}],"priority":0,"enableServiceLinks":true,"preemptionPolicy":"PreemptLowerPriority"},`+
		`"status":{"phase":"Running","conditions":[{"type":"Initialized","status":"True","lastProbeTime":null,"lastTransitionTime":%q},{"type":"Ready","status":"True","lastProbeTime":null,"lastTransitionTime":%q},{"type":"ContainersReady","status":"True","lastProbeTime":null,"lastTransitionTime":%q},{"type":"PodScheduled","status":"True","lastProbeTime":null,"lastTransitionTime":%q}],`+
		`"hostIP":%q,"podIP":%q,"podIPs":[{"ip":%q}],"startTime":%q,"containerStatuses":[{"name":"app","state":{"running":{"startedAt":%q}},"lastState":{},"ready":true,"restartCount":%d,"image":%q,"imageID":"%s@sha256:%s","containerID":"containerd://%s","started":true}],"qosClass":"Burstable"}}`,
		100*(1+g.r.IntN(10)), 128*(1+g.r.IntN(16)), 50*(1+g.r.IntN(10)), 64*(1+g.r.IntN(16)),
		a.name, g.alnum(5),
		a.sa, a.sa, node,
		created, created, created, created,
		g.ip("10.0"), g.ip("100.96"), g.ip("100.96"), created, created, g.r.IntN(3), a.image, a.image, g.hexN(64), g.hexN(64))

	b := make([]byte, 0, maxObject)
	b = fmt.Appendf(b, `{"kind":"Pod","apiVersion":"v1","metadata":{"name":%q,"generateName":"%s-%s-","namespace":%q,"uid":%q,"resourceVersion":%q,"creationTimestamp":%q,`+
		`"labels":{"app.kubernetes.io/name":%q,"app.kubernetes.io/part-of":%q,"pod-template-hash":%q},`+
		`"annotations":{"kubectl.kubernetes.io/restartedAt":%q,"checksum/config":%q,"prometheus.io/scrape":"true","prometheus.io/port":"9090"},`+
		`"ownerReferences":[{"apiVersion":"apps/v1","kind":"ReplicaSet","name":"%s-%s","uid":%q,"controller":true,"blockOwnerDeletion":true}],"managedFields":[%s,%s]},`+
		`"spec":{"volumes":[{"name":"config","configMap":{"name":"%s-config","defaultMode":420}},{"name":"kube-api-access-%s","projected":{"sources":[{"serviceAccountToken":{"expirationSeconds":3607,"path":"token"}},{"configMap":{"name":"kube-root-ca.crt","items":[{"key":"ca.crt","path":"ca.crt"}]}}],"defaultMode":420}}],`+
		`"containers":[{"name":"app","image":%q,"args":["--config=/etc/%s/config.yaml","--log-level=%s"],"ports":[{"name":"http","containerPort":8080,"protocol":"TCP"},{"name":"metrics","containerPort":9090,"protocol":"TCP"}],"env":[`,
		name, a.name, a.hash, a.ns, g.uid(), g.rv(), created,
		a.name, a.ns, a.hash,
		g.time(), g.hexN(64),
		a.name, a.hash, g.uid(),
		managedField("kube-controller-manager", "Update", created, podFields),
		managedField("kubelet", "Update", created, `{"f:status":{"f:conditions":{},"f:containerStatuses":{},"f:hostIP":{},"f:phase":{},"f:podIP":{},"f:podIPs":{},"f:startTime":{}}}`),
		a.name, g.alnum(5),
		a.image, a.name, g.word())
	for i := 0; len(b)+len(tail) < target; i++ {
		if i > 0 {
			b = append(b, ',')
		}
		b = fmt.Appendf(b, `{"name":%q,"value":%q}`, a.env[i%len(a.env)], g.envValue(a))
	}
	return "/registry/pods/" + a.ns + "/" + name, append(b, tail...)
}

// envValue is a plausible environment value: mostly service addresses,
// flags and settings, sometimes a random token.
func (g *objectGen) envValue(a podApp) string {
	switch k := g.r.IntN(20); {
	case k < 5:
		return fmt.Sprintf("http://%s.%s.svc.cluster.local:%d/%s/%s", g.word()+"-"+g.word(), a.ns, 8000+g.r.IntN(100), g.word(), g.word())
	case k < 9:
		return strconv.Itoa(g.r.IntN(10000))
	case k < 12:
		return []string{"true", "false", "info", "debug", "json", "eu-west-1", "production"}[g.r.IntN(7)]
	case k < 15:
		return g.word() + "," + g.word() + "," + g.word() + "," + g.word()
	case k < 18:
		return g.blob(24 + g.r.IntN(24))
	default:
		return "postgres://" + a.name + ":" + g.alnum(16) + "@" + g.word() + "-db." + a.ns + ".svc:5432/" + g.word() + "?sslmode=require"
	}
}

func (g *objectGen) configMap() (string, []byte) {
	ns := g.ns[g.r.IntN(len(g.ns))]
	name := g.word() + "-" + g.word() + "-config-" + g.suffix()
	created := g.time()
	target := g.size(minObject+64, maxObject-64)
	b := make([]byte, 0, maxObject)
	b = fmt.Appendf(b, `{"kind":"ConfigMap","apiVersion":"v1","metadata":{"name":%q,"namespace":%q,"uid":%q,"resourceVersion":%q,"creationTimestamp":%q,`+
		`"labels":{"app.kubernetes.io/name":%q,"app.kubernetes.io/managed-by":"Helm","helm.sh/chart":"%s-%d.%d.%d"},"annotations":{"meta.helm.sh/release-name":%q,"meta.helm.sh/release-namespace":%q},`+
		`"managedFields":[%s]},"data":{`,
		name, ns, g.uid(), g.rv(), created,
		g.word(), g.word(), 1+g.r.IntN(5), g.r.IntN(30), g.r.IntN(10), g.word(), ns,
		managedField("helm", "Update", created, `{"f:data":{".":{},"f:config.yaml":{}},"f:metadata":{"f:annotations":{".":{},"f:meta.helm.sh/release-name":{},"f:meta.helm.sh/release-namespace":{}},"f:labels":{".":{},"f:app.kubernetes.io/managed-by":{},"f:app.kubernetes.io/name":{},"f:helm.sh/chart":{}}}}`))
	// A third of the configmaps carry a binary payload (a keystore, a
	// compiled rule set) in binaryData: base64 of random bytes.
	binary := 0
	if g.r.IntN(3) == 0 {
		binary = (target - len(b)) * (30 + g.r.IntN(40)) / 100
	}
	var yaml strings.Builder
	yaml.WriteString("# managed by helm\n")
	// Quoting turns each newline into two bytes.
	for lines := 1; len(b)+yaml.Len()+lines+binary+64 < target; lines++ {
		switch g.r.IntN(4) {
		case 0:
			fmt.Fprintf(&yaml, "%s:\n", g.word())
		case 1:
			fmt.Fprintf(&yaml, "  %s_%s: %d\n", g.word(), g.word(), g.r.IntN(5000))
		case 2:
			fmt.Fprintf(&yaml, "  %s: %s.%s.svc.cluster.local:%d\n", g.word(), g.word(), ns, 8000+g.r.IntN(100))
		default:
			fmt.Fprintf(&yaml, "  %s_%s: %s\n", g.word(), g.word(), g.word())
		}
	}
	b = fmt.Appendf(b, `"config.yaml":%q}`, yaml.String())
	if binary > 0 {
		b = fmt.Appendf(b, `,"binaryData":{"%s.bin":%q}`, g.word(), g.blob(binary*3/4))
	}
	return "/registry/configmaps/" + ns + "/" + name, append(b, '}')
}

func (g *objectGen) event() (string, []byte) {
	a := g.apps[g.r.IntN(len(g.apps))]
	pod := a.name + "-" + a.hash + "-" + g.alnum(5)
	name := pod + "." + g.hexN(16)
	first := g.time()
	reason := eventReasons[g.r.IntN(len(eventReasons))]
	var msg string
	switch reason {
	case "Pulling", "Pulled":
		msg = fmt.Sprintf("Successfully pulled image %q in %d.%03ds (%d.%03ds including waiting). Image size: %d bytes.", a.image, g.r.IntN(20), g.r.IntN(1000), g.r.IntN(30), g.r.IntN(1000), 10_000_000+g.r.IntN(500_000_000))
	case "Scheduled":
		msg = fmt.Sprintf("Successfully assigned %s/%s to %s", a.ns, pod, g.node())
	case "Unhealthy", "BackOff":
		msg = fmt.Sprintf("Readiness probe failed: Get \"http://%s:8080/ready\": context deadline exceeded (Client.Timeout exceeded while awaiting headers)", g.ip("100.96"))
	default:
		msg = fmt.Sprintf("%s container app in pod %s (%s %s %s)", reason, pod, g.word(), g.word(), g.word())
	}
	b := make([]byte, 0, 2048)
	b = fmt.Appendf(b, `{"kind":"Event","apiVersion":"v1","metadata":{"name":%q,"namespace":%q,"uid":%q,"resourceVersion":%q,"creationTimestamp":%q,"managedFields":[%s]},`+
		`"involvedObject":{"kind":"Pod","namespace":%q,"name":%q,"uid":%q,"apiVersion":"v1","resourceVersion":%q,"fieldPath":"spec.containers{app}"},`+
		`"reason":%q,"message":%q,"source":{"component":"kubelet","host":%q},"firstTimestamp":%q,"lastTimestamp":%q,"count":%d,"type":%q,"eventTime":null,"reportingComponent":"kubelet","reportingInstance":%q}`,
		name, a.ns, g.uid(), g.rv(), first,
		managedField("kubelet", "Update", first, `{"f:count":{},"f:firstTimestamp":{},"f:involvedObject":{},"f:lastTimestamp":{},"f:message":{},"f:reason":{},"f:reportingComponent":{},"f:reportingInstance":{},"f:source":{"f:component":{},"f:host":{}},"f:type":{}}`),
		a.ns, pod, g.uid(), g.rv(),
		reason, msg, g.node(), first, g.time(), 1+g.r.IntN(40), []string{"Normal", "Warning"}[g.r.IntN(2)], g.node())
	return "/registry/events/" + a.ns + "/" + name + g.suffix(), b
}

func (g *objectGen) secret() (string, []byte) {
	ns := g.ns[g.r.IntN(len(g.ns))]
	name := g.word() + "-" + g.word() + "-tls-" + g.suffix()
	created := g.time()
	target := g.size(minObject+512, 4<<10)
	b := make([]byte, 0, 4<<10)
	b = fmt.Appendf(b, `{"kind":"Secret","apiVersion":"v1","metadata":{"name":%q,"namespace":%q,"uid":%q,"resourceVersion":%q,"creationTimestamp":%q,`+
		`"annotations":{"cert-manager.io/certificate-name":%q,"cert-manager.io/issuer-name":"letsencrypt","cert-manager.io/common-name":"%s.example.com"}},"type":"kubernetes.io/tls","data":{`,
		name, ns, g.uid(), g.rv(), created, name, g.word())
	rest := (target - len(b) - 40) * 3 / 4
	crt := rest * 2 / 3
	b = fmt.Appendf(b, `"tls.crt":%q,"tls.key":%q}}`, g.blob(crt), g.blob(rest-crt))
	return "/registry/secrets/" + ns + "/" + name, b
}
