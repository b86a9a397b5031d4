"""A local webhook receiver, a resolver that answers what a test says, and a CA that
signs a certificate for a made-up name: what the sender and guard tests deliver to.

The receiver is a raw HTTP/1.1 server on asyncio streams, so a test controls exactly
what it answers: a status, a redirect, nothing at all, or a body that never ends.
"""

from __future__ import annotations

import asyncio
import datetime
import socket
import ssl
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable
    from pathlib import Path


@dataclass(frozen=True)
class Received:
    method: str
    target: str
    headers: dict[str, str]  # names in lower case
    body: bytes
    local_address: str  # the address the connection arrived at


def answer(status: int, body: bytes = b"ok", headers: dict[str, str] | None = None):
    """Answer with ``status`` and a short body (none for 204)."""

    async def respond(received: Received, writer: asyncio.StreamWriter) -> None:
        lines = [f"HTTP/1.1 {status} Status"]
        lines += [f"{name}: {value}" for name, value in (headers or {}).items()]
        payload = b"" if status == 204 else body
        if status != 204:
            lines.append(f"content-length: {len(payload)}")
        writer.write(("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + payload)
        await writer.drain()

    return respond


async def never_answer(received: Received, writer: asyncio.StreamWriter) -> None:
    await asyncio.Event().wait()  # until the test's teardown cancels it


class Receiver:
    """Listens on ``host`` (an ephemeral port) and answers each request with ``respond``.

    ``requests`` holds what arrived, ``connections`` counts accepted connections, and
    ``client_closed`` is set when a client closes a connection."""

    def __init__(
        self,
        respond: Callable[[Received, asyncio.StreamWriter], Awaitable[None]],
        *,
        host: str = "127.0.0.1",
        ssl_context: ssl.SSLContext | None = None,
    ) -> None:
        self._respond = respond
        self._host = host
        self._ssl = ssl_context
        self.requests: asyncio.Queue[Received] = asyncio.Queue()
        self.connections = 0
        self.client_closed = asyncio.Event()
        self.port = 0
        self._tasks: set[asyncio.Task[None]] = set()
        self._server: asyncio.Server | None = None

    async def __aenter__(self) -> Receiver:
        self._server = await asyncio.start_server(self._handle, self._host, 0, ssl=self._ssl)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        assert self._server is not None
        self._server.close()
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        await self._server.wait_closed()

    async def endless_body(self, received: Received, writer: asyncio.StreamWriter) -> None:
        """200 with a chunked body that goes on until the client closes."""
        writer.write(b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n")
        chunk = b"4000\r\n" + b"x" * 0x4000 + b"\r\n"
        try:
            while True:
                writer.write(chunk)
                await writer.drain()
        except ConnectionError:
            self.client_closed.set()

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        local = writer.get_extra_info("sockname")[0]
        try:
            while (received := await _read_request(reader, local)) is not None:
                await self.requests.put(received)
                await self._respond(received, writer)
            self.client_closed.set()
        except ConnectionError:
            self.client_closed.set()
        except asyncio.CancelledError:
            # The teardown stops handlers; asyncio 3.11 would log a cancelled one as an
            # error in its callback, so the handler ends as if it returned.
            return
        finally:
            self._tasks.discard(task)
            writer.close()


async def _read_request(reader: asyncio.StreamReader, local: str) -> Received | None:
    try:
        head = await reader.readuntil(b"\r\n\r\n")
    except asyncio.IncompleteReadError:
        return None
    request_line, *header_lines = head.decode("latin-1").split("\r\n")
    method, target, _ = request_line.split(" ", 2)
    headers: dict[str, str] = {}
    for line in header_lines:
        if line:
            name, _, value = line.partition(":")
            headers[name.strip().lower()] = value.strip()
    body = await reader.readexactly(int(headers.get("content-length", "0")))
    return Received(method, target, headers, body, local)


@dataclass
class FakeResolver:
    """Answers each name with the addresses a test gave it: one list per call, the last
    one repeated. A name it was not given does not resolve."""

    answers: dict[str, list[list[str]]]
    calls: list[str] = field(default_factory=list)

    async def __call__(self, host: str, port: int) -> list[str]:
        self.calls.append(host)
        queue = self.answers.get(host)
        if not queue:
            raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")
        return queue.pop(0) if len(queue) > 1 else queue[0]


def closed_port() -> int:
    """A port on 127.0.0.1 that nothing listens on (bound, then released)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass(frozen=True)
class Certificates:
    ca_pem: str  # the CA a client trusts
    server: ssl.SSLContext  # serves the certificate for the name


def certificates_for(name: str, directory: Path) -> Certificates:
    """A throwaway CA and a server certificate for ``name`` signed by it."""
    now = datetime.datetime.now(datetime.UTC)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "ferryman test CA")])
    ca = (
        _builder(ca_name, ca_name, ca_key.public_key(), now)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(_usage(cert_sign=True), critical=True)
        .sign(ca_key, hashes.SHA256())
    )
    key = ec.generate_private_key(ec.SECP256R1())
    leaf = (
        _builder(
            x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)]),
            ca_name,
            key.public_key(),
            now,
        )
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(_usage(cert_sign=False), critical=True)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(x509.SubjectAlternativeName([x509.DNSName(name)]), critical=False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()),
            critical=False,
        )
        .sign(ca_key, hashes.SHA256())
    )
    cert_file, key_file = directory / "server.pem", directory / "server.key"
    cert_file.write_bytes(leaf.public_bytes(serialization.Encoding.PEM))
    key_file.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    server = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    server.load_cert_chain(cert_file, key_file)
    return Certificates(ca.public_bytes(serialization.Encoding.PEM).decode("ascii"), server)


def _builder(subject, issuer, public_key, now: datetime.datetime) -> x509.CertificateBuilder:
    return (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(issuer)
        .public_key(public_key)
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(public_key), critical=False)
    )


def _usage(*, cert_sign: bool) -> x509.KeyUsage:
    return x509.KeyUsage(
        digital_signature=True,
        content_commitment=False,
        key_encipherment=False,
        data_encipherment=False,
        key_agreement=False,
        key_cert_sign=cert_sign,
        crl_sign=cert_sign,
        encipher_only=False,
        decipher_only=False,
    )
