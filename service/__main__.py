"""`python -m service`: parse the settings, then serve the app with uvicorn;
`python -m service keygen --tenant T --scopes import,read`: make an API key;
`python -m service gc [--full] [--grace-seconds N] [settings]`: collect the store's garbage.

Owns the process start: settings errors end the process with status 2 and a
one-line message, and so does anonymous access on an address other than the
loopback (without `--api-keys` it needs `--allow-anonymous` there), and so
does a port another process serves (`service.server.listeners`, which makes
the listening sockets here, before anything else starts); thread
pools of the numeric libraries are pinned to one thread before anything
imports them (the fork server inherits that); logs are text or JSON lines
(`--log-format`); uvicorn serves with the hardened h11 protocol of
`service.server.h11_protocol` (the header deadline `--header-timeout`, strict
request framing), in this process or in `--http-workers` front ends
(`service.server.front_ends`). `keygen` prints the new secret once on standard error, and
on standard output the `[[key]]` table to add to the key file (which holds only
the secret's SHA-256), then SIGHUP makes the service read it again.
"""

from __future__ import annotations

import argparse
import ipaddress
import os
import signal
import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from service.settings import Settings

LOOPBACK_NAMES = ("localhost", "ip6-localhost")


def is_loopback(host: str) -> bool:
    if host.lower() in LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def anonymous_refusal(settings: Settings) -> str | None:
    """Why the service must not start as configured, or None: anonymous access
    (no --api-keys) on an address other than the loopback needs --allow-anonymous."""
    if settings.api_keys is not None or settings.allow_anonymous or is_loopback(settings.host):
        return None
    return (
        f"refusing to serve {settings.host!r} without API keys: anyone who reaches it could read and import "
        "every model. Give --api-keys FILE (make keys with `python -m service keygen --tenant NAME`), bind a loopback "
        "address (--host 127.0.0.1), or accept anonymous access with --allow-anonymous."
    )


def keygen(argv: list[str]) -> int:
    from service.access.keys import KNOWN_SCOPES, SCOPES, KeyFileError, new_key

    parser = argparse.ArgumentParser(
        prog="python -m service keygen", description="Make an API key: the secret once, and its [[key]] table."
    )
    parser.add_argument("--tenant", required=True, help="the tenant the key acts for")
    parser.add_argument(
        "--scopes",
        default=",".join(SCOPES),
        help=f"comma-separated, among {', '.join(KNOWN_SCOPES)} (default: {','.join(SCOPES)}; metrics is for the operator's scraper)",
    )
    arguments = parser.parse_args(argv)
    try:
        secret, table = new_key(arguments.tenant, [scope.strip() for scope in arguments.scopes.split(",") if scope.strip()])
    except KeyFileError as error:
        print(f"python -m service keygen: {error}", file=sys.stderr)
        return 2
    # The table on stdout (append it to the key file), the secret on stderr only:
    # `keygen >> keys.toml` never writes the secret into the file.
    print(f"secret (shown once; clients send Authorization: Bearer <secret>): {secret}", file=sys.stderr)
    print(table, end="")
    return 0


def collect_garbage(argv: list[str]) -> int:
    """`gc`: remove the content no record names (commits and removals cut
    short, as the index's marks tell; with --full, whatever a listing of the
    store finds), with the service's own settings."""
    from service.errors import StorageUnavailable
    from service.settings import load_settings
    from service.settings.kinds import SettingsError
    from service.store.backends import open_store, resumable_uploads_for
    from service.store.model_store import START_GRACE_SECONDS

    parser = argparse.ArgumentParser(
        prog="python -m service gc",
        description="Remove stored content that no record names (what a commit or a removal cut short left, as the "
        "index's marks of content in flight tell), then exit. Takes the service's settings (flags or ONNX_SERVICE_* "
        "variables) to find the store.",
    )
    parser.add_argument(
        "--full",
        action="store_true",
        help="also list every place of the store's content (on object storage, every object: slow for a large store) "
        "and remove what no record names, and the bytes of resumable uploads no row names",
    )
    parser.add_argument(
        "--grace-seconds",
        type=float,
        default=START_GRACE_SECONDS,
        help=f"leave content a commit or a removal began less than this long ago (in flight); default {START_GRACE_SECONDS:g}",
    )
    arguments, rest = parser.parse_known_args(argv)
    try:
        settings = load_settings(rest)
        store = open_store(settings)
        store.open_storage()
        try:
            removed = store.collect_garbage(arguments.grace_seconds, full=arguments.full)
            orphaned = resumable_uploads_for(settings, store).collect_orphans() if arguments.full else []
        finally:
            store.close()
    except (SettingsError, StorageUnavailable) as error:
        print(f"python -m service gc: {error}", file=sys.stderr)
        return 2
    print(f"removed {len(removed)} unrecorded contents" + "".join(f"\n  {place}" for place in removed))
    if orphaned:
        print(f"removed the objects of {len(orphaned)} resumable uploads no row names" + "".join(f"\n  {folder}" for folder in orphaned))
    return 0


def main(argv: list[str] | None = None, factory: str = "service.app:create_app") -> int:
    """The service's command line; `factory` names the app factory ("module:function",
    called as `service.app.create_app` is) the front ends serve."""
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["keygen"]:
        return keygen(argv[1:])
    if argv[:1] == ["gc"]:
        return collect_garbage(argv[1:])
    for variable in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ.setdefault(variable, "1")
    from service.access.keys import KeyFileError
    from service.settings import load_settings
    from service.settings.kinds import SettingsError

    try:
        settings = load_settings(argv)
    except SettingsError as error:
        print(f"python -m service: {error}", file=sys.stderr)
        return 2
    if settings.require_landlock:
        from service.sandbox.worker.landlock import abi_version

        if abi_version() < 1:
            print("python -m service: --require-landlock: this kernel offers no Landlock (or it is refused here)", file=sys.stderr)
            return 2
    refusal = anonymous_refusal(settings)
    if refusal is not None:
        print(f"python -m service: {refusal}", file=sys.stderr)
        return 2
    from service.sandbox.worker.confinement import make_undumpable

    make_undumpable()  # nothing of the same uid reads this process's memory or environment
    signal.signal(signal.SIGHUP, signal.SIG_IGN)  # until the app's lifespan (or the supervisor) handles it: never a kill

    from service.server.front_ends import app_factory, prepare_shared_state, remove_shared_state, serve
    from service.server.listeners import PortInUse, open_listeners

    try:
        listeners = open_listeners(settings.host, settings.port, settings.http_workers, backlog=2048)
    except PortInUse as error:
        print(f"python -m service: {error}", file=sys.stderr)
        return 2
    except OSError as error:
        print(f"python -m service: cannot listen on {settings.host}:{settings.port}: {error.strerror or error}", file=sys.stderr)
        return 2
    shared = prepare_shared_state(argv, factory) if settings.http_workers > 1 else None  # before prometheus-client is imported
    try:
        from service.observability.log_format import configure_logging

        create_app = app_factory(factory)

        uvicorn_logging = configure_logging(settings.log_level, settings.log_format)
        try:
            app = create_app(settings, shared_dir=shared)  # with several front ends: only checked here, each makes its own
        except KeyFileError as error:
            print(f"python -m service: --api-keys: {error}", file=sys.stderr)
            return 2
        except SettingsError as error:
            print(f"python -m service: {error}", file=sys.stderr)
            return 2
        serve(settings, app if shared is None else None, uvicorn_logging, listeners)
    finally:
        for listener in listeners:
            listener.close()
        if shared is not None:
            remove_shared_state(shared)
    return 0


if __name__ == "__main__":
    sys.exit(main())
