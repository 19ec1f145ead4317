"""The driver's control endpoint server: HTTP + JSON, on 127.0.0.1 unless the spec names another address.

Every rule below holds before a handler runs, so a refused request changes nothing and is answered
``{"error": "..."}``; the connection is never dropped without a reply it could still take.

* Authentication first: ``Authorization: Bearer <token>`` (the stream's token file, mode 0600) is checked from
  the headers, before any body is read (401).
* The body's size comes from a valid ``Content-Length`` only: missing means empty; negative, non-numeric or chunked
  is refused (400, 411) and one over :data:`MAX_BODY_BYTES` too (413), all without reading it.
* The body is a JSON object at most :data:`MAX_JSON_DEPTH` deep, its numbers at most :data:`MAX_NUMBER_CHARS`
  characters and finite (400), validated by the operation's pydantic model (unknown fields refused, 400).
* A connection must send its request line and headers within :data:`HEADER_DEADLINE_S`, however slowly it trickles
  them, and is closed otherwise; one idle or stalled for :data:`IO_TIMEOUT_S` after that is closed too.
* Connections that have not shown the token yet cannot starve those that have: at most
  :data:`MAX_UNAUTHENTICATED` of them wait for their headers at once (:data:`MAX_UNAUTHENTICATED_PER_PEER` from one
  address), apart from the :data:`MAX_CONNECTIONS` authenticated requests served at once; one more of either kind
  is answered 503 at once (clients retry a 503 within their deadline). So a client without the token that keeps
  dozens of half-sent requests open holds only its own slots, and only for seconds each.
* One mutating operation at a time (409 for another); ``GET status`` answers beside it.
* A failure the handler did not expect (Spark's own, a lost JVM) answers 500 with its type and first line, its
  traceback in the driver's log.
"""

from __future__ import annotations

import hmac
import json
import math
import re
import socket
import ssl
import sys
import threading
import time
import traceback
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import numpy as np
from pydantic import ValidationError

from dagster_reconf.core.errors import (
    ControlRequestError,
    ReconfError,
    SpecError,
    StreamStateError,
    format_validation_error,
)
from dagster_reconf.core.process.control import LOOPBACK, Handler, Routes

__all__ = [
    "HEADER_DEADLINE_S",
    "IO_TIMEOUT_S",
    "MAX_BODY_BYTES",
    "MAX_CONNECTIONS",
    "MAX_JSON_DEPTH",
    "MAX_UNAUTHENTICATED",
    "MAX_UNAUTHENTICATED_PER_PEER",
    "ControlServer",
    "parse_body",
]

MAX_BODY_BYTES = 1 << 20
MAX_JSON_DEPTH = 32  # the deepest request model nests 3
MAX_NUMBER_CHARS = 40  # a number's characters, digits and exponent included
IO_TIMEOUT_S = 10.0
HEADER_DEADLINE_S = 5.0  # a control client sends its headers in one write: milliseconds
MAX_CONNECTIONS = 32  # authenticated requests served at once
MAX_UNAUTHENTICATED = 256  # connections waiting for their headers, every peer together (a thread each)
MAX_UNAUTHENTICATED_PER_PEER = 64

Reply = tuple[int, dict[str, Any]]
_STRING = re.compile(rb'"(?:[^"\\]|\\.)*"')
_OPEN, _CLOSE = np.frombuffer(b"[{", dtype=np.uint8), np.frombuffer(b"]}", dtype=np.uint8)


def _json_depth(body: bytes) -> int:
    """How deep ``body``'s arrays and objects nest (strings skipped), without parsing it."""
    codes = np.frombuffer(_STRING.sub(b'""', body), dtype=np.uint8)
    steps = np.isin(codes, _OPEN).astype(np.int32) - np.isin(codes, _CLOSE)
    return int(np.cumsum(steps).max(initial=0))


def _bounded_number(text: str) -> int | float:
    if len(text) > MAX_NUMBER_CHARS:
        raise ValueError(f"a number of {len(text)} characters (at most {MAX_NUMBER_CHARS})")
    value = float(text) if any(c in text for c in ".eE") else int(text)
    if isinstance(value, float) and not math.isfinite(value):
        raise ValueError(f"number {text} is out of range")
    return value


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a number a request may carry")


