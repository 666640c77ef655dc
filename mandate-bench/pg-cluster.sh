# Sourced by pg-sitting.sh and pg-floor.sh: a throwaway PostgreSQL 15 cluster set as the
# sittings measure (synchronous_commit and fsync on, pg_stat_statements loaded in every new
# database), and the CPU time of its processes.
#
# `start_cluster NAME` reads PGBIN, PORT and SHARED_BUFFERS, and sets `dir` (the cluster's
# directory under /tmp, removed on exit), `PG` (its binaries, run as user postgres),
# `ADMIN` (a URL of its `postgres` database) and `postmaster` (the postmaster's pid).

# A query's rows, fields separated by spaces.
q() { psql -X -q -t -A -F ' ' "$1" -c "$2"; }

start_cluster() {
    dir=$(mktemp -d "/tmp/$1.XXXXXX")
    chown postgres "$dir"
    PG="runuser -u postgres -- $PGBIN"
    trap '$PG/pg_ctl -D "$dir/data" -m fast stop >/dev/null 2>&1 || true; rm -rf "$dir"' EXIT
    $PG/initdb -D "$dir/data" -U postgres --auth=trust --no-sync >/dev/null
    cat >>"$dir/data/postgresql.conf" <<CONF
listen_addresses = '127.0.0.1'
port = $PORT
unix_socket_directories = '$dir'
max_connections = 1000
shared_buffers = $SHARED_BUFFERS
synchronous_commit = on
fsync = on
shared_preload_libraries = 'pg_stat_statements'
pg_stat_statements.track = all
pg_stat_statements.max = 10000
track_wal_io_timing = on
${PG_CONF:-}
CONF
    $PG/pg_ctl -D "$dir/data" -l "$dir/postgres.log" -w start >/dev/null
    ADMIN="postgres://postgres@127.0.0.1:$PORT/postgres"
    # In template1, so that every database made after has the view.
    q "postgres://postgres@127.0.0.1:$PORT/template1" "CREATE EXTENSION pg_stat_statements" >/dev/null
    postmaster=$(head -1 "$dir/data/postmaster.pid")
}

# utime+stime of the cluster's processes (the postmaster and its children), plus the
# postmaster's reaped children (cutime+cstime): a backend that exits within the window still
# counts. Clock ticks.
pg_ticks() {
    local total=0 pid f
    for pid in $postmaster $(pgrep -P "$postmaster") ; do
        f=$(sed 's/^.*) //' "/proc/$pid/stat" 2>/dev/null) || continue
        set -- $f
        total=$((total + ${12} + ${13}))
        [ "$pid" = "$postmaster" ] && total=$((total + ${14} + ${15}))
    done
    echo "$total"
}

# The same ticks by kind of process, user and system apart, one line each: `kind utime
# stime`. A backend's kind is `backend`, the others' their title (`walwriter`, `autovacuum
# worker`, ...); the postmaster's reaped children are `exited`.
pg_ticks_by_kind() {
    local pid f kind
    for pid in $postmaster $(pgrep -P "$postmaster") ; do
        f=$(sed 's/^.*) //' "/proc/$pid/stat" 2>/dev/null) || continue
        # A process that exits between pgrep and here has no cmdline left: skipped.
        kind=$( { tr '\0' ' ' < "/proc/$pid/cmdline"; } 2>/dev/null | sed 's/^postgres: *//; s/ *$//') || continue
        set -- $f
        case "$kind" in
            *127.0.0.1*|*local*) kind=backend ;;
            */*) kind=postmaster ;;
        esac
        [ "$pid" = "$postmaster" ] && { kind=postmaster; echo "exited ${14} ${15}"; }
        echo "${kind// /_} ${12} ${13}"
    done
}
