package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/weirlimit/weir/rulesraft/rules"
)

// Output for humans (-o table) and machines (-o json). The format functions
// take plain values so tests can check them without a node.

func newTable(w io.Writer) *tabwriter.Writer {
	return tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
}

// writeJSON prints a server answer indented, or v marshalled when raw is nil.
func writeJSON(w io.Writer, raw []byte, v any) error {
	if raw == nil {
		b, err := json.MarshalIndent(v, "", "  ")
		if err != nil {
			return fmt.Errorf("weir: encode output: %w", err)
		}
		_, err = fmt.Fprintf(w, "%s\n", b)
		return err
	}
	var buf bytes.Buffer
	if err := json.Indent(&buf, raw, "", "  "); err != nil {
		buf.Reset()
		buf.Write(bytes.TrimSpace(raw))
	}
	buf.WriteByte('\n')
	_, err := w.Write(buf.Bytes())
	return err
}

// orDash shows an empty value as "-" so table columns stay aligned.
func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}

// rateString shows a rate per period as "10/1s".
func rateString(rate int64, period rules.Duration) string {
	return strconv.FormatInt(rate, 10) + "/" + shortDuration(period.D())
}

// ruleRate is a rule's rate as the rules table shows it: "10/1m", or for a
// calendar rule "10000/month Europe/Berlin".
func ruleRate(r *rules.Rule) string {
	if r.Calendar != "" {
		return strconv.FormatInt(r.Rate, 10) + "/" + r.Calendar + " " + r.Timezone
	}
	return rateString(r.Rate, r.Period)
}

// shortDuration drops time.Duration's trailing zero units: "1m" not "1m0s".
func shortDuration(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}

func msString(ms int64) string {
	return shortDuration(time.Duration(ms) * time.Millisecond)
}

// formatRules prints a rule set as a table.
func formatRules(w io.Writer, version uint64, rs []rules.Rule) error {
	fmt.Fprintf(w, "rules version %d: %d rule%s\n", version, len(rs), plural(len(rs)))
	if len(rs) == 0 {
		return nil
	}
	tw := newTable(w)
	fmt.Fprintln(tw, "ID\tROUTE\tMETHOD\tPLAN\tKEY\tALGORITHM\tRATE\tBURST\tFAIL\tTIMEOUT\tSHADOW\tLEASE")
	for _, r := range rs {
		r = rules.Normalize(r)
		route := r.Match.Route
		if r.Match.Domain != "" { // a descriptor rule: "domain:key=value,key"
			route = r.Match.Domain + ":" + rules.FormatEntries(r.Match.Descriptor)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%d\t%s\t%s\t%s\t%s\n",
			r.ID, orDash(route), orDash(r.Match.Method), r.Match.Plan, orDash(r.Key), r.Algorithm,
			ruleRate(&r), r.Burst, r.FailMode, shortDuration(r.Timeout.D()), yesNo(r.Shadow), r.Lease)
	}
	return tw.Flush()
}

// formatRule prints one rule as aligned "field: value" lines, named as in
// rules.yaml.
func formatRule(w io.Writer, version uint64, r rules.Rule) error {
	r = rules.Normalize(r)
	tw := newTable(w)
	rows := [][2]string{
		{"id", r.ID},
		{"match.route", r.Match.Route},
		{"match.method", r.Match.Method},
		{"match.plan", r.Match.Plan},
		{"key", r.Key},
		{"algorithm", r.Algorithm},
		{"rate", strconv.FormatInt(r.Rate, 10)},
		{"period", shortDuration(r.Period.D())},
		{"burst", strconv.FormatInt(r.Burst, 10)},
		{"fail_mode", r.FailMode},
		{"timeout", shortDuration(r.Timeout.D())},
		{"shadow", strconv.FormatBool(r.Shadow)},
		{"lease", r.Lease.String()},
	}
	if r.Calendar != "" { // calendar windows instead of a period
		rows = append(rows, [][2]string{{"calendar", r.Calendar}, {"timezone", r.Timezone}}...)
	}
	if r.Match.Domain != "" { // a descriptor rule (Envoy's rate limit service)
		rows = append(rows, [][2]string{
			{"match.domain", r.Match.Domain},
			{"match.descriptor", rules.FormatEntries(r.Match.Descriptor)},
			{"replaces", strings.Join(r.Replaces, ",")},
			{"unlimited", strconv.FormatBool(r.Unlimited)},
		}...)
	}
	rows = append(rows, [2]string{"rules version", strconv.FormatUint(version, 10)})
	for _, row := range rows {
		fmt.Fprintf(tw, "%s:\t%s\n", row[0], orDash(row[1]))
	}
	return tw.Flush()
}

