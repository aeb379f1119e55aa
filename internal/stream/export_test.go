package stream

import "time"

// SetRevokeEvery shortens how often h checks for revoked tokens; call it
// before h.Run.
func SetRevokeEvery(h *Hub, d time.Duration) { h.revokeEvery = d }
