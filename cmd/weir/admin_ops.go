package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"github.com/spf13/cobra"

	"github.com/weirlimit/weir/node/events"
)

// The operators' commands: weir events, weir top, weir limits. They read
// node/opsapi's and node/api's HTTP answers (an event in the one event
// shape, node/events.Event).

type eventsAnswer struct {
	Events   []events.Event `json:"events"`
	Answered []string       `json:"answered"`
	Failed   []string       `json:"failed"`
}

// eventsCmd is `weir events [--rule R] [--key K] [--decision D] [--follow]`.
func (c *cli) eventsCmd() *cobra.Command {
	cmd := &cobra.Command{Use: "events [--rule R] [--follow]", Args: noArgs, GroupID: "admin",
		Short: "Show sampled limit events (denials, fail-mode decisions)",
		Long: "Show the cluster's sampled limit events, oldest first: each node keeps a sample of\n" +
			"its decisions (each rule's first denial in each second, by default 1% of the other\n" +
			"denials, and every decision the owner could not make; a rule's events: {sample: 0.1}\n" +
			"changes the share). --follow keeps printing new events until interrupted; with\n" +
			"-o json each event is one JSON line."}
	o := adminFlags(cmd)
	rule := cmd.Flags().String("rule", "", "only this rule `id`")
	key := cmd.Flags().String("key", "", "only this `key` (for a redacted rule: its hash as events show it)")
	decision := cmd.Flags().String("decision", "", "only `allowed`, denied or error")
	follow := cmd.Flags().BoolP("follow", "f", false, "keep printing new events")
	limit := cmd.Flags().Int("limit", 100, "at most `N` of the newest buffered events (0: all)")
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		switch *decision {
		case "", "allowed", "denied", "error":
		default:
			return usageErr(cmd, "--decision %q: want allowed, denied or error", *decision)
		}
		if *limit < 0 {
			return usageErr(cmd, "--limit %d: must be >= 0", *limit)
		}
		q := url.Values{"limit": {strconv.Itoa(*limit)}}
		for k, v := range map[string]string{"rule": *rule, "key": *key, "decision": *decision} {
			if v != "" {
				q.Set(k, v)
			}
		}
		if !*follow {
			return request(c, cmd, o, func(api *apiClient) (eventsAnswer, []byte, error) {
				var a eventsAnswer
				raw, err := api.getJSON(cmd.Context(), "/v1/events", q, &a)
				return a, raw, err
			}, func(a eventsAnswer) error {
				if len(a.Failed) > 0 {
					fmt.Fprintf(c.stderr, "weir: no answer from %s; their events are missing\n", strings.Join(a.Failed, ", "))
				}
				if len(a.Events) == 0 {
					fmt.Fprintf(c.stderr, "weir: no events held; %s\n", eventsSampled)
				}
				tw := newTable(c.stdout)
				fmt.Fprintln(tw, eventHeader)
				for _, e := range a.Events {
					fmt.Fprintln(tw, eventRow(e))
				}
				return tw.Flush()
			})
		}
		api, err := c.client(cmd, o)
		if err != nil {
			return err
		}
		defer api.close()
		opened := func() {
			if !o.json() {
				fmt.Fprintln(c.stdout, strings.ReplaceAll(eventHeader, "\t", "  "))
			}
			fmt.Fprintf(c.stderr, "weir: waiting for events (Ctrl-C to stop); %s\n", eventsSampled)
		}
		return api.followEvents(cmd.Context(), q, opened, func(raw []byte, e events.Event) error {
			var err error
			if o.json() {
				_, err = fmt.Fprintf(c.stdout, "%s\n", raw)
			} else {
				_, err = fmt.Fprintln(c.stdout, strings.ReplaceAll(eventRow(e), "\t", "  "))
			}
			return err
		})
	}
	return cmd
}

const eventHeader = "TIME\tRULE\tVERSION\tKEY\tDECISION\tREMAINING\tNODE\tGATEWAY"