// formatDiff prints diff lines ("+ id", "- id", "~ id: rate 10 -> 20"), or
// "no changes".
// formatRead says how a read was served: "read: consistent (version N)"
// or "read: stale (version N)". A node that does not say prints nothing.
func formatRead(w io.Writer, read string, version uint64) {
	if read == "" {
		return
	}
	fmt.Fprintf(w, "read: %s (version %d)\n", read, version)
}

func formatDiff(w io.Writer, diff []string) {
	if len(diff) == 0 {
		fmt.Fprintln(w, "no changes")
		return
	}
	for _, l := range diff {
		fmt.Fprintln(w, l)
	}
}

// formatHistory prints history entries, newest first as the server sends.
func formatHistory(w io.Writer, es []historyEntry) error {
	if len(es) == 0 {
		fmt.Fprintln(w, "no history")
		return nil
	}
	tw := newTable(w)
	fmt.Fprintln(tw, "VERSION\tAT\tAUTHOR\tSUMMARY")
	for _, e := range es {
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\n", e.Version, orDash(e.At), orDash(e.Author), orDash(e.Summary))
	}
	return tw.Flush()
}

// formatOverrides prints overrides as a table.
func formatOverrides(w io.Writer, version uint64, os []rules.Override) error {
	fmt.Fprintf(w, "rules version %d: %d override%s\n", version, len(os), plural(len(os)))
	if len(os) == 0 {
		return nil
	}
	tw := newTable(w)
	fmt.Fprintln(tw, "RULE\tKEY\tLIMIT\tEXPIRES")
	for _, o := range os {
		limit := "blocked"
		if !o.Block {
			burst := o.Burst
			if burst == 0 {
				burst = o.Rate
			}
			limit = fmt.Sprintf("rate %d, burst %d", o.Rate, burst)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", o.Rule, o.Key, limit, expiresString(o.ExpiresAt))
	}
	return tw.Flush()
}

func expiresString(t time.Time) string {
	if t.IsZero() {
		return "never"
	}
	return t.UTC().Format(time.RFC3339)
}

// formatDecision prints a check's answer; DENIED stands out.
func formatDecision(w io.Writer, req checkRequest, d decision) error {
	verdict := "ALLOWED"
	if !d.Allowed {
		verdict = "DENIED"
	}
	if req.Cost == 0 {
		verdict += " (peek: cost 0, nothing taken)"
	}
	fmt.Fprintln(w, verdict)
	tw := newTable(w)
	fmt.Fprintf(tw, "key:\t%s\n", req.Key)
	fmt.Fprintf(tw, "rule:\t%s\n", req.Rule)
	fmt.Fprintf(tw, "cost:\t%d\n", req.Cost)
	fmt.Fprintf(tw, "remaining:\t%d of %d\n", d.Remaining, d.Limit)
	fmt.Fprintf(tw, "reset:\tin %s\n", msString(d.ResetMS))
	if !d.Allowed || d.RetryAfterMS > 0 {
		fmt.Fprintf(tw, "retry after:\t%s\n", msString(d.RetryAfterMS))
	}
	return tw.Flush()
}

// formatCluster prints the cluster summary and a member table. The node
// that answered is marked "(self)", the Raft leader with "*".
func formatCluster(w io.Writer, c clusterAnswer) error {
	inRing := 0
	for _, m := range c.Members {
		if m.State == "alive" || m.State == "suspect" {
			inRing++
		}
	}
	others := ""
	if k := len(c.Members) - inRing; k > 0 {
		others = fmt.Sprintf(" (+%d leaving or gone)", k)
	}
	fmt.Fprintf(w, "leader: %s   rules version: %d   ring version: %d   members: %d%s\n",
		orDash(c.Leader), c.RulesVersion, c.RingVersion, inRing, others)
	if c.NoLeader != "" {
		fmt.Fprintln(w, c.NoLeader)
	}
	if len(c.Members) == 0 {
		return nil
	}
	tw := newTable(w)
	fmt.Fprintln(tw, "ID\tSTATE\tRAFT\tPARTITIONS\tREPLICAS\tHTTP\tGRPC\tRAFT ADDR\tGOSSIP")
	for _, m := range c.Members {
		id := m.ID
		if m.ID == c.Leader && c.Leader != "" {
			id += " *"
		}
		if m.ID == c.Self && c.Self != "" {
			id += " (self)"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%d\t%s\t%s\t%s\t%s\n",
			id, orDash(m.State), orDash(m.RaftRole), m.PartitionsOwned, m.ReplicasHeld,
			orDash(m.HTTPAddr), orDash(m.GRPCAddr), orDash(m.RaftAddr), orDash(m.GossipAddr))
	}
	return tw.Flush()
}
