package authz

import (
	"errors"

	"github.com/weirlimit/weir/limit"
)

// ErrForbidden marks a caller that holds a role, but not the one asked for
// (HTTP 403).
var ErrForbidden = errors.New("authz: forbidden")

// RequireAdmin admits the admin role only, from any address: an admin
// certificate or the admin token, as the interceptors or the middleware
// found them (c). A node with neither TLS nor an admin token admits
// nobody. what names the call in the error ("keyring changes"). Refusals
// are limit.ErrUnauthenticated, or ErrForbidden for a caller with another
// role.
func (a *Authorizer) RequireAdmin(c Caller, what string) error {
	switch {
	case c.Admin:
		return nil
	case !a.cfg.TLS && a.cfg.AdminToken == "":
		return limit.Errorf(limit.ErrUnauthenticated, "%s need the admin role, and this node has no admin credential: start it with --admin-token-file (or with TLS, and use an admin certificate)", what)
	case c.Any():
		return limit.Errorf(ErrForbidden, "%s need the admin role: an admin certificate or the admin token (caller: %s)", what, c)
	case a.cfg.TLS:
		return limit.Errorf(limit.ErrUnauthenticated, "%s need the admin role: an admin certificate or the admin token", what)
	}
	return limit.Errorf(limit.ErrUnauthenticated, "%s need the admin token: send \"Authorization: Bearer <token>\"", what)
}
