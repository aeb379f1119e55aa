-- Console sessions of people signed in with single sign-on
-- (console.oidc). The session cookie and its CSRF token are stored as
-- their SHA-256 only. A session ends at expires_at (console.oidc.session_ttl
-- after sign-in) or when unused for console.oidc.idle_timeout since
-- last_seen_at, whichever comes first; sign-out deletes its row.

-- +goose Up
CREATE TABLE notify_console_sessions (
    hash         bytea PRIMARY KEY,
    csrf_hash    bytea NOT NULL,
    operator     text NOT NULL,
    name         text NOT NULL DEFAULT '',
    role         text NOT NULL CHECK (role IN ('viewer', 'operator', 'admin')),
    tenants      text[] NOT NULL DEFAULT '{}',
    created_at   timestamptz NOT NULL,
    last_seen_at timestamptz NOT NULL,
    expires_at   timestamptz NOT NULL
);

CREATE INDEX notify_console_sessions_expires_at ON notify_console_sessions (expires_at);

-- +goose Down
DROP TABLE notify_console_sessions;
