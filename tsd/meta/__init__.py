"""Series and UID metadata, annotations and series lookup (OpenTSDB's ``src/meta`` and
``src/search/TimeSeriesLookup``).

Async services over :mod:`tsd.storage`; the JSON shapes and merge rules beside them are pure.
:class:`tsd.meta.service.MetaService` bundles them for the daemon and the HTTP handlers.
"""
