package shard

// ruleTags counts a shard's live counters by rule, for the per-rule key
// cap (Item.Cap). A rule gets a small tag, stored in the high bits of
// each of its counters' table entries (table.tags) or in its logEntry, so the sweep
// can count a counter out without knowing its limit or rule. Counters with
// tag 0 (items without a Cap, imported states not decided since) are not
// counted; a decision gives an untagged counter its rule's tag.
//
// Owned by the holder of the shard's lock.
type ruleTags struct {
	byName map[string]uint16
	names  []string // by tag; "" for a free tag
	live   []int64  // counters by tag; [0] unused
	free   []uint16
}

// A table entry's or logEntry's tag holds the rule tag in its low 15 bits
// and, in volatileBit, whether the counter's rule has durable: off (it is
// never written to the data dir). ruleOf strips the bit.
const (
	maxTags     = 1<<15 - 1
	volatileBit = 1 << 15
)

// ruleOf is the rule tag of a stored tag (0: none).
func ruleOf(t uint16) uint16 { return t &^ volatileBit }

// withVolatile is tag with its volatile bit set to v.
func withVolatile(tag uint16, v bool) uint16 {
	if v {
		return tag | volatileBit
	}
	return tag &^ volatileBit
}

// get returns name's tag, assigning one if needed; 0 when every tag is in
// use (the rule's counters then go uncounted and uncapped).
func (r *ruleTags) get(name string) uint16 {
	if t, ok := r.byName[name]; ok {
		return t
	}
	if r.byName == nil {
		r.byName = make(map[string]uint16)
		r.names, r.live = []string{""}, []int64{0}
	}
	var t uint16
	switch {
	case len(r.free) > 0:
		t = r.free[len(r.free)-1]
		r.free = r.free[:len(r.free)-1]
	case len(r.names) <= maxTags:
		t = uint16(len(r.names))
		r.names, r.live = append(r.names, ""), append(r.live, 0)
	default:
		return 0
	}
	r.byName[name], r.names[t] = t, name
	return t
}

func (r *ruleTags) inc(t uint16) {
	if t = ruleOf(t); t != 0 {
		r.live[t]++
	}
}

func (r *ruleTags) dec(t uint16) {
	if t = ruleOf(t); t != 0 {
		r.live[t]--
	}
}

// reap frees the tags of rules with no live counter. It runs between
// batches (when a sweep pass begins), never while a group holds a tag it
// has not committed yet.
func (r *ruleTags) reap() {
	for t := 1; t < len(r.names); t++ {
		if r.names[t] != "" && r.live[t] == 0 {
			delete(r.byName, r.names[t])
			r.names[t] = ""
			r.free = append(r.free, uint16(t))
		}
	}
}
