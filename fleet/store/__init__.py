"""Persistence: the database is the source of truth (SQLite by default, PostgreSQL in production).

:mod:`.models` declares the tables, :mod:`.database` opens the engines and
runs the migrations, :mod:`.jobs` and the other repository modules read and
write rows inside sessions the caller opens.
"""
