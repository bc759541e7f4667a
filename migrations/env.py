"""Alembic environment for agentd.

agentd runs migrations programmatically (``agentd db upgrade``, and on first use
of a store): the caller passes an open connection in
``config.attributes["connection"]`` and the embedding dimension in
``config.attributes["embedding_dimension"]``. Run by the ``alembic`` command,
this file builds the connection itself from ``sqlalchemy.url`` with agentd's
extension-capable engine.
"""

from __future__ import annotations

from alembic import context

from agentd.store.engine import create_engine


def run_migrations() -> None:
    config = context.config
    connection = config.attributes.get("connection")
    if connection is not None:
        context.configure(connection=connection, render_as_batch=True)
        with context.begin_transaction():
            context.run_migrations()
        return
    engine = create_engine(config.get_main_option("sqlalchemy.url"))
    with engine.connect() as conn:
        context.configure(connection=conn, render_as_batch=True)
        with context.begin_transaction():
            context.run_migrations()
    engine.dispose()


run_migrations()
