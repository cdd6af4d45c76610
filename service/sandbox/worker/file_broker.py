"""The external-data broker: a worker that left root still opens its inputs.

Owns `FileBroker` (the worker's side) and `serve_requests` (the front end's).
A worker of a service running as root leaves root before it parses
(`service.sandbox.worker.privileges`), but which external data files its model names is
known only by parsing it, and the service's own files (a resumable upload's
parts, 0600) or a private data root are readable by root alone. So the
worker does not open them: it asks the front end that forked it, over a
socket pair made for the job (`service.sandbox.supervisor`). A request is a (directory,
location) pair; the directory must be the job's external-data folder (or
the model's), and the location is opened with the importer's own rules
(`importer.source.confined_descriptor`: links resolved, the result inside the
folder, a regular file, the very one checked); the descriptor is passed
back (SCM_RIGHTS), or the refusal as the importer would have raised it. The
worker checks and maps the file itself (`importer.source.open_confined`).
The front end never reads a byte of the files it opens, and answers at most
`max_external_files` requests a job. The same holds where the service is not
root (the worker could open the files itself): one way for every worker.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
from typing import Final

from importer import ErrorKind, ModelImportError
from importer.source import confined_descriptor
from service.sandbox.protocol import WorkerJob

MAX_REQUEST_BYTES: Final = 16 << 10
MAX_ANSWER_BYTES: Final = 16 << 10
READS_EXTERNAL_DATA: Final = ("import", "graph", "checks", "signature")  # the tasks that open files of the model's folder


class FileBroker:
    """The worker's side: `open(directory, location)` is an `importer.source.ConfinedOpener`."""

    def __init__(self, channel: socket.socket) -> None:
        self._channel = channel

    def open(self, directory: str, location: str) -> tuple[int, str]:
        try:
            self._channel.send(json.dumps([directory, location]).encode())
            answer, descriptors, _, _ = socket.recv_fds(self._channel, MAX_ANSWER_BYTES, 1)
        except OSError as gone:
            message = f"cannot be opened: the file broker is gone ({gone.strerror})"
            raise ModelImportError(ErrorKind.IO, message, input_name=location) from None
        reply = json.loads(answer) if answer else {"error": {"kind": ErrorKind.IO.value, "message": "cannot be opened: no answer"}}
        if "error" in reply:
            for fd in descriptors:
                os.close(fd)
            refusal = reply["error"]
            raise ModelImportError(ErrorKind(refusal["kind"]), refusal["message"], input_name=location, reason=refusal.get("reason"))
        if len(descriptors) != 1:
            raise ModelImportError(ErrorKind.IO, "cannot be opened: the file broker sent no descriptor", input_name=location)
        return descriptors[0], str(reply["path"])


def allowed_folders(job: WorkerJob) -> set[str]:
    """The folders a request may name: the job's external-data folder, or the model's own."""
    return {os.path.normpath(job.external_dir or job.directory), os.path.normpath(job.directory)}


def serve_requests(channel: socket.socket, job: WorkerJob) -> None:
    """Answer the worker's requests until it closes its end (or sends what is
    not a request, or more than `max_external_files` of them); then close ours."""
    folders = allowed_folders(job)
    with channel:
        for _ in range(job.max_external_files):
            try:
                request = channel.recv(MAX_REQUEST_BYTES)
            except OSError:
                return
            if not request:
                return
            try:
                directory, location = json.loads(request)
                if not isinstance(directory, str) or not isinstance(location, str):
                    return  # not a request of ours: the worker is not itself; stop answering
            except ValueError:
                return
            _answer(channel, folders, directory, location)


def _answer(channel: socket.socket, folders: set[str], directory: str, location: str) -> None:
    try:
        if os.path.normpath(directory) not in folders:
            raise ModelImportError(ErrorKind.EXTERNAL_DATA, "names a folder other than the job's", input_name=location)
        fd, path = confined_descriptor(directory, location)
    except ModelImportError as error:
        failure = {"kind": error.kind.value, "message": error.message, "reason": error.reason}
        with contextlib.suppress(OSError):
            channel.send(json.dumps({"error": failure}).encode())
        return
    try:
        socket.send_fds(channel, [json.dumps({"path": path}).encode()], [fd])
    except OSError:
        pass  # the worker is gone
    finally:
        os.close(fd)
