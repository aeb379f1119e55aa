-- Team access: the people who use the console and the admin API
-- (notify_operators) and the tokens scripts use instead of the config's
-- admin token (notify_operator_tokens). A role is viewer, operator or
-- admin; tenants, when not empty, confine the operator or token to those
-- tenants' objects. A token is stored as its SHA-256 only: it is shown once,
-- when it is created.

-- +goose Up
CREATE TABLE notify_operators (
    id         text PRIMARY KEY CHECK (id <> '' AND length(id) <= 320),
    name       text NOT NULL DEFAULT '',
    role       text NOT NULL CHECK (role IN ('viewer', 'operator', 'admin')),
    tenants    text[] NOT NULL DEFAULT '{}',
    created_at timestamptz NOT NULL DEFAULT now(),
    updated_at timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE notify_operator_tokens (
    id           uuid PRIMARY KEY,
    name         text NOT NULL DEFAULT '',
    hash         bytea NOT NULL UNIQUE,
    role         text NOT NULL CHECK (role IN ('viewer', 'operator', 'admin')),
    tenants      text[] NOT NULL DEFAULT '{}',
    created_by   text NOT NULL,
    created_at   timestamptz NOT NULL DEFAULT now(),
    expires_at   timestamptz,
    last_used_at timestamptz,
    revoked_at   timestamptz
);

-- +goose Down
DROP TABLE notify_operator_tokens;
DROP TABLE notify_operators;
