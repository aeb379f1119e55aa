-- The mobile devices a recipient registered (POST /v1/devices): an app
-- install's push token on a platform ("ios" through APNs, "android" through
-- FCM), with the app it belongs to (the iOS bundle id or Android package
-- name). A token is unique per recipient: registering it again returns the
-- same row (its platform and app updated, its failures cleared). A recipient
-- has at most 20 devices; the API holds the recipient lock while it counts,
-- so concurrent registrations cannot pass the limit together.
--
-- The fan-out asks, in its candidates statement, which platforms a recipient
-- has a device of (the index on (recipient, platform); recipient is
-- COLLATE "C" like every recipient id, so the fan-out's ids probe it), so a
-- recipient without one gets an `unavailable` delivery; the send job reads a batch's
-- devices by recipient and platform, records the last success, counts
-- consecutive failures, and deletes a device its push service says is no
-- longer registered. Erasing the recipient deletes them.

-- +goose Up
CREATE TABLE notify_devices (
    id              uuid PRIMARY KEY,
    recipient       text COLLATE "C" NOT NULL CHECK (octet_length(recipient) BETWEEN 1 AND 255),
    platform        text NOT NULL CHECK (platform ~ '^[a-z][a-z0-9_]{0,31}$'),
    token           text NOT NULL CHECK (octet_length(token) BETWEEN 1 AND 4096),
    app             text NOT NULL CHECK (octet_length(app) BETWEEN 1 AND 255),
    created_at      timestamptz NOT NULL DEFAULT now(),
    last_success_at timestamptz,
    failures        integer NOT NULL DEFAULT 0,
    UNIQUE (recipient, token)
);

CREATE INDEX notify_devices_recipient_platform_idx ON notify_devices (recipient, platform);

-- +goose Down
DROP TABLE notify_devices;
