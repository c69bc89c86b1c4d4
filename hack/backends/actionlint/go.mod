// Wrapper module: pins upstream actionlint, which checks .github/workflows in
// make lint (and runs shellcheck on their run: blocks). Built from the module's
// own source and go.sum (hack/backends/build.sh actionlint). Not product code.
module bosun.local/hack/backends/actionlint

go 1.25.0

require github.com/rhysd/actionlint v1.7.12
