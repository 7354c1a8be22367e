"""content_seen stage: exact and near-duplicate pages (SimHash block tables, Manku et al. WWW 2007).

Not built yet: issue 4 builds it on the runtime of :mod:`streams.runtime`. The module exists so
the package has the layout of the design card; it registers no command.
"""
