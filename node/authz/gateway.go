package authz

import (
	"context"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
)

// Gateway ids bound to one owner (GatewayOwner.MaxIDs).
const (
	// MaxGatewayIDsPerCredential: ids one certificate name or the gateway
	// token may hold (replicas sharing a certificate each have their own).
	MaxGatewayIDsPerCredential = 256
	// MaxGatewayIDsPerConn: ids one connection may hold when the node has
	// no gateway credential (a gateway client uses one id).
	MaxGatewayIDsPerConn = 1
)

// GatewayOwner is who a gateway id is bound to in gateway reports and
// Rules.Watch: the pair (Name, gateway id) is one gateway, and Name may
// hold at most MaxIDs ids, so one caller cannot pose as many gateways.
type GatewayOwner struct {
	// Name: "cert:<certificate identity>", "node:<id>" (a node proof),
	// "token" (the gateway token) or "conn:<peer address>".
	Name   string
	MaxIDs int
	// Conn: bound to the connection (the node has no gateway credential).
	Conn bool
}

// gatewayCreds reports whether acting as a gateway needs the role: under
// TLS (a gateway or node certificate) or with a gateway token.
func (a *Authorizer) gatewayCreds() bool { return a.cfg.TLS || a.cfg.GatewayToken != "" }

// GatewayOwnerOf is the owner of the gateway ids c sends: a gateway or node
// certificate's name, a node proof's node, or the gateway token; when the
// node has no gateway credential (neither TLS nor a gateway token),
// anyone's connection. Otherwise PermissionDenied (Unauthenticated without
// any role).
func GatewayOwnerOf(c Caller) (GatewayOwner, error) {
	switch {
	case c.HasCert && (c.Gateway || c.Node):
		return GatewayOwner{Name: "cert:" + c.Identity.String(), MaxIDs: MaxGatewayIDsPerCredential}, nil
	case c.Node:
		return GatewayOwner{Name: "node:" + c.NodeID, MaxIDs: MaxGatewayIDsPerCredential}, nil
	case c.GatewayToken:
		return GatewayOwner{Name: "token", MaxIDs: MaxGatewayIDsPerCredential}, nil
	case !c.gatewayCreds:
		return GatewayOwner{Name: "conn:" + c.Remote, MaxIDs: MaxGatewayIDsPerConn, Conn: true}, nil
	case !c.Any():
		return GatewayOwner{}, status.Error(codes.Unauthenticated, "authz: gateway reports and watches need the gateway role: a gateway certificate, or \"Authorization: Bearer <token>\" with the gateway token")
	}
	return GatewayOwner{}, status.Errorf(codes.PermissionDenied, "authz: gateway reports and watches need the gateway role: a gateway or node certificate, or the gateway token (caller: %s)", c)
}

// GatewayOwnerFrom is GatewayOwnerOf for the caller in ctx. A request
// that passed no interceptor (a node with no security configured) is bound
// to its gRPC connection, or to remote when given (HTTP).
func GatewayOwnerFrom(ctx context.Context, remote string) (GatewayOwner, error) {
	c, ok := ctx.Value(ctxKey{}).(Caller)
	if !ok {
		c = Caller{Remote: remote}
	}
	if c.Remote == "" {
		if p, ok := peer.FromContext(ctx); ok && p.Addr != nil {
			c.Remote = p.Addr.String()
		}
	}
	return GatewayOwnerOf(c)
}
