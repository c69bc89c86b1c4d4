// Wrapper module: pins upstream Helm 4, whose --wait judges readiness with kstatus
// (sigs.k8s.io/cli-utils) as Flux and Argo CD do: the tests check bosun's conditions
// against it. Built from the module's own source and go.sum (hack/backends/build.sh
// helm4). Not product code.
module bosun.local/hack/backends/helm4

go 1.26.0

require helm.sh/helm/v4 v4.3.1
