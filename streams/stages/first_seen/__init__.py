"""The runtime's minimal processor: :mod:`.stage` is its behaviour, :mod:`.spec` its declaration."""
