"""What kind of host a URL in an index names: public, private, loopback, or link-local/metadata.

An index from elsewhere must not turn its reader into a client of the reader's own network
(the cloud metadata endpoint at 169.254.169.254 hands out credentials to whoever asks from
inside the machine).  A host is judged by what it *is*, not by how it is spelled: IP
literals in every form libc accepts (``2852039166``, ``0xa9fea9fe``, ``0251.0376.0251.0376``,
``169.254.43518``), IPv6 forms that carry an IPv4 address (``::ffff:169.254.169.254``, NAT64,
6to4, Teredo), names that are loopback or metadata by definition (``localhost``,
``metadata.google.internal``), and other names by what DNS answers for them now.

DNS is asked once per distinct host, concurrently, with a time limit; a name that does not
resolve in time is judged by its spelling alone (the read would fail on it anyway).  The
answer can change between this check and the read (DNS rebinding), and redirects are
followed by the HTTP client: a service that opens indexes from strangers should also keep
its readers off internal addresses at the network level.
"""

from __future__ import annotations

import ipaddress
import socket
import threading
import time
from collections.abc import Iterable

Address = ipaddress.IPv4Address | ipaddress.IPv6Address

PUBLIC, PRIVATE, LOOPBACK, LINK_LOCAL = "public", "private", "loopback", "link-local"
_SEVERITY = {PUBLIC: 0, PRIVATE: 1, LOOPBACK: 2, LINK_LOCAL: 3}
DESCRIBED = {PRIVATE: "a private-network address", LOOPBACK: "a loopback address (this machine)",
             LINK_LOCAL: "a link-local or cloud metadata address"}

# Instance metadata services: AWS/Azure/GCP/Oracle (169.254.169.254), ECS tasks, AWS over
# IPv6, Alibaba Cloud.  The first two are link-local anyway; the others are not.
METADATA_ADDRESSES = frozenset(ipaddress.ip_address(a) for a in (
    "169.254.169.254", "169.254.170.2", "fd00:ec2::254", "100.100.100.200"))
METADATA_NAMES = frozenset({"metadata", "metadata.google.internal", "metadata.goog", "instance-data",
                            "instance-data.ec2.internal"})
LOOPBACK_NAMES = frozenset({"localhost", "localhost.localdomain", "ip6-localhost", "ip6-loopback"})
_NAT64 = ipaddress.ip_network("64:ff9b::/96")
RESOLVE_SECONDS = 3.0


def normalise_host(host: str) -> str:
    """``host`` as compared here: lower case, without IPv6 brackets, zone id or a trailing dot."""
    host = host.strip().lower().strip("[]").rstrip(".")
    return host.split("%", 1)[0] if ":" in host else host


def literal_address(host: str) -> Address | None:
    """The address ``host`` spells, in any form the resolver would take as a number; None for names."""
    host = normalise_host(host)
    try:
        return ipaddress.ip_address(host)
    except ValueError:
        pass
    if host[:1].isdigit() and all(c in "0123456789abcdefx." for c in host):
        try:  # libc's inet_aton forms: 2852039166, 0xa9fea9fe, 0251.0376.0251.0376, 169.254.43518
            return ipaddress.IPv4Address(socket.inet_aton(host))
        except OSError:
            return None
    return None


def _embedded_ipv4(a: Address) -> list[Address]:
    """IPv4 addresses an IPv6 address reaches: mapped, NAT64, 6to4, Teredo, IPv4-compatible."""
    if a.version != 6:
        return []
    out: list[Address] = []
    for v4 in (a.ipv4_mapped, a.sixtofour):
        if v4 is not None:
            out.append(v4)
    if a.teredo is not None:
        out.extend(a.teredo)
    if a in _NAT64 or (int(a) >> 32 == 0 and int(a) > 1):
        out.append(ipaddress.IPv4Address(int(a) & 0xFFFFFFFF))
    return out


def _kind_of_one(a: Address) -> str:
    if a in METADATA_ADDRESSES or a.is_link_local:
        return LINK_LOCAL
    if a.is_loopback or a.is_unspecified:  # connecting to 0.0.0.0 or :: reaches this machine
        return LOOPBACK
    if a.is_multicast or not a.is_global:  # private ranges, CGNAT, reserved, documentation
        return PRIVATE
    return PUBLIC


def address_kind(a: Address) -> str:
    """The most sensitive kind among ``a`` and the IPv4 addresses it carries."""
    return worst(_kind_of_one(x) for x in [a, *_embedded_ipv4(a)])


def worst(kinds: Iterable[str]) -> str:
    return max(kinds, key=_SEVERITY.__getitem__, default=PUBLIC)


def worst_address(addresses: Iterable[Address]) -> tuple[str, Address]:
    """(kind, address) of the most sensitive of ``addresses`` (at least one)."""
    return max(((address_kind(a), a) for a in addresses), key=lambda ka: _SEVERITY[ka[0]])


def name_kind(host: str) -> str | None:
    """The kind of a host by its spelling alone (literals, well-known names); None: ask DNS."""
    host = normalise_host(host)
    a = literal_address(host)
    if a is not None:
        return address_kind(a)
    if host in LOOPBACK_NAMES or host.endswith(".localhost"):
        return LOOPBACK
    if host in METADATA_NAMES:
        return LINK_LOCAL
    return None


def same_host(a: str, b: str) -> bool:
    """Do two hosts spell the same name or the same address?"""
    a, b = normalise_host(a), normalise_host(b)
    if a == b:
        return True
    x, y = literal_address(a), literal_address(b)
    return x is not None and x == y


def resolve(hosts: Iterable[str], timeout: float = RESOLVE_SECONDS) -> dict[str, list[Address]]:
    """The addresses DNS gives for each name now (names that fail or time out are left out).

    Each name is asked in its own daemon thread, so a resolver that hangs costs ``timeout``
    once, not once per name, and never holds up the interpreter's exit.
    """
    found: dict[str, list[Address]] = {}

    def ask(host: str) -> None:
        try:
            infos = socket.getaddrinfo(host, None, proto=socket.IPPROTO_TCP)
        except (OSError, UnicodeError):
            return
        addrs = []
        for info in infos:
            try:
                addrs.append(ipaddress.ip_address(str(info[4][0]).split("%", 1)[0]))
            except ValueError:
                continue
        found[host] = addrs

    threads = [threading.Thread(target=ask, args=(h,), daemon=True, name="refindex-resolve") for h in set(hosts)]
    for t in threads:
        t.start()
    deadline = time.monotonic() + timeout
    for t in threads:
        t.join(max(0.0, deadline - time.monotonic()))
    return dict(found)
