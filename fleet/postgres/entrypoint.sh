#!/bin/sh
# The PostgreSQL container's entry point (fleet/postgres/Dockerfile): on the first
# start, initdb into $PGDATA (a folder of the named volume) and, in single-user
# mode (nothing listens yet), a login role POSTGRES_USER with POSTGRES_PASSWORD
# owning a database POSTGRES_DB; then the postmaster in the foreground (exec: it
# gets the stop signal, SIGINT, a fast shutdown), listening on every address,
# password logins (scram-sha-256) from any host over TCP, `peer` for the
# container's own postgres user over the unix socket. Any arguments are added
# to the postmaster's (`-c name=value`).
set -eu

: "${POSTGRES_USER:?the login role to create}"
: "${POSTGRES_PASSWORD:?its password}"
: "${POSTGRES_DB:?the database to create}"

identifier() {  # a plain SQL identifier: no quoting subtleties in what follows
    case $2 in
        '' | [0-9]* | *[!A-Za-z0-9_]*)
            echo "postgres-entrypoint: $1 must be letters, digits and _ (not first a digit): '$2'" >&2
            exit 2
            ;;
    esac
}
identifier POSTGRES_USER "$POSTGRES_USER"
identifier POSTGRES_DB "$POSTGRES_DB"
if [ "$POSTGRES_USER" = postgres ]; then
    echo "postgres-entrypoint: POSTGRES_USER must not be postgres (the superuser, reached only over the unix socket)" >&2
    exit 2
fi
case $POSTGRES_PASSWORD in
    *"
"*)
        echo "postgres-entrypoint: POSTGRES_PASSWORD must be one line" >&2
        exit 2
        ;;
esac

if [ ! -s "$PGDATA/PG_VERSION" ]; then
    echo "postgres-entrypoint: initialising $PGDATA"
    mkdir -p "$PGDATA"
    chmod 0700 "$PGDATA"
    initdb -D "$PGDATA" --username=postgres --auth-local=peer --auth-host=scram-sha-256 \
        --encoding=UTF8 --no-locale --no-instructions >/dev/null
    printf '%s\n' \
        '# compose.fleet.yaml: password logins from the compose network (postgres-entrypoint)' \
        'host all all 0.0.0.0/0 scram-sha-256' \
        'host all all ::/0 scram-sha-256' >>"$PGDATA/pg_hba.conf"
    password=$(printf '%s' "$POSTGRES_PASSWORD" | sed "s/'/''/g")
    # One statement per line (single-user mode ends a statement at a newline).
    printf '%s\n' \
        "CREATE ROLE \"$POSTGRES_USER\" LOGIN PASSWORD '$password';" \
        "CREATE DATABASE \"$POSTGRES_DB\" OWNER \"$POSTGRES_USER\";" |
        postgres --single -D "$PGDATA" -c listen_addresses= postgres >/dev/null
    echo "postgres-entrypoint: role $POSTGRES_USER and database $POSTGRES_DB created"
fi
unset POSTGRES_PASSWORD
exec postgres -D "$PGDATA" -c listen_addresses='*' "$@"
