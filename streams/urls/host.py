"""The project's own rules for a host the WHATWG host parser has already processed.

ada (:mod:`streams.urls.whatwg`) does the standard's work: percent-decoding, UTS #46 IDNA to
``xn--`` Punycode, IPv4 numbers in any base to dotted decimal, IPv6 in its short form. Two rules
differ from a browser on purpose (docs/canonicalization.md, rule 5):

* trailing dots are removed: ``example.com.`` names the same server as ``example.com`` in every
  resolver a crawler uses, and one spelling is one key;
* a name DNS cannot resolve (a label over 63 octets, a name over 253, an empty label; RFC 1035
  §2.3.4) is ``invalid_url``: a fetch of it can only fail, and a hostile frontier of such names
  would fill the seen-set with keys for nothing.
"""

from __future__ import annotations

from streams.errors import RecordRejected

_MAX_LABEL_OCTETS, _MAX_DOMAIN_OCTETS = 63, 253  # RFC 1035 §2.3.4: longer names cannot be resolved


def canonical_host(host: str) -> str:
    """The standard's host without trailing dots; names DNS cannot resolve refused."""
    if host.startswith("["):
        return host  # IPv6, already in the standard's short form (RFC 5952 §4)
    domain = host.rstrip(".")
    if len(domain) > _MAX_DOMAIN_OCTETS:
        raise RecordRejected("invalid_url", "host longer than DNS allows (RFC 1035 §2.3.4)")
    labels = domain.split(".")
    if not all(labels):
        raise RecordRejected("invalid_url", "host has an empty label (RFC 1035 §2.3.4)")
    if any(len(label) > _MAX_LABEL_OCTETS for label in labels):
        raise RecordRejected("invalid_url", "host label longer than DNS allows (RFC 1035 §2.3.4)")
    return domain


def strip_www(host: str) -> str:
    """Aggressive: drop leading ``www.`` labels while a dot remains (``www2.``, ``www-1.`` kept)."""
    while host.startswith("www.") and "." in host[4:]:
        host = host[4:]
    return host
