// Package check renders bloatd's Helm chart with Helm's own Go packages
// (what `helm lint` and `helm template` run) and decodes every rendered
// object strictly into the Kubernetes API types (k8s.io/api and the
// Prometheus Operator's monitoring.coreos.com/v1), so that a misspelt or
// misplaced field fails here and not on a cluster. check_test.go holds the
// checks; `make fleet-test` runs them.
package check

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"strings"

	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	"helm.sh/helm/v3/pkg/action"
	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/chartutil"
	"helm.sh/helm/v3/pkg/lint/support"
	"helm.sh/helm/v3/pkg/releaseutil"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	k8sruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
)

// Release and namespace of the plain manifest and of every check.
const (
	Release   = "bloatd"
	Namespace = "bloatd"
)

// The oldest Kubernetes the chart claims (Chart.yaml kubeVersion); the
// checks render for it.
var kubeVersion = chartutil.KubeVersion{Version: "v1.25.0", Major: "1", Minor: "25"}

// Dir is this package's directory; the chart and the manifest are found
// from it, whatever the working directory.
func Dir() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Dir(file)
}

// ChartDir is daemon/dist/helm/bloatd.
func ChartDir() string { return filepath.Join(Dir(), "..", "..", "helm", "bloatd") }

// ManifestPath is the plain manifest for `kubectl apply`.
func ManifestPath() string { return filepath.Join(Dir(), "..", "bloatd.yaml") }

// RepoRoot is the top of the repository.
func RepoRoot() string { return filepath.Join(Dir(), "..", "..", "..", "..") }

// Lint runs `helm lint --strict` on the chart with vals over its defaults
// and returns every message above INFO (errors and warnings), as text.
func Lint(vals map[string]any) []string {
	l := action.NewLint()
	l.Strict = true
	l.Namespace = Namespace
	l.KubeVersion = &kubeVersion
	res := l.Run([]string{ChartDir()}, vals)
	var out []string
	for _, m := range res.Messages {
		if m.Severity > support.InfoSev {
			out = append(out, m.Error())
		}
	}
	for _, e := range res.Errors {
		out = append(out, e.Error())
	}
	return dedup(out)
}

func dedup(s []string) []string {
	seen := map[string]bool{}
	var out []string
	for _, x := range s {
		if !seen[x] {
			seen[x] = true
			out = append(out, x)
		}
	}
	return out
}

// Render is `helm template bloatd CHART --namespace bloatd` with vals over
// the chart's defaults (values.schema.json applies): the manifest text.
func Render(vals map[string]any) (string, error) {
	chrt, err := loader.Load(ChartDir())
	if err != nil {
		return "", err
	}
	inst := action.NewInstall(&action.Configuration{})
	inst.DryRun = true
	inst.ClientOnly = true
	inst.Replace = true
	inst.ReleaseName = Release
	inst.Namespace = Namespace
	inst.KubeVersion = &kubeVersion
	rel, err := inst.Run(chrt, vals)
	if err != nil {
		return "", err
	}
	return rel.Manifest, nil
}

// scheme knows the kinds the chart may render, and no others: an object of
// any other kind (or apiVersion) fails to decode.
func scheme() *k8sruntime.Scheme {
	s := k8sruntime.NewScheme()
	for _, add := range []func(*k8sruntime.Scheme) error{
		corev1.AddToScheme, appsv1.AddToScheme, monitoringv1.AddToScheme,
	} {
		if err := add(s); err != nil {
			panic(err)
		}
	}
	return s
}

var decoder = serializer.NewCodecFactory(scheme(), serializer.EnableStrict).UniversalDeserializer()

// Object is one rendered object, decoded.
type Object struct {
	Source string // the template it came from
	Obj    k8sruntime.Object
}

// Decode splits a manifest into its documents and decodes each strictly
// (Kubernetes' own strict decoder: unknown fields, duplicate fields and
// wrong types are errors, field names match case-sensitively).
func Decode(manifest string) ([]Object, error) {
	docs := releaseutil.SplitManifests(manifest)
	keys := make([]string, 0, len(docs))
	for k := range docs {
		keys = append(keys, k)
	}
	sort.Sort(releaseutil.BySplitManifestsOrder(keys))
	var out []Object
	var errs []string
	for _, k := range keys {
		doc := docs[k]
		src := source(doc)
		if strings.TrimSpace(stripComments(doc)) == "" {
			continue
		}
		obj, _, err := decoder.Decode([]byte(doc), nil, nil)
		if err != nil {
			errs = append(errs, fmt.Sprintf("%s: %v", src, err))
			continue
		}
		out = append(out, Object{Source: src, Obj: obj})
	}
	if len(errs) > 0 {
		return out, fmt.Errorf("%s", strings.Join(errs, "\n"))
	}
	return out, nil
}

// source is the "# Source: chart/templates/x.yaml" line helm writes.
func source(doc string) string {
	for _, l := range strings.Split(doc, "\n") {
		if s, ok := strings.CutPrefix(l, "# Source: "); ok {
			return s
		}
	}
	return "(manifest)"
}

func stripComments(doc string) string {
	var b strings.Builder
	for _, l := range strings.Split(doc, "\n") {
		if !strings.HasPrefix(strings.TrimSpace(l), "#") {
			b.WriteString(l + "\n")
		}
	}
	return b.String()
}

// PlainManifest is what daemon/dist/kubernetes/bloatd.yaml holds: a
// Namespace that admits privileged pods, then the chart rendered with its
// defaults.
func PlainManifest() (string, error) {
	rendered, err := Render(nil)
	if err != nil {
		return "", err
	}
	// hostNetwork, hostPID, hostPath and added capabilities are beyond Pod
	// Security's "baseline" level: the namespace admits privileged pods.
	ns := "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: " + Namespace +
		"\n  labels:\n    pod-security.kubernetes.io/enforce: privileged\n"
	var b bytes.Buffer
	b.WriteString("# bloatd as a DaemonSet, for `kubectl apply -f` without Helm.\n")
	b.WriteString("# Generated from the chart daemon/dist/helm/bloatd with its default values\n")
	b.WriteString("# (make fleet-manifest); edit the chart, not this file.\n")
	b.WriteString("# The image: see README, \"Fleet\" (make image, then push or import it).\n")
	b.WriteString("---\n# Source: namespace (added by the generator)\n")
	b.WriteString(ns)
	b.WriteString(rendered)
	return b.String(), nil
}

// WriteManifest regenerates the plain manifest.
func WriteManifest() error {
	m, err := PlainManifest()
	if err != nil {
		return err
	}
	return os.WriteFile(ManifestPath(), []byte(m), 0o644)
}
