-- Push subscriptions and mobile devices remember the tenant they were
-- registered under (docs/tenants.md, "Push subscriptions and devices"): a
-- recipient token with a tenant claim registers them for that tenant, and
-- they receive only that tenant's notifications; a registration made
-- without a claim has a NULL tenant and receives the notifications of no
-- tenant and those of every tenant, as before.
--
-- The same endpoint (or device token) may be registered once per tenant
-- and once without one: uniqueness is on (recipient, endpoint or token,
-- tenant), with NULL as one value. The send path takes one registration
-- per endpoint (token), so a browser registered both ways gets one message.

-- +goose Up
ALTER TABLE notify_push_subscriptions ADD COLUMN tenant text COLLATE "C"
    CHECK (octet_length(tenant) BETWEEN 1 AND 255 AND tenant !~ '[[:cntrl:]]');
ALTER TABLE notify_push_subscriptions DROP CONSTRAINT notify_push_subscriptions_recipient_endpoint_key;
CREATE UNIQUE INDEX notify_push_subscriptions_recipient_endpoint_tenant_key
    ON notify_push_subscriptions (recipient, endpoint, (coalesce(tenant, '')));

ALTER TABLE notify_devices ADD COLUMN tenant text COLLATE "C"
    CHECK (octet_length(tenant) BETWEEN 1 AND 255 AND tenant !~ '[[:cntrl:]]');
ALTER TABLE notify_devices DROP CONSTRAINT notify_devices_recipient_token_key;
CREATE UNIQUE INDEX notify_devices_recipient_token_tenant_key
    ON notify_devices (recipient, token, (coalesce(tenant, '')));

-- +goose Down
DELETE FROM notify_push_subscriptions WHERE tenant IS NOT NULL;
DROP INDEX notify_push_subscriptions_recipient_endpoint_tenant_key;
ALTER TABLE notify_push_subscriptions DROP COLUMN tenant;
ALTER TABLE notify_push_subscriptions ADD CONSTRAINT notify_push_subscriptions_recipient_endpoint_key UNIQUE (recipient, endpoint);

DELETE FROM notify_devices WHERE tenant IS NOT NULL;
DROP INDEX notify_devices_recipient_token_tenant_key;
ALTER TABLE notify_devices DROP COLUMN tenant;
ALTER TABLE notify_devices ADD CONSTRAINT notify_devices_recipient_token_key UNIQUE (recipient, token);
