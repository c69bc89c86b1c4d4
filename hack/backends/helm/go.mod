// Wrapper module: pins upstream Helm, which lints and renders bosun's chart in the
// tests. Built from the module's own source and go.sum (hack/backends/build.sh
// helm). Not product code.
module bosun.local/hack/backends/helm

go 1.25.0

require helm.sh/helm/v3 v3.22.0
