// Wrapper module: pins upstream Prometheus, whose promtool checks bosun's alert
// rules (`promtool test rules`) in the tests. Built from the module's own source
// and go.sum (hack/backends/build.sh promtool). Not product code.
module bosun.local/hack/backends/promtool

go 1.25.0

require github.com/prometheus/prometheus v0.316.0
