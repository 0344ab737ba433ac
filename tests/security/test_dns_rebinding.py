"""The Ask fetcher connects to the address it checked (issue 38, Why 3): a name whose answers change between
lookups (DNS rebinding) never leads it to this machine.

The resolver is the process's own ``socket.getaddrinfo``, replaced for a few made-up names (``*.rebind.test``)
by one that answers a public address first and 127.0.0.1 after, as an attacker's DNS server would; every
other name and every numeric address goes to the real one. A real loopback listener (the canary) stands at the
port the URL names: a fetcher that looked the name up again would connect to it. The public address is never
reached either: the test's resolver refuses to turn it into a socket address, so nothing leaves the machine.
"""

from __future__ import annotations

import http.server
import socket
import threading

import pytest

from helpers.canary import Canary
from pictrieve.tools.web.fetch import FetchError, UnsafeURLError, fetch_page

PUBLIC = "93.184.216.34"
"""The public answer a rebinding name gives first (never connected to: see :class:`Resolver`)."""


class Resolver:
    """``socket.getaddrinfo`` for names ending ``.rebind.test``: each name's answers in turn (the last repeats);
    the public address is refused as a socket address, so no connection to it is ever tried. ``lookups``
    counts each name's lookups."""

    def __init__(self, real, answers: dict[str, list[str]]) -> None:
        self.real, self.answers = real, answers
        self.lookups: dict[str, int] = {}

    def __call__(self, host, port, *args, **kwargs):
        name = host.decode() if isinstance(host, bytes) else str(host)
        if name == PUBLIC:
            raise socket.gaierror(socket.EAI_NONAME, "the test's public address is not reachable from here")
        if not name.endswith(".rebind.test"):
            return self.real(host, port, *args, **kwargs)
        seen = self.lookups.get(name, 0)
        self.lookups[name] = seen + 1
        answers = self.answers[name]
        address = answers[min(seen, len(answers) - 1)]
        return [(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP, "", (address, int(port or 80)))]


@pytest.fixture
def resolver(monkeypatch):
    def install(answers: dict[str, list[str]]) -> Resolver:
        fake = Resolver(socket.getaddrinfo, answers)
        monkeypatch.setattr(socket, "getaddrinfo", fake)
        return fake

    return install


class _Pages(http.server.BaseHTTPRequestHandler):
    """A page, and a redirect to the rebinding name at the canary's port (the path says which port)."""

    seen_hosts: list[str] = []

    def log_message(self, *args):
        pass

    def do_GET(self):  # noqa: N802
        type(self).seen_hosts.append(self.headers.get("Host", ""))
        if self.path.startswith("/to/"):
            self.send_response(302)
            self.send_header("Location", f"http://second.rebind.test:{self.path.rsplit('/', 1)[1]}/secret")
            self.end_headers()
            return
        body = b"<html><head><title>Horses</title></head><body><article><p>" + b"Horses sleep standing up. " * 8 \
            + b"</p></article></body></html>"
        self.send_response(200)
        self.send_header("Content-Type", "text/html; charset=utf-8")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


@pytest.fixture
def pages():
    _Pages.seen_hosts = []
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Pages)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield server.server_address[1]
    server.shutdown()
    server.server_close()


def test_a_name_that_rebinds_to_loopback_after_the_check_reaches_no_local_listener(resolver):
    """Public for the check, 127.0.0.1 for any later lookup: the fetch goes to the public address (refused
    here) and the canary at the URL's port gets no connection; the name was looked up once."""
    fake = resolver({"first.rebind.test": [PUBLIC, "127.0.0.1"]})
    with Canary() as canary:
        port = canary.url.rsplit(":", 1)[1]
        with pytest.raises(FetchError, match="could not fetch"):
            fetch_page(f"http://first.rebind.test:{port}/secret", timeout=5)
        assert canary.connections == 0 and canary.requests == []
    assert fake.lookups == {"first.rebind.test": 1}


def test_every_redirect_target_is_checked_and_pinned_too(resolver, pages):
    """An allowed start page redirects to a second rebinding name: it is looked up once, checked (public),
    and never connected to at 127.0.0.1, where the canary listens."""
    fake = resolver({"start.rebind.test": ["127.0.0.1"], "second.rebind.test": [PUBLIC, "127.0.0.1"]})
    with Canary() as canary:
        port = canary.url.rsplit(":", 1)[1]
        with pytest.raises(FetchError, match="second.rebind.test"):
            fetch_page(f"http://start.rebind.test:{pages}/to/{port}", allow_hosts={"start.rebind.test"}, timeout=5)
        assert canary.connections == 0
    assert fake.lookups == {"start.rebind.test": 1, "second.rebind.test": 1}


