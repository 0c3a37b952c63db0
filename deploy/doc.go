// Package deploy ships redrive's monitoring assets: Prometheus alert rules
// (prometheus/alerts.yml, with promtool unit tests in
// prometheus/alerts_test.yml) and a Grafana dashboard
// (grafana/dashboard.json). The files are also embedded in Files, so a
// program can write them out. The tests of this package check them
// against the metrics that package metrics exports.
package deploy

import "embed"

// Files holds prometheus/alerts.yml, prometheus/alerts_test.yml and
// grafana/dashboard.json.
//
//go:embed prometheus/alerts.yml prometheus/alerts_test.yml grafana/dashboard.json
var Files embed.FS
