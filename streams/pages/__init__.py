"""Pure page analysis for the content_seen and revisit stages: decoding, main text, features, SimHash."""
