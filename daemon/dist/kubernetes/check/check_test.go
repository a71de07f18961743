package check

import (
	"errors"
	"flag"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/BurntSushi/toml"
	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"
)

var update = flag.Bool("update", false, "rewrite daemon/dist/kubernetes/bloatd.yaml from the chart")

// A configuration of the chart and what its pod must be granted.
type variant struct {
	name   string
	values string   // YAML over the chart's defaults
	caps   []string // exactly the capabilities added
	kinds  []string // exactly the kinds rendered
}

var (
	load     = []string{"BPF", "PERFMON", "NET_ADMIN"}
	setns    = []string{"BPF", "PERFMON", "NET_ADMIN", "SYS_ADMIN", "SYS_PTRACE"}
	minimal  = []string{"ConfigMap", "DaemonSet", "ServiceAccount"}
	monitors = []string{"ConfigMap", "DaemonSet", "PodMonitor", "Service", "ServiceAccount", "ServiceMonitor"}
)

var variants = []variant{
	{"defaults", ``, load, minimal},
	{"monitors", `
metrics:
  serviceMonitor: {enabled: true, interval: 15s, labels: {release: kube-prometheus-stack}}
  podMonitor: {enabled: true}
`, load, monitors},
	{"service only", `metrics: {service: {enabled: true}}`, load,
		[]string{"ConfigMap", "DaemonSet", "Service", "ServiceAccount"}},
	// the flight recorder's journal in the pod's own emptyDir, bounded
	{"journal in the pod", `
journal: {hostPath: ""}
config: {journal_max_mb: 16, journal_max_days: 7}
`, load, minimal},
	// registering congestion controls enters every network namespace
	{"cc and policy", `
config:
  cc: [bloatd_westwood, bloatd_cubic]
  policy:
    - {name: bulk-westwood, bulk_bytes: 1M, cc: bloatd_westwood}
    - {name: web, sport: 443, cc: bloatd_westwood, enabled: false}
    - {name: backup, cgroup: system.slice/backup.service, dport: "8000-8099", cc: reno}
`, setns, minimal},
	// bloatd's own default (no cc key) registers both
	{"cc left to bloatd", `config: {cc: null}`, setns, minimal},
	// DRWA gives windows back in every namespace at stop
	{"drwa armed", `config: {drwa: "off", drwa_lambda: 2.5, drwa_min_bytes: 131072}`, setns, minimal},
	{"bpf stats", `config: {bpf_stats: true, drwa_lambda: 3.0, floor_prefix_v6: 0}`, setns, minimal},
	{"api on the node", `
api: {hostPath: /run/bloatd, group: bloatd, gid: 998}
metrics: {host: "0.0.0.0", port: 19477, annotations: false}
config: {interval_ms: 50, map_capacity: 131072, floors: false, log: debug}
priorityClassName: system-node-critical
`, append(slices.Clone(load), "CHOWN"), minimal},
}

func parse(t *testing.T, values string) map[string]any {
	t.Helper()
	vals := map[string]any{}
	if err := yaml.Unmarshal([]byte(values), &vals); err != nil {
		t.Fatalf("test values: %v", err)
	}
	return vals
}

func renderDecode(t *testing.T, vals map[string]any) []Object {
	t.Helper()
	manifest, err := Render(vals)
	if err != nil {
		t.Fatalf("helm template: %v", err)
	}
	objs, err := Decode(manifest)
	if err != nil {
		t.Fatalf("strict decode:\n%v", err)
	}
	return objs
}

func TestLint(t *testing.T) {
	for _, v := range variants {
		t.Run(v.name, func(t *testing.T) {
			if msgs := Lint(parse(t, v.values)); len(msgs) > 0 {
				t.Fatalf("helm lint --strict:\n%s", strings.Join(msgs, "\n"))
			}
		})
	}
}

func TestTemplateDecodesStrictly(t *testing.T) {
	bin := bloatdBin(t)
	for _, v := range variants {
		t.Run(v.name, func(t *testing.T) {
			objs := renderDecode(t, parse(t, v.values))
			var kinds []string
			for _, o := range objs {
				kinds = append(kinds, o.Obj.GetObjectKind().GroupVersionKind().Kind)
			}
			slices.Sort(kinds)
			if !slices.Equal(kinds, v.kinds) {
				t.Fatalf("kinds %v, want %v", kinds, v.kinds)
			}
			ds := only[*appsv1.DaemonSet](t, objs)
			checkPod(t, ds, v.caps)
			checkConfig(t, bin, only[*corev1.ConfigMap](t, objs))
			checkMetricsTargets(t, ds, objs)
		})
	}
}

