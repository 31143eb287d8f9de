"""Search for the generator agents: snippet search backends (``search``), page backends with a cache
(``pages``) and corpora indexed into SQLite FTS5 with long-tail entity mining (``corpus``)."""
