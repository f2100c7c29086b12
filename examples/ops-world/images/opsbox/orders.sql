-- ops-world seed: 100,000 orders, generated deterministically (no random()) so that the task in
-- instruction.md has one definite answer on every deploy. Safe to run twice.
\set ON_ERROR_STOP on
CREATE TABLE IF NOT EXISTS orders (
  id          bigint PRIMARY KEY,
  customer_id integer     NOT NULL,
  status      text        NOT NULL,
  total_cents integer     NOT NULL,
  created_at  timestamptz NOT NULL
);
INSERT INTO orders (id, customer_id, status, total_cents, created_at)
SELECT g,
       (1 + (g * 7919) % 5000)::integer,
       (ARRAY['paid', 'shipped', 'pending', 'failed', 'refunded'])[(1 + (g * 31 + g / 7) % 5)::integer],
       ((g * 104729) % 100000)::integer,
       timestamptz '2026-01-01 00:00:00+00' + (g % 525600) * interval '1 minute'
FROM generate_series(1::bigint, 100000::bigint) AS g
ON CONFLICT (id) DO NOTHING;
CREATE INDEX IF NOT EXISTS orders_status_idx ON orders (status);
ANALYZE orders;
