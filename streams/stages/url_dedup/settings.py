"""The URL stage's settings (``[url_dedup]`` in TOML, ``STREAMS_URL_DEDUP_*``).

A module of its own, not compiled: :mod:`streams.config` reads each field's declared type
(``tuple[str, ...]``, ``Literal``) to parse environment variables and TOML, and a class compiled
with mypyc keeps only the bare types (``tuple``).
"""

from __future__ import annotations

from dataclasses import dataclass

from streams.urls import canonical
from streams.urls.canonical import CanonicalSettings


@dataclass(frozen=True)
class UrlDedupSettings:
    """Settings of the URL stage (``[url_dedup]`` in TOML, ``STREAMS_URL_DEDUP_*``)."""

    profile: str = "safe"                    # canonicalization profile: safe | aggressive
    max_url_bytes: int = 4096                # longer URLs are dead letters (url_too_long)
    session_id_params: tuple[str, ...] = canonical.SESSION_ID_PARAMS   # aggressive only
    tracking_params: tuple[str, ...] = canonical.TRACKING_PARAMS       # aggressive only
    tracking_param_prefixes: tuple[str, ...] = ("utm_",)               # aggressive only
    seen_set: str = "exact"                  # exact (RocksDB + Bloom front) | bloom (Bloom only)
    expected_urls: int = 10_000_000          # all shards together; sizes the Bloom filters
    bloom_false_positive_rate: float = 0.01  # front filter (exact) or target rate (bloom)
    route_cache_urls: int = 1_000_000        # fingerprints routed recently, answered at routing
    forget_after_days: float = 0.0           # a URL seen longer ago is new again; 0: never (exact only)
    forget_part_marks: int = 200_000         # marks a forget scans per transaction, at most

    def canonical(self) -> CanonicalSettings:
        return CanonicalSettings(profile=self.profile, max_url_bytes=self.max_url_bytes,
                                 session_id_params=self.session_id_params,
                                 tracking_params=self.tracking_params,
                                 tracking_param_prefixes=self.tracking_param_prefixes)