// only is the one object of type T among objs.
func only[T any](t *testing.T, objs []Object) T {
	t.Helper()
	var found []T
	for _, o := range objs {
		if x, ok := o.Obj.(T); ok {
			found = append(found, x)
		}
	}
	if len(found) != 1 {
		var zero T
		t.Fatalf("%d objects of type %T, want 1", len(found), zero)
	}
	return found[0]
}

// checkPod: the least-privilege shape README "Fleet" describes.
func checkPod(t *testing.T, ds *appsv1.DaemonSet, caps []string) {
	t.Helper()
	pod := ds.Spec.Template.Spec
	if !pod.HostNetwork || !pod.HostPID || pod.HostIPC {
		t.Errorf("hostNetwork %v hostPID %v hostIPC %v, want true true false",
			pod.HostNetwork, pod.HostPID, pod.HostIPC)
	}
	if pod.AutomountServiceAccountToken == nil || *pod.AutomountServiceAccountToken {
		t.Errorf("the service account token is mounted: bloatd never uses the API server")
	}
	for k, v := range ds.Spec.Selector.MatchLabels {
		if ds.Spec.Template.Labels[k] != v {
			t.Errorf("selector %s=%s does not select the pod template", k, v)
		}
	}
	if len(pod.Containers) != 1 || len(pod.InitContainers) != 0 {
		t.Fatalf("%d containers, %d init containers: want one bloatd", len(pod.Containers), len(pod.InitContainers))
	}
	c := pod.Containers[0]
	sc := c.SecurityContext
	if sc == nil || sc.Capabilities == nil {
		t.Fatalf("no security context")
	}
	if sc.Privileged == nil || *sc.Privileged {
		t.Errorf("privileged")
	}
	if sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation {
		t.Errorf("allowPrivilegeEscalation is not false")
	}
	if sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem {
		t.Errorf("root file system writable")
	}
	if got := capsOf(sc.Capabilities.Drop); !slices.Equal(got, []string{"ALL"}) {
		t.Errorf("drops %v, want ALL", got)
	}
	want := slices.Clone(caps)
	slices.Sort(want)
	if got := capsOf(sc.Capabilities.Add); !slices.Equal(got, want) {
		t.Errorf("adds %v, want %v", got, want)
	}
	volumes := map[string]corev1.Volume{}
	for _, v := range pod.Volumes {
		volumes[v.Name] = v
	}
	mounts := map[string]corev1.VolumeMount{}
	for _, m := range c.VolumeMounts {
		if _, ok := volumes[m.Name]; !ok {
			t.Errorf("mount %s names no volume", m.MountPath)
		}
		mounts[m.MountPath] = m
	}
	for path, hostPath := range map[string]string{
		"/sys/kernel/btf": "/sys/kernel/btf",
		"/sys/fs/cgroup":  "/sys/fs/cgroup",
	} {
		m, ok := mounts[path]
		if !ok || !m.ReadOnly {
			t.Errorf("%s: mounted %v, read-only %v; want a read-only mount", path, ok, m.ReadOnly)
			continue
		}
		if hp := volumes[m.Name].HostPath; hp == nil || hp.Path != hostPath {
			t.Errorf("%s is not the host's %s", path, hostPath)
		}
	}
	// The flight recorder's journal: writable, on the node or in the pod.
	if m, ok := mounts["/var/lib/bloatd"]; !ok || m.ReadOnly {
		t.Errorf("/var/lib/bloatd (the journal): mounted %v, read-only %v; want a writable mount", ok, m.ReadOnly)
	} else if v := volumes[m.Name]; v.HostPath == nil && v.EmptyDir == nil {
		t.Errorf("the journal is on neither a hostPath nor an emptyDir")
	}
	for _, v := range pod.Volumes {
		if v.HostPath != nil && strings.HasPrefix(v.HostPath.Path, "/sys/fs/bpf") {
			t.Errorf("bpffs mounted: bloatd pins nothing")
		}
	}
	i := slices.Index(c.Args, "--listen")
	if i < 0 || i+1 >= len(c.Args) || !strings.HasSuffix(c.Args[i+1], ":"+port(c)) {
		t.Errorf("args %v: no --listen on the metrics port", c.Args)
	}
	if c.LivenessProbe == nil || c.ReadinessProbe == nil || c.StartupProbe == nil {
		t.Errorf("probes missing")
	}
	if c.Resources.Limits.Memory().IsZero() || c.Resources.Requests.Memory().IsZero() {
		t.Errorf("no memory request or limit")
	}
}

func capsOf(cs []corev1.Capability) []string {
	var out []string
	for _, c := range cs {
		out = append(out, string(c))
	}
	slices.Sort(out)
	return out
}

func port(c corev1.Container) string {
	for _, p := range c.Ports {
		if p.Name == "metrics" {
			return strconv.Itoa(int(p.ContainerPort))
		}
	}
	return "(none)"
}