def test_a_redirect_to_a_name_that_answers_loopback_at_once_is_refused(resolver, pages):
    resolver({"start.rebind.test": ["127.0.0.1"], "second.rebind.test": ["127.0.0.1"]})
    with Canary() as canary:
        port = canary.url.rsplit(":", 1)[1]
        with pytest.raises(UnsafeURLError, match="non-public address 127.0.0.1"):
            fetch_page(f"http://start.rebind.test:{pages}/to/{port}", allow_hosts={"start.rebind.test"}, timeout=5)
        assert canary.connections == 0


def test_the_pinned_connection_still_names_the_host(resolver, pages):
    """Connected to the address the name had at the check (the second answer would be elsewhere), the request
    says the name in its Host header, as a browser's would, and the page is read."""
    fake = resolver({"page.rebind.test": ["127.0.0.1", PUBLIC]})
    page = fetch_page(f"http://page.rebind.test:{pages}/horses", allow_hosts={"page.rebind.test"}, timeout=5)
    assert "Horses sleep standing up" in page.text
    assert _Pages.seen_hosts == [f"page.rebind.test:{pages}"]
    assert fake.lookups == {"page.rebind.test": 1}


# --- HTTPS: the connection goes to the checked address, the TLS name and the certificate check stay the host's ---


def _certificates(folder, name: str):
    """A test CA (its PEM file) and a server certificate for ``name`` signed by it (cert and key files)."""
    import datetime

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    now = datetime.datetime.now(datetime.timezone.utc)
    ca_key, key = ec.generate_private_key(ec.SECP256R1()), ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "pictrieve test CA")])
    ca = (x509.CertificateBuilder().subject_name(ca_name).issuer_name(ca_name).public_key(ca_key.public_key())
          .serial_number(1).not_valid_before(now - datetime.timedelta(days=1))
          .not_valid_after(now + datetime.timedelta(days=1))
          .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
          .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True,
                                       content_commitment=False, key_encipherment=False, data_encipherment=False,
                                       key_agreement=False, encipher_only=False, decipher_only=False), critical=True)
          .sign(ca_key, hashes.SHA256()))
    cert = (x509.CertificateBuilder().subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)]))
            .issuer_name(ca_name).public_key(key.public_key()).serial_number(2)
            .not_valid_before(now - datetime.timedelta(days=1)).not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.SubjectAlternativeName([x509.DNSName(name)]), critical=False)
            .sign(ca_key, hashes.SHA256()))
    paths = folder / "ca.pem", folder / "server.pem", folder / "server.key"
    paths[0].write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    paths[1].write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    paths[2].write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                           serialization.NoEncryption()))
    return paths


@pytest.fixture
def tls_pages(tmp_path, monkeypatch):
    """The pages over HTTPS on 127.0.0.1 with a certificate for ``secure.rebind.test`` (its CA trusted through
    ``REQUESTS_CA_BUNDLE``); yields (port, the TLS server names clients sent)."""
    import ssl

    ca, cert, key = _certificates(tmp_path, "secure.rebind.test")
    monkeypatch.setenv("REQUESTS_CA_BUNDLE", str(ca))
    names: list[str | None] = []
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    context.sni_callback = lambda sock, name, ctx: names.append(name)
    _Pages.seen_hosts = []
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Pages)
    server.socket = context.wrap_socket(server.socket, server_side=True)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield server.server_address[1], names
    server.shutdown()
    server.server_close()


def test_https_to_the_checked_address_keeps_the_tls_name_and_checks_the_certificate_against_it(resolver, tls_pages):
    port, names = tls_pages
    fake = resolver({"secure.rebind.test": ["127.0.0.1", PUBLIC]})
    page = fetch_page(f"https://secure.rebind.test:{port}/horses", allow_hosts={"secure.rebind.test"}, timeout=5)
    assert "Horses sleep standing up" in page.text
    assert names == ["secure.rebind.test"] and _Pages.seen_hosts == [f"secure.rebind.test:{port}"]
    assert fake.lookups == {"secure.rebind.test": 1}


def test_https_refuses_a_certificate_for_another_name(resolver, tls_pages):
    """The same server reached as another name: the certificate does not name it, so nothing is read."""
    port, _names = tls_pages
    resolver({"other.rebind.test": ["127.0.0.1"]})
    with pytest.raises(FetchError, match="could not fetch"):
        fetch_page(f"https://other.rebind.test:{port}/horses", allow_hosts={"other.rebind.test"}, timeout=5)
    assert _Pages.seen_hosts == []
