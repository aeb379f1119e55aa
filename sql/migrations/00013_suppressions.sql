-- The suppression list: addresses notifyd never sends to again on a channel,
-- because the mailbox does not exist (an SMTP 5.1.x reply, or a hard bounce a
-- provider reported to POST /v1/bounces), the person complained (marked the
-- mail as spam), or an operator said so. A delivery whose recipient's
-- address is listed becomes `suppressed` when it is claimed, with no
-- provider call. The address is stored normalised (trimmed, lower-case), and
-- the claim compares it with lower() of the profile's address; the primary
-- key serves that probe.
--
-- Soft bounces (mailbox full, greylisting) do not suppress; they are counted
-- per address in notify_soft_bounces so an operator can see a pattern.

-- +goose Up
CREATE TABLE notify_suppressions (
    channel    text COLLATE "C" NOT NULL,
    address    text COLLATE "C" NOT NULL CHECK (octet_length(address) BETWEEN 1 AND 320 AND address = lower(btrim(address))),
    -- hard | complaint | manual, or the SMTP reply that suppressed the address
    -- ("smtp 5.1.1: no such user").
    reason     text NOT NULL CHECK (octet_length(reason) BETWEEN 1 AND 1000),
    created_at timestamptz NOT NULL DEFAULT now(),
    updated_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (channel, address)
);

CREATE TABLE notify_soft_bounces (
    channel    text COLLATE "C" NOT NULL,
    address    text COLLATE "C" NOT NULL CHECK (octet_length(address) BETWEEN 1 AND 320 AND address = lower(btrim(address))),
    count      bigint NOT NULL DEFAULT 1,
    first_at   timestamptz NOT NULL DEFAULT now(),
    last_at    timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (channel, address)
);

-- +goose Down
DROP TABLE notify_soft_bounces;
DROP TABLE notify_suppressions;
