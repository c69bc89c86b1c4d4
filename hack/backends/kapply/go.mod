// Wrapper module: pins upstream cli-utils, whose kapply is kstatus's own command
// line (`kapply status --poll-until=forever` prints each change of a resource's
// kstatus as the library computes it): the tests check every kind's Reconciling
// and Stalled conditions against it. Built from the module's own source and go.sum
// (hack/backends/build.sh kapply). Not product code.
module bosun.local/hack/backends/kapply

go 1.25.0

require sigs.k8s.io/cli-utils v0.37.2
