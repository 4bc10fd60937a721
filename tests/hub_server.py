"""A local stand-in for the Hugging Face Hub's file endpoint, for the tests of common/hub.py.

The hub itself cannot be reached from the test machines.  This serves the files given to it under
/datasets/<repo>/resolve/<revision>/<path>, with the headers huggingface_hub reads (X-Repo-Commit, ETag,
Content-Length) and the hub's error codes for a missing file or repository, and records every request.
"""

from __future__ import annotations

import hashlib
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

COMMIT = "0123456789abcdef0123456789abcdef01234567"


class HubServer:
    """Serves `files` ({repo path: bytes}) of the dataset `repo` on 127.0.0.1; `url` for HF_ENDPOINT."""

    def __init__(self, repo: str, files: dict[str, bytes]):
        self.repo, self.files, self.requests = repo, files, []
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    def __enter__(self) -> HubServer:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._server.shutdown()
        self._server.server_close()

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        hub = self

        class Handler(BaseHTTPRequestHandler):
            """Answers HEAD and GET of one dataset's files as the hub's resolve endpoint does."""

            def do_HEAD(self):  # noqa: N802 (http.server's name)
                self._answer(body=False)

            def do_GET(self):  # noqa: N802
                self._answer(body=True)

            def _answer(self, body: bool) -> None:
                hub.requests.append((self.command, self.path))
                prefix = f"/datasets/{hub.repo}/resolve/main/"
                if not self.path.startswith(f"/datasets/{hub.repo}/"):
                    return self._error(404, "RepoNotFound", "Repository not found")
                data = hub.files.get(self.path[len(prefix):]) if self.path.startswith(prefix) else None
                if data is None:
                    return self._error(404, "EntryNotFound", "Entry not found")
                self.send_response(200)
                self.send_header("X-Repo-Commit", COMMIT)
                self.send_header("ETag", f'"{hashlib.sha256(data).hexdigest()}"')
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                if body:
                    self.wfile.write(data)

            def _error(self, status: int, code: str, message: str) -> None:
                text = message.encode()
                self.send_response(status)
                self.send_header("X-Error-Code", code)
                self.send_header("X-Error-Message", message)
                self.send_header("Content-Length", str(len(text)))
                self.end_headers()
                if self.command == "GET":
                    self.wfile.write(text)

            def log_message(self, *args) -> None:
                pass

        return Handler
