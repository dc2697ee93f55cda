"""Live updates that every host sees: a version number per topic, kept in the database.

A writer bumps a topic after the commit that changed what the topic names (a
course build, a run, a list); a page's event stream on any web host polls the
topic's row and tells the browser when the version moved. The row lives in the
ledger's database, so it works the same on every queue driver and on SQLite,
and nothing of it is local to one host. Losing a bump only delays a refresh.

``streams`` keeps the streams themselves from starving the pages: caps per process and
per session (a lease row per open stream, ``live_streams``), a keep-alive at every poll,
and an end when the client leaves, the session ends or the worker stops.
"""