// checkMetricsTargets: the Service, ServiceMonitor and PodMonitor name a
// port the pod has and select the pods.
func checkMetricsTargets(t *testing.T, ds *appsv1.DaemonSet, objs []Object) {
	t.Helper()
	labels := ds.Spec.Template.Labels
	selects := func(what string, sel map[string]string) {
		for k, v := range sel {
			if labels[k] != v {
				t.Errorf("%s selects %s=%s, which the pods do not carry", what, k, v)
			}
		}
	}
	for _, o := range objs {
		switch x := o.Obj.(type) {
		case *corev1.Service:
			selects("Service", x.Spec.Selector)
			for _, p := range x.Spec.Ports {
				if p.TargetPort.String() != "metrics" {
					t.Errorf("Service targets port %s", p.TargetPort.String())
				}
			}
		case *monitoringv1.ServiceMonitor:
			selects("ServiceMonitor", x.Spec.Selector.MatchLabels)
			for _, e := range x.Spec.Endpoints {
				if e.Port != "metrics" || e.Path != "/metrics" {
					t.Errorf("ServiceMonitor scrapes port %q path %q", e.Port, e.Path)
				}
			}
		case *monitoringv1.PodMonitor:
			selects("PodMonitor", x.Spec.Selector.MatchLabels)
			for _, e := range x.Spec.PodMetricsEndpoints {
				if e.Port == nil || *e.Port != "metrics" || e.Path != "/metrics" {
					t.Errorf("PodMonitor scrapes port %v path %q", e.Port, e.Path)
				}
			}
		}
	}
}

// bloatdBin is the release binary (BLOATD_BIN overrides), which judges the
// rendered bloatd.toml with its own parser.
func bloatdBin(t *testing.T) string {
	t.Helper()
	bin := os.Getenv("BLOATD_BIN")
	if bin == "" {
		bin = filepath.Join(RepoRoot(), "target", "release", "bloatd")
	}
	if _, err := os.Stat(bin); err != nil {
		t.Fatalf("%s: %v (build it first: make build, or set BLOATD_BIN)", bin, err)
	}
	return bin
}

// checkConfig: bloatd accepts the rendered bloatd.toml. `bloatd status`
// reads the config like every command (exit 2 on any error in it) and,
// with no daemon in the empty run directory, exits 3.
func checkConfig(t *testing.T, bin string, cm *corev1.ConfigMap) {
	t.Helper()
	dir := t.TempDir()
	conf := filepath.Join(dir, "bloatd.toml")
	text := cm.Data["bloatd.toml"]
	// The pod's /etc/group (the ConfigMap's `group`) has the API group;
	// this machine may not: check the line there, and parse with root.
	if m := regexp.MustCompile(`(?m)^api_group = "([^"]+)"$`).FindStringSubmatch(text); m != nil {
		if !regexp.MustCompile(`(?m)^` + m[1] + `:x:[0-9]+:$`).MatchString(cm.Data["group"]) {
			t.Errorf("api_group %s is not in the pod's /etc/group:\n%s", m[1], cm.Data["group"])
		}
		text = strings.Replace(text, m[0], `api_group = "root"`, 1)
	}
	t.Logf("bloatd.toml:\n%s", text)
	if err := os.WriteFile(conf, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	run := filepath.Join(dir, "run")
	if err := os.Mkdir(run, 0o700); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(bin, "--config", conf, "--run-dir", run, "status").CombinedOutput()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != 3 {
		t.Fatalf("bloatd with the rendered config: %v, %s\n%s", err, out, cm.Data["bloatd.toml"])
	}
}

// The check fails on what it is there to catch.
func TestMisspeltFieldsFail(t *testing.T) {
	base, err := Render(parse(t, `metrics: {serviceMonitor: {enabled: true}, podMonitor: {enabled: true}}`))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Decode(base); err != nil {
		t.Fatalf("the base manifest must decode: %v", err)
	}
	for _, c := range []struct{ from, to, want string }{
		{"hostNetwork: true", "hostNetwrok: true", `unknown field "spec.template.spec.hostNetwrok"`},
		// field names match case-sensitively (encoding/json would not)
		{"hostNetwork: true", "hostnetwork: true", `unknown field "spec.template.spec.hostnetwork"`},
		{"readOnlyRootFilesystem: true", "readOnlyRootFileSystem: true", "readOnlyRootFileSystem"},
		{"podMetricsEndpoints:", "podMetricEndpoints:", `unknown field "spec.podMetricEndpoints"`},
		{"scrapeTimeout: 10s", "scrapeTimout: 10s", "scrapeTimout"},
		{"kind: DaemonSet", "kind: Daemonset", "no kind \"Daemonset\""},
		{"      hostPID: true", "      hostPID: \"yes\"", "hostPID"},
	} {
		bad := strings.Replace(base, c.from, c.to, 1)
		if bad == base {
			t.Fatalf("%q not in the manifest", c.from)
		}
		_, err := Decode(bad)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s -> %s: error %v, want %s", c.from, c.to, err, c.want)
		}
	}
}

