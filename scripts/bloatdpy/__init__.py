"""bloatd's one Python package, for the tests (scripts/tests), the lab
(scripts/lab), the benchmarks (scripts/bench) and the kernel matrix
(scripts/vm); each of those directories reaches it through a symlink
(`bloatdpy -> ../bloatdpy`), so no script edits `sys.path`:

- `api`: the API's client (HTTP on the daemon's Unix socket) and its JSON
  Schema (docs/api.schema.json), which checks every GET's answer;
- `ss`: `ss -tin` parsed with bloatd's field names, the kernel's view;
- `harness`: the daemon (`Daemon`), the lab topology (`Lab`), traffic,
  Prometheus, cgroups, tmux, the chart's pod, and the tests' `TestCase`;
- `instrument`: the lab's per-flow samples, from bloatd or from `ss`;
- `truth`: the lab's truth: its bottleneck, who shares it, what it did.
"""