// eventsSampled says which decisions become events (node/ops, Ops.Observe).
const eventsSampled = "events are sampled: each rule's first denial per second on each node, " +
	"1% of the other denials by default (a rule's events: {sample: S}), every decision the owner could not make"

func eventRow(e events.Event) string {
	return fmt.Sprintf("%s\t%s\t%d\t%s\t%s\t%d\t%s\t%s", e.Time.UTC().Format("15:04:05.000"), e.Rule, e.RuleVersion,
		e.Key, e.Decision, e.Remaining, e.Node, orDash(e.Gateway))
}

// followEvents reads GET /v1/events as server-sent events until ctx ends
// or the node closes the stream, calling opened once the node accepted it
// and handing each event to f.
func (c *apiClient) followEvents(ctx context.Context, q url.Values, opened func(), f func(raw []byte, e events.Event) error) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.base+"/v1/events?"+q.Encode(), nil)
	if err != nil {
		return fmt.Errorf("%w at %s: %v", errUnreachable, c.base, err)
	}
	req.Header.Set("Accept", "text/event-stream")
	req.Header.Set("User-Agent", "weir-cli")
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	stream := &http.Client{Transport: c.transport} // no overall timeout: it runs until interrupted
	resp, err := stream.Do(req)
	if err != nil {
		return c.transportError(ctx, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		data, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
		return c.answerError(resp, data)
	}
	opened()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		data, ok := strings.CutPrefix(sc.Text(), "data: ")
		if !ok {
			continue
		}
		var e events.Event
		if err := json.Unmarshal([]byte(data), &e); err != nil {
			return fmt.Errorf("%w: an event that is not JSON: %v", errBadAnswer, err)
		}
		if err := f([]byte(data), e); err != nil {
			return err
		}
	}
	if err := sc.Err(); err != nil && ctx.Err() == nil {
		return c.transportError(ctx, err)
	}
	return nil // the node closed the stream, or the command was interrupted
}

type hotKeysAnswer struct {
	Keys []struct {
		Rule    string  `json:"rule"`
		Key     string  `json:"key"`
		Rate    float64 `json:"rate"`
		ErrRate float64 `json:"err_rate"`
	} `json:"keys"`
	Failed []string `json:"failed"`
}

// topCmd is `weir top [--rule R] [--top N]`.
func (c *cli) topCmd() *cobra.Command {
	cmd := &cobra.Command{Use: "top [--rule R]", Args: noArgs, GroupID: "admin",
		Short: "Show each rule's hottest keys",
		Long: "Show each rule's hottest keys across the cluster, by estimated checks per second\n" +
			"over the last 30 to 60 seconds (a bounded space-saving sketch per rule and node:\n" +
			"the estimate may overcount by at most ±ERR). Estimated from a sample: on average\n" +
			"one check in 32 on each node feeds the sketches."}
	o := adminFlags(cmd)
	rule := cmd.Flags().String("rule", "", "only this rule `id`")
	top := cmd.Flags().Int("top", 10, "keys per rule (1 to 1000)")
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		if *top < 1 || *top > 1000 {
			return usageErr(cmd, "--top %d: want 1 to 1000", *top)
		}
		q := url.Values{"top": {strconv.Itoa(*top)}}
		if *rule != "" {
			q.Set("rule", *rule)
		}
		return request(c, cmd, o, func(api *apiClient) (hotKeysAnswer, []byte, error) {
			var a hotKeysAnswer
			raw, err := api.getJSON(cmd.Context(), "/v1/hotkeys", q, &a)
			return a, raw, err
		}, func(a hotKeysAnswer) error {
			if len(a.Failed) > 0 {
				fmt.Fprintf(c.stderr, "weir: no answer from %s; their keys are missing\n", strings.Join(a.Failed, ", "))
			}
			fmt.Fprintln(c.stderr, "weir: checks per second estimated from a sample (on average one check in 32 on each node), over the last 30 to 60 s")
			tw := newTable(c.stdout)
			fmt.Fprintln(tw, "RULE\tKEY\tCHECKS/S\tERR")
			for _, k := range a.Keys {
				fmt.Fprintf(tw, "%s\t%s\t%.1f\t%.1f\n", k.Rule, k.Key, k.Rate, k.ErrRate)
			}
			return tw.Flush()
		})
	}
	return cmd
}

