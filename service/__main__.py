"""`python -m service`: parse the settings, then serve the app with uvicorn.

Owns the process start: settings errors end the process with status 2 and a
one-line message; thread pools of the numeric libraries are pinned to one
thread before anything imports them (the fork server inherits that); uvicorn
serves with the hardened h11 protocol of `service.http_protocol` (the header
deadline `--header-timeout`, strict request framing).
"""

from __future__ import annotations

import logging
import os
import sys


def main(argv: list[str] | None = None) -> int:
    for variable in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ.setdefault(variable, "1")
    from service.settings import SettingsError, load_settings

    try:
        settings = load_settings(argv)
    except SettingsError as error:
        print(f"python -m service: {error}", file=sys.stderr)
        return 2

    import uvicorn

    from service.app import create_app
    from service.http_protocol import protocol_class

    logging.basicConfig(level=settings.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    app = create_app(settings)
    uvicorn.run(
        app,
        host=settings.host,
        port=settings.port,
        http=protocol_class(settings.header_timeout),
        log_level=settings.log_level,
        access_log=settings.log_level == "debug",
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
