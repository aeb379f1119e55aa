-- Live River clients. Each notifyd process registers its River client here
-- and holds a session advisory lock on it (class 1852798057, 'noti', and
-- hashtext(client_id)) on a connection of its own for as long as it runs.
-- PostgreSQL releases the lock the moment that connection ends, a process
-- killed with it: the retry sweep then finds the client's row unlocked, makes
-- the jobs River still has `running` on that client available again at once,
-- and forgets the row. Without it River rescues them only after
-- RescueStuckJobsAfter (twice retry.lease, 10 minutes by default): a fan-out
-- interrupted by a crash sat that long. A client that never registered (an
-- older notifyd, an insert-only client) is left to River's rescuer.

-- +goose Up
CREATE TABLE notify_river_clients (
    client_id     text PRIMARY KEY,
    registered_at timestamptz NOT NULL DEFAULT now()
);

-- +goose Down
DROP TABLE notify_river_clients;
