// Command render prints the chart's objects for values given as YAML on
// stdin (over the chart's defaults), as one JSON array, after the same
// strict decode the checks use. scripts/tests/test_image.py runs the
// DaemonSet's pod from it with podman.
package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"

	check "bloatd.invalid/fleetcheck"
	"sigs.k8s.io/yaml"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "render:", err)
		os.Exit(1)
	}
}

func run() error {
	in, err := io.ReadAll(os.Stdin)
	if err != nil {
		return err
	}
	vals := map[string]any{}
	if err := yaml.Unmarshal(in, &vals); err != nil {
		return fmt.Errorf("values: %w", err)
	}
	manifest, err := check.Render(vals)
	if err != nil {
		return err
	}
	objs, err := check.Decode(manifest)
	if err != nil {
		return err
	}
	out := make([]any, 0, len(objs))
	for _, o := range objs {
		out = append(out, o.Obj)
	}
	return json.NewEncoder(os.Stdout).Encode(out)
}
