SELECT set_config('search_path', quote_ident(current_schema()) || ', pg_catalog, pg_temp', true);
-- notify_audience_rows runs the audience query the calling session prepared
-- as statement stmt (stores.StageAudience: the operator's query wrapped to
-- return one row per recipient) with its parameters args, and returns its
-- rows, so that one INSERT … SELECT writes them into their table.
--
-- The query runs READ ONLY: the function sets transaction_read_only for its
-- own duration (PostgreSQL gives the caller its setting back when the
-- function returns, so the calling INSERT still writes). A write in the
-- query — nextval(), SELECT … FOR UPDATE, a function that writes — is
-- refused exactly as in a READ ONLY transaction. The query's rows are all
-- read (into the function's result) before the caller writes any of them.
--
-- args are text, each quoted by quote_nullable as a literal argument of
-- EXECUTE: PostgreSQL reads it with the input function of the type the
-- prepared statement gave that placeholder, as it reads a parameter bound
-- as text. A NULL is NULL.
--
-- It runs with the caller's rights and search path (the daemon's role:
-- the query is the operator's and reads what that role may read).
CREATE OR REPLACE FUNCTION notify_audience_rows(stmt text, args text[])
RETURNS TABLE (id text, reason text)
LANGUAGE plpgsql VOLATILE
SET transaction_read_only = on
AS $$
BEGIN
    RETURN QUERY EXECUTE pg_catalog.format('EXECUTE %I%s', stmt,
        CASE WHEN coalesce(pg_catalog.cardinality(args), 0) = 0 THEN ''
             ELSE '(' || (SELECT pg_catalog.string_agg(pg_catalog.quote_nullable(u.a), ', ' ORDER BY u.i)
                          FROM pg_catalog.unnest(args) WITH ORDINALITY AS u(a, i)) || ')'
        END);
END
$$;
