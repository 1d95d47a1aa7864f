// Package identity binds a node credential to membership: a caller that
// proved it is node X (a node certificate, or a gossip key's proof) acts
// only as X, and only while X is a member of this node's gossip view; a
// hand-off ask only takes partitions its asker may own or hold. The node's
// peer service asks a Guard before it serves; the Raft side of the same
// rule is rulesraft's request check.
//
// A Guard owns no state of its own: it reads the node's membership through
// Membership, counts refusals through Config.Refused, and polls with a
// deadline on the caller's goroutine (a member that just joined may call a
// gossip round before this node hears of it).
package identity
