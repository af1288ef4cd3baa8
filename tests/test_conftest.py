"""The shared fixtures: `no_network` refuses every way out to the network, and only that."""

import errno
import socket
import urllib.error
import urllib.request

import pytest


def test_name_lookups_fail(no_network):
    with pytest.raises(socket.gaierror, match=r"Name or service not known \(no network in tests\)"):
        socket.getaddrinfo("example.org", 443)
    with pytest.raises(socket.gaierror, match=r"Name or service not known \(no network in tests\)"):
        socket.create_connection(("example.org", 443), timeout=1)


def test_sockets_cannot_connect(no_network):
    address = ("127.0.0.1", 9)  # an address needs no lookup; unpatched, this is "connection refused" instead
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        with pytest.raises(OSError) as e:
            sock.connect(address)
        assert e.value.errno == errno.ENETUNREACH
        assert sock.connect_ex(address) == errno.ENETUNREACH


def test_a_library_download_is_refused(no_network):
    with pytest.raises(urllib.error.URLError, match="no network in tests"):
        urllib.request.urlopen("http://192.0.2.1/file", timeout=1)  # an IP: no DNS name to fail on


def test_local_sockets_still_work(no_network, tmp_path):
    path = str(tmp_path / "s")
    with socket.socket(socket.AF_UNIX) as server, socket.socket(socket.AF_UNIX) as client:
        server.bind(path)
        server.listen(1)
        client.connect(path)
        assert client.connect_ex(path) == errno.EISCONN  # already connected: the real connect_ex answered