type limitsAnswer struct {
	Key    string `json:"key"`
	Limits []struct {
		Rule         string `json:"rule"`
		Allowed      bool   `json:"allowed"`
		Remaining    int64  `json:"remaining"`
		Limit        int64  `json:"limit"`
		ResetAt      string `json:"reset_at"`
		Calendar     string `json:"calendar"` // a calendar rule's unit and zone; reset_at is in that zone
		Timezone     string `json:"timezone"`
		RetryAfterMS int64  `json:"retry_after_ms"`
		RuleVersion  uint64 `json:"rule_version"`
		Error        string `json:"error"`
		PermitsHeld  *int64 `json:"permits_held"` // concurrency rules: requests in flight
	} `json:"limits"`
}

// limitsCmd is `weir limits KEY`: GET /v1/limits/{key}.
func (c *cli) limitsCmd() *cobra.Command {
	cmd := &cobra.Command{Use: "limits KEY [--plan P]", GroupID: "admin",
		Short: "Show a key's quota under each rule that applies to it",
		Long: "Show, without taking anything, a limited key's quota under each rule of its key\n" +
			"type (apikey:ak_1 → the apikey rules; global:global → the global rules):\n" +
			"remaining of limit, and when the bucket is full again (reset_at; for a calendar\n" +
			"rule, the next boundary in the rule's zone, e.g. 2026-01-01T00:00:00.000+01:00 (month, Europe/Berlin)).",
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) != 1 || args[0] == "" {
				return usageErr(cmd, "want one KEY, e.g. apikey:ak_42")
			}
			return nil
		}}
	o := adminFlags(cmd)
	plan := cmd.Flags().String("plan", "", "only the rules that apply to requests of this `plan` (a plan's own rule replaces the \"*\" one)")
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		var q url.Values
		if *plan != "" {
			q = url.Values{"plan": {*plan}}
		}
		return request(c, cmd, o, func(api *apiClient) (limitsAnswer, []byte, error) {
			var a limitsAnswer
			raw, err := api.getJSON(cmd.Context(), "/v1/limits/"+url.PathEscape(args[0]), q, &a)
			return a, raw, err
		}, func(a limitsAnswer) error {
			if len(a.Limits) == 0 {
				_, err := fmt.Fprintf(c.stdout, "no rule limits keys of this type (%s)\n", a.Key)
				return err
			}
			tw := newTable(c.stdout)
			permits := false // a column for concurrency rules' permits held, when there are any
			for _, l := range a.Limits {
				permits = permits || l.PermitsHeld != nil
			}
			held := func(p *int64) string {
				switch {
				case !permits:
					return ""
				case p == nil:
					return "\t-"
				}
				return fmt.Sprintf("\t%d", *p)
			}
			header := "RULE\tREMAINING\tLIMIT\tRESET AT\tVERSION"
			if permits {
				header += "\tPERMITS HELD"
			}
			fmt.Fprintln(tw, header)
			for _, l := range a.Limits {
				if l.Error != "" {
					fmt.Fprintf(tw, "%s\t-\t-\t%s\t-%s\n", l.Rule, l.Error, held(nil))
					continue
				}
				reset := orDash(l.ResetAt)
				if l.Calendar != "" {
					reset += " (" + l.Calendar + ", " + l.Timezone + ")"
				}
				fmt.Fprintf(tw, "%s\t%d\t%d\t%s\t%d%s\n", l.Rule, l.Remaining, l.Limit, reset, l.RuleVersion, held(l.PermitsHeld))
			}
			return tw.Flush()
		})
	}
	return cmd
}
