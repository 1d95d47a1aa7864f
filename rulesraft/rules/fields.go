package rules

import (
	"strconv"
	"strings"
)

// Field is one field of a rules file or of an override, as written: its
// path ("rate", "match.route", "match.descriptor[].key"), its type and what
// leaving it out means, in the words of docs/rules.md. These tables are the
// one list of fields: the parser names them in its "unknown field"
// problems, tests check them against the structs' tags and the parser, and
// a test checks docs/rules.md against them.
type Field struct {
	Name    string
	Type    string
	Default string
	// Feature names what a member must support to store a rule that sets
	// this field (features.go): "" for a field every version knows. A rule
	// set that uses a feature some live member does not advertise is
	// refused (docs/design.md, mixed versions).
	Feature string
}

// Field.Default values that are not a value.
const (
	// Required: the field must be given (docs/rules.md says when not).
	Required = "required"
	// Unset: absent means the feature is off or not used.
	Unset = "none"
)

// FileFields are the fields at the top level of a rules file.
func FileFields() []Field {
	return []Field{
		{"rules", "list of rules", Required, ""},
	}
}

// RuleFields are a rule's fields, in the order a rules file usually gives
// them; a nested field follows its parent.
func RuleFields() []Field {
	return []Field{
		{"id", "string", Required, ""},
		{"match", "mapping", Required, ""},
		{"match.route", "string", Required, ""},
		{"match.method", "string", AnyMethod, ""},
		{"match.plan", "string", AnyPlan, ""},
		{"match.domain", "string", Unset, ""},
		{"match.descriptor", "list of mappings", Unset, ""},
		{"match.descriptor[].key", "string", Required, ""},
		{"match.descriptor[].value", "string", "*", ""},
		{"key", "string", Required, ""},
		{"algorithm", "string", DefaultAlgorithm, ""},
		{"rate", "whole number", Required, ""},
		{"period", "duration", Required, ""},
		{"calendar", "day | week | month | year", Unset, FeatureCalendar},
		{"timezone", "IANA time zone name", DefaultTimezone, FeatureCalendar},
		{"burst", "whole number", "= rate", ""},
		{"fail_mode", "string", DefaultFailMode, ""},
		{"timeout", "duration", Duration(DefaultTimeout).String(), ""},
		{"shadow", "bool", "false", ""},
		{"lease", "auto | off | whole number", LeaseAuto.String(), ""},
		{"max_keys", "whole number", "0", ""},
		{"cost", "whole number", "1", ""},
		{"cost_header", "header name", Unset, ""},
		{"scope", "string", ScopeRegion, ""},
		{"events", "mapping", "{}", ""},
		{"events.sample", "number", strconv.FormatFloat(DefaultEventSample, 'g', -1, 64), ""},
		{"events.redact", "bool", "false", ""},
		{"replaces", "list of rule ids", Unset, ""},
		{"unlimited", "bool", "false", ""},
		{"durable", "on | off", "on", FeatureDurable},
		{"limit", "whole number", Unset, FeatureConcurrency},
		{"permit_ttl", "duration", Duration(DefaultPermitTTL).String(), FeatureConcurrency},
		{"priority_header", "header name", Unset, FeatureReserve},
		{"priority_default", "string", DefaultPriorityClass, FeatureReserve},
		{"reserve", "mapping of class to percent", Unset, FeatureReserve},
	}
}

// OverrideFields are an override's fields (JSON over HTTP, or the flags of
// `weir overrides set`).
func OverrideFields() []Field {
	return []Field{
		{"key", "string", Required, ""},
		{"rule", "string", Required, ""},
		{"rate", "whole number", Required, ""},
		{"burst", "whole number", "= rate", ""},
		{"block", "bool", "false", ""},
		{"expires_at", "RFC 3339 time", "never", ""},
	}
}

// fieldNames lists, comma-separated, the names of fs directly under
// parent ("" for the rule itself, "match", "events"): what the parser
// says a mapping there takes.
func fieldNames(fs []Field, parent string) string {
	var names []string
	for _, f := range fs {
		name := f.Name
		if parent != "" {
			var ok bool
			if name, ok = strings.CutPrefix(name, parent+"."); !ok {
				continue
			}
		}
		if !strings.Contains(name, ".") {
			names = append(names, name)
		}
	}
	return strings.Join(names, ", ")
}
