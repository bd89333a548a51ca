// Package workflows holds the test that lints the GitHub Actions workflows of the
// repository (.github/workflows: ci.yml runs .ci/run on every push and pull request,
// release.yml runs make release on every v* tag) with actionlint, used as a library. It is
// in the deploy module so that the main module never depends on actionlint.
package workflows
