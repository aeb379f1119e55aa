package httpapi

import (
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/notifyd/notifyd/internal/wire"
	"github.com/notifyd/notifyd/stores"
)

// deviceRequest is the body of POST /v1/devices: an app install's push
// token on a platform.
type deviceRequest struct {
	Platform *string `json:"platform"`
	Token    *string `json:"token"`
	App      *string `json:"app"`
}

// deviceJSON is a device as GET /v1/devices lists it.
type deviceJSON struct {
	ID string `json:"id"`
	// Tenant is the tenant the device was registered under (the token's
	// tenant claim): it gets only that tenant's notifications. Null:
	// registered without a claim, it gets every notification.
	Tenant        *string    `json:"tenant"`
	Platform      string     `json:"platform"`
	Token         string     `json:"token"`
	App           string     `json:"app"`
	CreatedAt     time.Time  `json:"created_at"`
	LastSuccessAt *time.Time `json:"last_success_at"`
	Failures      int        `json:"failures"`
}

// createDevice is POST /v1/devices: 201 {"id"} for a new device, 200 {"id"}
// when the recipient had registered the token under the same tenant already
// (its platform and app are replaced). A token with a tenant claim registers
// the device under its tenant: it is then pushed only that tenant's
// notifications. The platform must be one a registered channel sends to,
// and its channel checks the token and the app; nothing is written unless
// all three are valid and the recipient has fewer than stores.MaxDevices
// devices.
func (s *Server) createDevice(w http.ResponseWriter, r *http.Request, recipient string) error {
	var req deviceRequest
	if err := s.DecodeJSON(w, r, &req, false); err != nil {
		return err
	}
	platforms := s.reg.Platforms()
	platform, token, app := text(req.Platform), text(req.Token), text(req.App)
	switch {
	case len(platforms) == 0:
		return notFoundError("no registered channel sends to mobile devices")
	case platform == "":
		return invalidField("platform", "is required: one of "+strings.Join(platforms, ", "))
	case !slices.Contains(platforms, platform):
		return invalidField("platform", fmt.Sprintf("want one of %s, got %q", strings.Join(platforms, ", "), platform))
	case token == "":
		return invalidField("token", "is required")
	case app == "":
		return invalidField("app", "is required")
	}
	dp, _ := s.reg.DevicePlatform(platform)
	if err := dp.CheckToken(token); err != nil {
		return invalidField("token", err.Error())
	}
	if err := dp.CheckApp(app); err != nil {
		return invalidField("app", err.Error())
	}
	tenant, _ := confinedTenant(r)
	id, created, err := stores.PutDevice(r.Context(), s.pool, recipient, tenant, platform, token, app)
	if errors.Is(err, stores.ErrTooManyDevices) {
		return invalidField("token", err.Error()+"; delete one first")
	}
	if err != nil {
		return err
	}
	status := http.StatusOK
	if created {
		status = http.StatusCreated
	}
	wire.WriteJSON(w, status, map[string]string{"id": id})
	return nil
}

// listDevices is GET /v1/devices (and, for an admin,
// /v1/recipients/{id}/devices): the recipient's devices, oldest first; a
// token with a tenant claim lists only those registered under its tenant.
func (s *Server) listDevices(w http.ResponseWriter, r *http.Request, recipient string) error {
	tenant, _ := confinedTenant(r)
	found, err := stores.ListDevices(r.Context(), s.pool, recipient, tenant)
	if err != nil {
		return err
	}
	out := make([]deviceJSON, len(found))
	for i, d := range found {
		out[i] = deviceJSON{ID: d.ID, Tenant: nonEmpty(d.Tenant), Platform: d.Platform, Token: d.Token, App: d.App, CreatedAt: d.CreatedAt,
			LastSuccessAt: d.LastSuccessAt, Failures: d.Failures}
	}
	wire.WriteJSON(w, http.StatusOK, map[string]any{"devices": out})
	return nil
}

// deleteDevice is DELETE /v1/devices/{id}: 204, or 404 when the recipient
// has no device with that id (another recipient's id is not theirs; for a
// token with a tenant claim, neither is one registered outside its tenant).
func (s *Server) deleteDevice(w http.ResponseWriter, r *http.Request, recipient string) error {
	id := r.PathValue("id")
	tenant, _ := confinedTenant(r)
	err := stores.DeleteDevice(r.Context(), s.pool, recipient, tenant, id)
	if errors.Is(err, stores.ErrNotFound) {
		return notFoundError("no device %q", id)
	}
	if err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}