def parse_body(body: bytes) -> tuple[dict[str, Any] | None, str | None]:
    """The request body as a JSON object, or why it is refused (see module docstring)."""
    depth = _json_depth(body)
    if depth > MAX_JSON_DEPTH:
        return None, f"request body nests {depth} deep (at most {MAX_JSON_DEPTH})"
    try:
        data = json.loads(
            body or b"{}", parse_int=_bounded_number, parse_float=_bounded_number, parse_constant=_no_constant
        )
    except json.JSONDecodeError as exc:
        return None, f"request body is not JSON: {exc.msg} at position {exc.pos}"
    except (ValueError, RecursionError) as exc:
        return None, f"request body refused: {exc}"
    if not isinstance(data, dict):
        return None, f"request body must be a JSON object, got {type(data).__name__}"
    return data, None


def content_length(value: str | None, transfer_encoding: str | None) -> tuple[int, Reply | None]:
    """The body's length from its headers, or the reply refusing it (nothing is read either way)."""
    if transfer_encoding is not None:
        return 0, (411, {"error": f"Transfer-Encoding {transfer_encoding!r} is not accepted; send Content-Length"})
    if value is None or value.strip() == "":
        return 0, None
    text = value.strip()
    if not text.isdigit():  # "-1", "abc", "1e3", "+5"
        return 0, (400, {"error": f"Content-Length {value[:40]!r} is not a byte count (a non-negative integer)"})
    if len(text) > 12 or int(text) > MAX_BODY_BYTES:
        return 0, (413, {"error": f"request body of {text[:20]} bytes exceeds {MAX_BODY_BYTES} bytes"})
    return int(text), None


class _Slots:
    """Who holds a connection: those waiting for their headers, by peer address, and the authenticated ones served."""

    def __init__(self, served: int, waiting: int, waiting_per_peer: int) -> None:
        self.limits = (served, waiting, waiting_per_peer)
        self._lock = threading.Lock()
        self._waiting: dict[str, int] = {}
        self._served = 0

    def wait(self, peer: str) -> str | None:
        """Take a slot for a new connection from ``peer`` until its headers arrive; why not, where it cannot."""
        _, waiting, per_peer = self.limits
        with self._lock:
            if self._waiting.get(peer, 0) >= per_peer:
                return f"{per_peer} control connections from {peer} have not sent their headers yet; retry shortly"
            if sum(self._waiting.values()) >= waiting:
                return f"{waiting} control connections have not sent their headers yet; retry shortly"
            self._waiting[peer] = self._waiting.get(peer, 0) + 1
            return None

    def arrived(self, peer: str) -> None:
        """The connection's headers arrived: its waiting slot is free."""
        with self._lock:
            self._waiting[peer] -= 1
            if not self._waiting[peer]:
                del self._waiting[peer]

    def serve(self) -> str | None:
        """Take a slot for an authenticated request; why not, where all are taken."""
        served, _, _ = self.limits
        with self._lock:
            if self._served >= served:
                return f"{served} control connections are open; retry shortly"
            self._served += 1
            return None

    def served(self) -> None:
        with self._lock:
            self._served -= 1


