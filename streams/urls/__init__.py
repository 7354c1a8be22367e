"""URL handling for the dedup stages (canonical forms, fingerprints, URL-keyed structures)."""
