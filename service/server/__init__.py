"""The web server: everything tied to uvicorn and h11, below the app.

Owns the hardened HTTP/1.1 protocol (`h11_protocol`: header deadline,
smuggling refused, bounded heads, the Content-Length body fast path, the
protocol's own problems), the server's end of zero-copy sends
(`zero_copy`), the event loop a front end runs (`event_loop`), the
listening sockets (`listeners`) and the front-end processes
(`front_ends`: uvicorn's supervisor over `--http-workers` processes sharing
the sockets). The app knows none of it: it runs as well on any ASGI server
(the tests run it over httpx's ASGI transport).

uvicorn and h11 are pinned to the ranges in `pyproject.toml` and tested as
such (`tests/service/unit/test_server_pins.py`). Their public interfaces
serve everywhere but in two places, each with its measured gain beside it:
h11's reader state in `h11_protocol` (the body fast path: an 805 MB
upload's front-end CPU from 4.0 s to 1.4 s) and uvicorn's request cycle in
`zero_copy` (sendfile: a tensor's bytes never pass through Python).

May import: `service.app` (a front end makes the app), `service.api` (the
app's end of the zero-copy extension, the problem types of the protocol's own
answers), `service.settings`, `service.observability` (the log format),
`service.sandbox` (a front end's lifeline and undumpable memory). Nothing
else imports it but the entry point (`service.__main__`).
"""
