// Package rendertest checks the Helm chart in deploy/helm/weir against the
// plain manifests in deploy/kubernetes: rendered with its default values
// and the release name "weir", the chart makes the same objects (kinds,
// names, ports, probes, arguments, variables, volumes, replicas, the
// PodDisruptionBudget), with the chart's extra labels as the only
// difference. It is its own module so that Helm's dependencies stay out of
// Weir's: Debian packages no helm binary, so the test renders the chart
// with Helm's Go library (chart loader and template engine).
package rendertest