class _BoundedServer(ThreadingHTTPServer):
    """A threading HTTP server whose connections hold slots (:class:`_Slots`): one that finds none is answered 503
    at once, and one whose headers do not arrive within the deadline is closed."""

    daemon_threads = True
    request_queue_size = 128  # connections the kernel holds until accepted (socketserver's 5 drops a burst's rest)

    def __init__(self, address: tuple[str, int], handler: type[BaseHTTPRequestHandler], slots: _Slots) -> None:
        self.slots = slots
        self._deadlines: dict[int, threading.Timer] = {}
        super().__init__(address, handler)

    def process_request(self, request: Any, client_address: Any) -> None:
        refusal = self.slots.wait(client_address[0])
        if refusal is not None:
            _answer_raw(request, 503, {"error": refusal})
            self.shutdown_request(request)
            return
        deadline = threading.Timer(HEADER_DEADLINE_S, _cut, (request,))
        deadline.daemon = True
        self._deadlines[id(request)] = deadline
        deadline.start()
        try:
            super().process_request(request, client_address)
        except Exception:
            self.headers_arrived(request, client_address)
            raise

    def headers_arrived(self, request: Any, client_address: Any) -> None:
        """The connection's request line and headers are in (or it ended first): its deadline and waiting slot go.
        Called once per connection."""
        deadline = self._deadlines.pop(id(request), None)
        if deadline is not None:
            deadline.cancel()
            self.slots.arrived(client_address[0])

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            self.headers_arrived(request, client_address)  # where it ended before them

    def handle_error(self, request: Any, client_address: Any) -> None:
        """A client that fails the TLS handshake (plain HTTP, an untrusted peer) or hangs up is dropped quietly."""
        if not isinstance(sys.exc_info()[1], (ssl.SSLError, ConnectionError, TimeoutError, OSError)):
            super().handle_error(request, client_address)


def _cut(request: socket.socket) -> None:
    """End a connection whose headers did not arrive in time: its thread's read returns, and the thread ends."""
    try:
        request.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass  # already closed


def _answer_raw(request: socket.socket, status: int, reply: dict[str, Any]) -> None:
    data = json.dumps(reply).encode()
    head = f"HTTP/1.0 {status} Refused\r\nContent-Type: application/json\r\nContent-Length: {len(data)}\r\n\r\n"
    try:
        request.settimeout(1.0)
        request.sendall(head.encode() + data)
    except OSError:
        pass  # the client went away: nothing to tell it