// values.schema.json refuses values the chart does not know, before
// anything renders.
func TestSchemaRefusesUnknownValues(t *testing.T) {
	for _, c := range []struct{ values, want string }{
		{`config: {intervl_ms: 50}`, "intervl_ms"},
		{`config: {policy: [{name: a, bulk_byte: 1M, cc: reno}]}`, "bulk_byte"},
		{`config: {drwa: yes}`, "drwa"},
		{`config: {listen: "0.0.0.0:1"}`, "listen"},
		{`metrics: {serviceMonitor: {enable: true}}`, "enable"},
		{`hostNetwork: false`, "hostNetwork"},
	} {
		_, err := Render(parse(t, c.values))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: error %v, want one naming %s", c.values, err, c.want)
		}
		if msgs := Lint(parse(t, c.values)); len(msgs) == 0 {
			t.Errorf("%s: helm lint passes it", c.values)
		}
	}
}

// daemon/dist/kubernetes/bloatd.yaml is the chart rendered with its
// defaults (go test -run TestPlainManifest -update rewrites it).
func TestPlainManifest(t *testing.T) {
	want, err := PlainManifest()
	if err != nil {
		t.Fatal(err)
	}
	if *update {
		if err := WriteManifest(); err != nil {
			t.Fatal(err)
		}
	}
	got, err := os.ReadFile(ManifestPath())
	if err != nil {
		t.Fatal(err)
	}
	if string(got) != want {
		t.Fatalf("%s is not the chart's rendering: run make fleet-manifest", ManifestPath())
	}
	objs, err := Decode(string(got))
	if err != nil {
		t.Fatalf("strict decode:\n%v", err)
	}
	ns := only[*corev1.Namespace](t, objs)
	if ns.Labels["pod-security.kubernetes.io/enforce"] != "privileged" {
		t.Errorf("namespace without the privileged pod security level")
	}
	checkPod(t, only[*appsv1.DaemonSet](t, objs), load)
	for _, o := range objs {
		if n := o.Obj.(interface{ GetNamespace() string }).GetNamespace(); o.Source != "namespace (added by the generator)" && n != Namespace {
			t.Errorf("%s in namespace %q", o.Source, n)
		}
	}
}

// The chart's version is bloatd's (Cargo.toml's workspace version).
func TestChartVersionIsBloatds(t *testing.T) {
	cargo, err := os.ReadFile(filepath.Join(RepoRoot(), "Cargo.toml"))
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^\[workspace\.package\][^\[]*?^version = "([^"]+)"`).FindSubmatch(cargo)
	if m == nil {
		t.Fatal("no [workspace.package] version in Cargo.toml")
	}
	var chart struct{ Version, AppVersion string }
	b, err := os.ReadFile(filepath.Join(ChartDir(), "Chart.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(b, &chart); err != nil {
		t.Fatal(err)
	}
	if chart.Version != string(m[1]) || chart.AppVersion != string(m[1]) {
		t.Fatalf("Chart.yaml version %s appVersion %s, bloatd %s", chart.Version, chart.AppVersion, m[1])
	}
}

// The chart's config defaults are bloatd's (daemon/dist/bloatd.toml), but
// for cc, which the chart leaves empty on purpose (values.yaml says why).
func TestConfigDefaultsAreBloatds(t *testing.T) {
	var daemon map[string]any
	if _, err := toml.DecodeFile(filepath.Join(RepoRoot(), "daemon", "dist", "bloatd.toml"), &daemon); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(ChartDir(), "values.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var values struct{ Config map[string]any }
	if err := yaml.Unmarshal(b, &values); err != nil {
		t.Fatal(err)
	}
	for k, v := range values.Config {
		d, ok := daemon[k]
		switch {
		case k == "cc":
			if l, _ := v.([]any); len(l) != 0 {
				t.Errorf("cc: the chart registers nothing by default, got %v", v)
			}
		case k == "policy":
		case !ok:
			t.Errorf("config.%s: not in daemon/dist/bloatd.toml", k)
		case toString(d) != toString(v):
			t.Errorf("config.%s = %v, bloatd's default is %v", k, v, d)
		}
	}
}

func toString(v any) string {
	b, _ := yaml.Marshal(v)
	return string(b)
}

func TestMain(m *testing.M) {
	flag.Parse()
	os.Exit(m.Run())
}
