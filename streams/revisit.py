"""revisit stage: change detection from HTTP and content signals, adaptive revisit intervals.

Not built yet: issue 5 builds it on the runtime of :mod:`streams.runtime`. The module exists so
the package has the layout of the design card; it registers no command.
"""
