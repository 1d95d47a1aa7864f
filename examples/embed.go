// Package examples embeds the example rule set that `weir dev` loads.
package examples

import _ "embed"

// RulesYAML is examples/rules.yaml: login per IP, reads and writes per API
// key per plan, several windows on one key, a global, a shadow, a header and
// a lease rule.
//
//go:embed rules.yaml
var RulesYAML []byte