class ControlServer:
    """Serves the control endpoint for one driver (port 0: the OS picks one).

    Args:
        token: the secret every request must present.
        routes: ``{(method, path): (request model or None, handler)}`` (see
            :func:`~dagster_reconf.core.process.control.routes`); handlers get the validated body and return a
            JSON-able dict.
        host: the address to listen on (default 127.0.0.1).
        tls: where given, HTTPS only (:mod:`~dagster_reconf.core.process.control_tls`).
    """

    def __init__(
        self, token: str, routes: Routes, port: int = 0, host: str = LOOPBACK, tls: ssl.SSLContext | None = None
    ) -> None:
        self._token = token
        self._routes = routes
        self._busy = threading.Lock()
        self._in_flight: tuple[str, float] | None = None  # the mutating operation running, and since when
        slots = _Slots(MAX_CONNECTIONS, MAX_UNAUTHENTICATED, MAX_UNAUTHENTICATED_PER_PEER)
        self._httpd = _BoundedServer((host, port), self._handler_class(), slots)
        if tls is not None:  # the handshake happens on a connection's first read, in its own thread, under its timeout
            self._httpd.socket = tls.wrap_socket(self._httpd.socket, server_side=True, do_handshake_on_connect=False)
        self.tls = tls is not None
        self._thread: threading.Thread | None = None

    @property
    def host(self) -> str:
        """The address it listens on."""
        return str(self._httpd.server_address[0])

    @property
    def port(self) -> int:
        return int(self._httpd.server_address[1])

    def start(self) -> None:
        self._thread = threading.Thread(target=self._httpd.serve_forever, name="reconf-control", daemon=True)
        self._thread.start()

    def close(self) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()

    def in_flight(self) -> dict[str, Any]:
        """The mutating operation running now and for how long (``operation_in_flight``,
        ``operation_in_flight_s``), for the status; ``{}`` where none runs."""
        running = self._in_flight
        if running is None:
            return {}
        name, since = running
        return {"operation_in_flight": name, "operation_in_flight_s": round(time.monotonic() - since, 1)}

    def authenticate(self, authorization: str | None) -> Reply | None:
        """None where ``authorization`` carries the token, else the 401 reply."""
        expected = f"Bearer {self._token}"
        if authorization is not None and hmac.compare_digest(authorization.encode(), expected.encode()):
            return None
        return 401, {
            "error": "missing or wrong token: send 'Authorization: Bearer <token>' with the stream's token file"
        }

    def handle(self, method: str, path: str, authorization: str | None, body: bytes) -> Reply:
        """Authenticate, validate and dispatch one request (transport-independent, unit-testable)."""
        return self.authenticate(authorization) or self.dispatch(method, path, body)

    def dispatch(self, method: str, path: str, body: bytes) -> Reply:
        """Validate and run one authenticated request."""
        route = self._routes.get((method, path))
        if route is None:
            known = ", ".join(f"{m} {p}" for m, p in sorted(self._routes))
            return 404, {"error": f"no endpoint {method} {path[:200]}; endpoints: {known}"}
        model, handler = route
        payload: Any = None
        if model is not None:
            data, problem = parse_body(body)
            if problem is not None:
                return 400, {"error": problem}
            try:
                payload = model.model_validate(data)
            except ValidationError as exc:
                return 400, {"error": format_validation_error(f"{path} request", exc, data)}
        if method == "GET":
            return self._call(handler, payload)
        if not self._busy.acquire(blocking=False):
            name, since = self._in_flight or ("another operation", time.monotonic())
            return 409, {
                "error": f"another control operation ({name}, for {time.monotonic() - since:.0f} s) is in progress; "
                "retry when it has finished",
                "in_flight": name,
            }
        self._in_flight = (path.rsplit("/", 1)[-1], time.monotonic())
        try:
            return self._call(handler, payload)
        finally:
            self._in_flight = None
            self._busy.release()

    @staticmethod
    def _call(handler: Handler, payload: Any) -> Reply:
        try:
            return 200, handler(payload)
        except SpecError as exc:
            return 400, {"error": str(exc)}
        except (StreamStateError, ControlRequestError) as exc:
            return 409, {"error": str(exc)}
        except ReconfError as exc:
            return 500, {"error": str(exc)}
        except Exception as exc:  # noqa: BLE001 - Spark's, py4j's: answered, not a dropped connection; the traceback goes to the log
            return _unexpected(exc)

    def _handler_class(self) -> type[BaseHTTPRequestHandler]:
        server = self

        class RequestHandler(BaseHTTPRequestHandler):
            timeout = IO_TIMEOUT_S  # each read and write of the connection; an idle or stalled one is closed

            def _answer(self, method: str) -> Reply:
                server._httpd.headers_arrived(self.request, self.client_address)
                denied = server.authenticate(self.headers.get("Authorization"))
                if denied is not None:
                    return denied
                refusal = server._httpd.slots.serve()
                if refusal is not None:
                    return 503, {"error": refusal}
                try:
                    return self._authenticated(method)
                finally:
                    server._httpd.slots.served()

            def _authenticated(self, method: str) -> Reply:
                length, refused = content_length(
                    self.headers.get("Content-Length"), self.headers.get("Transfer-Encoding")
                )
                if refused is not None:
                    return refused
                body = self.rfile.read(length) if length else b""
                if len(body) < length:
                    return 400, {"error": f"request body ended after {len(body)} of {length} bytes"}
                return server.dispatch(method, self.path, body)

            def _serve(self, method: str) -> None:
                self.close_connection = True  # one request per connection: nothing unread is left behind
                try:
                    status, reply = self._answer(method)
                except (TimeoutError, ConnectionError):
                    return  # stalled or gone mid-body: closed without an answer nobody waits for
                except Exception as exc:  # noqa: BLE001 - answered, never a dropped connection
                    status, reply = _unexpected(exc)
                data = json.dumps(reply, default=str).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self) -> None:  # noqa: N802 - http.server naming
                self._serve("GET")

            def do_POST(self) -> None:  # noqa: N802
                self._serve("POST")

            def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
                """Requests are not logged: the status and lifecycle records say what happened."""

        return RequestHandler


def _unexpected(exc: BaseException) -> Reply:
    traceback.print_exception(exc, file=sys.stderr)
    first = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    return 500, {"error": f"unexpected {type(exc).__name__}: {first} (the driver's log has the traceback)"}
